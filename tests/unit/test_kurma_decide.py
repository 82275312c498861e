"""Kurma's pure decision and controller loop on a small two-site model (§5, §6, §7.1.2)."""

import numpy as np
import pytest

from geoslo.control.kurma import (
    IntervalMeasurements,
    KurmaConfig,
    KurmaController,
    KurmaModel,
    KurmaObservation,
    build_problem,
    decide,
    dissemination_offset_s,
)
from geoslo.errors import ConfigError
from geoslo.models import SloSurface

GRID = np.array([0.0, 500.0, 800.0, 1000.0])


def knee_surface(shift_per_ms=10.0, mixes=(0.0,)):
    """Violation rises from 0 at 500 to 1 at 1000 req/s; each ms of base RTT moves it left."""
    bases = np.arange(0, 31)
    violation = np.empty((bases.size, len(mixes), GRID.size))
    for b in bases:
        for w, mix in enumerate(mixes):
            load = GRID + b * shift_per_ms + mix * 1000
            violation[b, w] = np.clip((load - 500.0) / 500.0, 0.0, 1.0) ** 2
    return SloSurface(bases, np.array(mixes, float), GRID, violation)


def two_site_model():
    surface = knee_surface()
    return KurmaModel(
        ("a", "b"), np.array([1000.0, 1000.0]), (surface, surface), min_service_ms=1.0
    )


def observation(demand, rtt_ms=10.0, write_fraction=(0.0, 0.0)):
    rtt = np.array([[0.0, rtt_ms], [rtt_ms, 0.0]])
    return KurmaObservation(np.array(demand, float), np.array(write_fraction, float), rtt)


def test_build_problem_reads_each_curve_at_the_measured_base_rtt():
    problem = build_problem(observation([900, 100], rtt_ms=20), two_site_model(), KurmaConfig())
    local, remote = problem.violation[0, 0], problem.violation[0, 1]
    grid = problem.load_grid_rps
    assert np.interp(700.0, grid, remote) > np.interp(700.0, grid, local)


def test_propagated_writes_load_every_other_site():
    model = two_site_model()
    quiet = build_problem(observation([500, 500]), model, KurmaConfig())
    writes = build_problem(observation([500, 500], write_fraction=(0.4, 0.0)), model, KurmaConfig())
    # site b now also serves a's 200 req/s of writes: its curve is read 200 req/s further right
    at = lambda p: np.interp(600.0, p.load_grid_rps, p.violation[1, 1])  # noqa: E731
    assert at(writes) > at(quiet)


def test_decide_moves_load_from_the_hot_site_to_the_idle_one():
    plan = decide(observation([950, 100]), two_site_model(), KurmaConfig())
    rates = np.asarray(plan.rates_rps)
    assert rates[0, 1] > 0 and rates[1, 0] == 0
    assert rates.sum(axis=1) == pytest.approx([950, 100])


def test_dissemination_point_is_the_largest_one_way_delay_plus_the_margin():
    assert dissemination_offset_s(np.array([[0, 5.0], [13.5, 0]])) == pytest.approx(0.0335)


def test_config_rejects_an_unknown_objective():
    with pytest.raises(ConfigError, match="objective"):
        KurmaConfig(objective="fast")


def measurements(arrivals, duration_s=2.5, min_response=np.inf):
    n = len(arrivals)
    return IntervalMeasurements(
        duration_s=duration_s,
        arrivals=np.array(arrivals, float),
        writes=np.zeros(n),
        requests=np.diag(arrivals).astype(float),
        violations=np.zeros((n, n)),
        min_response_ms=np.full((n, n), min_response),
        probe_rtt_ms=np.array([[0.0, 12.0], [12.0, 0.0]]),
    )


def test_controller_averages_demand_over_its_window_and_uses_probes_for_base_rtt():
    controller = KurmaController(two_site_model(), KurmaConfig(rate_window_s=5.0))
    controller.step(measurements([2500, 250]))
    routing = controller.step(measurements([2500, 250]))
    fractions = routing.fractions
    assert routing.plan is controller.plan and routing.plan.status == "optimal"
    assert controller.base_rtt_ms[0, 1] == 12.0
    assert fractions.sum(axis=1) == pytest.approx([1.0, 1.0])
    assert fractions[0, 1] > 0  # 1000 req/s at a is past its knee


def test_dns_variant_moves_at_most_its_rate_per_interval():
    config = KurmaConfig(max_fraction_change_per_s=0.013)
    controller = KurmaController(two_site_model(), config)
    routing = controller.step(measurements([2500, 250]))
    assert routing.fractions[0, 1] == pytest.approx(0.013 * 2.5)
    assert routing.plan.rates_rps[0, 1] > 0.013 * 2.5 * 2500  # the plan goes further


def test_slow_variant_recomputes_only_every_period():
    config = KurmaConfig(recompute_every_s=10.0, demand_ewma_alpha=0.8)
    controller = KurmaController(two_site_model(), config)
    first = controller.step(measurements([500, 250]))
    later = controller.step(measurements([2500, 250]))
    assert first is not None and later is None  # 2.5 s later: no new plan yet
