"""`geoslo kurma example` writes a problem that `geoslo kurma decide` (and `solve`) answers."""

import json

import numpy as np
import pytest

from _cli import geoslo
from geoslo.control.kurma import parse_problem, problem_to_dict, solve
from geoslo.control.kurma.example import example_problem
from geoslo.errors import InputError


def test_example_then_decide_on_the_command_line(tmp_path):
    problem_path = tmp_path / "problem.json"
    made = geoslo("kurma", "example", "-o", str(problem_path), "--sites", "3", "--seed", "1")
    assert made.returncode == 0, made.stderr
    decided = geoslo("kurma", "decide", "--input", str(problem_path), "--objective", "cost")
    assert decided.returncode == 0, decided.stderr
    plan = json.loads(decided.stdout)
    assert plan["status"] == "optimal" and plan["solver_status"] == "optimal"
    assert plan["objective"] == pytest.approx(plan["redirected_rps"]) and plan["decide_ms"] > 0
    assert plan["redirected_rps"] > 0  # the busiest site is past its 5% point
    demand = json.loads(problem_path.read_text())["demand_rps"]
    assert [sum(row) for row in plan["rates_rps"]] == pytest.approx(demand)
    alias = geoslo("kurma", "solve", "--input", str(problem_path), "--objective", "cost")
    assert alias.returncode == 0, alias.stderr
    again = json.loads(alias.stdout)
    assert {k: v for k, v in again.items() if k != "decide_ms"} == {
        k: v for k, v in plan.items() if k != "decide_ms"
    }


@pytest.mark.parametrize(("sites", "seed"), [(2, 0), (3, 0), (3, 7), (5, 2), (10, 3)])
def test_example_is_a_valid_problem_with_one_site_past_its_5pct_point(sites, seed):
    problem = example_problem(sites, seed)
    assert parse_problem(problem_to_dict(problem)).sites == problem.sites
    alone = [problem.omega(i, i, d) for i, d in enumerate(problem.demand_rps)]
    assert sum(v > problem.slo_violation_target for v in alone) == 1
    # remote curves lie above the local one: the WAN adds to every response (§4)
    assert np.all(problem.violation[0, 1] >= problem.violation[1, 1] - 1e-12)
    plan = solve(problem, "perf", time_limit_s=5.0)
    assert plan.outcome.applicable and plan.redirected_rps > 0


def test_example_rejects_a_site_count_out_of_range():
    for sites in (1, 21):
        with pytest.raises(InputError, match="sites"):
            example_problem(sites)
