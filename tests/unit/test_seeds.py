"""The reproduction over seeds: spread statistics, tables read back, checks over seeds."""

from __future__ import annotations

import math

import pytest

from geoslo.errors import GeosloError, InputError
from geoslo.experiments._seeds import (
    SeedRun,
    _checks_over_seeds,
    _comparison_rows,
    reproduce_seeds,
    run_seed,
    seed_list,
    spread,
)
from geoslo.report import Report, failed_checks


def fake_reproduce(out_dir, quick: bool = False, seed: int = 0):
    """A reproduction whose 'ours' is 10 + seed and whose check fails on seed 2."""
    report = Report(f"Fake system{' (quick)' if quick else ''}")
    report.comparison("headline", [{"quantity": "speed-up", "ours": 10.0 + seed, "paper": 12}])
    report.table("wide", [{"metric": "p95", "MPC": seed, "MPC (paper)": 1.5}])
    report.table("plain", [{"metric": "p95", "value": 3.0}])
    report.checks({"faster than the baseline": seed != 2})
    if seed == 3:
        report.write(out_dir)
        raise GeosloError(f"section(s) x failed; the rest is in {out_dir}/index.md")
    return report.write(out_dir)


def test_spread_gives_the_t_interval_of_the_mean():
    summary = spread([1.0, 2.0, 3.0])
    assert summary["n"] == 3
    assert (summary["median"], summary["min"], summary["max"], summary["mean"]) == (2, 1, 3, 2)
    assert summary["ci95_half"] == pytest.approx(4.3027 * 1.0 / math.sqrt(3), rel=1e-4)
    assert spread([5.0])["ci95_half"] is None


def test_comparison_and_wide_paper_tables_are_read_back_others_are_not():
    comparison = b"quantity,ours,paper,unit,difference,ratio,where,note\nq,1.5,2,ms,,,,\n"
    assert _comparison_rows(comparison)[0]["ours"] == "1.5"
    wide = b"metric,MPC,MPC (paper),FIFO\np95,3,4,9\n"
    assert _comparison_rows(wide) == [
        {"quantity": "p95: MPC", "ours": "3", "paper": "4"} | {"unit": ""}
    ]
    assert _comparison_rows(b"metric,value\np95,3\n") == []
    assert _comparison_rows(b"") == []


def _run(seed: int, checks: dict[str, bool | None], error: str = "") -> SeedRun:
    verdict = {True: "True", False: "False", None: "inconclusive"}
    lines = "check,passed\n" + "".join(f"{k},{verdict[v]}\n" for k, v in checks.items())
    return SeedRun(seed, {"checks.csv": lines.encode()}, error, 1.0)


@pytest.mark.parametrize(
    ("runs", "holds"),
    [
        ([_run(1, {"a": True}), _run(2, {"a": True})], True),
        ([_run(1, {"a": True}), _run(2, {"a": False})], False),
        ([_run(1, {"a": True}), _run(2, {})], False),  # a seed that never checked it
        ([_run(1, {"a": True}), _run(2, {"a": None})], None),  # one seed could not judge it
        ([_run(1, {"a": False}), _run(2, {"a": None})], False),
    ],
)
def test_a_check_holds_over_seeds_only_if_it_held_on_every_seed(runs, holds):
    checks = _checks_over_seeds(runs)
    assert [v for k, v in checks.items() if k.startswith("a ")] == [holds]
    assert checks["every seed's run finished (2 of 2)"] is True


def test_a_seed_whose_run_failed_fails_the_summary():
    checks = _checks_over_seeds([_run(1, {"a": True}), _run(2, {"a": True}, error="boom")])
    assert checks["every seed's run finished (1 of 2)"] is False


def test_run_seed_returns_the_folder_and_the_error_of_a_failed_run():
    run = run_seed(fake_reproduce, True, 3)
    assert run.error.startswith("section(s) x failed") and "seeds/seed-3" in run.error
    assert {"index.md", "headline.csv", "checks.csv"} <= set(run.files)
    assert run_seed(fake_reproduce, False, 1).error == ""


def test_reproduce_seeds_writes_each_seed_and_the_spread(tmp_path):
    index = reproduce_seeds(fake_reproduce, tmp_path, quick=True, seeds=[1, 2, 3])
    text = index.read_text()
    assert text.startswith("# Fake system (quick) over 3 seeds")
    for seed in (1, 2, 3):
        assert (tmp_path / "seeds" / f"seed-{seed}" / "index.md").exists()
    headline = (tmp_path / "headline_seeds.csv").read_text().splitlines()
    assert headline[0].startswith("quantity,paper,unit,median,min,max,mean,ci95_half,seeds")
    assert headline[1].startswith("speed-up,12.0,,12.0,11.0,13.0,12.0,")
    assert (tmp_path / "wide_seeds.csv").exists() and not (tmp_path / "plain_seeds.csv").exists()
    assert (tmp_path / "headline_seeds.png").stat().st_size > 1000
    failed = failed_checks(tmp_path)
    assert failed == [
        "faster than the baseline (held on 2 of 3 seeds)",
        "every seed's run finished (2 of 3)",
    ]


@pytest.mark.parametrize("seeds", [0, -1, 101])
def test_seed_count_out_of_range_is_refused(seeds):
    with pytest.raises(InputError, match="--seeds"):
        seed_list(1, seeds)
    assert seed_list(4, 3) == [4, 5, 6]
