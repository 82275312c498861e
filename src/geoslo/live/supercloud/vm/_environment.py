"""The Supercloud scheduler's environment on real VMs (Shen et al., SoCC 2016, §2, §3, §5.1):
each node of the placement is a QEMU guest in its site's namespace, and the plan's moves
are live migrations (QEMU's pre-copy over TCP through the emulated WAN), not ZooKeeper
reconfigurations.

``start()`` builds (or finds) the guest, opens the WAN between the sites (``SiteWan``: a
namespace per site, the delay proxy with each pair's RTT, an HTB cap on each site's link)
and boots one QEMU per node in its site, returning once every guest answers its prober.
``observe()`` reports each site's requests over the interval from the workload it is
given (``rates_rps``: seconds since the start to each site's requests/s; the guests run
no service), the placement the VMs are in, and busy while a migration runs (and for the
interval in which it ended, as the ZooKeeper testbed does). ``apply(plan)`` starts the
plan's migrations at once in the background; each boots the destination QEMU with
``-incoming`` in the destination's namespace, migrates over QMP, and stops the source once
the guest answers at the destination. The outside prober watches each move from both
QEMUs (the gap from the source's last answer to the destination's first), and every move
is kept in ``migrations`` with QEMU's own figures. A move that fails leaves the VM at its
source and surfaces from the next ``observe()``. ``close()`` returns when every QEMU and
the proxy have exited and the namespaces are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.control.supercloud import FrontEnd, Node, Placement, PlacementObservation, Plan
from geoslo.errors import ConfigError, TestbedError
from geoslo.live._processes import ManagedProcess
from geoslo.live.supercloud.vm._guest import GuestImage, build_guest
from geoslo.live.supercloud.vm._link import SiteWan
from geoslo.live.supercloud.vm._migration import MigrationSettings, _run, _start_qemu
from geoslo.live.supercloud.vm._prober import Answer, Prober, largest_gap_s, outside_downtime_s
from geoslo.live.supercloud.vm._qemu import (
    VmSettings,
    cannot_run_reason,
    choose_accel,
    kvm_unusable_reason,
    qemu_command,
)
from geoslo.live.supercloud.vm._qmp import QmpClient
from geoslo.live.supercloud.zookeeper._plan_steps import PlanRefusedError

__all__ = ["SupercloudVmEnvironment", "guest_crash", "seconds_below_half", "vm_name"]

RatesFn = Callable[[float], Sequence[float]]  # seconds since start -> each site's requests/s
BOOT_TIMEOUT_S = 180.0  # TCG boots Debian's kernel and fills the memory in ~5-15 s idle
_BASELINE_S = 2.0  # the prober's answers before a move: its usual rate, its own gaps
_AFTER_S = 1.0  # ... and after the destination's first answer


def vm_name(index: int) -> str:
    """Node ``index`` (from 0) is VM ``vm<index + 1>``; the first leads at the start."""
    return f"vm{index + 1}"


def seconds_below_half(
    answer_s: Sequence[float], baseline_from_s: float, from_s: float, to_s: float
) -> int:
    """1-s bins from ``from_s`` to ``to_s`` in which the prober got fewer than half its
    usual answers (the median per second over ``baseline_from_s``..``from_s``): §5.2.2's
    measure of a dip, as the ZooKeeper runs count it from their clients' throughput."""
    times = np.asarray(answer_s, dtype=float)
    base_bins = max(int(round(from_s - baseline_from_s)), 1)
    edges = from_s - np.arange(base_bins, -1, -1, dtype=float)
    before = np.histogram(times, bins=edges)[0]
    usual = float(np.median(before))
    n = max(int(np.ceil(to_s - from_s)), 1)
    during = np.histogram(times, bins=from_s + np.arange(n + 1, dtype=float))[0]
    return int(np.sum(during < 0.5 * usual))


_CRASH_MARKS = ("BUG:", "Kernel panic", "kernel BUG", "fatal error:", "SIGSEGV", "panic:")


def guest_crash(console: Path) -> str:
    """The first line of the guest's console that says it crashed ("" if none): its
    kernel's oops or panic, or the Go runtime's fatal error."""
    try:
        lines = console.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in lines if any(m in line for m in _CRASH_MARKS)), "")


@dataclass
class _Vm:
    """One node's VM: where it runs now, its QEMU, the folder of its sockets."""

    name: str
    slot: int  # its incoming port's offset at any site
    site: str
    process: ManagedProcess
    folder: Path
    generation: int = 0  # how many times it moved


class SupercloudVmEnvironment:
    """The placement loop's handle on VMs (one per node of ``start_sites``, the first the
    leader) over ``sites``, ``rtt_ms`` apart, each site's link capped at
    ``link.bandwidth_bytes_per_s`` (``link.rtt_ms`` is not used: each pair has its own).
    ``rates_rps(t)`` gives each site's requests/s ``t`` seconds after the start;
    ``read_fraction`` splits them into reads and writes."""

    simulated = False

    def __init__(
        self,
        sites: Sequence[str],
        rtt_ms,
        start_sites: Sequence[str],
        interval_s: float,
        rates_rps: RatesFn,
        vm: VmSettings | None = None,
        link: MigrationSettings | None = None,
        read_fraction: float = 0.9,
        state_dir: Path | None = None,
        image: GuestImage | None = None,
    ) -> None:
        self.sites = tuple(sites)
        self.rtt_ms = np.asarray(rtt_ms, dtype=float)
        n = len(self.sites)
        if n < 2 or len(set(self.sites)) != n:
            raise ConfigError("sites", f"give two or more distinct sites, not {self.sites}")
        if self.rtt_ms.shape != (n, n) or self.rtt_ms.min() < 0:
            raise ConfigError("rtt_ms", f"must be {n} x {n} RTTs >= 0 ms, one row per site")
        if not start_sites or not set(start_sites) <= set(self.sites):
            raise ConfigError("start_sites", f"must name one or more of {self.sites}")
        if not interval_s > 0:
            raise ConfigError("interval_s", f"must be > 0, got {interval_s!r}")
        if not 0.0 <= read_fraction <= 1.0:
            raise ConfigError("read_fraction", f"must be in 0..1, got {read_fraction!r}")
        self.interval_s = float(interval_s)
        self.rates_rps = rates_rps
        self.vm = vm or VmSettings(memory_mib=128, working_set_mib=32, dirty_bytes_per_s=1e6)
        self.link = link or MigrationSettings()
        self.read_fraction = float(read_fraction)
        self._own_dir = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="geoslo-vm-run-"))
        self.image = image
        self.start_sites = tuple(start_sites)
        nodes = tuple(Node(vm_name(k), s) for k, s in enumerate(self.start_sites))
        self.start_placement = Placement(nodes, vm_name(0))
        self.accel = ""  # kvm or tcg, chosen at start
        self.accel_reason = ""  # why not KVM, when TCG
        self.leader = vm_name(0)
        self.intervals = 0
        self.migrations: list[dict] = []  # every move: QEMU's and the prober's figures
        self._vms: dict[str, _Vm] = {}
        self._started: list[ManagedProcess] = []  # every QEMU, stopped by close()
        self._wan: SiteWan | None = None
        self._task: asyncio.Task | None = None
        self._failure: str | None = None
        self._ended_unseen = False
        self._start_s = self._last_s = 0.0

    # --- start and close ------------------------------------------------------------

    async def start(self) -> None:
        reason = cannot_run_reason()
        if reason:
            raise TestbedError(f"VMs between site namespaces cannot run here: {reason}")
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        if self.image is None:
            self.image = await asyncio.to_thread(build_guest)
        self.accel = choose_accel(self.vm.accel)
        self.accel_reason = (kvm_unusable_reason() or "") if self.accel == "tcg" else ""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        rtt = tuple(tuple(float(x) for x in row) for row in self.rtt_ms)
        self._wan = SiteWan(
            self.state_dir, self.sites, rtt, len(self.start_sites), self.link.bandwidth_bytes_per_s
        )
        await asyncio.to_thread(self._wan.open)
        for slot, site in enumerate(self.start_sites):
            name = vm_name(slot)
            folder = self.state_dir / name / "g0"
            process = await asyncio.to_thread(self._boot, name, site, folder, None)
            self._vms[name] = _Vm(name, slot, site, process, folder)
        await asyncio.gather(*(self._answers(vm) for vm in self._vms.values()))
        self._start_s = self._last_s = time.monotonic()

    def _boot(self, name: str, site: str, folder: Path, incoming: str | None) -> ManagedProcess:
        argv = qemu_command(self.image, self.vm, self.accel, folder, incoming)
        process = _start_qemu(f"qemu-{name}", argv, self._wan.namespace(site), folder)
        self._started.append(process)
        return process

    async def _answers(self, vm: _Vm) -> None:
        """Until the guest answers its prober (booted, its memory filled)."""
        prober = Prober({"source": vm.folder / "probe.sock"})
        try:
            await prober.start(30.0)
            await prober.wait_for("source", 0.0, BOOT_TIMEOUT_S)
        finally:
            await prober.stop()

    async def close(self) -> None:
        """Stop a move still running, every QEMU and the proxy; delete the namespaces."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await asyncio.to_thread(self._stop_all)

    def _stop_all(self) -> None:
        for process in self._started:
            process.stop()
        self._started.clear()
        if self._wan is not None:
            self._wan.close()
            self._wan = None
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # --- observe ---------------------------------------------------------------------

    @property
    def placement(self) -> Placement:
        """Where the VMs run now (a moving VM is at its source until it answers at the
        destination)."""
        nodes = tuple(Node(vm.name, vm.site) for vm in self._vms.values())
        return Placement(nodes or self.start_placement.nodes, self.leader)

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def observe(self) -> PlacementObservation:
        """One interval: each site's requests since the last observation, the VMs'
        sites, busy while a move runs. ``now_s`` counts intervals."""
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise TestbedError(f"the last plan's migration failed: {failure}")
        for vm in self._vms.values():
            if not vm.process.alive:
                raise TestbedError(f"{vm.name}'s QEMU exited; see {vm.process.log_path}")
        running = self.busy
        busy = running or self._ended_unseen
        self._ended_unseen = running and self._ended_unseen
        now = time.monotonic()
        elapsed_s, self._last_s = now - self._last_s, now
        rates = self.rates_rps(now - self._start_s - elapsed_s / 2)
        if len(rates) != len(self.sites):
            raise TestbedError(f"the workload gave {len(rates)} rates for {len(self.sites)} sites")
        read = self.read_fraction
        front_ends = tuple(
            FrontEnd(site, read * rps * elapsed_s, (1 - read) * rps * elapsed_s)
            for site, rps in zip(self.sites, rates, strict=True)
        )
        self.intervals += 1
        now_s = self.intervals * self.interval_s
        return PlacementObservation(now_s, front_ends, self.placement, busy, self.rtt_ms)

    # --- apply -----------------------------------------------------------------------

    async def apply(self, plan: Plan) -> None:
        """Start the plan's live migrations, all at once; refuse (nothing changed) a plan
        while one runs, or a malformed one."""
        if self.busy:
            raise PlanRefusedError("plan refused: a migration is still running")
        moved = [m.node for m in plan.migrations]
        for m in plan.migrations:
            vm = self._vms.get(m.node)
            if vm is None:
                raise PlanRefusedError(f"plan refused, nothing changed: no VM {m.node!r}")
            if vm.site != m.from_site or m.to_site not in self.sites or m.to_site == vm.site:
                raise PlanRefusedError(
                    f"plan refused, nothing changed: {m.node} is in {vm.site}, the plan moves "
                    f"it from {m.from_site} to {m.to_site}"
                )
        if len(set(moved)) != len(moved):
            raise PlanRefusedError("plan refused, nothing changed: a VM moved twice")
        if plan.placement.leader not in self._vms:
            raise PlanRefusedError(f"plan refused: the leader {plan.placement.leader!r} is no VM")
        self.leader = plan.placement.leader
        if plan.migrations:
            self._task = asyncio.create_task(self._carry_out(plan.migrations))

    async def _carry_out(self, migrations) -> None:
        leaving = Counter(m.from_site for m in migrations)
        moves = [self._move(self._vms[m.node], m.to_site, leaving[m.from_site]) for m in migrations]
        try:
            outcomes = await asyncio.gather(*moves, return_exceptions=True)
            failed = [f"{type(e).__name__}: {e}" for e in outcomes if isinstance(e, BaseException)]
            if failed:
                self._failure = "; ".join(failed)
        finally:
            self._ended_unseen = True

    async def _move(self, vm: _Vm, to_site: str, sharing: int) -> None:
        """Migrate ``vm`` to ``to_site``; its record in ``migrations`` either way."""
        record = {
            "node": vm.name, "from": vm.site, "to": to_site, "accel": self.accel,
            "memory_mib": self.vm.memory_mib, "working_set_mib": self.vm.working_set_mib,
            "dirty_bytes_per_s": self.vm.dirty_bytes_per_s,
            "rtt_ms": float(self.rtt_ms[self.sites.index(vm.site), self.sites.index(to_site)]),
            "bandwidth_bytes_per_s": self.link.bandwidth_bytes_per_s,
            "downtime_limit_ms": self.link.downtime_limit_ms,
            "moving_from_site": sharing, "start_unix_s": time.time(), "ok": False,
        }  # fmt: skip
        self.migrations.append(record)
        started_s = time.monotonic()
        folder = self.state_dir / vm.name / f"g{vm.generation + 1}"
        uri = self._wan.incoming_uri(to_site, vm.slot)
        destination = None
        try:
            destination = await asyncio.to_thread(self._boot, vm.name, to_site, folder, uri)
            figures = await self._migrate(vm, folder, uri)
        except BaseException as error:
            record["error"] = f"{type(error).__name__}: {error}"
            crash = guest_crash(folder / "console.log")
            if crash:
                record["error"] += f" (the guest crashed after resuming: {crash})"
                error.add_note(f"the guest crashed after resuming: {crash}")
            if destination is not None:
                await asyncio.to_thread(destination.stop)
            await self._resume(vm)  # the VM runs on at its source
            raise
        finally:
            record["end_unix_s"] = time.time()
        source = vm.process
        vm.site, vm.process, vm.folder = to_site, destination, folder
        vm.generation += 1
        await asyncio.to_thread(source.stop)
        record.update(figures, ok=True, wall_s=time.monotonic() - started_s)

    async def _resume(self, vm: _Vm) -> None:
        """After a failed move, the source runs again: a migration that completed at the
        source left it paused (``postmigrate``) even if the destination then died."""
        with contextlib.suppress(Exception):
            qmp = await QmpClient.connect(vm.folder / "qmp.sock", 10.0)
            try:
                await qmp.execute("migrate_cancel")
                if (await qmp.execute("query-status")).get("status") != "running":
                    await qmp.execute("cont")
            finally:
                await qmp.close()

    async def _migrate(self, vm: _Vm, folder: Path, uri: str) -> dict:
        """QMP on both sides, the prober on both, the migration; the figures."""
        async with contextlib.AsyncExitStack() as stack:
            target = await QmpClient.connect(folder / "qmp.sock", 30.0)
            stack.push_async_callback(target.close)
            source = await QmpClient.connect(vm.folder / "qmp.sock", 30.0)
            stack.push_async_callback(source.close)
            sockets = {"source": vm.folder / "probe.sock", "destination": folder / "probe.sock"}
            prober = Prober(sockets)
            stack.push_async_callback(prober.stop)
            prober.open_when_running("destination", target)
            await prober.start()
            baseline_s = time.monotonic()
            await prober.wait_for("source", baseline_s, 30.0)
            await asyncio.sleep(_BASELINE_S)
            migrate_at_s = time.monotonic()
            figures, forced = await _run(source, self.link, self.vm.memory_mib * 2**20, uri)
            migrated_s = time.monotonic() - migrate_at_s
            await prober.wait_for("destination", 0.0, 30.0)  # it runs: it answers
            await asyncio.sleep(_AFTER_S)
            answers: list[Answer] = list(prober.answers)
        first_there = min(a.at_s for a in answers if a.side == "destination")
        times = [a.at_s for a in answers]
        figures.update(
            forced=forced,
            migrate_s=migrated_s,
            outside_downtime_s=outside_downtime_s(answers),
            probe_gap_s=largest_gap_s(answers, "source", migrate_at_s),
            seconds_below_half=seconds_below_half(
                times, migrate_at_s - _BASELINE_S, migrate_at_s, first_there + _AFTER_S
            ),
            answers_per_s=sum(migrate_at_s - _BASELINE_S <= t < migrate_at_s for t in times)
            / _BASELINE_S,
        )
        return figures
