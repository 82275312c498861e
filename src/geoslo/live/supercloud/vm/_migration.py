"""One live migration of the guest between two site namespaces across the emulated WAN
(Supercloud, SoCC 2016, §2 and §5.2; QEMU's pre-copy, as Clark et al.'s [22]).

``run_migration(image, vm, link, state_dir)``: open the link, start the destination
(``-incoming``) and the source, wait until the guest answers the prober, set the source's
``max-bandwidth`` and ``downtime-limit`` (``migrate-set-parameters``), ``migrate`` over TCP
to the proxy, poll ``query-migrate`` until it completes, and measure: QEMU's total time,
downtime, bytes and dirty-page rate; the downtime the prober saw; the dirty rate the guest
achieved. A migration still running after ``converge_timeout_s``, or after sending
``force_after_sent_fraction`` times the memory (Xen's rule, the model's), does not converge
under the downtime limit (QEMU would iterate forever: it has no round cap); the limit is
then raised to ``forced_downtime_limit_ms`` so that it stops and copies, and the run says
``forced``.
Every process, qdisc and namespace started here is stopped or deleted, also on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._netns import command_in
from geoslo.live._processes import ManagedProcess
from geoslo.live.supercloud.vm._guest import GuestImage
from geoslo.live.supercloud.vm._link import ADDRESS, PORT, WanLink
from geoslo.live.supercloud.vm._prober import (
    PAGE_BYTES,
    Prober,
    dirty_rate_bytes_per_s,
    largest_gap_s,
    outside_downtime_s,
)
from geoslo.live.supercloud.vm._qemu import VmSettings, choose_accel, qemu_command
from geoslo.live.supercloud.vm._qmp import QmpClient

__all__ = ["MigrationSettings", "MigrationRun", "run_migration", "summarise_query"]


@dataclass(frozen=True)
class MigrationSettings:
    """The WAN between the sites (RTT, HTB cap) and QEMU's migration parameters."""

    rtt_ms: float = 50.0
    bandwidth_bytes_per_s: float = 25e6  # HTB cap on the link (0: none)
    downtime_limit_ms: int = 300  # QEMU's default
    max_bandwidth_bytes_per_s: float = 10e9  # QEMU's own cap: far above the link's
    # a migration not converged by then is forced to stop and copy (QEMU has no round
    # cap); Xen's 3x-the-memory rule (the model's) forces it too
    converge_timeout_s: float = 60.0
    force_after_sent_fraction: float = 3.0
    forced_downtime_limit_ms: int = 60_000
    warmup_s: float = 2.0  # the guest dirties memory before the migration starts
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.rtt_ms < 0 or self.bandwidth_bytes_per_s < 0:
            raise ConfigError("rtt_ms", "rtt_ms and bandwidth_bytes_per_s must be >= 0")
        if not 0 < self.downtime_limit_ms <= 2_000_000:
            raise ConfigError("downtime_limit_ms", "must be in 1..2000000 (QEMU's range)")


@dataclass(frozen=True)
class MigrationRun:
    """What one migration measured (times in s, bytes, rates in bytes/s)."""

    accel: str
    memory_mib: int
    working_set_mib: int
    dirty_bytes_per_s: float  # the knob
    rtt_ms: float
    bandwidth_bytes_per_s: float
    downtime_limit_ms: int
    status: str
    forced: bool
    total_s: float  # QEMU's total-time
    downtime_s: float  # QEMU's downtime
    setup_s: float
    outside_downtime_s: float | None  # the prober's: source's last answer to destination's first
    probe_gap_s: float  # the prober's longest silence before the migration (its resolution)
    transferred_bytes: int
    normal_bytes: int  # pages sent with their content
    zero_pages: int  # pages QEMU found all zero (sent as a few bytes each)
    iterations: int  # dirty-sync-count: bitmap syncs, i.e. rounds
    qemu_dirty_bytes_per_s: float  # QEMU's last dirty-pages-rate, in bytes/s
    guest_dirty_bytes_per_s: float | None  # the guest's own counter, before the migration
    throughput_bytes_per_s: float  # QEMU's last mbps, in bytes/s

    def as_row(self) -> dict:
        return asdict(self)


def summarise_query(info: dict) -> dict:
    """The figures of a completed ``query-migrate`` answer, in seconds and bytes."""
    ram = info.get("ram", {})
    page_bytes = int(ram.get("page-size", PAGE_BYTES))
    return {
        "status": str(info.get("status")),
        "total_s": info.get("total-time", 0) / 1e3,
        "downtime_s": info.get("downtime", 0) / 1e3,
        "setup_s": info.get("setup-time", 0) / 1e3,
        "transferred_bytes": int(ram.get("transferred", 0)),
        "normal_bytes": int(ram.get("normal-bytes", 0)),
        "zero_pages": int(ram.get("duplicate", 0)),
        "iterations": int(ram.get("dirty-sync-count", 0)),
        "qemu_dirty_bytes_per_s": float(ram.get("dirty-pages-rate", 0)) * page_bytes,
        "throughput_bytes_per_s": float(ram.get("mbps", 0)) * 1e6 / 8,
    }


def run_migration(
    image: GuestImage, vm: VmSettings, link: MigrationSettings, state_dir: Path
) -> MigrationRun:
    """Boot the guest at the source site, migrate it to the destination, measure."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    accel = choose_accel(vm.accel)
    wan = WanLink(state_dir, link.rtt_ms, link.bandwidth_bytes_per_s).open()
    started: list[ManagedProcess] = []
    try:
        migrate = _migrate(image, vm, link, accel, wan, state_dir, started)
        return asyncio.run(_within(link.timeout_s, migrate, started))
    except TimeoutError:
        raise TestbedError(f"the migration took over {link.timeout_s:.0f} s") from None
    finally:
        for process in started:
            process.stop()
        wan.close()


async def _within(timeout_s: float, migrate, started: list[ManagedProcess]):
    """``migrate``'s result, or TimeoutError after ``timeout_s``, once its QEMUs are stopped
    (every QMP read then ends) and it is cancelled. Not ``asyncio.wait_for``: a fresh
    clone's run had a 3-s limit pass and the run go on for 600 s (Python 3.11's wait_for
    can lose a cancellation that meets an inner wait_for finishing)."""
    task = asyncio.ensure_future(migrate)
    await asyncio.wait({task}, timeout=timeout_s)
    if task.done():
        return task.result()
    for process in started:
        process.stop()
    task.cancel()
    await asyncio.wait({task}, timeout=10.0)
    raise TimeoutError


def _start_qemu(name: str, argv: list[str], namespace: str, folder: Path) -> ManagedProcess:
    """QEMU started inside ``namespace`` (its PID is QEMU's own: ``ip netns exec`` execs)."""
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in ("qmp.sock", "probe.sock", "console.log"):
        (folder / leftover).unlink(missing_ok=True)
    return ManagedProcess(name, command_in(namespace, argv), folder / "qemu.log").start()


async def _migrate(image, vm, link, accel, wan: WanLink, state_dir: Path, started) -> MigrationRun:
    """Start both sides, wait for the guest, migrate, check the destination runs."""
    folders = {"source": state_dir / "src", "destination": state_dir / "dst"}
    uri = f"tcp:{ADDRESS}:{PORT}"
    async with contextlib.AsyncExitStack() as stack:
        argv = qemu_command(image, vm, accel, folders["destination"], uri)
        started.append(_start_qemu("qemu-destination", argv, wan.destination_ns,
                                   folders["destination"]))  # fmt: skip
        destination = await QmpClient.connect(folders["destination"] / "qmp.sock", 30.0)
        stack.push_async_callback(destination.close)
        argv = qemu_command(image, vm, accel, folders["source"])
        started.append(_start_qemu("qemu-source", argv, wan.source_ns, folders["source"]))
        source = await QmpClient.connect(folders["source"] / "qmp.sock", 30.0)
        stack.push_async_callback(source.close)
        prober = Prober({side: folder / "probe.sock" for side, folder in folders.items()})
        stack.push_async_callback(prober.stop)
        prober.open_when_running("destination", destination)
        await prober.start()
        await prober.wait_for("source", 0.0, 120.0)  # booted and memory filled
        await asyncio.sleep(link.warmup_s)
        migrate_at_s = time.monotonic()
        figures, forced = await _run(source, link, vm.memory_mib * 2**20)
        await prober.wait_for("destination", 0.0, 30.0)
    answers = prober.answers
    return MigrationRun(
        accel, vm.memory_mib, vm.working_set_mib, vm.dirty_bytes_per_s, link.rtt_ms,
        link.bandwidth_bytes_per_s, link.downtime_limit_ms, figures["status"], forced,
        figures["total_s"], figures["downtime_s"], figures["setup_s"],
        outside_downtime_s(answers), largest_gap_s(answers, "source", migrate_at_s),
        figures["transferred_bytes"], figures["normal_bytes"], figures["zero_pages"],
        figures["iterations"], figures["qemu_dirty_bytes_per_s"],
        dirty_rate_bytes_per_s(answers, migrate_at_s), figures["throughput_bytes_per_s"],
    )  # fmt: skip


_URI = f"tcp:{ADDRESS}:{PORT}"


async def _run(
    source: QmpClient, link: MigrationSettings, memory_bytes: int, uri: str = _URI
) -> tuple[dict, bool]:
    """Set the parameters, migrate to ``uri``, poll until done: QEMU's figures and whether
    forced."""
    await source.execute(
        "migrate-set-parameters",
        **{
            "max-bandwidth": int(link.max_bandwidth_bytes_per_s),
            "downtime-limit": int(link.downtime_limit_ms),
        },
    )
    await source.execute("migrate", uri=uri)
    started_s, forced, dirty_rate = time.monotonic(), False, 0.0
    while True:
        info = await source.execute("query-migrate")
        status = info.get("status")
        if status == "completed":
            figures = summarise_query(info)
            figures["qemu_dirty_bytes_per_s"] = dirty_rate or figures["qemu_dirty_bytes_per_s"]
            return figures, forced
        if status in ("failed", "cancelled"):
            raise TestbedError(f"the migration {status}: {info.get('error-desc', 'no reason')}")
        now = summarise_query(info)
        dirty_rate = now["qemu_dirty_bytes_per_s"] or dirty_rate  # the last one measured
        sent_fraction = now["transferred_bytes"] / memory_bytes
        too_long = time.monotonic() - started_s > link.converge_timeout_s
        if not forced and (too_long or sent_fraction >= link.force_after_sent_fraction):
            await source.execute(
                "migrate-set-parameters", **{"downtime-limit": link.forced_downtime_limit_ms}
            )
            forced = True
        await asyncio.sleep(0.1)
