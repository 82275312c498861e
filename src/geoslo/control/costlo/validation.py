"""The problem.json and config.json contract of ConfSelector for one prefix (§5.2).

problem.json carries what §5.2 says ConfSelector takes as input: the prefix's workload,
every candidate region's prices, its agent's concurrent GET/PUT pairs and pings to the
prefix, and the rate one relay VM sustains; plus the SLO and the search's limits.
config.json is the selected configuration with its estimated latency and monthly cost.
Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path (``regions[1].storage.get_same_object.network_ms[3][0]``). Schema: docs/costlo.md.
Every number has a range and every list a length bound (the constants below, also in the
docs' table), so that whatever is accepted is selected in bounded time and memory.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from geoslo._json import (
    as_list,
    boolean,
    check_keys,
    check_non_negative,
    integer,
    number,
    number_rows,
    numbers,
    string,
)
from geoslo.control.costlo.decide import CostloProblem, RegionInput
from geoslo.control.costlo.types import (
    Estimate,
    PrefixWorkload,
    SearchLimits,
    Selection,
    Slo,
    configuration_to_dict,
)
from geoslo.errors import InputError
from geoslo.models import PairSamples, StorageMeasurements
from geoslo.topology import StoragePrices

__all__ = [
    "parse_problem",
    "problem_to_dict",
    "selection_to_dict",
    "tail_key",
    "MIN_SAMPLES",
    "MAX_SAMPLES",
    "MAX_PAIRS",
    "MAX_REGIONS",
    "JSON_APPLICATIONS",
]

MIN_SAMPLES = 10  # pairs per kind and pings per region; §6.5 uses 10K
MAX_SAMPLES = 100_000  # ten times §6.5's 10K, per kind and for the pings
MAX_PAIRS = 1_000_000  # pairs of every kind and region of one problem (the example: 160K)
MAX_REGIONS = 32  # the paper's two providers had 21 regions
# A latency sample over 5 s is a failed request, not a tail (the simulated clouds' slowest
# PUT takes 2 s, the paper's medians are under 100 ms). The bound also bounds the width of
# the estimator's distributions (10,000 points at 0.5 ms), and so an evaluation's cost.
MAX_LATENCY_MS = 5_000.0
MAX_SLO_MS = 60_000.0  # SLOs and margins: a minute
MAX_ARRIVAL_MS = 1e13  # arrival times on any origin; Unix time in ms reaches 1e13 in 2286
MAX_RATE_RPS = 1e9  # more than one prefix's clients send
MIN_RELAY_RPS = 1.0  # a relay VM moves at least one request a second
MAX_PER_MONTH = 1e16  # operations a month: 1e9 req/s for a month is 2.6e15
MAX_OBJECT_BYTES = 5e12  # S3's largest object, 5 TB
MAX_STORED_GB = 1e9  # an exabyte
MAX_PRICE_USD = 1e4  # per unit of each price; list prices are cents
MAX_PAGE_OBJECTS = 10_000  # §2's pages have 50
# The search: best-first over copies x requests per copy in two regions and the PUT tuple.
# One evaluation takes up to a few ms at these bounds (measured; docs/costlo.md).
LIMITS_RANGES: dict[str, tuple[float, float]] = {
    "max_copies": (1, 5),  # §5.2's default space goes to 3
    "max_requests_per_copy": (1, 5),  # and to 4
    "max_evaluations": (1, 10_000),  # twice the default
    "probability_step": (0.001, 1.0),
    "slo_margin_ms": (0.0, MAX_SLO_MS),
}
MAX_TIMEOUT_PERCENTILES = 100
JSON_APPLICATIONS = ("operation", "page")
_SOCIAL = (
    "'social' needs every follower prefix's regions and is available from the Python API "
    "only (geoslo.control.costlo); use 'operation' or 'page'"
)

_TOP_KEYS = {"prefix", "workload", "slo", "serving_region", "second_region", "regions", "limits"}
_SLO_KEYS = {"get_ms", "put_ms", "percentile", "application", "page_objects"}
_REGION_KEYS = {"name", "prices", "relay_rps", "ping_ms", "storage"}
_PAIR_KEYS = {"network_ms", "service_ms", "arrival_ms"}


def _names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _build(cls, kwargs: dict, where: str):
    """``cls(**kwargs)`` with the dataclass's own checks reported at ``where``."""
    try:
        return cls(**kwargs)
    except InputError as error:
        raise InputError(f"{where}.{error.field}", error.problem) from None


# ---------------------------------------------------------------------------- parse


_WORKLOAD_HIGH = {
    "gets_per_month": MAX_PER_MONTH,
    "puts_per_month": MAX_PER_MONTH,
    "object_bytes": MAX_OBJECT_BYTES,
    "stored_gb": MAX_STORED_GB,
    "peak_get_rps": MAX_RATE_RPS,
    "peak_put_rps": MAX_RATE_RPS,
}


def _workload(value: Any) -> PrefixWorkload:
    names = _names(PrefixWorkload)
    check_keys(value, set(names), {"gets_per_month"}, "workload")
    kwargs = {
        key: number(value[key], f"workload.{key}", 0.0, _WORKLOAD_HIGH[key])
        for key in names
        if key in value
    }
    return _build(PrefixWorkload, kwargs, "workload")


def _slo(value: Any) -> Slo:
    check_keys(value, _SLO_KEYS, set(), "slo")
    kwargs: dict[str, Any] = {}
    for key in ("get_ms", "put_ms"):
        if key in value:
            raw = value[key]
            kwargs[key] = None if raw is None else number(raw, f"slo.{key}", 0.0, MAX_SLO_MS)
    if "percentile" in value:
        kwargs["percentile"] = number(value["percentile"], "slo.percentile")
    if "application" in value:
        application = value["application"]
        if application == "social":
            raise InputError("slo.application", _SOCIAL)
        if application not in JSON_APPLICATIONS:
            raise InputError("slo.application", f"must be one of {list(JSON_APPLICATIONS)}")
        kwargs["application"] = application
    if "page_objects" in value:
        kwargs["page_objects"] = integer(
            value["page_objects"], "slo.page_objects", 1, MAX_PAGE_OBJECTS
        )
    return _build(Slo, kwargs, "slo")


def _limits(value: Any) -> SearchLimits:
    """Each field is read by the type of its default (bool, int, float, tuple of numbers)."""
    names = _names(SearchLimits)
    check_keys(value, set(names), set(), "limits")
    defaults = SearchLimits()
    kwargs: dict[str, Any] = {}
    for key in names:
        if key not in value:
            continue
        raw, path, default = value[key], f"limits.{key}", getattr(defaults, key)
        low, high = LIMITS_RANGES.get(key, (None, None))
        if isinstance(default, bool):
            kwargs[key] = boolean(raw, path)
        elif isinstance(default, int):
            kwargs[key] = integer(raw, path, low, high)
        elif isinstance(default, tuple):
            kwargs[key] = tuple(float(x) for x in _timeout_percentiles(raw, path))
        else:
            kwargs[key] = number(raw, path, low, high)
    return _build(SearchLimits, kwargs, "limits")


def _timeout_percentiles(value: Any, path: str) -> np.ndarray:
    out = numbers(value, path, low=0.0, high=100.0)
    if out.size > MAX_TIMEOUT_PERCENTILES:
        raise InputError(path, f"must hold at most {MAX_TIMEOUT_PERCENTILES} percentiles")
    return out


def _prices(value: Any, where: str) -> StoragePrices:
    names = _names(StoragePrices)
    check_keys(value, set(names), set(names), where)
    kwargs = {key: number(value[key], f"{where}.{key}", 0.0, MAX_PRICE_USD) for key in names}
    return _build(StoragePrices, kwargs, where)


def _count(value: Any, path: str, what: str) -> list:
    """A list of MIN_SAMPLES to MAX_SAMPLES entries (checked before its entries are)."""
    items = as_list(value, path)
    if not MIN_SAMPLES <= len(items) <= MAX_SAMPLES:
        raise InputError(path, f"must hold {MIN_SAMPLES} to {MAX_SAMPLES} {what}, has {len(items)}")
    return items


_PAIR_HIGH = {"network_ms": MAX_LATENCY_MS, "service_ms": MAX_LATENCY_MS}


def _pairs(value: Any, where: str) -> PairSamples:
    check_keys(value, _PAIR_KEYS, _PAIR_KEYS, where)
    arrays = {}
    for key in ("network_ms", "service_ms", "arrival_ms"):
        path = f"{where}.{key}"
        rows = _count(value[key], path, "pairs [a, b]")
        high = _PAIR_HIGH.get(key, MAX_ARRIVAL_MS)
        arrays[key] = check_non_negative(number_rows(rows, path, 2, high=high), path)
        count = arrays[key].shape[0]
        first = arrays["network_ms"].shape[0]
        if count != first:
            raise InputError(path, f"must have as many pairs as network_ms ({first}), has {count}")
    return _build(PairSamples, arrays, where)


def _storage(value: Any, where: str) -> StorageMeasurements:
    names = _names(StorageMeasurements)
    check_keys(value, set(names), set(names), where)
    kwargs = {key: _pairs(value[key], f"{where}.{key}") for key in names}
    return StorageMeasurements(**kwargs)


def _ping(value: Any, where: str) -> np.ndarray:
    items = _count(value, where, "RTT samples")
    return check_non_negative(numbers(items, where, high=MAX_LATENCY_MS), where)


def _relay_rps(value: Any, where: str) -> float:
    """Requests/s one VM relays; it divides the peak rate into VMs, so at least 1."""
    return number(value, where, MIN_RELAY_RPS, MAX_RATE_RPS)


def _region(value: Any, where: str) -> RegionInput:
    check_keys(value, _REGION_KEYS, _REGION_KEYS, where)
    relay_rps = _relay_rps(value["relay_rps"], f"{where}.relay_rps")
    return RegionInput(
        name=string(value["name"], f"{where}.name"),
        prices=_prices(value["prices"], f"{where}.prices"),
        storage=_storage(value["storage"], f"{where}.storage"),
        ping_ms=_ping(value["ping_ms"], f"{where}.ping_ms"),
        relay_rps=relay_rps,
    )


def _pair_count(problem_regions: list[RegionInput]) -> int:
    """Pairs of every kind in ``problem_regions`` (what MAX_PAIRS bounds)."""
    kinds = _names(StorageMeasurements)
    return sum(getattr(r.storage, k).network_ms.shape[0] for r in problem_regions for k in kinds)


def _regions(value: Any) -> list[RegionInput]:
    items = as_list(value, "regions")
    if not 1 <= len(items) <= MAX_REGIONS:
        raise InputError("regions", f"must hold 1 to {MAX_REGIONS} regions, not {len(items)}")
    seen: dict[str, int] = {}
    out = []
    for k, item in enumerate(items):
        region = _region(item, f"regions[{k}]")
        if _pair_count([*out, region]) > MAX_PAIRS:
            raise InputError(
                f"regions[{k}].storage", f"the regions hold more than {MAX_PAIRS} pairs in all"
            )
        if region.name in seen:
            raise InputError(
                f"regions[{k}].name", f"{region.name!r} is already regions[{seen[region.name]}]"
            )
        seen[region.name] = k
        out.append(region)
    return out


def _region_name(value: Any, field: str, names: list[str]) -> str:
    name = string(value, field)
    if name not in names:
        raise InputError(field, f"{name!r} is not the name of one of the regions {names}")
    return name


def parse_problem(data: dict) -> CostloProblem:
    """A checked :class:`CostloProblem` from the problem.json contract (docs/costlo.md).

    The serving region is the one ``serving_region`` names; the other regions are the
    candidates, of which the second region is ``second_region`` or the one with the
    lowest median ping (§5.2). The optional ``prefix`` name is not part of the problem;
    pass it to :func:`selection_to_dict`.
    """
    check_keys(data, _TOP_KEYS, {"workload", "serving_region", "regions"}, "")
    if data.get("prefix") is not None:
        string(data["prefix"], "prefix")
    workload = _workload(data["workload"])
    slo = _slo(data["slo"]) if "slo" in data else Slo()
    limits = _limits(data["limits"]) if "limits" in data else SearchLimits()
    regions = _regions(data["regions"])
    names = [r.name for r in regions]
    serving = _region_name(data["serving_region"], "serving_region", names)
    second = data.get("second_region")
    if second is not None:
        second = _region_name(second, "second_region", names)
        if second == serving:
            raise InputError("second_region", "must differ from serving_region")
    return CostloProblem(
        workload=workload,
        serving=regions[names.index(serving)],
        candidates=tuple(r for r in regions if r.name != serving),
        slo=slo,
        limits=limits,
        second_region=second,
    )


# ---------------------------------------------------------------------------- write


def _floats(values: np.ndarray) -> list:
    return np.asarray(values, dtype=float).tolist()


def _pairs_to_dict(pairs: PairSamples) -> dict:
    return {key: _floats(getattr(pairs, key)) for key in ("network_ms", "service_ms", "arrival_ms")}


def _region_to_dict(region: RegionInput) -> dict:
    kinds = _names(StorageMeasurements)
    storage = {kind: _pairs_to_dict(getattr(region.storage, kind)) for kind in kinds}
    return {
        "name": region.name,
        "prices": {key: float(getattr(region.prices, key)) for key in _names(StoragePrices)},
        "relay_rps": float(region.relay_rps),
        "ping_ms": _floats(region.ping_ms),
        "storage": storage,
    }


def _slo_to_dict(slo: Slo) -> dict:
    if slo.application not in JSON_APPLICATIONS:
        raise InputError("slo.application", _SOCIAL)
    return {
        "get_ms": slo.get_ms,
        "put_ms": slo.put_ms,
        "percentile": slo.percentile,
        "application": slo.application,
        "page_objects": slo.page_objects,
    }


def _limits_to_dict(limits: SearchLimits) -> dict:
    out = {}
    for key in _names(SearchLimits):
        value = getattr(limits, key)
        out[key] = [float(x) for x in value] if isinstance(value, tuple) else value
    return out


def problem_to_dict(problem: CostloProblem, prefix: str | None = None) -> dict:
    """The problem.json form of ``problem`` (``parse_problem`` reads it back unchanged);
    the serving region comes first in ``regions``."""
    out: dict[str, Any] = {} if prefix is None else {"prefix": prefix}
    w = problem.workload
    out["workload"] = {key: float(getattr(w, key)) for key in _names(PrefixWorkload)}
    out["slo"] = _slo_to_dict(problem.slo)
    out["serving_region"] = problem.serving.name
    if problem.second_region is not None:
        out["second_region"] = problem.second_region
    others = [r for r in problem.candidates if r.name != problem.serving.name]
    out["regions"] = [_region_to_dict(r) for r in (problem.serving, *others)]
    out["limits"] = _limits_to_dict(problem.limits)
    return out


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded estimate is written as null."""
    x = float(x)
    return x if math.isfinite(x) else None


def _estimate(e: Estimate | None, tail_key: str) -> dict | None:
    if e is None:
        return None
    return {
        "p50_ms": _finite(e.p50_ms),
        tail_key: _finite(e.tail_ms),
        "baseline_p50_ms": _finite(e.baseline_p50_ms),
        "inflation_ms": _finite(e.inflation_ms),
    }


def tail_key(percentile: float) -> str:
    """The config.json name of the tail estimate: ``p99_ms``, ``p99.9_ms``."""
    return f"p{percentile:g}_ms"


def _outcome(selection: Selection) -> dict:
    """The contract's four words (``geoslo.control.Outcome``): the objective is the
    configuration's cost in USD per month."""
    outcome = selection.outcome
    return {
        "status": outcome.status,
        "solver_status": outcome.solver_status,
        "objective": None if outcome.objective is None else _finite(outcome.objective),
        "decide_ms": float(outcome.decide_ms),
    }


def selection_to_dict(
    selection: Selection, *, percentile: float = 99.0, prefix: str | None = None
) -> dict:
    """The config.json form of ConfSelector's answer; ``percentile`` is the SLO's (it
    names the tail estimate) and ``prefix`` the problem's optional name."""
    c = selection.configuration
    key = tail_key(percentile)
    return {
        "prefix": prefix,
        "met": bool(selection.met),
        **_outcome(selection),
        "serving_region": selection.serving_region or None,
        "second_region": selection.second_region or None,
        "configuration": configuration_to_dict(c),
        "estimate": {"get": _estimate(selection.get, key), "put": _estimate(selection.put, key)},
        "cost_usd_per_month": {k: float(v) for k, v in selection.cost.as_dict().items()},
        "baseline_cost_usd_per_month": {
            k: float(v) for k, v in selection.baseline_cost.as_dict().items()
        },
        "cost_increase_fraction": float(selection.cost_increase_fraction),
        "evaluated": int(selection.evaluated),
    }
