"""A real live migration (issue 39, Supercloud SoCC 2016 §2, §5.2): the guest built from
Debian's kernel and the project's init, moved by QEMU's pre-copy migration from one site
namespace to another across the delay proxy and an HTB cap. Needs root (namespaces, HTB)
and QEMU; skipped with the reason otherwise. It runs under KVM where /dev/kvm can boot the
guest and under TCG otherwise (on PVM's /dev/kvm Debian's kernel does not boot).
Margins come from the run itself (the prober's own gaps before the migration), never from
how punctual this machine is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _vm_guest import guest_or_skip, processes_mentioning

from geoslo.experiments.supercloud._live_vm import model_columns
from geoslo.live.supercloud.vm import (
    MigrationSettings,
    VmSettings,
    choose_accel,
    run_migration,
)

pytestmark = pytest.mark.integration

MEMORY_MIB, WSS_MIB = 256, 64
DIRTY_BYTES_PER_S, LINK_BYTES_PER_S = 8e6, 25e6


@pytest.fixture(scope="module")
def guest():
    return guest_or_skip("live VM migration")


# a 58-s migration of a guest dirtying 8 MB/s; under TCG such a guest sometimes crashes just
# after it resumes (docs/supercloud.md): test_supercloud_vm_moves moves a quiet guest briefly
@pytest.mark.slow
def test_a_dirtying_vm_moves_between_sites(guest, tmp_path: Path) -> None:
    vm = VmSettings(MEMORY_MIB, WSS_MIB, DIRTY_BYTES_PER_S)
    link = MigrationSettings(rtt_ms=50.0, bandwidth_bytes_per_s=LINK_BYTES_PER_S)
    run = run_migration(guest, vm, link, tmp_path)

    assert run.status == "completed" and run.accel == choose_accel()
    # the guest filled its memory: round 0 carried it with content, not as zero pages
    assert run.normal_bytes >= 0.7 * MEMORY_MIB * 2**20
    # a dirtying guest needs rounds after the first, and QEMU saw it dirty
    assert run.iterations >= 2
    assert run.qemu_dirty_bytes_per_s > 0
    assert run.guest_dirty_bytes_per_s is not None
    assert 0.5 * DIRTY_BYTES_PER_S <= run.guest_dirty_bytes_per_s <= 1.1 * DIRTY_BYTES_PER_S
    # the HTB cap bounds the stream (noise can only slow it)
    moving_s = run.total_s - run.downtime_s - run.setup_s
    assert run.transferred_bytes / moving_s <= 1.15 * LINK_BYTES_PER_S
    # the prober saw the VM stop at the source and answer at the destination; its gap is
    # QEMU's downtime or more, less what the prober's own answers wobble by
    assert run.outside_downtime_s is not None
    assert run.outside_downtime_s >= run.downtime_s - run.probe_gap_s
    # the model's bytes are of the measured order
    model = model_columns(run.as_row())
    assert 0.5 <= run.transferred_bytes / model["model_bytes"] <= 2.0


@pytest.mark.timeout(180)  # a fresh clone's run once went on for 600 s (run_migration's _within)
def test_a_failed_migration_leaves_nothing_behind(guest, tmp_path: Path) -> None:
    """A run cut short (its time limit passes while the guest boots) raises TestbedError
    and stops both QEMUs and the proxy and deletes its namespaces."""
    from geoslo.errors import TestbedError
    from geoslo.live._netns import namespaces

    def ours() -> set[str]:  # this process's site namespaces (SiteNamespaces names them so):
        # other tests running beside this one create and delete theirs meanwhile
        return {n for n in namespaces() if n.startswith(f"geoslo-zk-{os.getpid()}-")}

    before = ours()
    link = MigrationSettings(rtt_ms=50.0, bandwidth_bytes_per_s=LINK_BYTES_PER_S, timeout_s=3.0)
    with pytest.raises(TestbedError, match="took over 3 s"):
        run_migration(guest, VmSettings(MEMORY_MIB, WSS_MIB, DIRTY_BYTES_PER_S), link, tmp_path)
    assert ours() == before
    assert not processes_mentioning(str(tmp_path)), "a QEMU or the proxy is still running"
    logs = [tmp_path / "src" / "qemu.log", tmp_path / "dst" / "qemu.log"]
    assert all("terminating on signal 15" in log.read_text() for log in logs if log.exists())
