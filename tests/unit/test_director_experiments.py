"""The SCADS Director's reproduction: workloads, allocations, model training and the
quick report (FAST 2011 §5.4, §6)."""

import json

import numpy as np
import pytest

from geoslo.control.director import DirectorConfig, work_capacity
from geoslo.control.director.decide import MAX_REPLICAS, replicas_needed
from geoslo.experiments.director import check_done, minimum_servers, reproduce
from geoslo.experiments.director._overprovisioning import OVERPROVISIONING_SWEEP_QUICK
from geoslo.experiments.director._simulated import initial_layout, train_models
from geoslo.experiments.director._workloads import (
    HotspotShape,
    bin_popularity,
    diurnal_rates,
    hotspot_rates,
)
from geoslo.models import PAPER_MIXES_READ_FRACTION, SteadyStateModel
from geoslo.sim.director import ServerPerformance

MODEL = SteadyStateModel(-10.0, 0.01, 0.03)  # 1000 gets/s or 333 puts/s per server


def test_bin_popularity_sums_to_one_and_names_the_most_popular_key_s_bin():
    popularity, hot = bin_popularity(10_000, 50, seed=3)
    assert popularity.sum() == pytest.approx(1.0)
    assert popularity.argmax() == hot
    assert popularity.max() > 5 * np.median(popularity)  # Zipf: one key dominates its bin


def test_hotspot_doubles_the_aggregate_over_the_ramp_onto_one_key():
    shape = HotspotShape(flat_s=60, ramp_s=300, hold_s=60)
    base, hot = hotspot_rates(1000.0, shape)
    assert len(base) == len(hot) == shape.duration_s
    assert hot[:60].max() == 0.0
    assert hot[360:].min() == pytest.approx(1000.0)
    assert np.all(np.diff(hot[60:360]) > 0)


def test_the_diurnal_day_has_its_peak_and_length():
    day = diurnal_rates(5000.0, 7200)
    assert len(day) == 7200
    assert day.max() == pytest.approx(5000.0)
    assert day.min() < 0.3 * day.max()  # a real day-night swing


def test_replicas_needed_is_the_fewest_whose_share_fits():
    config = DirectorConfig()
    capacity = work_capacity(MODEL)
    gets = np.array([0.0, 900.0, 1000.0, 5000.0, 1e9])
    puts = np.array([0.0, 10.0, 0.0, 30.0, 0.0])
    needed = replicas_needed(gets, puts, MODEL, config, capacity)
    for g, p, n in zip(gets, puts, needed, strict=True):
        brute = next(
            (k for k in range(2, MAX_REPLICAS) if 0.01 * g * 2 / k + 0.03 * p < capacity),
            MAX_REPLICAS,
        )
        assert n == brute


def test_minimum_servers_is_a_tight_packing_with_distinct_replicas():
    config = DirectorConfig()
    gets = np.full(40, 120.0)  # 80 replicas of 0.12 of a server: 8 fit one (0.96), 9 do not
    servers = minimum_servers(gets, np.zeros(40), MODEL, config)
    assert servers == 10
    assert minimum_servers(gets, np.zeros(40), MODEL, config, fill_fraction=0.7) > servers
    # one bin with a replica per server: two servers however light it is
    assert minimum_servers(np.array([1.0]), np.zeros(1), MODEL, config) == 2


def test_initial_layout_deals_replicas_on_distinct_servers_and_adds_standbys():
    layout = initial_layout(bins=10, servers=4, replicas=2, standbys=2)
    assert len(layout) == 6 and layout[-1].bins == () and layout[-2].bins == ()
    holders = {b: [s.name for s in layout if b in s.bins] for b in range(10)}
    assert all(len(set(h)) == 2 for h in holders.values())


def test_models_trained_on_the_simulated_servers_find_their_capacity():
    perf = ServerPerformance()
    models = train_models(perf, seed=1)
    for read, crossing in zip(PAPER_MIXES_READ_FRACTION, models.crossings_rps, strict=True):
        truth = perf.capacity_rps(read, 100.0, 99.0)
        assert crossing == pytest.approx(truth, rel=0.05)
        assert models.steady.capacity_rps(read) == pytest.approx(crossing, rel=0.05)
    busy, idle = models.copy.factor(4e6, 5000, 250), models.copy.factor(4e6, 0, 0)
    assert busy < idle


def test_check_done_reads_the_summary():
    summary = {
        "serving_over_ideal": 1.15,
        "held_over_ideal": 1.1,
        "saving_vs_fixed100": 0.1,
        "saving_vs_fixed70": 0.4,
        "decide_ms_1000_servers": 50.0,
    }
    assert all(check_done(summary).values())
    assert not all(check_done({**summary, "serving_over_ideal": 1.3}).values())


def test_the_units_check_counts_as_the_paper_does_under_one_name_on_every_seed():
    """§6.3 counts every leased server minus the standbys (issue 15: the full run's 1.208
    failed the bar while the servers that held data, 1.186, passed it); the check's name
    holds no number of the run, so that --seeds finds the same check on every seed (the
    report's tables give both ratios)."""
    summary = {
        "serving_over_ideal": 1.208,
        "held_over_ideal": 1.186,
        "saving_vs_fixed100": 0.1,
        "saving_vs_fixed70": 0.4,
        "decide_ms_1000_servers": 50.0,
    }
    checks = check_done(summary)
    (units,) = [name for name in checks if "ideal" in name]
    assert checks[units] is False
    assert "1.208" not in units and "1.186" not in units
    assert list(check_done({**summary, "serving_over_ideal": 1.1})) == list(checks)


@pytest.mark.slow  # reruns the whole quick reproduction
def test_the_quick_reproduction_writes_its_report(tmp_path):
    index = reproduce(tmp_path, quick=True, workers=1)
    text = index.read_text()
    headings = ("Models (§5.4)", "Hotspot spike", "Diurnal workload", "A truth the model does")
    for heading in (*headings, "Acceptance checks"):
        assert heading in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ideal_units"] > 0
    assert summary["diurnal-0.1"]["units"] < summary["diurnal-0.3"]["units"]
    assert summary["saving_vs_fixed70"] > summary["saving_vs_fixed100"]
    moved = summary["hotspot_data_moved"]  # per decision, in the report's hotspot section
    assert "Data moved per decision" in text
    assert 0 < moved["hot_bin_mb"] <= moved["total_mb"]
    assert moved["largest_decision_mb"] <= moved["total_mb"]
    gap = summary["gap"]  # elastic 0.1's units above the ideal, term by term, adding up
    terms = ("overprovisioning", "controller_view", "packing", "no_data_beyond_standbys")
    assert gap["ideal"] + sum(gap[t] for t in terms) == summary["diurnal-0.1"]["serving"]
    assert gap["overprovisioning"] > 0 and gap["clock_units"] >= summary["diurnal-0.1"]["units"]
    assert f"{gap['serving'] - gap['ideal']} serving units above the ideal" in text
    truth = summary["truth"]  # issue 23: the model's error on a truth it does not assume
    assert truth["linear_max_error_pct"] < 2.0  # exact by construction on the linear truth
    assert truth["contended_late_at_fill"] > truth["linear_late_at_fill"]
    assert "Where the model breaks" in text
    assert f"{100 * truth['contended_late_at_fill']:.1f}% of the contended truth" in text
    for run in ("diurnal-linear", "diurnal-contended", "hotspot-linear", "hotspot-contended"):
        assert 0.0 <= truth["runs"][run]["periods_over_fraction"] <= 1.0
    assert (tmp_path / "truth.csv").exists() and (tmp_path / "model_error_by_truth.csv").exists()
    sweep = summary["overprovisioning"]  # issue 23: the sweep reuses the 0.1 and 0.3 days
    assert [e["overprovisioning"] for e in sweep] == list(OVERPROVISIONING_SWEEP_QUICK)
    by_factor = {e["overprovisioning"]: e for e in sweep}
    assert by_factor[0.1]["units"] == summary["diurnal-0.1"]["units"]
    assert by_factor[0.3]["units"] == summary["diurnal-0.3"]["units"]
    assert "Overprovisioning sweep" in text and "Cost against headroom" in text
    assert (tmp_path / "overprovisioning.csv").exists()
    assert (tmp_path / "overprovisioning.png").exists()
