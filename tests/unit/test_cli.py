"""The command line: JSON in and out, one clear line and exit status 2 for bad input."""

import json
from pathlib import Path

import pytest

from _cli import geoslo

EXAMPLE = Path(__file__).parents[2] / "examples" / "kurma-problem.json"


def test_kurma_solve_writes_an_optimal_plan(tmp_path):
    out = tmp_path / "plan.json"
    result = geoslo("kurma", "solve", "--input", str(EXAMPLE), "--output", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    assert plan["optimal"] is True and plan["formulation"] == "perf"
    assert plan["status"] == "optimal" and plan["solver_status"] == "optimal"
    demand = json.loads(EXAMPLE.read_text())["demand_rps"]
    assert [sum(row) for row in plan["rates_rps"]] == pytest.approx(demand)


def test_kurma_solve_cost_objective_reads_stdin():
    result = geoslo(
        "kurma", "solve", "--input", "-", "--objective", "cost", stdin=EXAMPLE.read_text()
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["formulation"] == "cost" and plan["objective"] == plan["redirected_rps"]
    assert plan["feasible"] is True
    assert max(plan["site_violation_fraction"]) <= 0.05 + 1e-9


def _broken(change) -> str:
    problem = json.loads(EXAMPLE.read_text())
    change(problem)
    return json.dumps(problem)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p.pop("demand_rps"), "demand_rps"),
        (lambda p: p["curves"]["load_rps"].reverse(), "load_rps"),
        (lambda p: p["demand_rps"].__setitem__(0, -5), "demand_rps"),
        (lambda p: p["capacity_rps"].__setitem__(1, float("nan")), "capacity_rps"),
        (lambda p: p["curves"]["violation"][0][1].__setitem__(2, 1.5), "violation"),
    ],
)
def test_bad_input_gets_one_line_naming_the_field_and_exit_2(change, field):
    result = geoslo("kurma", "solve", "--input", "-", stdin=_broken(change))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_unreadable_or_malformed_input_is_exit_2(tmp_path):
    missing = geoslo("kurma", "solve", "--input", str(tmp_path / "nope.json"))
    broken = geoslo("kurma", "solve", "--input", "-", stdin="{not json")
    for result in (missing, broken):
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1


def test_unknown_objective_is_exit_2():
    result = geoslo("kurma", "solve", "--input", str(EXAMPLE), "--objective", "fastest")
    assert result.returncode == 2
    assert "--objective" in result.stderr


def test_version_is_the_package_version():
    import geoslo
    from _cli import geoslo as run_geoslo

    done = run_geoslo("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"geoslo {geoslo.__version__}"
