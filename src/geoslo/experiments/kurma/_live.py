"""Kurma on the live testbed: profile the real backend, build the curves, replay Trace-1.

The sequence is the paper's (§4, §6, §7) on real processes:

1. the testbed (Redis servers per site, the WAN emulator) starts in the run folder;
2. the profiler drives every site open-loop at increasing loads at once (the machine is
   shared, so each site is profiled under the load the others put on it), while the
   instances, measuring only, probe the WAN 3 times per site every 200 ms;
3. the response-time distributions and each link's residual WAN latency from its probes
   (base removed) become the curve family of each site pair, saved for the agents (save_model);
4. each policy replays the same Trace-1-like imbalance, scaled to the profiled 5% point,
   through one load generator per site; Kurma's instances exchange state through the WAN.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from geoslo.control.kurma import profiled_model, save_model
from geoslo.dist import LatencyDistribution
from geoslo.errors import TestbedError
from geoslo.experiments.kurma._runs import INTERVAL_S, split_cell
from geoslo.experiments.kurma._scenario import BASE_RTT_RANGE_MS, RHO, SLO_MS
from geoslo.live import ManagedProcess, stop_pid
from geoslo.live.kurma import (
    InstanceConfig,
    LoadgenConfig,
    Testbed,
    TestbedSpec,
    read_loadgen_result,
    start_instance,
    start_loadgen,
)
from geoslo.live.kurma._testbed import cpu_per_command_us, time_per_command_us
from geoslo.models import (
    ServiceProfile,
    SloSurface,
    build_slo_surface,
    probe_residuals_ms,
    profile_backend,
    saturation_rps,
)
from geoslo.report import progress as progress_bar

__all__ = [
    "LiveSettings",
    "LiveModel",
    "LiveRun",
    "profile_testbed",
    "run_policy_live",
    "testbed_for_run",
]

OBJECTIVES = dict.fromkeys(("AllLocal", "GlobalRR", "LatencyAware", "DynamicSnitch", "C3"))
OBJECTIVES.update(KurmaPerf="perf", KurmaCost="cost")
PROBE_BLOCK_S = 5.0  # base RTT = min over blocks of 5 s of probes (75 per link)
PROBES_PER_BLOCK = int(PROBE_BLOCK_S / 0.2) * 3  # a link's probes in a block (3 each 0.2 s)
RESIDUAL_MAX_LOAD_FRACTION = 0.6  # of the nominal capacity (see profile_testbed)
RAMP_S = 10  # before a replay, load ramps up to the trace's first second (not measured)
# A block's base is its second-fastest probe: at a route change toxiproxy releases the chunk
# it holds at once (docs/live.md), and that one probe would undercut the base of its block.
SKIP_LOWEST_PROBES = 1


@dataclass(frozen=True)
class LiveSettings:
    trace_minutes: float = 4.0
    profile_points: int = 14
    profile_seconds: float = 6.0  # per load point, every site at once
    profile_gap_s: float = 1.5  # idle between points: the queues drain
    write_fraction: float = 0.02  # writes reach every site (eventual consistency)
    warmup_s: float = 2.0  # between starting the processes and the first request
    # site choices; "Policy+server_choice" a grid cell (geoslo's balancer: KurmaPerf's rates,
    # least outstanding inside the site, each client counting its own requests in flight)
    policies: tuple[str, ...] = (
        "AllLocal", "GlobalRR", "LatencyAware", "DynamicSnitch", "C3", "KurmaPerf", "KurmaCost",
        "KurmaPerf+least_outstanding",
    )  # fmt: skip
    trace2_policies: tuple[str, ...] = ("AllLocal", "KurmaPerf")  # Trace-2 leaves little spare
    incidents: bool = True  # a KurmaPerf replay with a failure and a partition (§9)

    @classmethod
    def quick(cls) -> LiveSettings:
        return cls(trace_minutes=1.25, profile_points=10, profile_seconds=4.0)


@dataclass(frozen=True)
class LiveModel:
    """What profiling the testbed produced."""

    profile: ServiceProfile
    residual_samples_ms: dict[str, np.ndarray]  # per directed link "src>dst", base removed
    surface: SloSurface  # with every link's residual pooled (the report's summary curve)
    saturation_rps: float
    model_path: Path
    nominal_rps: float  # per site, the testbed's own estimate before profiling
    server_cpu_us_per_command: float = float("nan")  # the servers' CPU per command profiling

    @property
    def pooled_residual_ms(self) -> np.ndarray:
        return np.concatenate(list(self.residual_samples_ms.values()))

    @property
    def local_5pct_rps(self) -> float:
        return self.surface.curve(0).load_at(RHO)


@dataclass(frozen=True)
class LiveRun:
    """One policy's replay: every request of every site, and the instances' round logs."""

    policy: str
    requests: list[dict[str, np.ndarray]]  # per source site, the generator's arrays
    rounds: list[list[dict]]  # per site, its instance's round records
    max_late_ms: float
    start_unix_s: float  # when the generators started
    events: dict[str, float] = field(default_factory=dict)  # name -> when it happened (unix s)
    server_us_per_command: float = float("nan")  # the servers' own time per command (INFO)
    server_cpu_us_per_command: float = float("nan")  # and their CPU per command (INFO cpu)
    probe_rtts_ms: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # per link

    def since(self, t_unix_s: float) -> LiveRun:
        """Only requests issued from ``t_unix_s`` on, and the rounds measuring after it."""
        requests = [
            {key: values[r["issued_unix_s"] >= t_unix_s] for key, values in r.items()}
            for r in self.requests
        ]
        first_round_s = t_unix_s + INTERVAL_S
        rounds = [[rec for rec in log if rec["t_unix_s"] >= first_round_s] for log in self.rounds]
        return LiveRun(
            self.policy, requests, rounds, self.max_late_ms, t_unix_s, self.events,
            self.server_us_per_command, self.server_cpu_us_per_command, self.probe_rtts_ms,
        )  # fmt: skip

    def violated(self, i: int) -> np.ndarray:
        r = self.requests[i]
        return ~r["ok"] | (r["response_ms"] > SLO_MS)

    def site_violation_fraction(self) -> np.ndarray:
        return np.array([self.violated(i).mean() for i in range(len(self.requests))])

    def global_violation_fraction(self) -> float:
        total = sum(len(r["ok"]) for r in self.requests)
        return float(sum(self.violated(i).sum() for i in range(len(self.requests))) / total)

    def redirected(self) -> int:
        return int(sum((r["site"] != i).sum() for i, r in enumerate(self.requests)))

    def total(self) -> int:
        return int(sum(len(r["ok"]) for r in self.requests))

    def wan_bytes(self) -> float:
        return float(sum(sum(rec["report"]["wan_bytes"]) for log in self.rounds for rec in log))


def _stepped_trace(loads: np.ndarray, settings: LiveSettings) -> list[float]:
    rates: list[float] = []
    for load in loads:
        rates += [float(load)] * int(settings.profile_seconds)
        rates += [0.0] * int(np.ceil(settings.profile_gap_s))
    return rates


def _start_at(warmup_s: float) -> float:
    return float(np.ceil(time.time() + warmup_s))


@dataclass(frozen=True)
class Event:
    """Something done to the testbed ``at_s`` after the generators start, while they run:
    ``action(testbed, agents)`` (the agents' processes, in site order)."""

    at_s: float
    name: str
    action: Callable[[Testbed, list[ManagedProcess]], object]


def _replay(
    testbed: Testbed, run_dir: Path, policy: str, traces: list[list[float]], seed: int,
    write_fraction: float, warmup_s: float, model_path: Path | None, label: str | None = None,
    events: Sequence[Event] = (),
) -> LiveRun:  # fmt: skip
    """Agents up, one generator per site, ``events`` on time, wait for the end, agents down;
    ``policy`` a site choice or a grid cell ("KurmaPerf+least_outstanding")."""
    run_dir.mkdir(parents=True, exist_ok=True)
    site_choice, server_choice = split_cell(policy)
    objective = OBJECTIVES[site_choice]
    instances = [
        start_instance(
            InstanceConfig(
                str(testbed.state_dir), site, str(run_dir), objective,
                str(model_path) if objective else None, SLO_MS,
            )
        )
        for site in testbed.spec.sites
    ]  # fmt: skip
    generators: list[ManagedProcess] = []
    counters_before = testbed.server_counters()
    try:
        start = _start_at(warmup_s)
        generators += [
            start_loadgen(
                LoadgenConfig(
                    str(testbed.state_dir), site, site_choice, tuple(trace), start,
                    str(run_dir / f"requests-{site.lower()}.npz"), write_fraction, SLO_MS,
                    seed + 17 * k, server_choice=server_choice,
                ),
                run_dir,
            )
            for k, (site, trace) in enumerate(zip(testbed.spec.sites, traces, strict=True))
        ]  # fmt: skip
        done = _wait(
            generators, start, max(len(t) for t in traces), label, events, testbed, instances
        )
        if events:  # when each happened, beside the logs it explains
            (run_dir / "events.json").write_text(json.dumps(done))
        for generator in generators:
            if generator.alive:
                generator.stop()
                raise TestbedError(f"{generator.name} did not finish; see {generator.log_path}")
        time.sleep(3.0)  # an interval and more: the instances log the last one
    finally:  # also on an interrupt (SIGTERM is one: geoslo.cli.main)
        for process in [*generators, *instances]:
            process.stop()
    counters_after = testbed.server_counters()
    results = [
        read_loadgen_result(run_dir / f"requests-{site.lower()}.npz") for site in testbed.spec.sites
    ]
    rounds = [
        _read_rounds(run_dir / f"kurma-{site.lower()}-rounds.jsonl") for site in testbed.spec.sites
    ]
    return LiveRun(
        policy,
        [arrays for arrays, _ in results],
        rounds,
        max(summary["max_late_ms"] for _, summary in results),
        start,
        done,
        time_per_command_us(counters_before, counters_after),
        cpu_per_command_us(counters_before, counters_after),
        _read_probes(run_dir, testbed, lambda _: True),
    )


def _wait(
    generators, start_unix_s: float, duration_s: int, label: str | None,
    events: Sequence[Event] = (), testbed: Testbed | None = None, agents=(),
) -> dict[str, float]:  # fmt: skip
    """Until every generator ends (or a minute past the trace), a progress bar in seconds;
    each event done when its time comes. Returns when each event was done (unix s)."""
    deadline = start_unix_s + duration_s + 60
    bar = progress_bar(total=duration_s, label=label) if label else None
    pending, done = sorted(events, key=lambda e: e.at_s), {}
    while any(g.alive for g in generators) and time.time() < deadline:
        while pending and time.time() >= start_unix_s + pending[0].at_s:
            event = pending.pop(0)
            event.action(testbed, list(agents))
            done[event.name] = time.time()
        time.sleep(0.2)
        if bar is not None:
            bar.update(min(duration_s, int(time.time() - start_unix_s)) - bar.done)
    if bar is not None:
        bar.close()
    return done


def _read_rounds(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _read_probes(run_dir: Path, testbed: Testbed, keep) -> dict[tuple[int, int], np.ndarray]:
    """Probe RTTs per directed link (i, j), in time order, of the probes sent when ``keep(t)``."""
    sites, links = testbed.spec.sites, {}
    for i, site in enumerate(sites):
        path = run_dir / f"kurma-{site.lower()}-probes.csv"
        rows = [line.split(",") for line in path.read_text().splitlines()] if path.exists() else []
        for j, dst in enumerate(sites):
            rtts = [float(r[2]) for r in rows if r[1] == dst and keep(float(r[0]))]
            if rtts:
                links[(i, j)] = np.array(rtts)
    return links


def _pair_surfaces(profile, residuals: dict[tuple[int, int], np.ndarray], n: int):
    """Each directed link's SLO curves, from its own residual (§4.2: curves per site pair)."""
    rows = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append(None)
                continue
            if (i, j) not in residuals:
                raise TestbedError(f"no probe crossed link {i} -> {j} while profiling")
            residual = LatencyDistribution.from_samples(residuals[(i, j)], step_ms=0.1)
            row.append(build_slo_surface(profile, SLO_MS, residual, BASE_RTT_RANGE_MS))
        rows.append(tuple(row))
    return tuple(rows)


def live_profile_loads(nominal_rps: float, n_points: int) -> np.ndarray:
    """Evenly spaced loads from 5% to 97% of the nominal capacity. Not §4.1's spacing,
    denser toward ``nominal_rps``: this backend saturates at 0.75-0.8 of its nominal
    capacity (the CPU quota's throttling), so that spacing spent most points beyond
    saturation, where every request violates, and left 48 to 336 req/s between two points.
    The sites that receive redirects run in that gap, and a piecewise-linear curve across
    it (0 to 0.6%) put Kurma's estimate for redirected requests at 1.1-1.4% where 0.0%
    was measured, and where the local responses measured at the destination at the same
    time, with the probes' residual and base, predicted 0.01-0.15%."""
    return nominal_rps * np.linspace(0.05, 0.97, n_points)


def profile_testbed(
    testbed: Testbed, run_dir: Path, settings: LiveSettings, seed: int, progress=print
) -> LiveModel:
    """Profile every site at once, open-loop, at loads up to the backend's capacity (§4.1)."""
    spec = testbed.spec
    nominal_rps = spec.servers_per_site * testbed.workload.capacity_per_server_rps
    loads = live_profile_loads(nominal_rps, settings.profile_points)
    trace = _stepped_trace(loads, settings)
    progress(f"profiling {len(loads)} loads up to {loads[-1]:.0f} req/s, {len(trace)} s")
    run = _replay(
        testbed, run_dir / "profile", "AllLocal", [trace] * len(spec.sites), seed, 0.0,
        settings.warmup_s, None, "Profiling (live)",
    )  # fmt: skip
    start = min(float(r["issued_unix_s"].min()) for r in run.requests)
    start = float(np.floor(start))
    period = int(settings.profile_seconds) + int(np.ceil(settings.profile_gap_s))
    issued = np.concatenate([r["issued_unix_s"] for r in run.requests])
    response = np.concatenate([r["response_ms"] for r in run.requests])
    response = np.where(np.concatenate([r["ok"] for r in run.requests]), response, np.inf)

    def measure(load_rps: float, write_fraction: float) -> np.ndarray:
        k = int(np.argmin(np.abs(loads - load_rps)))
        t0 = start + k * period
        chosen = (issued >= t0) & (issued < t0 + settings.profile_seconds)
        if not chosen.any():
            raise TestbedError(f"no response measured at {load_rps:.0f} req/s")
        return response[chosen]

    profile = profile_backend(measure, loads)
    saturation = saturation_rps(measure, loads, SLO_MS)
    # Near saturation the three generators starve the 2 cores and the probes would measure
    # that, not the WAN: the residual comes from the points below RESIDUAL_MAX_LOAD_FRACTION.
    calm_until = start + period * int(np.sum(loads <= RESIDUAL_MAX_LOAD_FRACTION * nominal_rps))
    probes = _read_probes(run_dir / "profile", testbed, lambda t: t < calm_until)
    residuals = {
        link: probe_residuals_ms([rtts], PROBES_PER_BLOCK, SKIP_LOWEST_PROBES)
        for link, rtts in probes.items()
    }
    pooled = LatencyDistribution.from_samples(np.concatenate(list(residuals.values())), 0.1)
    model = profiled_model(spec.sites, profile, saturation, SLO_MS, pooled)
    surface = model.surfaces[0]
    model = replace(model, pair_surfaces=_pair_surfaces(profile, residuals, len(spec.sites)))
    model_path = save_model(model, run_dir / "model.npz")
    samples = {f"{spec.sites[i]}>{spec.sites[j]}": r for (i, j), r in residuals.items()}
    return LiveModel(
        profile, samples, surface, saturation, model_path, nominal_rps,
        run.server_cpu_us_per_command,
    )  # fmt: skip


def with_ramp(trace: np.ndarray) -> list[float]:
    """The trace after a linear ramp from 0 to its first second over RAMP_S seconds, so
    that every policy starts warm (Kurma has measured the demand) when the trace begins."""
    ramp = np.linspace(0.0, float(trace[0]), RAMP_S, endpoint=False)
    return [float(x) for x in np.concatenate([ramp, trace])]


def run_policy_live(
    testbed: Testbed, run_dir: Path, policy: str, traces: list[np.ndarray],
    settings: LiveSettings, model: LiveModel, seed: int, events: Sequence[Event] = (),
    name: str | None = None,
) -> LiveRun:  # fmt: skip
    """Replay ``traces`` (one per site, per second) under ``policy``, after the ramp, with
    ``events`` (their times from the generators' start, the ramp included)."""
    name = name or policy
    run = _replay(
        testbed, run_dir / name, policy, [with_ramp(t) for t in traces], seed,
        settings.write_fraction, settings.warmup_s, model.model_path, f"Live {name}", events,
    )  # fmt: skip
    return run.since(run.start_unix_s + RAMP_S)


def testbed_for_run(run_dir: Path, seed: int, progress=print) -> Testbed:
    """A fresh testbed of the default calibration, in the run folder (stopped by the caller)."""
    state_dir = run_dir / "testbed"
    existing = Testbed.load(state_dir)
    if existing is not None:
        for p in existing.processes:
            stop_pid(p["pid"])
    return Testbed.up(TestbedSpec(seed=seed), state_dir, progress)
