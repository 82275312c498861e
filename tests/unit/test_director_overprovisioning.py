"""The Director reproduction's overprovisioning sweep (FAST 2011 §5.5, §6.3): its rows,
prose, checks and jobs, on hand-made run summaries."""

import pytest

from geoslo.experiments.director import PAPER_VALUES
from geoslo.experiments.director._overprovisioning import (
    check_sweep,
    sweep_rows,
    sweep_text,
)
from geoslo.experiments.director._report import _diurnal, _jobs
from geoslo.report import load_paper_values


def day(factor: float, units: int, periods_over_fraction: float = 0.0, late_fraction=1e-4):
    """A ``_day_summary`` of a diurnal day with 100 ideal units and 20 standby units."""
    return {
        "overprovisioning": factor,
        "units": units,
        "serving_over_ideal": (units - 20) / 100,
        "periods_over_fraction": periods_over_fraction,
        "late_fraction": late_fraction,
        "percentiles": {"20": 99.0, "60": 99.5, "300": 99.9},
        "ideal_units": 100,
        "standby_units": 20,
    }


def test_the_checks_hold_when_more_overprovisioning_costs_more_and_is_late_less():
    sweep = [day(0.0, 120, 0.05), day(0.1, 130, 0.02), day(0.3, 150, 0.0)]
    assert all(check_sweep(sweep).values())


@pytest.mark.parametrize(
    ("units", "over", "failed"),
    [
        ((120, 119, 150), (0.0, 0.0, 0.0), None),  # a drop within 1% is noise
        ((120, 110, 150), (0.0, 0.0, 0.0), "server units"),
        ((120, 130, 150), (0.01, 0.0, 0.03), "periods over the SLO"),
        ((120, 130, 150), (0.01, 0.0, 0.019), None),  # within 1 point
    ],
)
def test_each_check_fails_on_its_own_trade_off(units, over, failed):
    sweep = [day(f, u, o) for f, u, o in zip((0.0, 0.1, 0.3), units, over, strict=True)]
    checks = check_sweep(sweep)
    assert [name for name, ok in checks.items() if not ok] == [
        name for name in checks if failed is not None and failed in name
    ]


def test_check_names_hold_no_number_of_the_run():
    a = check_sweep([day(0.0, 120), day(0.5, 180)])
    b = check_sweep([day(0.1, 333, 0.2), day(0.3, 2, 0.7)])
    assert list(a) == list(b)


def test_the_paper_column_is_filled_at_0_1_only_from_the_paper_values():
    paper = load_paper_values(PAPER_VALUES)
    rows = sweep_rows(paper, [day(0.0, 120), day(0.1, 130), day(0.3, 150)])
    assert len(rows) == 15 and len({r["quantity"] for r in rows}) == 15
    quoted = {r["quantity"]: r["paper"] for r in rows if r["paper"] is not None}
    values = paper["values"]
    assert quoted == {
        "overprovisioning 0.1: server units": values["diurnal_elastic_01_units"]["value"],
        "overprovisioning 0.1: serving units over the ideal": values[
            "diurnal_serving_over_ideal_pct"
        ]["value"],
    }
    ours = {r["quantity"]: r["ours"] for r in rows}
    assert ours["overprovisioning 0.3: server units"] == 150
    assert ours["overprovisioning 0.3: serving units over the ideal"] == pytest.approx(30.0)


def test_the_prose_reads_its_numbers_from_the_sweep():
    text = sweep_text([day(0.0, 120, 0.05), day(0.2, 110, 0.0), day(0.5, 160, 0.0)])
    assert "120 then 160 server units (+33%" in text
    assert "did not rise at every step" in text and "(120, 110, 160)" in text
    assert "from 5.0% to 0.0%" in text


def test_a_sweep_factor_the_fixed_runs_have_runs_once():
    jobs = _jobs("scale", "linear", "contended", (0.0, 0.1, 0.3, 0.5))
    fixed = _jobs("scale", "linear", "contended", ())
    assert len(fixed) == 7 and len(jobs) == 9
    assert jobs[_diurnal(0.1)] == fixed[_diurnal(0.1)]
    assert jobs[_diurnal(0.5)][2:] == ("linear", 0.5, 2)
