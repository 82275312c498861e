"""The pure parts of follow the sun by live VM migration (issue 39, item 4): the prober's
dip measure, the schedule's rates, the checks and the model's share of the link, and the
``kind = "vm"`` configuration of ``geoslo run``. No process is started."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from geoslo.experiments.supercloud._live_sun import LiveSunSettings, think_schedule_ms
from geoslo.experiments.supercloud._live_vm_sun import (
    MODEL_BAND_FRACTION,
    _with_model,
    check_vm_sun,
    sun_rates,
    vm_sun_findings,
    vm_sun_results,
)
from geoslo.live.supercloud.vm._environment import seconds_below_half
from geoslo.runtime.supercloud import SYSTEM, ControllerSettings


def answers(start_s: float, end_s: float, per_s: int, gaps=()) -> list[float]:
    """Answer times at ``per_s`` a second, none inside any (from, to) of ``gaps``."""
    times = np.arange(start_s, end_s, 1.0 / per_s)
    return [float(t) for t in times if not any(a <= t < b for a, b in gaps)]


@pytest.mark.parametrize(
    ("gap", "below"),
    [
        ((), 0),  # no silence, no dip
        (((10.2, 10.4),), 0),  # 0.2 s silent: the bin keeps 80% of its answers
        (((10.2, 10.8),), 1),  # 0.6 s within one bin
        (((10.7, 11.9),), 1),  # 1.2 s over two bins: the second below half only
        (((10.0, 13.0),), 3),  # 3 s silent
    ],
)
def test_seconds_below_half_counts_bins_with_under_half_the_usual_answers(gap, below):
    times = answers(8.0, 16.0, 100, gap)
    assert seconds_below_half(times, 8.0, 10.0, 15.0) == below


def test_the_schedule_is_the_live_sun_sessions_over_their_pause():
    sun = LiveSunSettings.quick()
    rates = sun_rates(sun)
    pauses = [think_schedule_ms(sun, offset) for offset in sun.utc_offset_h]
    for hour in (0, 5, 13, 23):
        got = rates(hour * sun.hour_s + 0.5)
        want = [sun.threads_per_site * 1e3 / p[hour] for p in pauses]
        assert got == pytest.approx(want)
    assert rates(24 * sun.hour_s + 1.0) == rates(1.0)  # the day repeats


def move(node="vm1", ok=True, total_s=None, downtime_s=0.2, outside_s=0.6, sharing=1) -> dict:
    """A measured move as the environment records it (its figures in s, bytes); its total
    time the model's unless given."""
    row = {
        "node": node, "from": "Washington DC", "to": "Tokyo", "ok": ok, "accel": "tcg",
        "memory_mib": 128, "working_set_mib": 32, "dirty_bytes_per_s": 1e6, "rtt_ms": 150.0,
        "bandwidth_bytes_per_s": 25e6, "downtime_limit_ms": 300, "moving_from_site": sharing,
        "throughput_bytes_per_s": 25e6, "total_s": total_s, "downtime_s": downtime_s,
        "outside_downtime_s": outside_s, "wall_s": 15.0, "seconds_below_half": 1,
        "transferred_bytes": 120e6,
    }  # fmt: skip
    if total_s is None:
        row["total_s"] = _with_model(dict(row, ok=True))["model_total_s"]
    return row


def day(*moves, failures=()) -> dict:
    return {
        "accel": "tcg", "accel_reason": "", "boot_s": 9.0, "placements": [], "refused": 0,
        "moves": [_with_model(m) for m in moves], "failures": list(failures),
    }  # fmt: skip


def test_moves_leaving_a_site_together_share_its_link_in_the_model():
    alone = _with_model(move())
    shared = _with_model(move(sharing=3))
    assert shared["model_bandwidth_bytes_per_s"] == pytest.approx(25e6 / 3)
    assert shared["model_total_s"] > 2.5 * alone["model_total_s"]


THREE_STEP = {
    "3-step": {
        "procedure_s": 20.0, "seconds_below_half": 3, "lowest_fraction": 0.1,
        "leader_before": "virginia", "leader_after": "tokyo", "rtt_ms": 100.0,
    }
}  # fmt: skip
UNAVAILABLE = "live VMs: clients' longest unavailability below the 3-step reconfiguration's"
MOVED = "live VMs: the scheduler moved them and every migration completed"
MODEL = (
    f"live VMs: the pre-copy model's total time within {MODEL_BAND_FRACTION:.0%} of QEMU's "
    "(median over the moves)"
)


def test_checks_pass_on_a_run_that_holds():
    results = vm_sun_results(day(move()), THREE_STEP, None)
    assert check_vm_sun(results) == {MOVED: True, UNAVAILABLE: True, MODEL: True}
    assert any("shorter than the 3-step" in s for s in vm_sun_findings(results))


@pytest.mark.parametrize(
    ("moves", "failures", "reconfigurations", "failed"),
    [
        ((), (), THREE_STEP, MOVED),  # the scheduler never moved
        ((move(ok=False),), (), THREE_STEP, MOVED),
        ((move(),), ("30 s: the VM did not answer",), THREE_STEP, MOVED),
        ((move(outside_s=3.5),), (), THREE_STEP, UNAVAILABLE),  # forced stop-and-copy
        ((move(total_s=100.0),), (), THREE_STEP, MODEL),  # the model far off
    ],
)
def test_each_check_fails_on_its_own_run(moves, failures, reconfigurations, failed):
    checks = check_vm_sun(vm_sun_results(day(*moves, failures=failures), reconfigurations, None))
    assert checks[failed] is False


def test_without_a_3_step_run_the_unavailability_check_is_inconclusive():
    broken = {"3-step": {"error": "cannot run here: no Java"}}
    checks = check_vm_sun(vm_sun_results(day(move()), broken, None))
    assert checks[UNAVAILABLE] is None


def test_the_vm_environment_is_configured_like_the_others():
    model = SYSTEM.environments["vm"]
    settings = model.model_validate({"kind": "vm", "day_s": 120})
    assert settings.sites == ("Washington DC", "Tokyo") and settings.start_sites == (
        "Washington DC",
    )
    with pytest.raises(ValidationError, match="start_sites"):
        model.model_validate({"kind": "vm", "start_sites": ["Frankfurt"]})
    with pytest.raises(ValidationError, match="working_set_mib"):
        model.model_validate({"kind": "vm", "memory_mib": 64, "working_set_mib": 128})
    with pytest.raises(ValidationError):
        model.model_validate({"kind": "vm", "memory_mib": 16})
    # single_vm is allowed on VMs (one node), and nothing starts when it is built
    service = SYSTEM.build(ControllerSettings(evaluation="single_vm"), settings, 5.0)
    env = service.environment
    assert env.sites == settings.sites and env.start_placement.nodes[0].site == "Washington DC"
    assert env.migrations == [] and not env.busy


def test_a_failed_move_is_a_row_of_its_own_and_fails_the_run(tmp_path):
    failed = dict(move(node="vm2", ok=False), error="TestbedError: no answer")
    results = vm_sun_results(day(move(), failed), THREE_STEP, None)
    rows = [r["approach"] for r in results["rows"]]
    assert any("vm2" in r and "failed: TestbedError: no answer" in r for r in rows)
    assert check_vm_sun(results)[MOVED] is False
    assert "2 live migration(s), 1 of them completed" in vm_sun_findings(results)[0]


@pytest.mark.parametrize(
    ("console", "crash"),
    [
        ("geoslo-init: filled 39 MiB\n", ""),
        ("[ 12.1] kernel BUG at lib/list_debug.c:27!\n[ 12.2] invalid opcode\n", "kernel BUG"),
        ("fatal error: runtime: netpoll failed\n", "fatal error"),
        ("SIGSEGV: segmentation violation\nPC=0x60\n", "SIGSEGV"),
    ],
)
def test_a_guest_crash_is_read_from_its_console(tmp_path, console, crash):
    from geoslo.live.supercloud.vm._environment import guest_crash

    (tmp_path / "console.log").write_text(console)
    found = guest_crash(tmp_path / "console.log")
    assert (crash in found) if crash else found == ""
    assert guest_crash(tmp_path / "missing.log") == ""


def test_reproduce_refuses_vm_without_live(tmp_path):
    from typer.testing import CliRunner

    from geoslo.cli import app

    done = CliRunner().invoke(
        app, ["reproduce", "supercloud", "--vm", "--output", str(tmp_path / "out")]
    )
    assert done.exit_code == 2 and "--live" in done.output
    assert not (tmp_path / "out").exists()  # nothing ran
