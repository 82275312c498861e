"""Benchmarks that train the SCADS Director's models on the simulated servers (§5.4).

* Steady state: a fleet of servers (tens, as §5.4 benchmarked on EC2) at a steady
  workload of each read/write mix, at rates around its capacity, many noise periods per
  rate; a rate is a violation when most server-periods have their p99 past the threshold.
  The lowest such rate is the mix's crossing.
* Copy duration: copies at several specified rates into servers at several loads; the
  observed factor is the actual over the specified rate, with a measurement error.
"""

from __future__ import annotations

import numpy as np

from geoslo.models import (
    PAPER_MIXES_READ_FRACTION,
    CopyDurationModel,
    SteadyStateModel,
    fit_copy_duration,
    fit_steady_state,
    mix_crossing_samples,
)
from geoslo.sim.director._truth import ServerPerformance

__all__ = [
    "steady_state_crossings",
    "copy_factor_runs",
    "trained_models",
    "BENCHMARK_SERVERS",
    "BENCHMARK_PERIODS",
]

BENCHMARK_SERVERS = 10  # §5.4 benchmarked on tens of EC2 servers
BENCHMARK_PERIODS = 200  # server-periods per load, over the fleet


def trained_models(
    perf: ServerPerformance, seed: int = 0, threshold_ms: float = 100.0, percentile: float = 99.0
) -> tuple[SteadyStateModel, CopyDurationModel, np.ndarray]:
    """§5.4 on the simulated servers: the crossing of each of the paper's mixes (the SLO:
    ``percentile`` under ``threshold_ms``), then the logistic fit; copies at several rates
    and loads, then the linear fit. Returns both models and the crossings (req/s, per mix)."""
    mixes = PAPER_MIXES_READ_FRACTION
    crossings = steady_state_crossings(perf, mixes, threshold_ms, percentile, seed=seed)
    steady = fit_steady_state(*mix_crossing_samples(PAPER_MIXES_READ_FRACTION, crossings))
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.5e6, 8e6, 120)  # around the paper's 4 MB/s
    gets = rng.uniform(0.0, 1.0, 120) * crossings[-1]
    puts = gets * rng.uniform(0.02, 0.25, 120)
    factors = copy_factor_runs(perf, rates, gets, puts, seed=seed)
    return steady, fit_copy_duration(rates, gets, puts, factors), crossings


def steady_state_crossings(
    perf: ServerPerformance,
    read_fractions,
    threshold_ms: float = 100.0,
    percentile: float = 99.0,
    periods: int = BENCHMARK_PERIODS,
    seed: int = 0,
    servers: int = BENCHMARK_SERVERS,
) -> np.ndarray:
    """Per mix, the lowest total req/s at which most of ``periods`` server-periods (on
    ``servers`` servers) violate the percentile."""
    rng = np.random.default_rng(seed)
    allowed = 1.0 - percentile / 100.0
    crossings = []
    for read in np.asarray(read_fractions, float):
        nominal = perf.capacity_rps(read, threshold_ms, percentile)
        rates = nominal * np.linspace(0.5, 1.5, 201)
        factor, hiccup = perf.fleet_noise(servers, periods // servers, rng)
        rho = perf.utilisation(rates[:, None] * read, rates[:, None] * (1 - read), factor[None, :])
        late = perf.tail(threshold_ms, rho, hiccup[None, :])
        violated = (late > allowed).mean(axis=1) > 0.5
        crossings.append(rates[np.argmax(violated)] if violated.any() else rates[-1])
    return np.array(crossings)


def copy_factor_runs(
    perf: ServerPerformance,
    specified_bytes_per_s,
    target_get_rps,
    target_put_rps,
    error_fraction: float = 0.05,
    seed: int = 0,
) -> np.ndarray:
    """The observed copy-rate factor of one copy per (rate, get rate, put rate) triple."""
    rng = np.random.default_rng(seed)
    rate = np.asarray(specified_bytes_per_s, float)
    rho = perf.utilisation(target_get_rps, target_put_rps)
    truth = perf.copy_factor(rate, rho)
    return np.clip(truth * (1.0 + error_fraction * rng.standard_normal(rate.shape)), 0.01, 1.0)
