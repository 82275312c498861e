"""Profiling one site and calibrating the backend to Kurma's Fig. 4 (section 4).

Procedure (what ``calibrate_backend`` does, rerun by ``benchmarks/bench_sim.py
--calibrate [--tail ...]``): fix the mean service capacity from the saturation load,
then solve for the tail's two free parameters so that the load at which 5% of
responses exceed the SLO is 43k req/s for local requests and 36k req/s for requests
sent from 22 ms away (response + 22 ms + a residual WAN sample). The free parameters
per tail (``BackendParams.tail``): "server_stalls" the stall probability and mean;
"site_stalls" the pause rate and mean (the base service time then fills the running
time left); "heavy_tail_threads" the lognormal's log-sd and the floor's share of the
mean (the thread count is a knob, not fitted). Loads are swept with common random
numbers, so the measured crossings move smoothly with the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

from geoslo.errors import InputError
from geoslo.sim.kurma import _kernels as K
from geoslo.sim.kurma._params import (
    DEFAULT_RESIDUAL_WAN_MEAN_MS,
    DEFAULT_RESIDUAL_WAN_SHAPE,
    TAILS,
    BackendParams,
    ServiceParams,
)
from geoslo.sim.kurma._site_stalls import LOOKAHEAD_MS, SiteStallTimeline

__all__ = ["profile_site", "Crossings", "measure_crossings", "calibrate_backend"]


def _service_draws(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.standard_exponential(n), rng.random(n)


def _services(params: ServiceParams, e_base, u_stall, slowdown=1.0) -> np.ndarray:
    """`_kernels.service_ms` over arrays (the same draws, the same formulas)."""
    if params.lognormal_sigma > 0:
        sigma = params.lognormal_sigma
        z = np.sqrt(2.0 * e_base) * np.cos(2.0 * np.pi * u_stall)
        lognormal = np.exp(sigma * z - 0.5 * sigma * sigma)
        return (params.floor_ms + params.base_mean_ms * lognormal) * slowdown
    s = e_base * params.base_mean_ms
    stalled = u_stall < params.stall_probability
    if params.stall_probability > 0:
        u = np.maximum(u_stall[stalled] / params.stall_probability, 1e-300)
        s[stalled] += -np.log(u) * params.stall_mean_ms
    return s * slowdown


PROFILE_SAMPLES = 2_000_000  # responses kept per point when a server choice is profiled


def profile_site(
    backend: BackendParams,
    load_rps: float,
    write_fraction: float,
    duration_s: float,
    seed: int,
    slowdown: np.ndarray | None = None,
    server_choice: str | None = None,
) -> np.ndarray:
    """Response times (ms) of one site under a constant Poisson load.

    Open-loop profiling of a cold cluster (Kurma section 4.1): the queues start empty.
    ``slowdown`` multiplies each server's service times (interference, section 7.1.4).
    ``server_choice`` (None: a uniform server, in arrival order) profiles the site with
    the server choice it will serve with, on the request-level simulator: a uniform
    sample of at most :data:`PROFILE_SAMPLES` responses.
    Every tail of ``backend`` is honoured: its threads per server and, for site-wide
    stalls, a pause timeline of its own stream (``seed``), the other draws unchanged.
    """
    if not (np.isfinite(load_rps) and load_rps > 0):
        raise InputError("load_rps", f"must be > 0, got {load_rps}")
    if not 0.0 <= write_fraction <= 1.0:
        raise InputError("write_fraction", f"must be in [0, 1], got {write_fraction}")
    if not (np.isfinite(duration_s) and duration_s > 0):
        raise InputError("duration_s", f"must be > 0, got {duration_s}")
    if server_choice is not None:
        return _profile_with_choice(
            backend, load_rps, write_fraction, duration_s, seed, slowdown, server_choice
        )
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(load_rps * duration_s))
    arrival_ms = np.sort(rng.random(n)) * duration_s * 1000.0
    server = np.minimum((rng.random(n) * backend.servers).astype(np.int64), backend.servers - 1)
    e_base, u_stall = _service_draws(rng, n)
    is_write = rng.random(n) < write_fraction
    svc = _services(backend.read, e_base, u_stall)
    if is_write.any():
        svc[is_write] = _services(backend.write, e_base[is_write], u_stall[is_write])
    if slowdown is not None:
        factors = np.asarray(slowdown, dtype=float)
        if factors.shape != (backend.servers,) or np.any(~(factors > 0)):
            raise InputError("slowdown", f"needs {backend.servers} factors > 0")
        svc = svc * factors[server]
    if backend.tail != "site_stalls":
        stall_ms = np.zeros((1, 0, 2))
        quota_us, period_us = backend.cpu_quota_us
        return K.profile_kernel(
            arrival_ms, server, svc, backend.servers, backend.overhead_ms, backend.threads,
            stall_ms, quota_us / 1000.0, period_us / 1000.0,
        )  # fmt: skip
    lookahead_ms = LOOKAHEAD_MS
    while True:  # the same pauses, drawn further ahead if the queues outgrow them
        timeline = SiteStallTimeline([backend], seed)
        bq = np.zeros((1, K.NBQ), dtype=np.int64)
        timeline.extend(bq, np.array([duration_s * 1000.0 + lookahead_ms]))
        stall_ms = timeline.stall_ms[:, : bq[0, K.BQ_HI]]
        try:
            return K.profile_kernel(
                arrival_ms, server, svc, backend.servers, backend.overhead_ms, 1, stall_ms, 0.0, 1.0
            )
        except RuntimeError:
            lookahead_ms *= 4.0


def _profile_with_choice(
    backend, load_rps, write_fraction, duration_s, seed, slowdown, server_choice
) -> np.ndarray:
    from geoslo.sim.kurma._env import RequestLevelSim

    seconds = int(np.ceil(duration_s))
    site = RequestLevelSim(
        site_names=["site"],
        backend=backend,
        rate_traces=[np.full(seconds, float(load_rps))],
        write_fraction=write_fraction,
        base_rtt_ms=np.zeros((1, 1)),
        residual_rtt_samples_ms=np.zeros(1),
        seed=seed,
        policy_params={"reservoir_size": PROFILE_SAMPLES},
        server_choice=server_choice,
    )
    if slowdown is not None:
        site.set_server_slowdown(0, slowdown)
    return site.run(duration_s).sample_response_ms


@dataclass(frozen=True)
class Crossings:
    """Loads (req/s) at which the violation fraction reaches its target (Fig. 4)."""

    local_rps: float
    remote_rps: float
    capacity_rps: float


def _crossing(loads: np.ndarray, frac: np.ndarray, target: float) -> float:
    above = np.nonzero(frac > target)[0]
    if above.size == 0:
        return float(loads[-1])
    k = int(above[0])
    if k == 0:
        return float(loads[0])
    lo, hi = max(frac[k - 1], 1e-12), frac[k]
    w = (np.log(target) - np.log(lo)) / (np.log(hi) - np.log(lo))
    return float(loads[k - 1] + w * (loads[k] - loads[k - 1]))


def _violations(
    backend: BackendParams,
    load_rps: float,
    slo_ms: float,
    wan: tuple[float, float, float],
    duration_s: float,
    seed: int,
    n_seeds: int,
) -> tuple[float, float]:
    """Fractions of local and remote (``wan``: base RTT, residual mean and shape) reads
    over the SLO at one load, pooled over seeds ``seed, seed+1, ...``."""
    remote_rtt_ms, residual_mean_ms, residual_shape = wan
    over_local = 0
    over_remote = 0
    total = 0
    for sd in range(seed, seed + n_seeds):
        r = profile_site(backend, load_rps, 0.0, duration_s, sd)
        rng = np.random.default_rng(sd + 10_000)
        resid = rng.gamma(residual_shape, residual_mean_ms / residual_shape, r.size)
        over_local += int(np.count_nonzero(r > slo_ms))
        over_remote += int(np.count_nonzero(r + remote_rtt_ms + resid > slo_ms))
        total += r.size
    return over_local / total, over_remote / total


def measure_crossings(
    backend: BackendParams,
    *,
    slo_ms: float = 30.0,  # section 4: SLO of 30 ms at the 95th percentile
    violation_fraction: float = 0.05,
    remote_rtt_ms: float = 22.0,  # section 4: Ireland -> Frankfurt base RTT
    residual_mean_ms: float = DEFAULT_RESIDUAL_WAN_MEAN_MS,
    residual_shape: float = DEFAULT_RESIDUAL_WAN_SHAPE,
    loads_rps: np.ndarray | None = None,
    duration_s: float = 30.0,
    seed: int = 0,
    n_seeds: int = 1,
) -> Crossings:
    """Sweep reads-only loads; return where local and remote violations cross the target.

    Violations are pooled over ``n_seeds`` runs (seeds ``seed, seed+1, ...``): the
    local crossing hinges on rare long stalls, so one short run is noisy.
    """
    loads = np.arange(30e3, 52.5e3, 1e3) if loads_rps is None else np.asarray(loads_rps)
    loc = np.empty(loads.size)
    rem = np.empty(loads.size)
    wan = (remote_rtt_ms, residual_mean_ms, residual_shape)
    for k, load in enumerate(loads):
        loc[k], rem[k] = _violations(backend, float(load), slo_ms, wan, duration_s, seed, n_seeds)
    return Crossings(
        local_rps=_crossing(loads, loc, violation_fraction),
        remote_rps=_crossing(loads, rem, violation_fraction),
        capacity_rps=backend.read_capacity_rps,
    )


# Each tail's two free parameters: the starting point and bounds of the search, in the
# solver's coordinates (logs of the stall probability / rate and mean; the log-sd and
# the floor's share of the mean as they are).
_SEARCH = {
    "server_stalls": ((np.log(8e-5), np.log(40.0)), (np.log(1e-6), np.log(2.0))),
    "site_stalls": ((np.log(0.35), np.log(60.0)), (np.log(0.01), np.log(2.0))),
    "heavy_tail_threads": ((2.2, 0.25), (0.5, 0.0)),
}


def _tail_backend(
    tail: str, x, mean_ms: float, servers: int, threads: int, overhead_ms: float
) -> BackendParams:
    """The backend of ``tail`` with mean capacity ``servers * threads / mean_ms`` and the
    solver's point ``x`` as its two free parameters."""
    if tail == "server_stalls":
        p, m = float(np.exp(x[0])), float(np.exp(x[1]))
        base = mean_ms - p * m
        if base <= 0:
            base = 1e-6
        svc = ServiceParams(base_mean_ms=base, stall_probability=p, stall_mean_ms=m)
        return BackendParams(servers=servers, read=svc, write=svc, overhead_ms=overhead_ms)
    if tail == "site_stalls":
        rate, length = float(np.exp(x[0])), float(np.exp(x[1]))
        running = 1.0 - rate * length / (1000.0 + rate * length)
        svc = ServiceParams(base_mean_ms=mean_ms * running)
        return BackendParams(
            servers=servers,
            read=svc,
            write=svc,
            overhead_ms=overhead_ms,
            tail=tail,
            site_stall_rate_per_s=rate,
            site_stall_mean_ms=length,
        )
    sigma, floor_share = float(x[0]), float(x[1])
    svc = ServiceParams(
        base_mean_ms=mean_ms * (1.0 - floor_share),
        floor_ms=mean_ms * floor_share,
        lognormal_sigma=sigma,
    )
    return BackendParams(
        servers=servers,
        read=svc,
        write=svc,
        overhead_ms=overhead_ms,
        tail=tail,
        threads=threads,
    )


def calibrate_backend(
    *,
    tail: str = "server_stalls",
    capacity_rps: float = 55e3,  # section 4: saturation near 55k req/s
    local_crossing_rps: float = 43e3,  # section 4: 5% over 30 ms at 43k req/s
    remote_crossing_rps: float = 36e3,  # section 4: 36k req/s from 22 ms away
    servers: int = 5,
    threads: int = 4,  # "heavy_tail_threads" only: the read stage's threads per server
    overhead_ms: float = 0.5,
    duration_s: float = 60.0,
    seed: int = 0,
    n_seeds: int = 4,
    initial: tuple[float, float] | None = None,
) -> BackendParams:
    """Solve the tail's two free parameters so the crossings hit their targets.

    ``initial`` is the starting point in the solver's coordinates (`_SEARCH`): for
    "server_stalls" (stall probability, stall mean ms) as plain numbers, as before;
    for "site_stalls" (pauses per s, pause mean ms); for "heavy_tail_threads"
    (log-sd, the floor's share of the mean service time).

    The solver is least squares on finite differences of the crossings, except for
    "site_stalls": its pauses are rare (the anchors ask for about one every 4 s, so a
    60-s run holds 5-22 of them), so it needs long runs (``duration_s * n_seeds`` of
    1200 s or more) and it solves for the violation fractions at the two anchor loads
    (5% each; the same anchors, 2 loads a step instead of 17) with Nelder-Mead, whose
    steps are not misled when a pause enters or leaves a run.
    """
    if tail not in TAILS:
        raise InputError("tail", f"must be one of {TAILS}, got {tail!r}")
    n_threads = threads if tail == "heavy_tail_threads" else 1
    mean_ms = servers * n_threads * 1000.0 / capacity_rps
    start, lower = _SEARCH[tail]
    if initial is not None:
        start = tuple(initial) if tail == "heavy_tail_threads" else tuple(np.log(initial))
    if tail == "server_stalls":
        upper = np.log([min(1e-2, 0.9 * mean_ms / 2.0), 500.0])
    elif tail == "site_stalls":
        upper = np.log([50.0, 500.0])
    else:
        upper = np.array([4.0, 0.95])

    def build(x) -> BackendParams:
        return _tail_backend(tail, x, mean_ms, servers, n_threads, overhead_ms)

    def residual(x: np.ndarray) -> np.ndarray:
        c = measure_crossings(
            build(x),
            duration_s=duration_s,
            seed=seed,
            n_seeds=n_seeds,
            loads_rps=np.arange(32e3, 48.5e3, 1e3),
        )
        return np.array(
            [c.local_rps / local_crossing_rps - 1.0, c.remote_rps / remote_crossing_rps - 1.0]
        )

    lower = np.asarray(lower, dtype=float)
    if tail == "site_stalls":
        wan = (22.0, DEFAULT_RESIDUAL_WAN_MEAN_MS, DEFAULT_RESIDUAL_WAN_SHAPE)  # section 4

        def at_anchors(x) -> float:
            b = build(x)
            local, _ = _violations(b, local_crossing_rps, 30.0, wan, duration_s, seed, n_seeds)
            _, remote = _violations(b, remote_crossing_rps, 30.0, wan, duration_s, seed, n_seeds)
            local, remote = max(local, 1e-6), max(remote, 1e-6)
            return float(np.log(local / 0.05) ** 2 + np.log(remote / 0.05) ** 2)

        simplex = np.asarray(start, dtype=float) + np.array([[0.0, 0.0], [0.25, 0.0], [0.0, 0.12]])
        sol = optimize.minimize(
            at_anchors,
            np.asarray(start, dtype=float),
            method="Nelder-Mead",
            bounds=list(zip(lower, upper, strict=True)),
            options={"initial_simplex": simplex, "xatol": 2e-3, "fatol": 1e-5, "maxfev": 40},
        )
        return build(sol.x)
    sol = optimize.least_squares(
        residual,
        np.asarray(start, dtype=float),
        bounds=(lower, upper),
        diff_step=0.05,
        xtol=1e-4,
        ftol=1e-6,
    )
    return build(sol.x)
