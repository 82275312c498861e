"""Follow the sun (Supercloud, SoCC 2016, §5.1, Figs. 4-5): a week of diurnal load in two
regions, reads to writes 9:1, served by a 3-node ZooKeeper-like ensemble that stays in the
US, straddles both regions, or is moved by the scheduler.

Each region replays its own slice of the real Wikipedia trace (hourly, smooth like the MSN
connection counts the paper used, which are not public): Washington DC the first week,
Tokyo the next, each in its own local time (UTC-5 and UTC+9 in January: 14 h apart), so
the two regions' loads differ from day to day as real regions' do, instead of §5.1's one
trace shifted by 12 hours. The per-minute Twitter trace was tried: its minute-to-minute
noise makes two regions of nearly equal load trade places hundreds of times a week.

The ground truth's WAN is not the scheduler's: the scheduler keeps the IBM Cloud RTT
measured when the run starts (§3's L), while the simulated pair follows its weekly
history, weeks compressed into the run (``ibm_drifting_rtt``). Each step records the
model's mean latency (f of the placement in force over its requests) beside the measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from geoslo.control.supercloud import (
    FrontEnd,
    Node,
    Placement,
    PlacementObservation,
    PlacementState,
    score_placement,
)
from geoslo.control.supercloud.example import example_state
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.errors import ConfigError
from geoslo.sim.supercloud import (
    DriftingRtt,
    EnsembleSettings,
    SimulatedEnsemble,
    StepResult,
    ibm_drifting_rtt,
    unit_trace,
)

__all__ = [
    "SunSettings",
    "SunRun",
    "ENSEMBLES",
    "run_ensemble",
    "offered_load_rps",
    "slices",
    "true_wan",
]

ENSEMBLES = ("US", "Global", "Dynamic")  # §5.1's three scenarios, in the paper's order
_START = {
    "US": ("Washington DC", "Washington DC", "Washington DC"),
    "Global": ("Washington DC", "Washington DC", "Tokyo"),
    "Dynamic": ("Washington DC", "Washington DC", "Tokyo"),
}


_DAY_MIN = 1440


@dataclass(frozen=True)
class SunSettings:
    """``first_day``: each region's first day of ``trace`` (US, Asia); ``utc_offset_h``: its
    local time, into which its slice is shifted (the trace's hours read as local hours);
    ``peak_rps``: the whole trace's peak.
    ``route_change_interval_s``: mean gap between the true WAN's steps to the pair's next
    weekly average (a week of history per 12 h of run by default)."""

    days: int = 7
    step_s: float = 60.0
    peak_rps: float = 1000.0
    read_fraction: float = 0.9  # §5.1
    trace: str = "wikipedia"
    first_day: tuple[int, ...] = (0, 7)  # a different week per region, same weekdays
    utc_offset_h: tuple[float, ...] = (-5.0, 9.0)  # Washington DC, Tokyo in January
    route_change_interval_s: float = 43_200.0
    threshold_fraction: float = 0.1
    interval_s: float = 60.0  # §5.1: placement evaluated every minute
    ensemble: EnsembleSettings = field(default_factory=EnsembleSettings)
    seed: int = 0

    @classmethod
    def quick(cls) -> SunSettings:
        return cls(days=2, step_s=120.0)

    def __post_init__(self) -> None:
        if len(self.first_day) != 2 or len(self.utc_offset_h) != 2:
            raise ConfigError("first_day", "give one first day and one UTC offset per region")


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
    model_ms: np.ndarray  # (steps,) the scheduler's mean latency of the placement in force
    measured_ms: np.ndarray  # (steps,) the ground truth's, offered-weighted
    model_rtt_ms: np.ndarray  # (2, 2) the RTTs the scheduler holds
    true_rtt_ms: np.ndarray  # (steps, 2, 2) the ground truth's RTTs at each step's start


def offered_load_rps(settings: SunSettings) -> tuple[np.ndarray, np.ndarray]:
    """Step start times (UTC, from midnight) and offered requests/s per region (US, Asia):
    region k replays days ``first_day[k]`` on of the trace in its local time, circularly
    within its slice (as §5.1 shifted its trace circularly)."""
    unit = unit_trace(settings.trace)
    minutes = settings.days * _DAY_MIN
    columns = []
    for first, offset_h in zip(settings.first_day, settings.utc_offset_h, strict=True):
        piece = unit[first * _DAY_MIN : first * _DAY_MIN + minutes]
        if piece.size < minutes:
            raise ConfigError(
                "first_day", f"{settings.trace} has no {settings.days} days from day {first}"
            )
        local = (np.arange(minutes) + int(round(offset_h * 60))) % minutes
        columns.append(piece[local] * settings.peak_rps)
    per_step = max(1, int(settings.step_s // 60))
    steps = minutes // per_step
    both = np.stack(columns, axis=1)[: steps * per_step]
    offered = both.reshape(steps, per_step, 2).mean(axis=1)
    return np.arange(steps) * settings.step_s, offered


def slices(settings: SunSettings) -> list[str]:
    """Which days of which trace each region replays, in words (for the report)."""
    return [
        f"{site}: {settings.trace} days {first}-{first + settings.days - 1} at UTC{offset:+g}"
        for site, first, offset in zip(
            _template_sites(), settings.first_day, settings.utc_offset_h, strict=True
        )
    ]


def _template_sites() -> tuple[str, ...]:
    return example_state().sites


def true_wan(settings: SunSettings) -> DriftingRtt:
    """The ground truth's RTTs over the run: each pair's weekly history from a seeded week."""
    duration_s = settings.days * 86_400.0
    return ibm_drifting_rtt(
        _template_sites(), settings.route_change_interval_s, duration_s, settings.seed
    )


def _template(drift: DriftingRtt) -> PlacementState:
    """Sites and the Global start of §5.1, with the RTTs as measured at the start of the run
    (the scheduler's fixed L)."""
    return replace(example_state(), rtt_ms=drift.at_ms(0.0))


def _workload_report(sites, offered_rps: np.ndarray, settings: SunSettings):
    """S of §3.2: reads and writes each front-end's active clients asked for in the last
    step (what users offer, not what a distant ensemble managed to serve: the trace counts
    active connections)."""
    requests = offered_rps * settings.step_s
    return tuple(
        FrontEnd(site, settings.read_fraction * n, (1 - settings.read_fraction) * n)
        for site, n in zip(sites, requests, strict=True)
    )


def _model_ms(template: PlacementState, report, placement: Placement) -> float:
    """The scheduler's mean latency per request of ``placement`` under ``report``: -f / S."""
    state = replace(template, front_ends=report, current=placement)
    requests = sum(f.reads + f.writes for f in report)
    return -score_placement(state, placement) / requests if requests > 0 else 0.0


def _measured_ms(step: StepResult, offered_rps: np.ndarray) -> float:
    """The step's mean latency per offered request: each region's mean sample (its samples
    are drawn evenly over its clients) weighted by its offered load."""
    means = [
        step.sample_ms[step.sample_site == k].mean() if offered_rps[k] > 0 else 0.0
        for k in range(len(offered_rps))
    ]
    total = offered_rps.sum()
    return float(np.dot(means, offered_rps) / total) if total > 0 else 0.0


def run_ensemble(name: str, settings: SunSettings) -> SunRun:
    """One of §5.1's scenarios over the whole run (a job for ``run_jobs``)."""
    drift = true_wan(settings)
    template = _template(drift)
    placement = Placement(tuple(Node(f"zk{k + 1}", s) for k, s in enumerate(_START[name])), "zk1")
    ensemble = SimulatedEnsemble(
        template.sites, template.rtt_ms, placement, settings.ensemble, settings.seed, drift
    )
    loop = PlacementLoop(template, settings.threshold_fraction, settings.interval_s)
    times_s, offered = offered_load_rps(settings)
    served = np.zeros_like(offered)
    model_ms = np.zeros(len(times_s))
    measured_ms = np.zeros(len(times_s))
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
        model_ms[k] = _model_ms(template, last_report, ensemble.placement)
        measured_ms[k] = _measured_ms(step, offered[k])
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
        model_ms,
        measured_ms,
        template.rtt_ms,
        drift.matrices_ms(times_s),
    )
