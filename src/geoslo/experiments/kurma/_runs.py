"""Run one load-balancing policy on the request-level simulator (Kurma §7.1).

Model-based policies (Kurma and the baselines built on its model: Mmc, DNS, EWMA) are a
:class:`KurmaController` fed the simulator's measurements every 2.5 s; the adaptive
per-request baselines (GlobalRR, LatencyAware, DynamicSnitch, C3) run inside the simulator's
kernel, where they see every response as it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geoslo.control.kurma import IntervalMeasurements, KurmaConfig, KurmaController, KurmaModel
from geoslo.experiments.kurma._scenario import SLO_MS, Scenario
from geoslo.sim.kurma import RequestLevelSim, WanTruthParams, interval_measurements

__all__ = [
    "PolicyRun",
    "run_policy",
    "run_cell",
    "cell_name",
    "split_cell",
    "POLICIES",
    "KERNEL_POLICIES",
    "WARMUP_S",
]

KERNEL_POLICIES = {
    "AllLocal": "rates",
    "GlobalRR": "global_rr",
    "LatencyAware": "latency_aware",
    "DynamicSnitch": "dynamic_snitch",  # the paper's Cassandra 3.9
    "DynamicSnitch-3.11": "dynamic_snitch",
    "C3": "c3",
}
# a kernel policy's parameters that make a variant of it (the simulator's defaults otherwise)
VARIANT_PARAMS = {"DynamicSnitch-3.11": {"ds_unscored_as_zero": 1.0}}  # CASSANDRA-13074
MODEL_POLICIES = {
    "KurmaPerf": {"objective": "perf"},
    "KurmaCost": {"objective": "cost"},
    "Mmc": {"objective": "perf"},
    "DNS": {"objective": "perf", "max_fraction_change_per_s": 0.013},  # 1.3 %/s, §7.1.2
    "EWMA": {"objective": "perf", "recompute_every_s": 600.0, "demand_ewma_alpha": 0.8},  # §7.1.2
}
POLICIES = tuple(KERNEL_POLICIES) + tuple(MODEL_POLICIES)
INTERVAL_S = 2.5  # §6
# Every run starts with this much of its first second's load, not recorded, so that Kurma has
# a plan from its first observation (two intervals: the 5 s rate window, §7.1) and the
# adaptive baselines have measured the servers: no policy starts cold on a busy trace.
WARMUP_S = 2 * INTERVAL_S


@dataclass(frozen=True)
class PolicyRun:
    policy: str
    requests: np.ndarray  # [interval, src, dst]
    violations: np.ndarray  # [interval, src, dst]
    served_rps: np.ndarray  # [interval, site] client load served at each site
    chosen_curve: dict[int, int]  # site -> index in its curve family (interference, §7.1.4)
    curve_fits: dict = field(default_factory=dict)  # site -> the last fit's CurveFit
    server_choice: str | None = None  # inside the chosen site (None: the policy's own)

    @property
    def name(self) -> str:
        """The grid cell: the site choice, with its server choice when one is given."""
        return cell_name(self.policy, self.server_choice)

    @property
    def global_violation_fraction(self) -> float:
        return float(self.violations.sum() / max(self.requests.sum(), 1))

    def redirected_requests(self) -> float:
        total = self.requests.sum(axis=0)
        return float(total.sum() - np.trace(total))

    def site_violation_fraction(self) -> np.ndarray:
        """Per source site: violations of its requests (wherever served) / its requests."""
        return self.violations.sum(axis=(0, 2)) / np.maximum(self.requests.sum(axis=(0, 2)), 1)

    def per_minute_site_fraction(self, site: int, interval_s: float = INTERVAL_S) -> np.ndarray:
        per = int(round(60 / interval_s))
        v = self.violations[:, site].sum(axis=1)
        r = self.requests[:, site].sum(axis=1)
        m = len(v) // per * per
        return v[:m].reshape(-1, per).sum(1) / np.maximum(r[:m].reshape(-1, per).sum(1), 1)


def cell_name(policy: str, server_choice: str | None) -> str:
    """ "KurmaPerf" (its own server choice), "KurmaPerf+least_outstanding", ..."""
    return policy if server_choice is None else f"{policy}+{server_choice}"


def split_cell(cell: str) -> tuple[str, str | None]:
    """The inverse of :func:`cell_name`: (site choice, server choice or None)."""
    policy, _, server_choice = cell.partition("+")
    return policy, server_choice or None


def kurma_model(
    scenario: Scenario, mmc: bool = False, server_choice: str | None = None
) -> KurmaModel:
    """Kurma's model of the scenario's sites, its curves profiled under ``server_choice``."""
    surface = scenario.mmc_surface if mmc else scenario.surface_for(server_choice)
    n = len(scenario.sites)
    return KurmaModel(
        scenario.sites,
        np.full(n, scenario.saturation_rps),
        (surface,) * n,
        min_service_ms=scenario.profile.min_service_ms,
    )


def make_controller(
    scenario: Scenario, policy: str, curve_families=None, server_choice: str | None = None
) -> KurmaController:
    config = KurmaConfig(slo_ms=SLO_MS, **MODEL_POLICIES[policy])
    model = kurma_model(scenario, mmc=policy == "Mmc", server_choice=server_choice)
    return KurmaController(model, config, curve_families)


def to_measurements(
    stats, base_rtt_ms: np.ndarray, pool_ms: np.ndarray, rng, wan_truth=None
) -> IntervalMeasurements:
    """What Kurma's instances measure and exchange after an interval (§6)."""
    return interval_measurements(stats, base_rtt_ms, pool_ms, rng, wan_truth)


def run_policy(
    scenario: Scenario,
    policy: str,
    traces: list[np.ndarray],
    write_fraction: float = 0.0,
    seed: int = 0,
    events=(),
    curve_families=None,
    on_interval=None,
    policy_params: dict | None = None,
    wan_truth: WanTruthParams | None = None,
    server_choice: str | None = None,
    server_choice_at: str | None = None,
) -> PolicyRun:
    """Simulate ``policy`` over per-second traces (one per site) in 2.5 s intervals.

    The run starts with :data:`WARMUP_S` of the traces' first second, not recorded.
    ``events`` is a list of (time_s, callable(sim, controller)) applied when time passes,
    e.g. interference on some servers or an interference signal (§7.1.4);
    ``policy_params`` overrides the simulator's ``DEFAULT_POLICY_PARAMS``; ``wan_truth``
    replaces the pooled residual WAN latency by the truth Kurma's model does not assume;
    ``server_choice`` (at ``server_choice_at``) picks the server inside the site.
    """
    duration_s = min(len(t) for t in traces)
    warmup_s = int(WARMUP_S)
    traces = [np.concatenate([np.full(warmup_s, t[0]), t]) for t in traces]
    topology = scenario.topology(duration_s + warmup_s)
    sim = RequestLevelSim(
        site_names=scenario.sites,
        backend=scenario.backend,
        rate_traces=traces,
        write_fraction=write_fraction,
        base_rtt_ms=topology.base_rtt_matrix_ms,
        residual_rtt_samples_ms=scenario.residual_pool_ms,
        slo_ms=SLO_MS,
        seed=seed,
        policy=KERNEL_POLICIES.get(policy, "rates"),
        policy_params={**VARIANT_PARAMS.get(policy, {}), **(policy_params or {})} or None,
        wan_truth=wan_truth,
        server_choice=server_choice,
        server_choice_at=server_choice_at,
    )
    controller = None
    if policy in MODEL_POLICIES:
        controller = make_controller(scenario, policy, curve_families, server_choice)
    rng = np.random.default_rng(seed + 1)
    n = len(scenario.sites)
    fractions = np.eye(n)
    pending = sorted(((t + warmup_s, act) for t, act in events), key=lambda e: e[0])
    requests, violations, served = [], [], []
    intervals = int(duration_s // INTERVAL_S)
    warmup = int(round(warmup_s / INTERVAL_S))
    for k in range(-warmup, intervals):
        while pending and pending[0][0] <= sim.now_s:
            pending.pop(0)[1](sim, controller)
        stats = sim.run(INTERVAL_S, fractions)  # in-kernel policies ignore the fractions
        if k >= 0:
            requests.append(stats.requests)
            violations.append(stats.violations)
            served.append(stats.requests.sum(axis=0) / INTERVAL_S)
        if controller is not None:
            base = topology.base_rtt_matrix_ms(sim.now_s)
            measured = to_measurements(stats, base, scenario.residual_pool_ms, rng, sim.wan_truth)
            routing = controller.step(measured)
            if routing is not None:  # None: the EWMA baseline keeps the routing in force
                fractions = routing.fractions
        if on_interval is not None and k >= 0:
            on_interval(k + 1, intervals)
    return PolicyRun(
        policy,
        np.array(requests),
        np.array(violations),
        np.array(served),
        dict(controller.chosen_curve) if controller is not None else {},
        dict(controller.last_fit) if controller is not None else {},
        server_choice,
    )


def run_cell(scenario, policy, server_choice, traces, write_fraction, seed) -> PolicyRun:
    """One grid cell (a site choice with a server choice), as a :func:`run_jobs` job."""
    return run_policy(scenario, policy, traces, write_fraction, seed, server_choice=server_choice)
