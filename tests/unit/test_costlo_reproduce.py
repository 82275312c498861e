"""The quick CosTLO reproduction writes its report and passes the issue's checks."""

import json

import pytest

from geoslo.experiments.costlo import check_done, reproduce


@pytest.mark.slow  # a whole quick reproduction (issue 41: none in the short suite)
def test_quick_reproduction_writes_the_report_and_passes_every_check(tmp_path):
    index = reproduce(tmp_path, quick=True)
    assert index == tmp_path / "index.md"
    assert index.read_text().startswith("#")
    checks = json.loads((tmp_path / "checks.json").read_text())
    assert len(checks) == 7  # 4 on the paper's claims, 3 on the departing ground truth
    assert all(isinstance(v, bool) for v in checks.values())
    assert checks == {name: True for name in checks}, checks
    results = json.loads((tmp_path / "results.json").read_text())
    assert check_done(results) == checks  # the file agrees with the numbers it reports


def test_the_differences_prose_states_this_runs_numbers():
    """No number in the prose is fixed text: change the results and the prose follows."""
    from geoslo.experiments.costlo import differences

    strategies = ["S1: one copy", "S2: relays", "S3: copies", "S4: region", "CosTLO"]
    results = {
        "fig13": {
            "rows": [
                {
                    "met_fraction": 0.37,
                    "within_5ms_fraction": 0.81,
                    "median_measured_minus_estimated_ms": 2.3,
                },
                {
                    "met_fraction": 0.44,
                    "within_5ms_fraction": 0.9,
                    "median_measured_minus_estimated_ms": -0.4,
                },
            ],
            "margin_rows": [
                {"slo_margin_ms": 0.0, "met_fraction": 0.4, "total_overhead_pct": 6.0},
                {"slo_margin_ms": 3.0, "met_fraction": 0.77, "total_overhead_pct": 8.25},
            ],
        },
        "fig16": {"rows": [{"slo_ms": 70.0, "total_overhead_pct": 3.3}]},
        "fig17": {
            "rows_a": [
                {"strategy": s, "slo_met_fraction": f}
                for s, f in zip(strategies, [0.57, 0.58, 0.61, 0.93, 1.0], strict=True)
            ],
            "rows_b": [{"overhead_without_pct": 30.0, "overhead_with_pct": 4.5}],
        },
        "headline": {"cost_increase_fraction": 0.075},
        "truth": {
            "per_truth": {
                t: {
                    "resent_p99_error_pct": e,
                    "vm_median_abs_p99_error_pct": v,
                    "slo_ms": 40.0,
                    "met_fraction": m,
                }
                for t, e, v, m in (
                    ("circular", -1.25, 0.75, 0.52),
                    ("departing", -9.75, 33.0, 0.21),
                )
            }
        },
    }
    text = differences(results)
    for shown in (
        "37%-44%",
        "81%",
        "-0.4 to +2.3 ms",
        "77%",
        "8.2%",
        "7.5%",
        "3.3%",
        "25.5",
        "57%",
        "93%",
        "-9.8%",
        "-1.2%",
        "33%",
        "0.8%",
        "21%",
        "52%",
    ):
        assert shown in text, shown
