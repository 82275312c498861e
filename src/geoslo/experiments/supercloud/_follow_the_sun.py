"""Follow the sun (Supercloud, SoCC 2016, §5.1, Figs. 4-5): a week of diurnal load in two
regions 12 hours apart, reads to writes 9:1, served by a 3-node ZooKeeper-like ensemble
that stays in the US, straddles both regions, or is moved by the scheduler.

The load is the first week of the real Wikipedia trace (hourly, smooth like the MSN
connection counts the paper used, which are not public), scaled so that each region's
peak is ``peak_rps``; the second region replays it shifted by 12 hours (§5.1). The
per-minute Twitter trace was tried: its minute-to-minute noise makes two regions of
nearly equal load trade places hundreds of times a week. RTTs are IBM Cloud's measured
Washington DC - Tokyo matrix (the paper ran Virginia - Taiwan).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geoslo.control.supercloud import (
    FrontEnd,
    Node,
    Placement,
    PlacementObservation,
    PlacementState,
)
from geoslo.control.supercloud.example import example_state
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.sim.supercloud import EnsembleSettings, SimulatedEnsemble
from geoslo.workload import load_trace_minutes

__all__ = ["SunSettings", "SunRun", "ENSEMBLES", "run_ensemble", "offered_load_rps"]

ENSEMBLES = ("US", "Global", "Dynamic")  # §5.1's three scenarios, in the paper's order
_START = {
    "US": ("Washington DC", "Washington DC", "Washington DC"),
    "Global": ("Washington DC", "Washington DC", "Tokyo"),
    "Dynamic": ("Washington DC", "Washington DC", "Tokyo"),
}


@dataclass(frozen=True)
class SunSettings:
    days: int = 7
    step_s: float = 60.0
    peak_rps: float = 1000.0
    read_fraction: float = 0.9  # §5.1
    shift_h: float = 12.0  # §5.1: the second region's trace starts 12 h later
    threshold_fraction: float = 0.1
    interval_s: float = 60.0  # §5.1: placement evaluated every minute
    ensemble: EnsembleSettings = field(default_factory=EnsembleSettings)
    seed: int = 0

    @classmethod
    def quick(cls) -> SunSettings:
        return cls(days=2, step_s=120.0)


@dataclass(frozen=True)
class SunRun:
    """One scenario: per-step offered and served load per region, latency samples, moves."""

    name: str
    times_s: np.ndarray
    offered_rps: np.ndarray  # (steps, 2)
    served_rps: np.ndarray  # (steps, 2)
    sample_site: np.ndarray
    sample_is_write: np.ndarray
    sample_ms: np.ndarray
    sample_weight: np.ndarray
    migrations: tuple[tuple[float, str, str, str], ...]  # (time s, node, from, to)


def offered_load_rps(settings: SunSettings) -> tuple[np.ndarray, np.ndarray]:
    """Step start times and offered requests/s per region (US, Asia)."""
    minutes = load_trace_minutes("wikipedia")[: settings.days * 1440]
    minutes = minutes / minutes.max() * settings.peak_rps
    shifted = np.roll(minutes, -int(settings.shift_h * 60))
    per_step = max(1, int(settings.step_s // 60))
    steps = len(minutes) // per_step
    both = np.stack([minutes, shifted], axis=1)[: steps * per_step]
    offered = both.reshape(steps, per_step, 2).mean(axis=1)
    return np.arange(steps) * settings.step_s, offered


def _template() -> PlacementState:
    """Sites, RTTs and the Global start of §5.1 (the scheduler's fixed inputs)."""
    return example_state()


def _workload_report(sites, offered_rps: np.ndarray, settings: SunSettings):
    """S of §3.2: reads and writes each front-end's active clients asked for in the last
    step (what users offer, not what a distant ensemble managed to serve: the trace counts
    active connections)."""
    requests = offered_rps * settings.step_s
    return tuple(
        FrontEnd(site, settings.read_fraction * n, (1 - settings.read_fraction) * n)
        for site, n in zip(sites, requests, strict=True)
    )


def run_ensemble(name: str, settings: SunSettings) -> SunRun:
    """One of §5.1's scenarios over the whole week (a job for ``run_jobs``)."""
    template = _template()
    placement = Placement(tuple(Node(f"zk{k + 1}", s) for k, s in enumerate(_START[name])), "zk1")
    ensemble = SimulatedEnsemble(
        template.sites, template.rtt_ms, placement, settings.ensemble, settings.seed
    )
    loop = PlacementLoop(template, settings.threshold_fraction, settings.interval_s)
    times_s, offered = offered_load_rps(settings)
    served = np.zeros_like(offered)
    samples: list = []
    last_report = None
    for k, now_s in enumerate(times_s):
        if name == "Dynamic" and last_report is not None:
            busy = ensemble.busy(now_s)
            plan = loop.step(PlacementObservation(now_s, last_report, ensemble.placement, busy))
            if plan is not None:
                ensemble.migrate(plan.migrations, now_s)
        step = ensemble.step(now_s, settings.step_s, offered[k], settings.read_fraction)
        served[k] = (step.served_reads + step.served_writes) / settings.step_s
        samples.append(step)
        last_report = _workload_report(template.sites, offered[k], settings)
    migrations = tuple((t, m.node, m.from_site, m.to_site) for t, m in ensemble.migration_log)
    return SunRun(
        name,
        times_s,
        offered,
        served,
        np.concatenate([s.sample_site for s in samples]),
        np.concatenate([s.sample_is_write for s in samples]),
        np.concatenate([s.sample_ms for s in samples]),
        np.concatenate([s.sample_weight for s in samples]),
        migrations,
    )
