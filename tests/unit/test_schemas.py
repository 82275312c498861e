"""`geoslo <system> schema` (issue 16, section 3): the JSON Schema (draft 2020-12) of each
decide contract comes from the pydantic models that validate it, so

* every system's example validates against its input schema, and what decide prints
  for it against its output schema;
* for the contract fuzz's mutations, the schema refuses what the models refuse (a type, a
  range, an unknown or missing key) and accepts what they accept; what only the checks
  across fields refuse (shapes that must agree, names that must exist) is counted;
* the models' errors keep the one-line words naming the JSON path.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from geoslo._schema import DIALECT, Contract, Integer, Number, Text, json_schema, validate
from geoslo.cli import app
from geoslo.control._contract import STATUSES
from geoslo.control._schema import SYSTEMS, Status, schema_of
from geoslo.errors import InputError
from property.test_contract_fuzz import LONG, mutations

SAMPLE_PER_SYSTEM = 60  # fuzz mutations checked against the schema, per system


def _validator(system: str, of: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema_of(system, of))


def _model(system: str):
    import importlib

    return importlib.import_module(f"geoslo.control.{system}._schema").INPUT


# ---------------------------------------------------------------------------- the schemas


@pytest.mark.parametrize("of", ["input", "output"])
@pytest.mark.parametrize("system", SYSTEMS)
def test_each_schema_is_a_valid_draft_2020_12_schema(system, of):
    schema = schema_of(system, of)
    assert schema["$schema"] == DIALECT
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_output_status_is_the_one_vocabulary():
    assert typing.get_args(Status) == STATUSES


# (system, extra options of `example`, extra options of `decide`): small enough to decide
# in a second or two.
EXAMPLES = [
    ("kurma", [], ["--time-limit-s", "2"]),
    ("costlo", ["--samples", "200"], []),
    ("director", ["--servers", "8", "--bins", "16"], []),
    ("replication", [], []),
    ("supercloud", [], []),
]


@pytest.mark.parametrize(("system", "example_options", "decide_options"), EXAMPLES)
def test_the_example_and_its_decision_validate_against_the_schemas(
    system, example_options, decide_options, tmp_path
):
    runner = CliRunner()
    problem, answer = tmp_path / "in.json", tmp_path / "out.json"
    made = runner.invoke(app, [system, "example", "-o", str(problem), *example_options])
    assert made.exit_code == 0, made.output
    _validator(system, "input").validate(json.loads(problem.read_text()))
    args = [system, "decide", "-i", str(problem), "-o", str(answer), *decide_options]
    decided = runner.invoke(app, args)
    assert decided.exit_code == 0, decided.output
    printed = json.loads(answer.read_text())
    output = _validator(system, "output")
    output.validate(printed)
    assert printed["status"] in STATUSES
    for key in ("status", "solver_status", "objective", "decide_ms"):  # each one required
        assert not output.is_valid({k: v for k, v in printed.items() if k != key}), key
    assert not output.is_valid(printed | {"status": "solved"})  # the one vocabulary


# ---------------------------------------------------------------------------- the fuzz


def _schema_accepts(system: str, data: Any) -> bool:
    return _validator(system, "input").is_valid(data)


def _model_accepts(system: str, data: Any) -> bool:
    try:
        _model(system).model_validate(data)
    except ValidationError:
        return False
    return True


def _parser(system: str):
    import importlib

    module = importlib.import_module(f"geoslo.control.{system}.validation")
    return getattr(module, "parse_problem", None) or module.parse_state


def _cases():
    """The fuzz's mutations but its lists of LONG entries (jsonschema, in pure Python, takes
    a minute over their millions of numbers; every list's bound is checked below)."""
    for system in SYSTEMS:
        for description, data, path, _ in mutations(system, 15, SAMPLE_PER_SYSTEM):
            if not description.endswith(f" x{LONG}"):
                yield pytest.param(system, data, id=f"{system}:{description}:{path}")


def _arrays(node: Any, where: str = ""):
    if isinstance(node, dict):
        if node.get("type") == "array":
            yield where, node
        for key, child in node.items():
            yield from _arrays(child, f"{where}/{key}")
    elif isinstance(node, list):
        for k, child in enumerate(node):
            yield from _arrays(child, f"{where}/{k}")


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_list_of_an_input_has_a_bound(system):
    """What the fuzz's LONG lists probe: every array of the input schema has maxItems."""
    unbounded = [w for w, node in _arrays(schema_of(system, "input")) if "maxItems" not in node]
    assert not unbounded


@pytest.mark.parametrize(("system", "data"), list(_cases()))
def test_the_schema_refuses_what_the_models_refuse(system, data):
    """The schema and the models agree on every mutation, and whatever the models refuse
    the validator refuses."""
    model_ok = _model_accepts(system, data)
    assert _schema_accepts(system, data) == model_ok
    if not model_ok:
        with pytest.raises(InputError):
            _parser(system)(data)


def test_what_only_the_checks_across_fields_refuse_is_counted():
    """Inputs the schema accepts and the validator refuses: its checks across fields
    (docs/<system>.md lists them). Printed for the docs; some must exist in the sample,
    or the fuzz no longer reaches those checks."""
    refused: dict[str, list[str]] = {}
    for system in SYSTEMS:
        for _, data, _, _ in mutations(system, 15, SAMPLE_PER_SYSTEM):
            if not _model_accepts(system, data):
                continue
            try:
                _parser(system)(data)
            except InputError as error:
                refused.setdefault(system, []).append(f"{error.field}: {error.problem[:60]}")
    print(f"\ncross-field refusals in {SAMPLE_PER_SYSTEM} mutations per system:")
    for system, problems in refused.items():
        print(f"  {system}: {len(problems)}: {sorted(set(problems))}")
    assert sum(len(p) for p in refused.values()) > 0


# ---------------------------------------------------------------------------- the words


class _Sample(Contract):
    rate_rps: Number(0.0, 1e9)
    share: Number(above=0.0, below=1.0) = 0.5
    horizon: Integer(1, 180) = 30
    name: Text = "x"
    rows: list[list[Number(0.0, 5.0)]] = []


def _sample(**fields) -> dict:
    return {"rate_rps": 1.0} | fields


WORDS = [  # (input, field, problem)
    (_sample(rate_rps=1e308), "rate_rps", "must be in [0, 1e+09], not 1e+308"),
    (_sample(rate_rps=-1), "rate_rps", "must be in [0, 1e+09], not -1"),
    (_sample(rate_rps="1"), "rate_rps", "must be a number, not str"),
    (_sample(rate_rps=True), "rate_rps", "must be a number, not bool"),
    (_sample(rate_rps=None), "rate_rps", "must be a number, not NoneType"),
    (_sample(rate_rps=10**400), "rate_rps", "must be finite (no NaN or infinity)"),
    (_sample(rate_rps=float("nan")), "rate_rps", "must be finite (no NaN or infinity)"),
    (_sample(share=0), "share", "must be in (0, 1), not 0"),
    (_sample(horizon=2.5), "horizon", "must be an integer, not 2.5"),
    (_sample(horizon=1e308), "horizon", "must be in [1, 180], not 1e+308"),
    (_sample(horizon="3"), "horizon", "must be a number, not str"),
    (_sample(name=""), "name", "must be a non-empty string"),
    (_sample(rows=[[1.0], {}]), "rows[1]", "must be a list, not dict"),
    (_sample(rows=[[1.0, 6.0]]), "rows[0][1]", "must be in [0, 5], not 6"),
    (
        _sample(speed=1),
        "speed",
        "unknown field; allowed: ['horizon', 'name', 'rate_rps', 'rows', 'share']",
    ),
    ({}, "rate_rps", "missing required field"),
    ([], "problem", "must be a JSON object, not list"),
]


@pytest.mark.parametrize(("data", "field", "problem"), WORDS)
def test_a_model_error_is_one_line_naming_the_json_path(data, field, problem):
    with pytest.raises(InputError) as caught:
        validate(_Sample, data)
    assert (caught.value.field, caught.value.problem) == (field, problem)


def test_an_integral_float_is_an_integer():
    assert validate(_Sample, _sample(horizon=3.0)).horizon == 3
    assert json_schema(_Sample)["properties"]["horizon"]["type"] == "integer"


# ---------------------------------------------------------------------------- the command


def test_the_schema_command_prints_either_schema_and_refuses_an_unknown_one(tmp_path):
    runner = CliRunner()
    out = tmp_path / "schema.json"
    done = runner.invoke(app, ["replication", "schema", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text()) == schema_of("replication", "input")
    done = runner.invoke(app, ["replication", "schema", "--of", "output"])
    assert json.loads(done.stdout)["title"] == schema_of("replication", "output")["title"]
    done = runner.invoke(app, ["replication", "schema", "--of", "state"])
    assert done.exit_code == 2 and "--of" in done.stderr
