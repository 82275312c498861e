"""state.json / actions.json contract of ``geoslo director decide`` (docs/director.md): each
kind of bad input named by its JSON path, the example's round trip, and the command line."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from _json_paths import assert_refused_by_name, numeric_leaves, set_at
from geoslo.cli import app
from geoslo.control.director import ACTION_KINDS, DirectorConfig, decide
from geoslo.control.director.example import example_state
from geoslo.control.director.scheduler import scheduled_actions
from geoslo.control.director.validation import (
    CONFIG_RANGES,
    MAX_BIN_BYTES,
    MAX_BIN_RPS,
    MAX_BINS,
    MAX_NAME_CHARS,
    MAX_PLACEMENTS,
    MAX_SERVERS,
    parse_state,
    plan_to_dict,
    state_to_dict,
)
from geoslo.errors import InputError


def good() -> dict:
    """Three servers, four bins, bin 3 hot enough to overload its two servers."""
    return {
        "servers": [
            {"name": "a", "bins": [0, 1, 3]},
            {"name": "b", "bins": [1, 2, 3], "ready": True},
            {"name": "c", "bins": [0, 2]},
        ],
        "bins": {
            "get_rps": [100.0, 200.0, 50.0, 1500.0],
            "put_rps": [10.0, 0.0, 5.0, 20.0],
            "bytes": [4e6, 8e6, 1e6, 2e6],
        },
        "model": {
            "steady_state": {
                "intercept": -10.0,
                "get_coefficient": 0.01,
                "put_coefficient": 0.04,
                "threshold": 0.5,
            },
            "copy_duration": {"coefficients": [0.9, 0, 0, -1e-4, 0, 0, 0]},
        },
        "config": {"standbys": 1, "overprovisioning": 0.1},
    }


def broken(change) -> dict:
    data = copy.deepcopy(good())
    change(data)
    return data


def server_bins(k: int, bins: list):
    return lambda d: d["servers"][k].__setitem__("bins", bins)


def steady(key: str, value):
    return lambda d: d["model"]["steady_state"].__setitem__(key, value)


def copying(key: str, value):
    return lambda d: d["model"]["copy_duration"].__setitem__(key, value)


def setting(key: str, value):
    return lambda d: d["config"].__setitem__(key, value)


BAD = [
    (lambda d: d.pop("model"), "model"),
    (lambda d: d.__setitem__("confg", {}), "confg"),
    (lambda d: d.__setitem__("servers", {}), "servers"),
    (lambda d: d["servers"][0].__setitem__("bin", [0]), "servers[0].bin"),
    (lambda d: d["servers"][1].pop("name"), "servers[1].name"),
    (lambda d: d["servers"][2].__setitem__("name", "a"), "servers[2].name"),
    (lambda d: d["servers"][0].__setitem__("ready", "yes"), "servers[0].ready"),
    (server_bins(1, [1, 4]), "servers[1].bins[1]"),  # out of range
    (server_bins(0, [0, 3, 0]), "servers[0].bins[2]"),  # listed twice
    (server_bins(0, [0, 1.5]), "servers[0].bins[1]"),
    (server_bins(0, [True]), "servers[0].bins[0]"),
    (server_bins(2, [-1]), "servers[2].bins[0]"),
    (lambda d: d.__setitem__("bins", [{"get_rps": 1}]), "bins"),  # columnar only
    (lambda d: d["bins"]["put_rps"].__setitem__(2, -5.0), "bins.put_rps[2]"),
    (lambda d: d["bins"]["get_rps"].__setitem__(0, float("nan")), "bins.get_rps[0]"),
    (lambda d: d["bins"]["get_rps"].__setitem__(1, "200"), "bins.get_rps[1]"),
    (lambda d: d["bins"]["bytes"].pop(), "bins.bytes"),
    (lambda d: d["bins"].pop("bytes"), "bins.bytes"),
    (steady("get_coefficient", 0.0), "model.steady_state.get_coefficient"),
    (steady("put_coefficient", -0.1), "model.steady_state.put_coefficient"),
    (steady("intercept", 1.0), "model.steady_state"),  # violates with no load
    (steady("threshold", 1.0), "model.steady_state.threshold"),
    (lambda d: d["model"]["steady_state"].pop("intercept"), "model.steady_state.intercept"),
    (copying("coefficients", [0.9, 0, 0]), "model.copy_duration.coefficients"),
    (copying("min_factor", 0), "model.copy_duration.min_factor"),
    (lambda d: d["model"].__setitem__("copy", {}), "model.copy"),
    (setting("alpha_up", 1.5), "config.alpha_up"),
    (setting("replicas", 2.5), "config.replicas"),
    (setting("read_fanout", 3), "config.read_fanout"),  # more than replicas
    (setting("standbys", -1), "config.standbys"),
    (setting("period_s", "20"), "config.period_s"),
    (setting("perod_s", 20), "config.perod_s"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "field"), BAD)
def test_bad_input_names_the_field(change, field):
    with pytest.raises(InputError) as caught:
        parse_state(broken(change))
    assert caught.value.field == field, caught.value


def test_good_input_reads_into_the_controllers_types():
    state, model, copy_model, config = parse_state(good())
    assert [s.name for s in state.servers] == ["a", "b", "c"]
    assert state.servers[0].bins == (0, 1, 3) and state.servers[0].ready
    assert state.get_rps.tolist() == [100.0, 200.0, 50.0, 1500.0]
    assert model.get_coefficient == 0.01 and copy_model.min_factor == 0.05
    assert config == DirectorConfig(standbys=1, overprovisioning=0.1)


def test_config_is_optional_and_integers_are_accepted_for_seconds():
    data = good()
    data.pop("config")
    assert parse_state(data)[3] == DirectorConfig()
    data["config"] = {"period_s": 30, "replicas": 3.0}
    config = parse_state(data)[3]
    assert config.period_s == 30.0 and config.replicas == 3


def test_a_bin_on_no_server_is_accepted_and_reported():
    data = good()
    data["servers"][2]["bins"] = [0]  # bin 2 stays on b only
    data["servers"][1]["bins"] = [1, 3]  # and now on no server
    state, model, copy_model, config = parse_state(data)
    answer = plan_to_dict(decide(state, model, config), state, model, copy_model, config)
    assert answer["unplaced_bins"] == [2]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_example_round_trips_through_json(seed):
    example = example_state(servers=12, bins=60, seed=seed)
    data = json.loads(json.dumps(state_to_dict(*example), allow_nan=False))
    state, model, copy_model, config = parse_state(data)
    original, *models = example
    assert state.servers == original.servers
    for name in ("get_rps", "put_rps", "bin_bytes"):
        assert np.array_equal(getattr(state, name), getattr(original, name))
    assert (model, copy_model, config) == tuple(models)


def test_plan_to_dict_splits_long_copies_and_predicts_each():
    state, model, copy_model, config = example_state(servers=40, bins=400, seed=0)
    config = DirectorConfig(max_action_s=5.0)
    plan = decide(state, model, config)
    answer = plan_to_dict(plan, state, model, copy_model, config)
    keys = {"actions", "servers", "threshold", "all_meet_slo", "limited_by", "unplaced_bins"}
    keys |= {"moved_bytes", "status", "solver_status", "objective", "decide_ms"}
    assert set(answer) == keys
    assert (answer["status"], answer["solver_status"]) == ("feasible", "greedy")
    assert answer["objective"] == len(plan.servers) and answer["decide_ms"] > 0
    actions = answer["actions"]
    assert len(actions) > len(plan.actions)  # some moves were split
    for action in actions:
        assert action["kind"] in ACTION_KINDS
        if action["kind"] in ("copy", "move"):
            assert {"bins", "source", "target"} <= set(action)
            assert action["predicted_duration_s"] > 0
            if len(action["bins"]) > 1:
                assert action["predicted_duration_s"] <= config.max_action_s
        else:
            assert "server" in action and action["predicted_duration_s"] == 0.0
    moved = sorted(b for a in actions if a["kind"] == "move" for b in a["bins"])
    assert moved == sorted(b for a in plan.actions if a.kind == "move" for b in a.bins)
    scheduled = scheduled_actions(plan, state.bin_bytes, copy_model, config)
    assert [s for _, s in scheduled] == [a["predicted_duration_s"] for a in actions]
    assert answer["all_meet_slo"] is True
    assert {s["name"] for s in answer["servers"]} == {s.name for s in plan.servers}
    one = answer["servers"][0]
    assert set(one) == {"name", "bins", "ready", "get_rps", "put_rps", "violation_probability"}
    json.dumps(answer, allow_nan=False)


# ---------------------------------------------------------------- the command line


def run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(app, list(args), input=stdin)


def test_cli_example_then_decide_writes_valid_actions(tmp_path):
    state_file, actions_file = tmp_path / "state.json", tmp_path / "actions.json"
    made = run("director", "example", "-o", str(state_file), "--servers", "20", "--bins", "150")
    assert made.exit_code == 0, made.output
    data = json.loads(state_file.read_text())
    assert len(data["servers"]) == 20 and len(data["bins"]["get_rps"]) == 150
    decided = run("director", "decide", "-i", str(state_file), "-o", str(actions_file))
    assert decided.exit_code == 0, decided.output
    answer = json.loads(actions_file.read_text())
    kinds = {a["kind"] for a in answer["actions"]}
    assert kinds <= set(ACTION_KINDS) and "copy" in kinds  # the hot bin gets replicas
    assert answer["all_meet_slo"] is True
    empty = [s for s in answer["servers"] if not s["bins"]]
    assert len(empty) == data["config"]["standbys"]


def test_cli_decide_reads_stdin_and_writes_stdout():
    result = run("director", "decide", "-i", "-", stdin=json.dumps(good()))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["threshold"] == 0.5


CLI_BAD = {"servers[1].bins[1]", "servers[0].bins[2]", "model.steady_state", "config.alpha_up"}


@pytest.mark.parametrize(("change", "field"), [case for case in BAD if case[1] in CLI_BAD])
def test_cli_bad_input_is_one_line_and_exit_2(change, field):
    result = run("director", "decide", "-i", "-", stdin=json.dumps(broken(change)))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"geoslo: error: {field}: "), result.stderr


def test_cli_example_rejects_too_few_servers():
    result = run("director", "example", "--servers", "3")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("geoslo: error: --servers: ")


# ---------------------------------------------------------------- ranges and bounds
# Issue 15: magnitudes such as 1e308 passed validation and then hung the standby loop or
# crashed; every number has a range and every list a bound, and whatever passes is decided.

HUGE = 1e308


def every_field() -> dict:
    """The example state with every config field given (each a number)."""
    data = state_to_dict(*example_state(servers=12, bins=60, seed=0))
    assert set(data["config"]) == {f.name for f in dataclasses.fields(DirectorConfig)}
    return data


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("path", sorted(set(numeric_leaves(every_field()))))
def test_every_number_out_of_its_range_is_refused_by_name(path, sign):
    assert_refused_by_name(parse_state, every_field(), path, sign * HUGE)


def test_every_config_field_has_a_range():
    assert {f.name for f in dataclasses.fields(DirectorConfig)} <= set(CONFIG_RANGES)


def many_servers(count: int, bins_each: int = 1) -> dict:
    data = good()
    bins = len(data["bins"]["get_rps"])
    data["servers"] = [
        {"name": f"s{k}", "bins": [(k + j) % bins for j in range(bins_each)]} for k in range(count)
    ]
    return data


def many_bins(count: int) -> dict:
    data = good()
    data["bins"] = {"get_rps": [1.0] * count, "put_rps": [0.0] * count, "bytes": [1.0] * count}
    return data


def long_lists(servers: int, bins: int, bins_each: int) -> dict:
    """``servers`` servers holding ``bins_each`` of ``bins`` bins each."""
    data = many_bins(bins)
    data["servers"] = [
        {"name": f"s{k}", "bins": [(k * bins_each + j) % bins for j in range(bins_each)]}
        for k in range(servers)
    ]
    return data


COUNTS = [  # (state, the field named): one case per bounded count
    (lambda: many_servers(MAX_SERVERS + 1), "servers"),
    (lambda: many_bins(MAX_BINS + 1), "bins.get_rps"),
    (lambda: long_lists(MAX_SERVERS, MAX_BINS, MAX_PLACEMENTS // MAX_SERVERS + 1), None),
    (lambda: set_at(good(), "servers[1].name", "server-" + "9" * 5000), "servers[1].name"),
    (lambda: set_at(good(), "config.replicas", 6), "config.replicas"),
    (lambda: set_at(good(), "config.standbys", 101), "config.standbys"),
]


@pytest.mark.parametrize(("make", "field"), COUNTS)
def test_counts_over_their_bound_are_refused_by_name(make, field):
    with pytest.raises(InputError) as caught:
        parse_state(make())
    expected = field or r"servers\[\d+\]\.bins"  # the list that takes the total past it
    assert re.fullmatch(re.escape(field) if field else expected, caught.value.field), caught.value
    assert re.search(r"at most|in \[", caught.value.problem), caught.value


def test_null_charge_interval_means_release_at_once():
    assert (
        parse_state(set_at(good(), "config.charge_interval_s", None))[3].charge_interval_s is None
    )


CLI_HUGE = [  # hung (standbys, put_coefficient) or crashed (overprovisioning) before
    "config.standbys",
    "config.replicas",
    "config.overprovisioning",
    "model.steady_state.put_coefficient",
]


@pytest.mark.parametrize("path", CLI_HUGE)
def test_cli_refuses_a_huge_number_in_one_line_and_writes_nothing(path, tmp_path):
    state_file, answer = tmp_path / "state.json", tmp_path / "actions.json"
    state_file.write_text(json.dumps(set_at(good(), path, HUGE)))
    result = run("director", "decide", "-i", str(state_file), "-o", str(answer))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"geoslo: error: {path}: "), result.stderr
    assert not answer.exists()


def largest_state() -> dict:
    """Every count at its bound and every number at the end of its range that makes the
    most work: all bins hot, the slowest copies, the most replicas and standbys."""
    servers, bins = MAX_SERVERS, MAX_BINS
    each = MAX_PLACEMENTS // servers
    data = long_lists(servers, bins, each)
    width = MAX_NAME_CHARS - 1
    for k, server in enumerate(data["servers"]):
        server["name"] = f"s{k:0{width}d}"
    data["bins"] = {
        "get_rps": [MAX_BIN_RPS] * bins,
        "put_rps": [MAX_BIN_RPS] * bins,
        "bytes": [MAX_BIN_BYTES] * bins,
    }
    data["model"] = {
        "steady_state": {"intercept": -700.0, "get_coefficient": 1e3, "put_coefficient": 1e3},
        "copy_duration": {"coefficients": [1e6, -1e6] * 3 + [1e6], "min_factor": 1e-3},
    }
    fields = {f.name for f in dataclasses.fields(DirectorConfig)}
    config = {key: high for key, (_, high) in CONFIG_RANGES.items() if key in fields}
    low_is_more_work = ("max_action_s", "copy_rate_bytes_per_s")
    config |= {key: CONFIG_RANGES[key][0] for key in low_is_more_work}
    data["config"] = config
    return data


def test_the_largest_accepted_state_is_decided():
    state, model, copy_model, config = parse_state(largest_state())
    answer = plan_to_dict(decide(state, model, config), state, model, copy_model, config)
    json.dumps(answer, allow_nan=False)
    assert answer["actions"] and len(answer["servers"]) >= MAX_SERVERS - config.standbys
