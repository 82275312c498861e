"""problem.json contract of Kurma's solver: one test per kind of bad input."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from geoslo.control.kurma.validation import parse_problem, problem_to_dict
from geoslo.errors import InputError


def good() -> dict:
    return {
        "sites": ["fra", "ire"],
        "demand_rps": [900.0, 300.0],
        "capacity_rps": [1000.0, 1000.0],
        "slo_violation_target": 0.05,
        "quantum_fraction": 0.05,
        "curves": {
            "load_rps": [0.0, 500.0, 1000.0],
            "violation": [[[0, 0.1, 0.9], [0, 0.2, 1]], [[0, 0.2, 1], [0, 0.1, 0.9]]],
        },
        "available": [True, True],
        "max_redirect_fraction": [[1, 0.5], [0.5, 1]],
    }


def test_round_trip() -> None:
    problem = parse_problem(good())
    again = parse_problem(problem_to_dict(problem))
    assert again.sites == problem.sites
    np.testing.assert_array_equal(again.violation, problem.violation)
    np.testing.assert_array_equal(again.max_redirect_fraction, problem.max_redirect_fraction)
    assert problem_to_dict(again) == problem_to_dict(problem)


def test_defaults_and_optional_fields() -> None:
    data = good()
    for key in ("slo_violation_target", "quantum_fraction", "available", "max_redirect_fraction"):
        del data[key]
    problem = parse_problem(data)
    assert problem.slo_violation_target == 0.05 and problem.quantum_fraction == 0.01
    assert problem.available is None and problem.max_redirect_fraction is None


def mutate(path: list, value=None, delete: bool = False) -> dict:
    data = copy.deepcopy(good())
    node = data
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


CASES = [
    ("missing field", mutate(["demand_rps"], delete=True), "demand_rps"),
    ("missing curves field", mutate(["curves", "load_rps"], delete=True), "curves.load_rps"),
    ("wrong type", mutate(["demand_rps"], "lots"), "demand_rps"),
    ("wrong element type", mutate(["capacity_rps", 1], "1000"), r"capacity_rps\[1\]"),
    ("bool as number", mutate(["quantum_fraction"], True), "quantum_fraction"),
    ("wrong length", mutate(["demand_rps"], [1.0]), "demand_rps"),
    ("wrong shape", mutate(["curves", "violation", 1], [[0, 0, 0]]), r"curves.violation\[1\]"),
    ("wrong curve length", mutate(["curves", "violation", 0, 1], [0, 1]),
     r"curves.violation\[0\]\[1\]"),
    ("non-monotone grid", mutate(["curves", "load_rps"], [0.0, 600.0, 500.0]), "curves.load_rps"),
    ("negative demand", mutate(["demand_rps", 0], -1.0), r"demand_rps\[0\]"),
    ("negative capacity", mutate(["capacity_rps", 1], -5.0), r"capacity_rps\[1\]"),
    ("NaN", mutate(["demand_rps", 1], math.nan), r"demand_rps\[1\]"),
    ("infinity", mutate(["curves", "load_rps", 2], math.inf), r"curves.load_rps\[2\]"),
    ("violation above 1", mutate(["curves", "violation", 0, 0, 2], 1.5),
     r"curves.violation\[0\]\[0\]\[2\]"),
    ("violation below 0", mutate(["curves", "violation", 1, 0, 0], -0.1),
     r"curves.violation\[1\]\[0\]\[0\]"),
    ("quantum zero", mutate(["quantum_fraction"], 0.0), "quantum_fraction"),
    ("quantum above 1", mutate(["quantum_fraction"], 1.5), "quantum_fraction"),
    ("rho out of range", mutate(["slo_violation_target"], 2.0), "slo_violation_target"),
    ("unknown key", mutate(["colour"], "blue"), "colour"),
    ("unknown curves key", mutate(["curves", "shape"], "knee"), "curves.shape"),
    ("available not bool", mutate(["available", 0], 1), r"available\[0\]"),
    ("redirect bound above 1", mutate(["max_redirect_fraction", 0, 1], 2.0),
     r"max_redirect_fraction\[0\]\[1\]"),
    ("duplicate sites", mutate(["sites"], ["fra", "fra"]), "sites"),
    ("empty site name", mutate(["sites", 1], ""), r"sites\[1\]"),
    ("not an object", ["fra"], "problem"),
    # Ranges (issue 15): docs and code agree, and nothing accepted overflows the solver.
    ("capacity zero", mutate(["capacity_rps", 1], 0.0), r"capacity_rps\[1\]"),
    ("rho zero", mutate(["slo_violation_target"], 0.0), "slo_violation_target"),
    ("rho one", mutate(["slo_violation_target"], 1.0), "slo_violation_target"),
    ("one-point grid", mutate(["curves", "load_rps"], [0.0]), "curves.load_rps"),
    ("huge demand", mutate(["demand_rps", 0], 1e308), r"demand_rps\[0\]"),
    ("int too big for a float", mutate(["demand_rps", 1], 10**400), r"demand_rps\[1\]"),
    ("huge capacity", mutate(["capacity_rps", 0], 1e308), r"capacity_rps\[0\]"),
    ("huge grid load", mutate(["curves", "load_rps", 2], 1e308), r"curves.load_rps\[2\]"),
    ("too many quanta", mutate(["demand_rps", 0], 1e9), r"demand_rps\[0\]"),
    ("too many sites", mutate(["sites"], [f"s{k}" for k in range(21)]), "sites"),
    ("too many loads", mutate(["curves", "load_rps"], list(range(1001))), "curves.load_rps"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "data", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_the_field(kind: str, data, field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}"):
        parse_problem(data)


def test_capacity_zero_was_a_receiver_and_is_now_refused() -> None:
    """docs/kurma.md: capacity > 0. A site of capacity 0 once passed and took traffic."""
    data = mutate(["capacity_rps", 1], 0.0)
    with pytest.raises(InputError, match=r"^capacity_rps\[1\]: must be in \[1, "):
        parse_problem(data)


def test_largest_accepted_problem_parses() -> None:
    """At the bounds (20 sites, 10,000 quanta per site) the problem is accepted."""
    from geoslo.control.kurma.validation import MAX_QUANTA_PER_SITE, MAX_SITES

    n = MAX_SITES
    data = {
        "sites": [f"s{k}" for k in range(n)],
        "demand_rps": [MAX_QUANTA_PER_SITE * 10.0] * n,
        "capacity_rps": [1000.0] * n,
        "quantum_fraction": 0.01,
        "curves": {"load_rps": [0.0, 1000.0], "violation": [[[0.0, 1.0]] * n] * n},
    }
    assert parse_problem(data).n_sites == n
    data["demand_rps"][3] *= 1.001
    with pytest.raises(InputError, match=r"^demand_rps\[3\]: .*quanta"):
        parse_problem(data)
