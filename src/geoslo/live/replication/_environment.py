"""The egress link as the controller's environment handle (Dürango et al., CDC 2016,
§III-§IV): every interval, the three backlogs read from the systems that hold them
(``_sources.py``, ``_sockets.py``) with what arrived and what was sent; the decision put in
force as HTB classes on the interface (``HtbShaper``).

* ``EgressEnvironment(EgressSpec(...))``: one's own host: a named interface, the
  application's Redis server, the replication master and its replica, and a spool folder
  of VM images that it copies by rsync (docs/replication-live.md).
* ``ReplicationTestbedEnvironment(LinkSpec(...))``: the same on this machine's testbed
  (``TrafficSites``: two namespaces and real servers; root), with the application's reader
  and writer following the spec's rates and a VM image put in the spool every
  ``image_period_s`` (the MPC's schedule).
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from geoslo.control.replication.types import (
    Allocation,
    Decision,
    Measurement,
    ReplicationObservation,
)
from geoslo.errors import ConfigError, TestbedError
from geoslo.live._metrics import UnitGauge
from geoslo.live._netns import cannot_run_reason, run_in
from geoslo.live._processes import find_program
from geoslo.live.replication._capacity import full_link_goodput_mbps
from geoslo.live.replication._htb import PortMatch, in_prefixes
from geoslo.live.replication._qdisc import state_path
from geoslo.live.replication._schedule import images_started
from geoslo.live.replication._shaper import HtbShaper
from geoslo.live.replication._sockets import AckedBytes, read_sockets, stream_of
from geoslo.live.replication._sources import (
    ApplicationStore,
    CopiedImage,
    ImageCopier,
    RedisAddress,
    ReplicatedStore,
)
from geoslo.live.replication._traffic import STREAM_MATCHES, TrafficSites

__all__ = [
    "EgressEnvironment",
    "EgressSpec",
    "LinkSpec",
    "ReplicationTestbedEnvironment",
    "interface_capacity_mbps",
]

MB = 1e6  # bytes; the controller counts in MB (10^6 bytes) and Mbit/s
APPLICATION, REPLICATION, VM_IMAGE = 0, 1, 2


@dataclass(frozen=True)
class EgressSpec:
    """What the controller shapes and reads on one host. ``capacity_mbps`` None: the
    interface's (``interface_capacity_mbps``)."""

    dev: str
    application: RedisAddress
    master: RedisAddress
    replica: RedisAddress
    spool_dir: Path
    image_destination: str
    matches: tuple[PortMatch, PortMatch, PortMatch]
    capacity_mbps: float | None = None
    namespace: str | None = None  # the interface's and the sockets' network namespace
    rsync_password_file: Path | None = None
    initial_shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)
    local_prefixes: tuple[str, ...] = ()  # destinations this side of the WAN: never shaped
    qdisc_state_dir: Path | None = None  # where the interface's qdisc is saved (None: memory)


def interface_capacity_mbps(dev: str, namespace: str | None = None) -> float:
    """C when none is given: the rate of an HTB root class already on ``dev`` (how an
    operator caps a link), else the interface's line rate (``/sys/class/net/DEV/speed``)."""
    tc = find_program("tc", "iproute2")
    try:
        classes = run_in(namespace, [tc, "class", "show", "dev", dev])
    except TestbedError as error:
        raise ConfigError("environment.interface", f"cannot read {dev}: {error}") from None
    for line in classes.splitlines():
        if line.startswith("class htb") and " root " in line and (rate := _rate_mbps(line)):
            return rate
    try:
        speed = float(run_in(namespace, ["cat", f"/sys/class/net/{dev}/speed"]).strip())
    except (TestbedError, ValueError):
        speed = -1.0
    if not speed > 0:
        raise ConfigError(
            "controller.capacity_mbps", f"{dev} reports no line rate: give the link's capacity"
        )
    return speed


def _rate_mbps(line: str) -> float | None:
    parts = line.split()
    if "rate" not in parts:
        return None
    text = parts[parts.index("rate") + 1].removesuffix("bit")
    unit = {"K": 1e-3, "M": 1.0, "G": 1e3}.get(text[-1:], 1e-6)
    return float(text.rstrip("KMG")) * unit


@dataclass
class _Reading:
    """Cumulative bytes per stream at one moment, and the backlogs then."""

    arrived: np.ndarray
    sent: np.ndarray
    backlog: np.ndarray


class EgressEnvironment:
    """One host's egress, observed from its systems and shaped by HTB (``simulated =
    False``). ``now_s`` counts from ``start()`` unless a ``clock_epoch_s`` is given.
    ``registry`` holds its own Prometheus gauges (``geoslo run`` serves them): C in force
    and C measured (``measured_capacity_mbps``)."""

    simulated = False
    MEASURED_INTERVALS = 60  # the measured C is the median over this many recent full ones

    def __init__(
        self,
        spec: EgressSpec,
        clock_epoch_s: float | None = None,
        registry: CollectorRegistry | None = None,
        act_at_start: bool = True,
    ) -> None:
        self.spec = spec
        self.act_at_start = act_at_start
        self.allocation = Allocation("shares", spec.initial_shares)
        self.capacity_mbps = spec.capacity_mbps
        self.copier = ImageCopier(
            spec.spool_dir, spec.image_destination, spec.namespace, spec.rsync_password_file
        )
        self._clock_epoch_s = clock_epoch_s
        self._shaper: HtbShaper | None = None
        self._application: ApplicationStore | None = None
        self._replicated: ReplicatedStore | None = None
        self._acked = AckedBytes()
        self._reading = threading.Lock()
        self._last: _Reading | None = None
        self._totals: list[tuple[float, float, float]] = []  # (now_s, backlog MB, sent MB)
        self.registry = registry or CollectorRegistry()
        self._capacity_gauge = UnitGauge(
            "geoslo_replication_capacity_mbps",
            "C in force: given or read from the interface",
            (),
            self.registry,
        )
        self._measured_gauge = UnitGauge(
            "geoslo_replication_measured_capacity_mbps",
            "Median goodput of the recent intervals in which the link was full (nan: none)",
            (),
            self.registry,
        )

    @property
    def images(self) -> list[CopiedImage]:
        return self.copier.images

    async def start(self) -> None:
        spec = self.spec
        if self.capacity_mbps is None:
            self.capacity_mbps = await asyncio.to_thread(
                interface_capacity_mbps, spec.dev, spec.namespace
            )
        self._application = ApplicationStore(spec.application)
        self._replicated = ReplicatedStore(spec.master, spec.replica)
        self._capacity_gauge.set(self.capacity_mbps)
        self._measured_gauge.set(float("nan"))
        if self._clock_epoch_s is None:
            self._clock_epoch_s = time.time()
        self._last = await asyncio.to_thread(self._read)
        if self.act_at_start:
            await self._begin_acting()

    async def _begin_acting(self) -> None:
        """HTB on the interface (in place of its root qdisc) and the image copies: at
        start, or (``act_at_start`` False: one's own host) at the first plan applied, so
        that a dry run changes nothing."""
        spec = self.spec
        saved_to = None
        if spec.qdisc_state_dir is not None:
            saved_to = state_path(spec.qdisc_state_dir, spec.dev, spec.namespace)
        shaper = HtbShaper(
            spec.dev, self.capacity_mbps * 1e6, spec.matches, spec.namespace,
            spec.local_prefixes, saved_to,
        )  # fmt: skip
        await asyncio.to_thread(shaper.install, spec.initial_shares)
        self._shaper = shaper
        self.copier.start()

    async def observe(self) -> ReplicationObservation:
        """The interval since the last observation: backlogs now, MB sent and arrived."""
        if self._last is None:
            raise TestbedError("the egress environment is not started (call start() first)")
        self.copier.check()
        reading = await asyncio.to_thread(self._read)
        last, self._last = self._last, reading
        measurement = Measurement(
            reading.backlog / MB,
            (reading.sent - last.sent) / MB,
            (reading.arrived - last.arrived) / MB,
        )
        now_s = self.now_s()
        self._totals.append((now_s, measurement.buffers_mb.sum(), measurement.sent_mb.sum()))
        del self._totals[: -(self.MEASURED_INTERVALS + 1)]
        self._measured_gauge.set(self.measured_capacity_mbps())
        return ReplicationObservation(now_s, measurement)

    def measured_capacity_mbps(self) -> float:
        """C as the link delivered it lately: the median goodput of the recent intervals
        in which it was full (``_capacity.py``); nan until there is one."""
        if len(self._totals) < 2:
            return float("nan")
        t, backlog, sent = np.array(self._totals).T
        full = full_link_goodput_mbps(t, backlog, sent, self.capacity_mbps or 0.0)
        return float(np.median(full)) if full.size else float("nan")

    async def apply(self, plan: Decision | Allocation) -> None:
        """Put the plan's allocation in force on the HTB classes."""
        allocation = as_allocation(plan)
        if self._last is None:
            raise TestbedError("the egress environment is not started (call start() first)")
        if self._shaper is None:
            await self._begin_acting()
        if allocation.mode == "priority":
            await asyncio.to_thread(self._shaper.set_priority, allocation.order)
        else:
            await asyncio.to_thread(self._shaper.set_shares, allocation.shares)
        self.allocation = allocation

    async def close(self) -> None:
        """Stop copying, close the connections, take HTB off the interface (idempotent)."""
        await self.copier.stop()
        for source in (self._application, self._replicated):
            if source is not None:
                source.close()
        self._application = self._replicated = None
        if self._shaper is not None:
            shaper, self._shaper = self._shaper, None
            await asyncio.to_thread(shaper.remove)

    def now_s(self) -> float:
        return time.time() - (self._clock_epoch_s or time.time())

    def class_bytes(self) -> dict[str, int]:
        """HTB's count of bytes sent per class (headers included): a cross-check."""
        return self._shaper.class_bytes() if self._shaper else {}

    def class_rates(self) -> dict[str, tuple[float, int]]:
        return self._shaper.class_rates() if self._shaper else {}

    def _read(self) -> _Reading:
        """Every counter once: the sockets (but those to local prefixes, which do not cross
        the WAN), the two Redis stores, the image spool (one reading at a time: an
        abandoned one must not race the next)."""
        with self._reading:
            with self.copier.lock:  # the images against the sockets, at one moment
                sockets = [
                    s
                    for s in read_sockets(self.spec.namespace)
                    if not in_prefixes(s.peer_ip, self.spec.local_prefixes)
                ]
                arrived_images, copied = self.copier.account(self._stream_sum(sockets, VM_IMAGE))
            acked = self._acked.update(sockets, self.spec.matches)
            in_sockets = self._stream_sum(sockets, APPLICATION, "send_queue_bytes")
            buffered, produced = self._application.read()
            lag, offset = self._replicated.read()
            return _Reading(
                arrived=np.array([produced, offset, arrived_images], float),
                sent=np.array([acked[APPLICATION], acked[REPLICATION], copied], float),
                backlog=np.array([buffered + in_sockets, lag, arrived_images - copied], float),
            )

    def _stream_sum(self, sockets, stream: int, what: str = "acked_bytes") -> int:
        """Bytes (acknowledged, or waiting in Send-Q) on the stream's open connections."""
        matches = self.spec.matches
        return sum(getattr(s, what) for s in sockets if stream_of(s, matches) == stream)


def as_allocation(plan: Decision | Allocation) -> Allocation:
    if isinstance(plan, Decision):
        return plan.allocation
    if isinstance(plan, Allocation):
        return plan
    raise TypeError(f"cannot apply {type(plan).__name__} to the link: a Decision or Allocation")


@dataclass(frozen=True)
class LinkSpec:
    """The testbed's link and what flows into it. The defaults are a small form of
    Experiment 1 (§V-C) that fits this machine: a 20 Mbit/s link, the application's reads
    alternating between overloading their share and not, steady replication, and a 4 MB
    image every 8 s (docs/replication-live.md)."""

    capacity_mbps: float = 20.0
    application_mbps: tuple[float, ...] = (15.2, 6.4)  # levels, each held level_period_s
    replication_mbps: tuple[float, ...] = (7.2,)
    level_period_s: float = 8.0
    image_mb: float = 4.0
    image_period_s: float = 8.0
    value_bytes: int = 65_536  # one value read or written
    namespace_prefix: str = "geoslo"
    state_dir: Path | None = None  # None: a new temporary folder
    initial_shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)  # until the first apply
    start_delay_s: float = 1.0  # the load starts this long after the servers are up

    def __post_init__(self) -> None:
        for name in ("capacity_mbps", "level_period_s", "image_mb", "image_period_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a finite number > 0, got {value!r}")
        for name in ("application_mbps", "replication_mbps"):
            levels = getattr(self, name)
            if not levels or not all(math.isfinite(v) and v >= 0 for v in levels):
                raise ConfigError(name, "must be one or more finite rates >= 0 (Mbit/s)")
        if not 1024 <= self.value_bytes <= 16 * 2**20:
            raise ConfigError("value_bytes", f"must be 1 KiB to 16 MiB, got {self.value_bytes!r}")


class ReplicationTestbedEnvironment:
    """The testbed's link, its systems and its load, as an environment handle."""

    simulated = False

    def __init__(self, spec: LinkSpec | None = None) -> None:
        self.spec = spec or LinkSpec()
        self.sites: TrafficSites | None = None
        self.egress: EgressEnvironment | None = None
        self.start_epoch_s = 0.0
        self.request_logs: dict[str, list] = {}
        self.registry = CollectorRegistry()  # the egress environment's gauges, once started
        self._images_task: asyncio.Task | None = None

    @property
    def allocation(self) -> Allocation:
        return (
            self.egress.allocation
            if self.egress
            else Allocation("shares", self.spec.initial_shares)
        )

    async def start(self) -> None:
        """The namespaces and servers, the HTB link, then the load and the image schedule.
        Without root (or ``tc``, namespaces or HTB) a TestbedError says why."""
        if self.sites is not None:
            raise TestbedError("the replication testbed is already started")
        reason = await asyncio.to_thread(cannot_run_reason)
        if reason:
            raise TestbedError(f"the replication testbed cannot start here: {reason}")
        spec = self.spec
        state_dir = spec.state_dir or Path(tempfile.mkdtemp(prefix="geoslo-replication-"))
        self.sites = await asyncio.to_thread(
            TrafficSites.up, state_dir, spec.namespace_prefix, spec.value_bytes
        )
        try:
            await self._start_on(self.sites)
        except BaseException:
            await self.close()
            raise

    async def _start_on(self, sites: TrafficSites) -> None:
        spec = self.spec
        self.start_epoch_s = time.time() + spec.start_delay_s
        self.egress = EgressEnvironment(
            EgressSpec(
                dev=sites.pair.tx_dev, application=sites.application, master=sites.master,
                replica=sites.replica, spool_dir=sites.spool_dir,
                image_destination=sites.image_destination, matches=STREAM_MATCHES,
                capacity_mbps=spec.capacity_mbps, namespace=sites.pair.tx,
                rsync_password_file=sites.rsync_password_file, initial_shares=spec.initial_shares,
            ),
            clock_epoch_s=self.start_epoch_s,
            registry=self.registry,
        )  # fmt: skip
        await self.egress.start()
        await asyncio.to_thread(
            sites.start_load, spec.application_mbps, spec.replication_mbps,
            spec.level_period_s, self.start_epoch_s,
        )  # fmt: skip
        self._images_task = asyncio.get_running_loop().create_task(self._put_images(sites))

    async def _put_images(self, sites: TrafficSites) -> None:
        """A VM image of ``image_mb`` random bytes into the spool at each period (its file's
        time is its scheduled time: when the image was taken)."""
        spec, k = self.spec, 1
        while True:
            due_epoch_s = self.start_epoch_s + k * spec.image_period_s
            await asyncio.sleep(max(due_epoch_s - time.time(), 0.0))
            await asyncio.to_thread(
                _write_image, sites.spool_dir, k, int(spec.image_mb * MB), due_epoch_s
            )
            k += 1

    def elapsed_s(self) -> float:
        """Seconds since the load started (the MPC's clock: images at multiples of the period)."""
        return time.time() - self.start_epoch_s

    def images_due(self) -> int:
        return images_started(self.elapsed_s(), self.spec.image_period_s)

    async def observe(self) -> ReplicationObservation:
        return await self._running().observe()

    async def apply(self, plan: Decision | Allocation) -> None:
        await self._running().apply(plan)

    def _running(self) -> EgressEnvironment:
        if self.egress is None:
            raise TestbedError("the replication testbed is not started (call start() first)")
        return self.egress

    async def close(self) -> None:
        """Stop the images, the load, the copier and every server; delete the namespaces
        (idempotent). The reader's and writer's request logs stay in ``request_logs``."""
        if self._images_task is not None:
            self._images_task.cancel()
            await asyncio.gather(self._images_task, return_exceptions=True)
            self._images_task = None
        try:
            if self.sites is not None:
                self.request_logs = await asyncio.to_thread(self.sites.stop_load)
        finally:
            try:
                if self.egress is not None:
                    await self.egress.close()
            finally:
                if self.sites is not None:
                    sites, self.sites = self.sites, None
                    await asyncio.to_thread(sites.down)


def _write_image(spool_dir: Path, k: int, size_bytes: int, taken_epoch_s: float) -> None:
    """``image-<k>`` of random bytes (nothing to compress), renamed into the spool whole."""
    partial = spool_dir / f".image-{k:04d}.partial"
    with open(partial, "wb") as out:
        left = size_bytes
        while left > 0:
            chunk = min(left, 1 << 20)
            out.write(os.urandom(chunk))
            left -= chunk
    os.utime(partial, (taken_epoch_s, taken_epoch_s))
    partial.rename(spool_dir / f"image-{k:04d}")
