"""`geoslo costlo example` then `geoslo costlo decide` (and its alias `select`): JSON in
and out, one line on stderr and exit status 2 for bad input (docs/costlo.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _cli import geoslo

SAMPLES = "2000"  # enough for the inference, small enough to keep the test fast


@pytest.fixture(scope="module")
def problem_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("costlo") / "problem.json"
    result = geoslo(
        "costlo", "example", "--raw", "--samples", SAMPLES, "--prefix", "3", "-o", str(path)
    )
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def compact_file(tmp_path_factory) -> Path:
    """The default form: the same prefix's samples on the lattice with counts."""
    path = tmp_path_factory.mktemp("costlo") / "compact.json"
    result = geoslo("costlo", "example", "--samples", SAMPLES, "--prefix", "3", "-o", str(path))
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def decided(problem_file) -> dict:
    """`geoslo costlo decide -i problem.json`'s answer (one run, read by several tests)."""
    result = geoslo("costlo", "decide", "-i", str(problem_file))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_example_is_compact_by_default_and_decides_like_the_raw_form(
    problem_file, compact_file, decided
):
    compact = json.loads(compact_file.read_text())
    assert compact["step_ms"] == 0.5 and "ping" in compact["regions"][1]
    pairs = compact["regions"][2]["storage"]["put_distinct_objects"]["network"]
    assert sum(row[-1] for row in pairs) == int(SAMPLES)
    assert compact_file.stat().st_size < problem_file.stat().st_size / 10
    answer = geoslo("costlo", "decide", "-i", str(compact_file))
    assert answer.returncode == 0, answer.stderr
    assert _without_time(json.loads(answer.stdout)) == _without_time(decided)


def test_example_is_a_valid_problem_with_four_regions(problem_file):
    problem = json.loads(problem_file.read_text())
    assert problem["serving_region"] == problem["regions"][0]["name"]
    assert len(problem["regions"]) == 4 and isinstance(problem["prefix"], str)
    pairs = problem["regions"][2]["storage"]["put_distinct_objects"]["network_ms"]
    assert len(pairs) == int(SAMPLES) and len(pairs[0]) == 2
    assert len(problem["regions"][1]["ping_ms"]) == int(SAMPLES)


def test_decide_writes_the_documented_config(problem_file, tmp_path):
    out = tmp_path / "config.json"
    result = geoslo("costlo", "decide", "-i", str(problem_file), "-o", str(out))
    assert result.returncode == 0, result.stderr
    config = json.loads(out.read_text())
    assert set(config) == {
        "prefix", "met", "status", "solver_status", "objective", "decide_ms", "serving_region",
        "second_region", "configuration", "estimate", "cost_usd_per_month",
        "baseline_cost_usd_per_month", "cost_increase_fraction", "evaluated",
    }  # fmt: skip
    assert config["status"] in ("feasible", "infeasible", "time_limit")
    assert config["met"] == (config["status"] == "feasible")
    assert config["objective"] == config["cost_usd_per_month"]["total"]
    assert config["decide_ms"] > 0
    problem = json.loads(problem_file.read_text())
    assert config["prefix"] == problem["prefix"]
    assert config["serving_region"] == problem["serving_region"]
    assert set(config["configuration"]) == {
        "serving", "second", "put", "get_timeout_ms", "get_probability", "put_timeout_ms",
        "put_probability",
    }  # fmt: skip
    assert set(config["configuration"]["serving"]) == {"copies", "requests_per_copy", "relay_vm"}
    assert set(config["estimate"]["get"]) == {"p50_ms", "p99_ms", "baseline_p50_ms", "inflation_ms"}
    costs = config["cost_usd_per_month"]
    assert set(costs) == {"storage", "requests", "vms", "bandwidth", "total"}
    assert costs["total"] >= config["baseline_cost_usd_per_month"]["total"] > 0
    assert isinstance(config["met"], bool) and config["evaluated"] >= 1


def _without_time(answer: dict) -> dict:
    """An answer without its wall-clock decision time (the one field two runs differ in)."""
    return {k: v for k, v in answer.items() if k != "decide_ms"}


def test_select_is_an_alias_of_decide(problem_file, decided):
    selected = geoslo("costlo", "select", "-i", str(problem_file))
    assert selected.returncode == 0, selected.stderr
    assert _without_time(json.loads(selected.stdout)) == _without_time(decided)


def test_decide_reads_stdin_and_writes_stdout(problem_file, decided):
    result = geoslo("costlo", "decide", "--input", "-", stdin=problem_file.read_text())
    assert result.returncode == 0, result.stderr
    assert _without_time(json.loads(result.stdout)) == _without_time(decided)


def _broken(problem_file: Path, change) -> str:
    problem = json.loads(problem_file.read_text())
    change(problem)
    return json.dumps(problem)


def _set_pair(p: dict) -> None:
    p["regions"][1]["storage"]["get_same_object"]["network_ms"][3][0] = -1.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p.pop("serving_region"), "serving_region"),
        (lambda p: p["slo"].__setitem__("application", "social"), "slo.application"),
        (lambda p: p["workload"].__setitem__("gets_per_mnth", 1), "workload.gets_per_mnth"),
        (_set_pair, "regions[1].storage.get_same_object.network_ms[3][0]"),
    ],
)
def test_bad_input_gets_one_line_naming_the_field_and_exit_2(problem_file, change, field):
    result = geoslo("costlo", "decide", "-i", "-", stdin=_broken(problem_file, change))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"geoslo: error: {field}: "), result.stderr


def test_unreadable_or_malformed_file_is_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (tmp_path / "missing.json", bad):
        result = geoslo("costlo", "decide", "-i", str(path))
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("geoslo: error: --input: ")


def test_example_rejects_an_unknown_prefix():
    result = geoslo("costlo", "example", "--prefix", "999", "--samples", "20")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("geoslo: error: --prefix: ")


def _many(problem_file: Path, tmp_path: Path) -> Path:
    one = json.loads(problem_file.read_text())
    tight = dict(one, prefix="tight", slo={"get_ms": 30.0})
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"problems": [one, tight]}))
    return path


def test_decide_many_prefixes_answers_each_in_order(problem_file, tmp_path):
    out = tmp_path / "configs.json"
    result = geoslo("costlo", "decide", "-i", str(_many(problem_file, tmp_path)), "-o", str(out))
    assert result.returncode == 0, result.stderr
    selections = json.loads(out.read_text())["selections"]
    assert [s["prefix"] for s in selections][1] == "tight"
    loose, tight = selections
    assert tight["cost_usd_per_month"]["total"] >= loose["cost_usd_per_month"]["total"]


def test_a_bad_problem_among_many_is_named_by_its_index(problem_file, tmp_path):
    many = json.loads(_many(problem_file, tmp_path).read_text())
    del many["problems"][1]["serving_region"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(many))
    result = geoslo("costlo", "decide", "-i", str(path))
    assert result.returncode == 2
    assert result.stderr.strip().startswith("geoslo: error: problems[1].serving_region")


@pytest.mark.slow  # starts a local Ray cluster (30-90 s)
def test_ray_local_gives_the_same_answers_as_in_process(problem_file, tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'ray>=2.40')")
    many = _many(problem_file, tmp_path)
    plain, on_ray = tmp_path / "plain.json", tmp_path / "ray.json"
    assert geoslo("costlo", "decide", "-i", str(many), "-o", str(plain)).returncode == 0
    result = geoslo("costlo", "decide", "-i", str(many), "--ray", "local", "-o", str(on_ray))
    assert result.returncode == 0, result.stderr
    plain_answers = json.loads(plain.read_text())["selections"]
    ray_answers = json.loads(on_ray.read_text())["selections"]
    assert [_without_time(a) for a in plain_answers] == [_without_time(a) for a in ray_answers]


@pytest.mark.parametrize(
    ("problems", "cpus", "size"),
    [(1, 2, 1), (8, 2, 1), (9, 2, 2), (1000, 2, 16), (1000, 64, 4), (3, 0, 1)],
)
def test_ray_batches_hold_about_four_per_cpu_and_at_most_sixteen(problems, cpus, size):
    from geoslo.experiments.costlo._many import batch_size

    assert batch_size(problems, cpus) == size
