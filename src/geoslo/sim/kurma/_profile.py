"""Profiling one site and calibrating the backend to Kurma's Fig. 4 (section 4).

Procedure (what ``calibrate_backend`` does, rerun by ``benchmarks/bench_sim.py
--calibrate``): fix the mean service time from the saturation load
(``servers / capacity``), then solve for the stall probability and stall mean so
that the load at which 5% of responses exceed the SLO is 43k req/s for local
requests and 36k req/s for requests sent from 22 ms away (response + 22 ms + a
residual WAN sample). Loads are swept with common random numbers, so the measured
crossings move smoothly with the parameters.
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
    BackendParams,
    ServiceParams,
)

__all__ = ["profile_site", "Crossings", "measure_crossings", "calibrate_backend"]


def _service_draws(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.standard_exponential(n), rng.random(n)


def _services(params: ServiceParams, e_base, u_stall, slowdown=1.0) -> np.ndarray:
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
    return K.profile_kernel(arrival_ms, server, svc, backend.servers, backend.overhead_ms)


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
    for k, load in enumerate(loads):
        over_local = 0
        over_remote = 0
        total = 0
        for sd in range(seed, seed + n_seeds):
            r = profile_site(backend, float(load), 0.0, duration_s, sd)
            rng = np.random.default_rng(sd + 10_000)
            resid = rng.gamma(residual_shape, residual_mean_ms / residual_shape, r.size)
            over_local += int(np.count_nonzero(r > slo_ms))
            over_remote += int(np.count_nonzero(r + remote_rtt_ms + resid > slo_ms))
            total += r.size
        loc[k] = over_local / total
        rem[k] = over_remote / total
    return Crossings(
        local_rps=_crossing(loads, loc, violation_fraction),
        remote_rps=_crossing(loads, rem, violation_fraction),
        capacity_rps=backend.read_capacity_rps,
    )


def calibrate_backend(
    *,
    capacity_rps: float = 55e3,  # section 4: saturation near 55k req/s
    local_crossing_rps: float = 43e3,  # section 4: 5% over 30 ms at 43k req/s
    remote_crossing_rps: float = 36e3,  # section 4: 36k req/s from 22 ms away
    servers: int = 5,
    overhead_ms: float = 0.5,
    duration_s: float = 60.0,
    seed: int = 0,
    n_seeds: int = 4,
    initial: tuple[float, float] = (8e-5, 40.0),
) -> BackendParams:
    """Solve the stall probability and mean so the crossings hit their targets."""
    mean_ms = servers * 1000.0 / capacity_rps

    def build(log_p: float, log_m: float) -> BackendParams:
        p, m = float(np.exp(log_p)), float(np.exp(log_m))
        base = mean_ms - p * m
        if base <= 0:
            base = 1e-6
        svc = ServiceParams(base_mean_ms=base, stall_probability=p, stall_mean_ms=m)
        return BackendParams(servers=servers, read=svc, write=svc, overhead_ms=overhead_ms)

    def residual(x: np.ndarray) -> np.ndarray:
        c = measure_crossings(
            build(*x),
            duration_s=duration_s,
            seed=seed,
            n_seeds=n_seeds,
            loads_rps=np.arange(32e3, 48.5e3, 1e3),
        )
        return np.array(
            [c.local_rps / local_crossing_rps - 1.0, c.remote_rps / remote_crossing_rps - 1.0]
        )

    lower = np.log([1e-6, 2.0])
    upper = np.log([min(1e-2, 0.9 * mean_ms / 2.0), 500.0])
    sol = optimize.least_squares(
        residual,
        np.log(np.asarray(initial)),
        bounds=(lower, upper),
        diff_step=0.05,
        xtol=1e-4,
        ftol=1e-6,
    )
    return build(*sol.x)
