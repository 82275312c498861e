"""Follow the sun's workload and ground truth (Supercloud, SoCC 2016, §5.1): each region its
own slice of the trace in its local time, a WAN that drifts per pair while the scheduler
keeps one RTT matrix, and the checks on the scheduler's model that can fail."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from geoslo.control.supercloud import FrontEnd, Node, Placement, PlacementObservation
from geoslo.control.supercloud.example import example_state
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.experiments.supercloud import SunSettings, check_sun, run_ensemble, sun_metrics
from geoslo.experiments.supercloud._follow_the_sun import offered_load_rps, true_wan
from geoslo.sim.supercloud import (
    DriftingRtt,
    EnsembleSettings,
    SimulatedEnsemble,
    ibm_drifting_rtt,
    unit_trace,
)
from geoslo.topology import BaseRttSchedule

DAY_MIN = 1440


def test_each_region_replays_its_own_days_in_its_local_time() -> None:
    settings = SunSettings(days=2, step_s=60.0, first_day=(0, 7), utc_offset_h=(-5.0, 9.0))
    times_s, offered = offered_load_rps(settings)
    unit = unit_trace(settings.trace) * settings.peak_rps
    minutes = 2 * DAY_MIN
    for k, (first, offset_h) in enumerate(zip((0, 7), (-5.0, 9.0), strict=True)):
        local = (np.arange(minutes) + int(offset_h * 60)) % minutes
        assert offered[:, k] == pytest.approx(unit[first * DAY_MIN + local])
    assert times_s[1] - times_s[0] == 60.0
    # Not one trace shifted: no circular shift of the US load gives Asia's.
    gaps = [
        np.abs(np.roll(offered[:, 0], shift) - offered[:, 1]).max()
        for shift in range(0, minutes, 60)
    ]
    assert min(gaps) > 0.02 * settings.peak_rps


def test_the_drifting_wan_follows_each_pairs_history_in_both_directions() -> None:
    sites = ("Washington DC", "Tokyo", "London")
    drift = ibm_drifting_rtt(sites, 3_600.0, 86_400.0, seed=3)
    times_s = np.linspace(0, 86_399, 50)
    matrices = drift.matrices_ms(times_s)
    assert matrices.shape == (50, 3, 3)
    assert np.all(matrices[:, range(3), range(3)] == 0)
    assert np.array_equal(matrices, matrices.transpose(0, 2, 1))
    for (i, j), schedule in drift.schedules.items():
        assert np.array_equal(matrices[:, i, j], schedule.at(times_s))
    assert np.ptp(matrices[:, 0, 1]) > 0 or np.ptp(matrices[:, 0, 2]) > 0  # it drifts


def _step_schedule(before_ms: float, after_ms: float, change_s: float) -> DriftingRtt:
    schedule = BaseRttSchedule(np.array([0.0, change_s]), np.array([before_ms, after_ms]))
    return DriftingRtt(("us", "asia"), {(0, 1): schedule})


def test_the_ensemble_serves_on_the_true_rtt_at_each_request_time() -> None:
    quiet = EnsembleSettings(service_sigma=0.0, wan_jitter_fraction=0.0, samples_per_step=400)
    placement = Placement(tuple(Node(f"zk{k}", "us") for k in (1, 2, 3)), "zk1")
    model_rtt_ms = np.array([[0.0, 100.0], [100.0, 0.0]])
    ensemble = SimulatedEnsemble(
        ("us", "asia"), model_rtt_ms, placement, quiet, 0, _step_schedule(100.0, 250.0, 30.0)
    )
    step = ensemble.step(0.0, 60.0, np.array([0.0, 100.0]), read_fraction=1.0)
    service_ms = quiet.service_median_ms
    # Sample times are not returned: the two levels split the samples about evenly.
    assert set(np.round(step.sample_ms - service_ms, 6)) == {100.0, 250.0}
    assert 0.3 < np.mean(step.sample_ms > 200) < 0.7


def test_the_model_has_no_error_on_a_truth_built_from_its_own_assumptions() -> None:
    """The error measure is right: no service time, no same-site RTT, no jitter, no drift
    and one site for every node (no quorum to disagree on) leave the model exact. This
    proves the measure, not the model."""
    exact = EnsembleSettings(
        same_site_rtt_ms=0.0, service_median_ms=0.0, service_sigma=0.0, wan_jitter_fraction=0.0
    )
    settings = SunSettings(days=1, step_s=600.0, route_change_interval_s=1e12, ensemble=exact)
    metrics = sun_metrics(run_ensemble("US", settings))
    assert metrics["model_error_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["true_rtt_min_ms"] == metrics["true_rtt_max_ms"] == metrics["model_rtt_ms"]


def test_the_model_misses_a_straddling_ensembles_writes() -> None:
    """Global's writes wait for the fastest follower, not twice the median: the model
    overrates them even on the model's own RTTs."""
    exact = EnsembleSettings(
        same_site_rtt_ms=0.0, service_median_ms=0.0, service_sigma=0.0, wan_jitter_fraction=0.0
    )
    settings = SunSettings(days=1, step_s=600.0, route_change_interval_s=1e12, ensemble=exact)
    metrics = sun_metrics(run_ensemble("Global", settings))
    assert metrics["model_error_fraction"] > 0.05


def _metrics(model_ms: dict[str, float], measured_ms: dict[str, float]) -> dict[str, dict]:
    base = {
        "reads_under_15ms": 0.8,
        "writes_under_15ms": 0.8,
        "served_fraction": 0.6,
        "move_interval_median_h": 12.0,
        "US_reads_under_15ms": 0.9,
        "Asia_reads_under_15ms": 0.0,
    }
    fixed = base | {"reads_under_15ms": 0.5, "writes_under_15ms": 0.5, "served_fraction": 0.5}
    out = {}
    for name in ("US", "Global", "Dynamic"):
        m = (base if name == "Dynamic" else fixed) | {
            "model_mean_ms": model_ms[name],
            "measured_mean_ms": measured_ms[name],
        }
        m["model_error_fraction"] = m["model_mean_ms"] / m["measured_mean_ms"] - 1
        out[name] = m
    return out


MEASURED = {"US": 80.0, "Global": 85.0, "Dynamic": 65.0}


@pytest.mark.parametrize(
    ("model_ms", "error_ok", "ranking_ok"),
    [
        ({"US": 75.0, "Global": 95.0, "Dynamic": 61.0}, True, True),
        ({"US": 75.0, "Global": 95.0, "Dynamic": 55.0}, False, True),  # Dynamic -15%
        ({"US": 90.0, "Global": 85.0, "Dynamic": 62.0}, True, False),  # US, Global swapped
    ],
)
def test_the_model_checks_can_fail(model_ms, error_ok, ranking_ok) -> None:
    checks = check_sun(_metrics(model_ms, MEASURED), threshold_fraction=0.1)
    error = next(v for k, v in checks.items() if "within T" in k)
    ranking = next(v for k, v in checks.items() if "ranks" in k)
    assert (error, ranking) == (error_ok, ranking_ok)


def test_same_seed_same_truth_and_the_scheduler_holds_the_first_rtt() -> None:
    settings = replace(SunSettings.quick(), seed=4)
    first, again = true_wan(settings), true_wan(settings)
    times_s = np.arange(0, 2 * 86_400, 3_600.0)
    assert np.array_equal(first.matrices_ms(times_s), again.matrices_ms(times_s))
    run = run_ensemble("US", replace(settings, days=1, step_s=1_800.0))
    assert np.array_equal(run.model_rtt_ms, first.at_ms(0.0))


def test_with_two_regions_the_rtt_level_never_changes_the_choice() -> None:
    """Why the drift moves the latency but not the decision (as the report says): every f
    of §3.2 scales with the one RTT between two regions, and so does T."""
    template = example_state()
    rng = np.random.default_rng(7)
    sites = template.sites
    for trial in range(40):
        loads = rng.uniform(10, 1000, 2)
        report = tuple(
            FrontEnd(site, 0.9 * n, 0.1 * n) for site, n in zip(sites, loads, strict=True)
        )
        current = Placement(
            tuple(Node(f"zk{k + 1}", sites[int(rng.integers(2))]) for k in range(3)), "zk1"
        )
        plans = []
        for scale in (0.8, 1.0, 1.25):
            loop = PlacementLoop(template, threshold_fraction=0.1)
            seen = PlacementObservation(0.0, report, current, False, template.rtt_ms * scale)
            plans.append(loop.step(seen))
        placements = {None if plan is None else plan.placement for plan in plans}
        assert len(placements) == 1, (trial, loads, current)
