"""Fig. 8's grid: its cells, and geoslo's checks and goal, which can fail (issue 37)."""

from __future__ import annotations

import pytest

from geoslo.control.kurma import SERVER_CHOICES
from geoslo.experiments.kurma._grid import (
    GEOSLO_BALANCER,
    SITE_CHOICES,
    goal_rows,
    grid_cells,
    grid_checks,
    grid_text,
)
from geoslo.experiments.kurma._runs import cell_name

OURS = cell_name(*GEOSLO_BALANCER)


def _row(name, site, choice, violations_pct, wan_gb, redirected_pct=10.0):
    return {
        "policy": name,
        "site_choice": site,
        "server_choice": choice,
        "global_violations_pct": violations_pct,
        "wan_gb": wan_gb,
        "redirected_pct": redirected_pct,
    }


def _trace(ours_pct=0.01, ours_gb=0.5, c3_pct=0.1, c3_gb=0.7, local_lo_pct=0.1, rr_gb=2.0):
    """A grid where every cell is present; the ones the checks read are set."""
    rows = {}
    for site, choice in grid_cells(("least_outstanding",)):
        name = cell_name(site, choice)
        rows[name] = _row(name, site, choice, 1.0, 0.1)
    rows[OURS] = _row(OURS, *GEOSLO_BALANCER, ours_pct, ours_gb, 20.0)
    rows["C3"] = _row("C3", "C3", None, c3_pct, c3_gb, 20.0)
    rows["GlobalRR"]["wan_gb"] = rr_gb
    name = cell_name("AllLocal", "least_outstanding")
    rows[name] = _row(name, "AllLocal", "least_outstanding", local_lo_pct, 0.0, 0.0)
    return rows


def test_the_grid_has_every_site_choice_with_its_own_and_each_row_choice_and_kurmas_row():
    cells = grid_cells(("least_outstanding",))
    assert len(cells) == len(set(cells))
    for site in SITE_CHOICES:
        assert (site, None) in cells and (site, "least_outstanding") in cells
    assert ("C3", None) in cells and not any(p == "C3" and c for p, c in cells)
    for choice in SERVER_CHOICES:  # Kurma's row: "random" is its own choice
        assert ("KurmaPerf", None if choice == "random" else choice) in cells


@pytest.mark.parametrize(
    ("trace", "passed"),
    [
        (_trace(), {"violations": True, "wan": True}),
        (_trace(c3_pct=0.005), {"violations": False, "wan": True}),  # C3 fewer violations
        (_trace(ours_gb=3.0), {"violations": True, "wan": False}),  # more WAN than GlobalRR
    ],
)
def test_geoslos_checks_fail_when_it_loses(trace, passed):
    checks = grid_checks({"Trace-1": trace})
    got = {"violations": None, "wan": None}
    for name, ok in checks.items():
        got["wan" if "WAN" in name else "violations"] = ok
    assert got == passed


def test_a_missed_goal_says_by_how_much_and_why():
    traces = {"Trace-2": _trace(ours_pct=0.2, c3_gb=0.3, local_lo_pct=0.08)}
    goals = {g["goal"]: g for g in goal_rows(traces)}
    every = goals["fewer violations than every other cell"]
    assert not every["met"] and every["best_other"] == "AllLocal+least_outstanding"
    assert not goals["less WAN traffic than C3"]["met"]
    assert goals["less WAN traffic than GlobalRR"]["met"]
    text = grid_text(traces)
    assert "Goal missed, fewer violations than every other cell: 0.200% against 0.080%" in text
    assert "moves 0.0% of the reads" in text
    assert "Goal missed, less WAN traffic than C3: 0.500 GB against 0.300 GB" in text


def test_the_tails_prose_ranks_each_tails_cells_from_its_numbers():
    from geoslo.experiments.kurma._tails import TAIL_CELLS, ranking, ranking_text

    rows = []
    for tail, c3_pct in (("server stalls", 0.09), ("site stalls", 0.01)):
        for k, cell in enumerate(cell_name(*c) for c in TAIL_CELLS):
            pct = c3_pct if cell == "C3" else 0.02 * (k + 1)
            rows.append({"tail": tail, "trace": "Trace-1", "cell": cell,
                         "global_violations_pct": pct})  # fmt: skip
    assert ranking(rows, "site stalls", "Trace-1")[0] == "C3"
    text = ranking_text(rows)
    assert f"**server stalls, Trace-1**: KurmaPerf 0.020%, {OURS} 0.040%" in text
    assert f"{OURS} beats C3" in text and f"{OURS} does not beat C3" in text
