"""problem.json / config.json contract of CosTLO's ConfSelector (§5.2): one test per kind of
bad input, each naming the field by its JSON path."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from geoslo.control import Outcome
from geoslo.control.costlo import (
    Configuration,
    CostBreakdown,
    Estimate,
    GetTuple,
    PutTuple,
    SearchLimits,
    Selection,
    Slo,
    parse_problem,
    problem_to_dict,
    selection_to_dict,
)
from geoslo.control.costlo.decide import decide
from geoslo.control.costlo.example import example_problem
from geoslo.control.costlo.validation import problem_to_compact_dict
from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError
from geoslo.models import infer_storage_model

KINDS = ("get_same_object", "get_distinct_objects", "put_same_object", "put_distinct_objects")


def pairs(n: int, network_ms: float, service_ms: float, seed: int) -> dict:
    """``n`` pairs of concurrent requests around the given latencies."""
    rng = np.random.default_rng(seed)
    return {
        "network_ms": (network_ms + rng.exponential(0.5, (n, 2))).round(3).tolist(),
        "service_ms": (service_ms + rng.exponential(5.0, (n, 2))).round(3).tolist(),
        "arrival_ms": rng.uniform(0.0, 0.2, (n, 2)).round(3).tolist(),
    }


def region(name: str, rtt_ms: float, n: int = 20, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "name": name,
        "prices": {
            "storage_usd_per_gb_month": 0.03,
            "get_usd_per_10k": 0.004,
            "put_usd_per_1k": 0.005,
            "vm_usd_per_hour": 0.02,
            "egress_usd_per_gb": 0.09,
        },
        "relay_rps": 800.0,
        "ping_ms": (rtt_ms + rng.exponential(1.0, n)).round(3).tolist(),
        "storage": {kind: pairs(n, 1.0, 10.0, seed + k) for k, kind in enumerate(KINDS)},
    }


def good() -> dict:
    return {
        "prefix": "us-kansas",
        "workload": {"gets_per_month": 1e7, "puts_per_month": 1e5, "peak_get_rps": 10.0},
        "slo": {"get_ms": 50, "put_ms": None, "percentile": 99, "application": "operation"},
        "serving_region": "s3:us-east-1",
        "regions": [
            region("azure:centralus", 20.0, seed=1),
            region("s3:us-east-1", 30.0, seed=2),
            region("s3:us-west-2", 50.0, seed=3),
        ],
        "limits": {"max_copies": 2, "timeout_percentiles": [50, 90], "allow_relay": False},
    }


def test_parse_picks_serving_candidates_and_fields() -> None:
    problem = parse_problem(good())
    assert problem.serving.name == "s3:us-east-1"
    assert [r.name for r in problem.candidates] == ["azure:centralus", "s3:us-west-2"]
    assert problem.second().name == "azure:centralus"  # lowest median ping (§5.2)
    assert problem.workload.gets_per_month == 1e7 and problem.workload.object_bytes == 1024.0
    assert problem.slo == Slo(get_ms=50.0, put_ms=None, percentile=99.0)
    assert problem.limits == SearchLimits(
        max_copies=2, timeout_percentiles=(50.0, 90.0), allow_relay=False
    )
    assert problem.serving.storage.put_same_object.network_ms.shape == (20, 2)
    assert problem.serving.ping_ms.shape == (20,)


def test_only_gets_per_month_serving_region_and_regions_are_required() -> None:
    data = good()
    data["workload"] = {"gets_per_month": 5.0}
    for key in ("prefix", "slo", "limits"):
        del data[key]
    problem = parse_problem(data)
    assert problem.slo == Slo() and problem.limits == SearchLimits()
    assert problem.workload.puts_per_month == 0.0 and problem.second_region is None


def test_second_region_can_be_named() -> None:
    data = good()
    data["second_region"] = "s3:us-west-2"
    assert parse_problem(data).second().name == "s3:us-west-2"


def test_round_trip() -> None:
    data = good()
    data["second_region"] = "s3:us-west-2"
    problem = parse_problem(data)
    written = problem_to_dict(problem, prefix="us-kansas")
    again = parse_problem(written)
    assert problem_to_dict(again, prefix="us-kansas") == written
    assert written["regions"][0]["name"] == "s3:us-east-1"  # serving first
    for kind in KINDS:
        np.testing.assert_array_equal(
            getattr(again.serving.storage, kind).service_ms,
            getattr(problem.serving.storage, kind).service_ms,
        )
    np.testing.assert_array_equal(again.candidates[1].ping_ms, problem.candidates[1].ping_ms)
    assert again.slo == problem.slo and again.limits == problem.limits
    assert again.workload == problem.workload and again.second_region == "s3:us-west-2"


def test_social_is_rejected_with_a_pointer_to_the_python_api() -> None:
    data = good()
    data["slo"]["application"] = "social"
    with pytest.raises(InputError, match=r"^slo.application: 'social'.*Python API"):
        parse_problem(data)
    problem = parse_problem(good())
    social = type(problem)(
        problem.workload, problem.serving, problem.candidates, Slo(application="social")
    )
    with pytest.raises(InputError, match="Python API"):
        problem_to_dict(social)


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


R1 = ["regions", 1]
GSO = [*R1, "storage", "get_same_object"]

CASES = [
    ("not an object", ["x"], "problem"),
    ("unknown key", mutate(["colour"], "blue"), "colour"),
    ("missing regions", mutate(["regions"], delete=True), "regions"),
    ("missing serving region", mutate(["serving_region"], delete=True), "serving_region"),
    ("prefix not a string", mutate(["prefix"], 3), "prefix"),
    ("missing gets", mutate(["workload", "gets_per_month"], delete=True),
     "workload.gets_per_month"),
    ("unknown workload key", mutate(["workload", "gets_per_day"], 1.0), "workload.gets_per_day"),
    ("negative puts", mutate(["workload", "puts_per_month"], -1.0), "workload.puts_per_month"),
    ("workload as string", mutate(["workload", "object_bytes"], "1KB"), "workload.object_bytes"),
    ("slo not an object", mutate(["slo"], 50), "slo"),
    ("slo typo", mutate(["slo", "get"], 50), "slo.get"),
    ("slo NaN", mutate(["slo", "get_ms"], math.nan), "slo.get_ms"),
    ("slo negative", mutate(["slo", "put_ms"], -3), "slo.put_ms"),
    ("percentile too high", mutate(["slo", "percentile"], 100), "slo.percentile"),
    ("unknown application", mutate(["slo", "application"], "video"), "slo.application"),
    ("followers over JSON", mutate(["slo", "followers"], 10), "slo.followers"),
    ("page objects fractional", mutate(["slo", "page_objects"], 2.5), "slo.page_objects"),
    ("page objects zero", mutate(["slo", "page_objects"], 0), "slo.page_objects"),
    ("serving not a region", mutate(["serving_region"], "s3:mars-1"), "serving_region"),
    ("second not a region", mutate(["second_region"], "azure:moon"), "second_region"),
    ("second is serving", mutate(["second_region"], "s3:us-east-1"), "second_region"),
    ("regions empty", mutate(["regions"], []), "regions"),
    ("regions not a list", mutate(["regions"], {}), "regions"),
    ("region not an object", mutate(R1, "s3"), r"regions\[1\]"),
    ("duplicate names", mutate([*R1, "name"], "azure:centralus"), r"regions\[1\].name"),
    ("empty name", mutate([*R1, "name"], ""), r"regions\[1\].name"),
    ("unknown region key", mutate([*R1, "latency"], 1), r"regions\[1\].latency"),
    ("missing prices", mutate([*R1, "prices"], delete=True), r"regions\[1\].prices"),
    ("missing price", mutate([*R1, "prices", "vm_usd_per_hour"], delete=True),
     r"regions\[1\].prices.vm_usd_per_hour"),
    ("negative price", mutate([*R1, "prices", "get_usd_per_10k"], -0.1),
     r"regions\[1\].prices.get_usd_per_10k"),
    ("relay zero", mutate([*R1, "relay_rps"], 0), r"regions\[1\].relay_rps"),
    ("relay bool", mutate([*R1, "relay_rps"], True), r"regions\[1\].relay_rps"),
    ("ping too few", mutate([*R1, "ping_ms"], [10.0] * 9), r"regions\[1\].ping_ms"),
    ("ping NaN", mutate([*R1, "ping_ms", 4], math.nan), r"regions\[1\].ping_ms\[4\]"),
    ("ping negative", mutate([*R1, "ping_ms", 2], -1.0), r"regions\[1\].ping_ms\[2\]"),
    ("ping string", mutate([*R1, "ping_ms", 0], "12"), r"regions\[1\].ping_ms\[0\]"),
    ("storage kind missing", mutate([*R1, "storage", "put_same_object"], delete=True),
     r"regions\[1\].storage.put_same_object"),
    ("storage typo", mutate([*R1, "storage", "get_same_objects"], {}),
     r"regions\[1\].storage.get_same_objects"),
    ("pair field missing", mutate([*GSO, "arrival_ms"], delete=True),
     r"regions\[1\].storage.get_same_object.arrival_ms"),
    ("pair not a list", mutate([*GSO, "network_ms"], 3.0),
     r"regions\[1\].storage.get_same_object.network_ms"),
    ("pair of three", mutate([*GSO, "network_ms", 3], [1.0, 2.0, 3.0]),
     r"regions\[1\].storage.get_same_object.network_ms\[3\]"),
    ("pair element string", mutate([*GSO, "network_ms", 3, 0], "1.0"),
     r"regions\[1\].storage.get_same_object.network_ms\[3\]\[0\]"),
    ("pair element bool", mutate([*GSO, "service_ms", 5, 1], False),
     r"regions\[1\].storage.get_same_object.service_ms\[5\]\[1\]"),
    ("pair NaN", mutate([*GSO, "network_ms", 3, 0], math.nan),
     r"regions\[1\].storage.get_same_object.network_ms\[3\]\[0\]"),
    ("pair infinity", mutate([*GSO, "arrival_ms", 7, 1], math.inf),
     r"regions\[1\].storage.get_same_object.arrival_ms\[7\]\[1\]"),
    ("pair negative", mutate([*GSO, "service_ms", 12, 1], -2.0),
     r"regions\[1\].storage.get_same_object.service_ms\[12\]\[1\]"),
    ("too few pairs", mutate([*GSO, "network_ms"], [[1.0, 1.0]] * 9),
     r"regions\[1\].storage.get_same_object.network_ms"),
    ("pairs of unequal counts", mutate([*GSO, "service_ms"], [[1.0, 1.0]] * 11),
     r"regions\[1\].storage.get_same_object.service_ms"),
    ("limits typo", mutate(["limits", "max_copy"], 2), "limits.max_copy"),
    ("limits not int", mutate(["limits", "max_copies"], 1.5), "limits.max_copies"),
    ("limits zero", mutate(["limits", "max_requests_per_copy"], 0),
     "limits.max_requests_per_copy"),
    ("limits not bool", mutate(["limits", "allow_timeout"], "yes"), "limits.allow_timeout"),
    ("limits bad percentile", mutate(["limits", "timeout_percentiles"], [50, 100]),
     r"limits.timeout_percentiles\[1\]"),
    ("limits percentile NaN", mutate(["limits", "timeout_percentiles", 1], math.nan),
     r"limits.timeout_percentiles\[1\]"),
    # Ranges (issue 15): nothing accepted crashes or hangs the selector.
    ("huge max_copies", mutate(["limits", "max_copies"], 1e308), "limits.max_copies"),
    ("max_copies above 5", mutate(["limits", "max_copies"], 6), "limits.max_copies"),
    ("huge requests per copy", mutate(["limits", "max_requests_per_copy"], 10**400),
     "limits.max_requests_per_copy"),
    ("huge evaluations", mutate(["limits", "max_evaluations"], 10**12),
     "limits.max_evaluations"),
    ("tiny probability step", mutate(["limits", "probability_step"], 1e-308),
     "limits.probability_step"),
    ("huge margin", mutate(["limits", "slo_margin_ms"], 1e308), "limits.slo_margin_ms"),
    ("too many timeouts", mutate(["limits", "timeout_percentiles"], [50.0] * 101),
     "limits.timeout_percentiles"),
    ("huge ping", mutate([*R1, "ping_ms", 3], 1e308), r"regions\[1\].ping_ms\[3\]"),
    ("ping over 5 s", mutate([*R1, "ping_ms", 3], 5000.5), r"regions\[1\].ping_ms\[3\]"),
    ("too many pings", mutate([*R1, "ping_ms"], [10.0] * 100_001), r"regions\[1\].ping_ms"),
    ("huge service", mutate([*GSO, "service_ms", 2, 0], 1e308),
     r"regions\[1\].storage.get_same_object.service_ms\[2\]\[0\]"),
    ("huge arrival", mutate([*GSO, "arrival_ms", 2, 1], 1e300),
     r"regions\[1\].storage.get_same_object.arrival_ms\[2\]\[1\]"),
    ("too many pairs", mutate([*GSO, "network_ms"], [[1.0, 1.0]] * 100_001),
     r"regions\[1\].storage.get_same_object.network_ms"),
    ("huge gets", mutate(["workload", "gets_per_month"], 1e308), "workload.gets_per_month"),
    ("huge object", mutate(["workload", "object_bytes"], 1e13), "workload.object_bytes"),
    ("huge peak", mutate(["workload", "peak_get_rps"], 10**400), "workload.peak_get_rps"),
    ("huge price", mutate([*R1, "prices", "vm_usd_per_hour"], 1e308),
     r"regions\[1\].prices.vm_usd_per_hour"),
    ("tiny relay rate", mutate([*R1, "relay_rps"], 1e-300), r"regions\[1\].relay_rps"),
    ("huge SLO", mutate(["slo", "get_ms"], 1e308), "slo.get_ms"),
    ("huge page", mutate(["slo", "page_objects"], 10**9), "slo.page_objects"),
    ("too many regions", mutate(["regions"], [region(f"r{k}", 20.0) for k in range(33)]),
     "regions"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "data", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_the_field(kind: str, data, field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}: "):
        parse_problem(data)


def test_more_pairs_than_the_problem_bound_name_the_region(monkeypatch) -> None:
    from geoslo.control.costlo import validation

    data = good()
    per_region = 4 * len(data["regions"][0]["storage"]["get_same_object"]["network_ms"])
    monkeypatch.setattr(validation, "MAX_PAIRS", 2 * per_region + 1)  # region 2 crosses it
    with pytest.raises(InputError, match=r"^regions\[2\].storage: .*pairs in all"):
        parse_problem(data)


def selection(get: Estimate | None, put: Estimate | None) -> Selection:
    return Selection(
        configuration=Configuration(
            serving=GetTuple(2, 1, True),
            second=GetTuple(1, 2, False),
            put=PutTuple(2, 1),
            get_timeout_ms=80.0,
            get_probability=0.4,
        ),
        met=True,
        get=get,
        put=put,
        cost=CostBreakdown(1.0, 2.0, 0.5, 1.5),
        baseline_cost=CostBreakdown(1.0, 2.0, 0.0, 1.0),
        evaluated=17,
        serving_region="s3:us-east-1",
        second_region="azure:centralus",
        outcome=Outcome("feasible", "bound_reached", 5.0, 7.5),
    )


def test_selection_to_dict_has_the_documented_fields() -> None:
    out = selection_to_dict(
        selection(Estimate(50.0, 95.0, 48.0), None), percentile=99.0, prefix="us-kansas"
    )
    assert list(out) == [
        "prefix", "met", "status", "solver_status", "objective", "decide_ms", "serving_region",
        "second_region", "configuration", "estimate", "cost_usd_per_month",
        "baseline_cost_usd_per_month", "cost_increase_fraction", "evaluated",
    ]  # fmt: skip
    assert out["prefix"] == "us-kansas" and out["met"] is True and out["evaluated"] == 17
    assert (out["status"], out["solver_status"]) == ("feasible", "bound_reached")
    assert (out["objective"], out["decide_ms"]) == (5.0, 7.5)
    assert out["second_region"] == "azure:centralus"
    c = out["configuration"]
    assert c["serving"] == {"copies": 2, "requests_per_copy": 1, "relay_vm": True}
    assert c["second"] == {"copies": 1, "requests_per_copy": 2, "relay_vm": False}
    assert c["put"] == {"copies": 2, "requests_per_copy": 1}
    assert (c["get_timeout_ms"], c["get_probability"]) == (80.0, 0.4)
    assert (c["put_timeout_ms"], c["put_probability"]) == (0.0, 1.0)
    assert out["estimate"] == {
        "get": {"p50_ms": 50.0, "p99_ms": 95.0, "baseline_p50_ms": 48.0, "inflation_ms": 47.0},
        "put": None,
    }
    assert out["cost_usd_per_month"] == {
        "storage": 1.0, "requests": 2.0, "vms": 0.5, "bandwidth": 1.5, "total": 5.0,
    }  # fmt: skip
    assert out["baseline_cost_usd_per_month"]["total"] == 4.0
    assert out["cost_increase_fraction"] == pytest.approx(0.25)


def test_selection_to_dict_names_the_tail_by_the_percentile_and_nulls_infinity() -> None:
    out = selection_to_dict(selection(None, Estimate(40.0, math.inf, 40.0)), percentile=99.9)
    assert out["prefix"] is None and out["estimate"]["get"] is None
    assert out["estimate"]["put"] == {
        "p50_ms": 40.0, "p99.9_ms": None, "baseline_p50_ms": 40.0, "inflation_ms": None,
    }  # fmt: skip


# ---------------------------------------------------------------------------- compact form


def _compact(data: dict) -> dict:
    return problem_to_compact_dict(parse_problem(data), prefix=data.get("prefix"))


def test_compact_round_trip_and_lattice() -> None:
    written = _compact(good())
    again = parse_problem(written)
    assert problem_to_compact_dict(again, prefix="us-kansas") == written
    assert written["step_ms"] == 0.5 and written["regions"][0]["name"] == "s3:us-east-1"
    pairs = again.serving.storage.get_same_object
    assert pairs.network_ms.shape == (20, 2) and again.serving.ping_ms.shape == (20,)
    assert np.all(pairs.service_ms % 0.5 == 0) and np.all(pairs.arrival_ms[:, 0] == 0.0)


@pytest.mark.parametrize(("seed", "prefix"), [(0, 0), (3, 11)])
def test_compact_form_gives_the_same_storage_model_and_selection(seed, prefix) -> None:
    """The compact form keeps what the estimator uses: the storage models' structure and
    distributions, the pings' distribution and so the selection come out the same."""
    raw = example_problem(seed, prefix, samples=2_000)
    compact = parse_problem(problem_to_compact_dict(raw))
    for a, b in zip(
        (raw.serving, *raw.candidates), (compact.serving, *compact.candidates), strict=True
    ):
        ma, mb = infer_storage_model(a.storage), infer_storage_model(b.storage)
        assert (ma.get_replicas, ma.put_replicas, ma.shared_network, ma.put_serialised) == (
            mb.get_replicas, mb.put_replicas, mb.shared_network, mb.put_serialised,
        )  # fmt: skip
        for dist in ("network", "get_service", "put_service"):
            assert getattr(ma, dist).offset_ms == getattr(mb, dist).offset_ms
            np.testing.assert_array_equal(getattr(ma, dist).pmf, getattr(mb, dist).pmf)
        pa, pb = (LatencyDistribution.from_samples(r.ping_ms, 0.5) for r in (a, b))
        assert pa.offset_ms == pb.offset_ms and np.array_equal(pa.pmf, pb.pmf)
    assert compact.second().name == raw.second().name
    a, b = selection_to_dict(decide(raw)), selection_to_dict(decide(compact))
    a.pop("decide_ms"), b.pop("decide_ms")
    assert a == b


def test_compact_ties_stay_ties_and_distinct_arrivals_keep_a_gap() -> None:
    data = good()
    rows = data["regions"][1]["storage"]["put_distinct_objects"]
    rows["arrival_ms"] = [[5.0, 5.0]] * 10 + [[5.0, 5.1]] * 5 + [[5.2, 5.0]] * 5
    pairs = parse_problem(_compact(data)).serving.storage.put_distinct_objects
    gaps = pairs.arrival_ms[:, 1] - pairs.arrival_ms[:, 0]
    assert np.sum(gaps == 0.0) == 10 and np.all(gaps[gaps > 0] == 0.5)


CR1 = ["regions", 1]
CGSO = [*CR1, "storage", "get_same_object"]


def cmutate(path: list, value) -> dict:
    data = _compact(good())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def _too_few_pairs() -> dict:
    data = cmutate([*CGSO, "network"], [[2, 2, 9]])
    node = data["regions"][1]["storage"]["get_same_object"]
    node["service"] = [[20, 20, 0, 9]]
    return data


COMPACT_CASES = [
    ("negative index", cmutate([*CGSO, "network", 0, 0], -1),
     r"regions\[1\].storage.get_same_object.network\[0\]\[0\]"),
    ("float index", cmutate([*CGSO, "service", 0, 1], 2.5),
     r"regions\[1\].storage.get_same_object.service\[0\]\[1\]"),
    ("zero count", cmutate([*CR1, "ping", 0, 1], 0), r"regions\[1\].ping\[0\]\[1\]"),
    ("short row", cmutate([*CGSO, "service", 0], [1, 2, 3]),
     r"regions\[1\].storage.get_same_object.service\[0\]\[3\]"),
    ("counts disagree", cmutate([*CGSO, "network"], [[2, 2, 19]]),
     r"regions\[1\].storage.get_same_object.service"),
    ("too few pairs", _too_few_pairs(), r"regions\[1\].storage.get_same_object.network"),
    ("too few pings", cmutate([*CR1, "ping"], [[40, 9]]), r"regions\[1\].ping"),
    ("too many pings", cmutate([*CR1, "ping"], [[40, 60_000], [41, 60_000]]),
     r"regions\[1\].ping"),
    ("raw key in compact", cmutate([*CR1, "ping_ms"], [1.0] * 20), r"regions\[1\].ping_ms"),
    ("step too fine", cmutate(["step_ms"], 0.001), "step_ms"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "data", "field"), COMPACT_CASES, ids=[c[0] for c in COMPACT_CASES]
)
def test_bad_compact_input_names_the_field(kind: str, data, field: str) -> None:
    with pytest.raises(InputError, match=f"^{field}: "):
        parse_problem(data)
