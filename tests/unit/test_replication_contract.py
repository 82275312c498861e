"""state.json / shares.json contract of ``geoslo replication decide`` (docs/replication.md):
bad input named by its JSON path with exit status 2, the example's round trip, the command
line, and the quick reproduction's pattern."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from _json_paths import assert_refused_by_name, numeric_leaves, set_at
from geoslo.cli import app
from geoslo.control.replication.decide import decide
from geoslo.control.replication.example import example_state
from geoslo.control.replication.validation import (
    MAX_HORIZON,
    RANGES,
    decision_to_dict,
    parse_state,
    state_to_dict,
)
from geoslo.errors import InputError


def good() -> dict:
    return state_to_dict(example_state())


def mutate(path: list, value) -> dict:
    data = good()
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["now_s"], "soon", "now_s"),
        (["buffers_mb"], KeyError, "buffers_mb"),
        (["buffers_mb", "application"], -1.0, "buffers_mb.application"),
        (["sent_mb", "vm_image"], None, "sent_mb.vm_image"),
        (["arrived_mb"], {"application": 1, "replication": 2}, "arrived_mb.vm_image"),
        (["shares", "replication"], 0.9, "shares"),
        (["config", "capacity_mbps"], 0, "config.capacity_mbps"),
        (["config", "horizon"], 2.5, "config.horizon"),
        (["config", "weights", "buffer"], [1, 2], "config.weights.buffer"),
        (["config", "weights", "moves", 1], -5, "config.weights.moves[1]"),
        (["config", "buffer_limits_mb", 0], -3, "config.buffer_limits_mb[0]"),
        (["config", "arrival_model", "kind"], "arima", "config.arrival_model.kind"),
        (["config", "speed"], 1, "config.speed"),
        (["filters", "application", "mean"], [1.0, 2.0], "filters.application.mean"),
        (["filters", "replication", "covariance"], [[-1.0]], "filters.replication.covariance"),
        (["integral_mb"], -1, "integral_mb"),
    ],
)
def test_bad_input_names_its_field(path, value, field):
    with pytest.raises(InputError) as info:
        parse_state(mutate(path, value))
    assert info.value.field == field


def test_the_example_round_trips_and_decides():
    state = parse_state(good())
    assert state_to_dict(state) == good()
    decision = decide(state)
    out = decision_to_dict(decision)
    assert out["status"] == "optimal" and out["solver_status"] == "solved"
    assert out["objective"] > 0 and out["decide_ms"] > 0
    assert {"held", "solve_ms"}.isdisjoint(out)  # one way to say each thing
    assert set(out["shares"]) == {"application", "replication", "vm_image"}
    assert sum(out["shares"].values()) <= 1 + 1e-9
    assert len(out["predicted_buffers_mb"]["application"]) == state.config.horizon
    assert out["integral_mb"] == state.integral_mb + state.measurement.buffers_mb[2]
    again = parse_state(good() | {"filters": out["filters"]})  # the new filters feed back
    assert again.filters[0].mean == pytest.approx(decision.filters[0].mean)


def test_filters_start_at_the_measured_arrivals_when_absent():
    data = good()
    del data["filters"]
    decision = decide(parse_state(data))
    assert decision.filters[0].mean[0] == pytest.approx(data["arrived_mb"]["application"])


def test_the_command_line_decides_and_reports_bad_input_with_status_2(tmp_path):
    runner = CliRunner()
    state = tmp_path / "state.json"
    assert runner.invoke(app, ["replication", "example", "-o", str(state)]).exit_code == 0
    out = tmp_path / "shares.json"
    result = runner.invoke(app, ["replication", "decide", "-i", str(state), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["status"] == "optimal"
    bad = copy.deepcopy(json.loads(state.read_text()))
    bad["config"]["horizon"] = 0
    state.write_text(json.dumps(bad))
    result = runner.invoke(app, ["replication", "decide", "-i", str(state)])
    assert result.exit_code == 2
    assert "config.horizon" in result.output and len(result.output.strip().splitlines()) == 1
    state.write_text("{not json")
    assert runner.invoke(app, ["replication", "decide", "-i", str(state)]).exit_code == 2


@pytest.mark.slow  # a whole quick reproduction (issue 41: none in the short suite)
def test_the_quick_reproduction_shows_the_papers_pattern(tmp_path):
    from geoslo.experiments.replication import reproduce

    index = reproduce(tmp_path / "report", quick=True, workers=1)
    summary = json.loads((index.parent / "summary.json").read_text())
    assert all(summary["checks"].values()), summary["checks"]
    mpc = summary["experiment_1"]["MPC"]
    assert np.isfinite(mpc["transfer_mean_s"]) and mpc["images_done"] >= 16
    assert summary["mpc_step_ms"]["median"] < 20.0  # a sanity bound; the bench measures it
    sweep = summary["horizon_sweep"]  # issue 23: the MPC at the quick run's horizons
    assert {n: set(s) for n, s in sweep.items()} == {f"experiment_{n}": {"5", "30"} for n in (1, 2)}
    assert sweep["experiment_1"]["30"]["app_p95_mb"] == mpc["app_p95_mb"]  # the table's run


# ---------------------------------------------------------------- ranges and bounds
# Issue 15: 1e308 in the link, the interval, the noise or a weight crashed the step, and a
# horizon of 10^9 grew the process to 23 GB; every number has a range, the horizon a bound.

HUGE = 1e308


def every_field() -> dict:
    """The example with every field given as a number (buffer limits too)."""
    return set_at(good(), "config.buffer_limits_mb", [500.0, 300.0, 2000.0])


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("path", sorted(set(numeric_leaves(every_field()))))
def test_every_number_out_of_its_range_is_refused_by_name(path, sign):
    assert_refused_by_name(parse_state, every_field(), path, sign * HUGE)


BOUNDS = [  # (path, value): one case per bound that a merely positive check let through
    ("config.horizon", MAX_HORIZON + 1),
    ("config.horizon", 10**9),
    ("config.capacity_mbps", 1e-300),
    ("config.arrival_model.process_noise_mb", 1e-300),
    ("config.buffer_limits_mb[1]", 1e-300),
]


@pytest.mark.parametrize(("path", "value"), BOUNDS)
def test_values_past_a_bound_are_refused_by_name(path, value):
    with pytest.raises(InputError) as caught:
        parse_state(set_at(every_field(), path, value))
    assert caught.value.field == path and "must be in [" in caught.value.problem


CLI_HUGE = [  # crashed (an internal error, exit 1) or ran out of memory before
    ("config.capacity_mbps", HUGE),
    ("config.arrival_model.measurement_noise_mb", HUGE),
    ("config.weights.integral", HUGE),
    ("config.horizon", 10**9),
]


@pytest.mark.parametrize(("path", "value"), CLI_HUGE)
def test_cli_refuses_a_huge_number_in_one_line_and_writes_nothing(path, value, tmp_path):
    state, answer = tmp_path / "state.json", tmp_path / "shares.json"
    state.write_text(json.dumps(set_at(good(), path, value)))
    result = CliRunner().invoke(app, ["replication", "decide", "-i", str(state), "-o", str(answer)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"geoslo: error: {path}: "), result.stderr
    assert not answer.exists()


def largest_state() -> dict:
    """The longest horizon, with buffer limits (slacks: the largest QP), the widest
    spread of weights and every magnitude at its maximum."""
    data = every_field()
    data["config"].update(
        horizon=MAX_HORIZON,
        capacity_mbps=RANGES["capacity_mbps"][0],
        interval_s=RANGES["interval_s"][1],
        image_mb=RANGES["image_mb"][1],
        image_period_s=RANGES["image_period_s"][0],
        weights={"buffer": [0.0, 1e9, 0.0], "moves": [1e9, 0.0, 1e9], "integral": 1e9},
    )
    most = RANGES["buffers_mb"][1]
    data["buffers_mb"] = {"application": most, "replication": 0.0, "vm_image": most}
    data["arrived_mb"] = {"application": most, "replication": -most, "vm_image": most}
    data["integral_mb"] = RANGES["integral_mb"][1]
    data["now_s"] = RANGES["now_s"][1]
    return data


@pytest.mark.slow  # twice 100,000 ADMM iterations at the 180-step horizon: 40-90 s
def test_the_largest_accepted_state_is_decided():
    out = decision_to_dict(decide(parse_state(largest_state())))
    json.dumps(out, allow_nan=False)
    assert len(out["planned_shares"]["application"]) == MAX_HORIZON
    assert sum(out["shares"].values()) <= 1 + 1e-9
