"""Follow the sun on a live ZooKeeper ensemble (SoCC 2016 §5.1 on real processes; issue 22).

Sites from the IBM Cloud matrices (§5.1's two by default), each a network namespace, each
pair its measured RTT apart through the delay proxy. Each site's clients follow their local day in a
compressed day (24 "hours" of ``hour_s``): a closed-loop session's pause after each
operation is the peak pause over the Wikipedia trace's load at that local hour, so a site
asks for more while it is day there. Three ensembles on the same setup, one after the
other:

* **follow the sun**: starts with every node in the first site; every interval the
  placement loop (threshold T, fewest migrations, §5.1) decides on the workload and the
  RTTs it measured, and the environment carries the plan out by reconfiguration; each
  node's VM image follows it through the image store (§4.1.3's proactive propagation);
* **fixed US**: every node in the first site, never moved;
* **fixed global**: the nodes spread over the sites in turn, the leader in the first
  (with two sites §5.1's Global: two in the first, one in the other), never moved.

Measured from every operation the clients made: the share of reads and of writes answered
within 15 ms (§5.1's bound), the throughput of each compressed hour, the worst second,
every reconfiguration's duration, and for every image that followed its node the share of
its first reads at the new site served there.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geoslo.control.supercloud import PlacementState
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.errors import ConfigError, GeosloError, TestbedError

__all__ = ["LiveSunSettings", "LiveSunRun", "run_live_ensemble", "think_schedule_ms"]

HOURS = 24
NODES = 3  # §5.1's ensemble
FOLLOW, FIXED_US, FIXED_GLOBAL = "follow the sun", "fixed US", "fixed global"
ENSEMBLES = (FOLLOW, FIXED_US, FIXED_GLOBAL)


@dataclass(frozen=True)
class LiveSunSettings:
    """A compressed day on three sites. ``utc_offset_h``: each site's local time; the
    peak pause is each session's pause at the trace's busiest hour."""

    sites: tuple[str, ...] = ("Washington DC", "Tokyo")  # §5.1's two regions
    utc_offset_h: tuple[float, ...] = (-5.0, 9.0)
    hour_s: float = 20.0  # one compressed hour: a day is 8 minutes
    interval_s: float = 10.0  # the scheduler's period, compressed (§5.1: a minute)
    threads_per_site: int = 16
    # A session's pause dwarfs its operation's latency (up to 230 ms across the WAN), so
    # that a site's count is what it asks for, not how near the servers are.
    peak_think_ms: float = 1000.0
    bound_ms: float = 15.0  # §5.1: requests answered within 15 ms
    threshold_fraction: float = 0.1
    trace: str = "wikipedia"
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.utc_offset_h) != len(self.sites):
            raise ConfigError("utc_offset_h", "give one offset per site")
        if not 0 < self.interval_s <= self.hour_s:
            raise ConfigError("interval_s", "must be > 0 and at most one compressed hour")

    @classmethod
    def quick(cls) -> LiveSunSettings:
        return cls(hour_s=8.0, interval_s=8.0)

    @property
    def day_s(self) -> float:
        return HOURS * self.hour_s


def think_schedule_ms(settings: LiveSunSettings, offset_h: float) -> list[float]:
    """One pause per compressed hour (UTC hour 0 first) for a site ``offset_h`` from UTC:
    the peak pause over the trace's relative load at that local hour."""
    from geoslo.sim.supercloud import unit_trace  # the trace, 0..1

    minutes = unit_trace(settings.trace)[: HOURS * 60]
    by_hour = minutes.reshape(HOURS, 60).mean(axis=1)
    load = by_hour / by_hour.max()
    local = [(h + int(round(offset_h))) % HOURS for h in range(HOURS)]
    return [float(settings.peak_think_ms / max(load[h], 1e-3)) for h in local]


@dataclass
class LiveSunRun:
    """One ensemble's day: every operation, the placements, the reconfigurations."""

    ensemble: str
    start_unix_s: float
    ops: dict[str, np.ndarray]  # per site: (end unix s, is read, latency ms, ok) rows
    placements: list[dict] = field(default_factory=list)  # per interval: t, leader, sites
    reconfigurations: list[dict] = field(default_factory=list)
    refused: int = 0
    failures: list[str] = field(default_factory=list)  # observations that raised
    image_moves: list[dict] = field(default_factory=list)  # follow the sun: images that moved

    def share_within(self, bound_ms: float, reads: bool) -> float:
        rows = np.concatenate([o for o in self.ops.values() if o.size]) if self.ops else None
        if rows is None or not rows.size:
            return float("nan")
        kind = rows[rows[:, 1] == float(reads)]
        return float(np.mean((kind[:, 3] > 0) & (kind[:, 2] <= bound_ms))) if kind.size else 0.0

    def hourly_within(self, bound_ms: float, hour_s: float, hours: int) -> list[float]:
        """Per compressed hour, the share (%) of its reads and writes (together) that
        succeeded within ``bound_ms``."""
        rows = np.concatenate([o for o in self.ops.values() if o.size]) if self.ops else None
        shares = []
        for k in range(hours):
            if rows is None:
                shares.append(float("nan"))
                continue
            t = rows[:, 0] - self.start_unix_s
            hour = rows[(t >= k * hour_s) & (t < (k + 1) * hour_s)]
            fast = (hour[:, 3] > 0) & (hour[:, 2] <= bound_ms)
            shares.append(100 * float(fast.mean()) if hour.size else float("nan"))
        return shares

    def per_second(self, day_s: float) -> np.ndarray:
        """Successful operations in each second of the day, all sites together."""
        counts = np.zeros(int(day_s))
        for rows in self.ops.values():
            ok = rows[rows[:, 3] > 0]
            second = (ok[:, 0] - self.start_unix_s).astype(int)
            second = second[(second >= 0) & (second < counts.size)]
            np.add.at(counts, second, 1)
        return counts


def _environment(settings: LiveSunSettings, ensemble: str, state_dir: Path):
    from geoslo.live.supercloud.zookeeper import ZkLiveSettings
    from geoslo.live.supercloud.zookeeper._environment import SupercloudTestbedEnvironment
    from geoslo.live.supercloud.zookeeper._images import ImageSettings
    from geoslo.sim.supercloud import site_rtt_ms

    rtt = tuple(tuple(float(x) for x in row) for row in site_rtt_ms(settings.sites))
    zk = ZkLiveSettings(
        sites=settings.sites, site_rtt_ms=rtt, seed=settings.seed, clients_connect_randomly=True
    )
    first = settings.sites[0]
    spread = tuple(settings.sites[k % len(settings.sites)] for k in range(NODES))
    start = spread if ensemble == FIXED_GLOBAL else (first,) * NODES
    schedules = {
        site: think_schedule_ms(settings, offset)
        for site, offset in zip(settings.sites, settings.utc_offset_h, strict=True)
    }
    threads = dict.fromkeys(settings.sites, settings.threads_per_site)
    images = ImageSettings() if ensemble == FOLLOW else None
    return SupercloudTestbedEnvironment(
        zk, threads, settings.interval_s, state_dir, start_sites=tuple(start),
        think_schedules=schedules, schedule_step_s=settings.hour_s, images=images,
    )  # fmt: skip


def run_live_ensemble(
    settings: LiveSunSettings, ensemble: str, state_dir: Path, progress=print
) -> LiveSunRun:
    """One ensemble through the compressed day (the environment started and closed here)."""
    if ensemble not in ENSEMBLES:
        raise ConfigError("ensemble", f"unknown ensemble {ensemble!r}; use one of {ENSEMBLES}")
    env = _environment(settings, ensemble, state_dir)
    return asyncio.run(_day(settings, ensemble, env, progress))


async def _day(settings: LiveSunSettings, ensemble: str, env, progress) -> LiveSunRun:
    await env.start()
    run = LiveSunRun(ensemble, env.schedule_start_unix_s, {})
    try:
        template = PlacementState(env.sites, env.rtt_ms, (), env.start_placement)
        loop = (
            PlacementLoop(template, settings.threshold_fraction, settings.interval_s)
            if ensemble == FOLLOW
            else None
        )
        intervals = int(settings.day_s // settings.interval_s)
        for k in range(1, intervals + 1):
            await asyncio.sleep(max(run.start_unix_s + k * settings.interval_s - time.time(), 0))
            try:
                seen = await env.observe()
            except TestbedError as error:  # a reconfiguration failed: counted, go on
                run.failures.append(f"{time.time() - run.start_unix_s:.0f} s: {error}")
                continue
            leader = seen.current.site_of(seen.current.leader)
            run.placements.append(
                {"t_s": time.time() - run.start_unix_s, "leader": leader, "busy": seen.busy,
                 "sites": sorted(n.site for n in seen.current.nodes),
                 "requests": {f.site: f.reads + f.writes for f in seen.front_ends}}
            )  # fmt: skip
            plan = loop.step(seen) if loop is not None else None
            if plan is not None:
                try:
                    await env.apply(plan)
                except GeosloError:
                    run.refused += 1
            if k % max(1, intervals // 8) == 0:
                hour = int(k * settings.interval_s // settings.hour_s)
                progress(f"supercloud live: {ensemble}, hour {hour} of 24, leader in {leader}")
    finally:
        await env.close()
    run.reconfigurations = list(env.reconfigurations)
    for move in env.images.moves if env.images is not None else ():
        run.image_moves.append(
            {"image": move.image, "from": move.from_site, "to": move.to_site,
             "t_s": move.at_unix_s - run.start_unix_s, "reads": move.reads,
             "local_read_fraction": move.local_read_fraction}
        )  # fmt: skip
    run.ops = {s: _read_ops(env.state_dir / f"ops-{k}.jsonl") for k, s in enumerate(env.sites)}
    return run


def _read_ops(path: Path) -> np.ndarray:
    """A client's record as rows (end unix s, is read, latency ms, ok)."""
    if not path.exists():
        return np.zeros((0, 4))
    rows = []
    for line in path.read_text().splitlines():
        try:
            end_s, op, latency_ms, ok = json.loads(line)
        except ValueError:
            continue  # a line cut by the client's stop
        rows.append((end_s, op == "r", latency_ms, ok))
    return np.array(rows, dtype=float).reshape(-1, 4)
