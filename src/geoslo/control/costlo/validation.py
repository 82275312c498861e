"""The problem.json and config.json contract of ConfSelector for one prefix (§5.2).

problem.json carries what §5.2 says ConfSelector takes as input: the prefix's workload,
every candidate region's prices, its agent's concurrent GET/PUT pairs and pings to the
prefix, and the rate one relay VM sustains; plus the SLO and the search's limits.
config.json is the selected configuration with its estimated latency and monthly cost.
Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path (``regions[1].storage.get_same_object.network_ms[3][0]``). The structure, types and
ranges are the pydantic models of ``_schema.py`` (every number has a range and every list
a length bound, also in the docs' table, so that whatever is accepted is selected in
bounded time and memory); the checks across fields are here. Schema:
``geoslo costlo schema``, docs/costlo.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from geoslo._schema import validate
from geoslo.control.costlo import _schema as schema
from geoslo.control.costlo._schema import (
    LIMITS_RANGES,
    MAX_ARRIVAL_MS,
    MAX_LATENCY_MS,
    MAX_OBJECT_BYTES,
    MAX_PAGE_OBJECTS,
    MAX_PER_MONTH,
    MAX_PRICE_USD,
    MAX_RATE_RPS,
    MAX_REGIONS,
    MAX_SAMPLES,
    MAX_SLO_MS,
    MAX_STORED_GB,
    MAX_TIMEOUT_PERCENTILES,
    MIN_RELAY_RPS,
    MIN_SAMPLES,
)
from geoslo.control.costlo.decide import CostloProblem, RegionInput
from geoslo.control.costlo.types import (
    Estimate,
    HedgeBudget,
    PrefixWorkload,
    SearchLimits,
    Selection,
    Slo,
    configuration_to_dict,
)
from geoslo.errors import InputError
from geoslo.models import PairSamples, StorageMeasurements
from geoslo.models._storage_service import DEFAULT_STEP_MS
from geoslo.topology import StoragePrices

__all__ = [
    "parse_problem",
    "problem_to_dict",
    "problem_to_compact_dict",
    "selection_to_dict",
    "tail_key",
    "MIN_SAMPLES",
    "MAX_SAMPLES",
    "MAX_PAIRS",
    "MAX_REGIONS",
    "JSON_APPLICATIONS",
    "LIMITS_RANGES",
    "MAX_TIMEOUT_PERCENTILES",
    "MAX_LATENCY_MS",
    "MAX_SLO_MS",
    "MAX_ARRIVAL_MS",
    "MAX_RATE_RPS",
    "MIN_RELAY_RPS",
    "MAX_PER_MONTH",
    "MAX_OBJECT_BYTES",
    "MAX_STORED_GB",
    "MAX_PRICE_USD",
    "MAX_PAGE_OBJECTS",
]

MAX_PAIRS = 1_000_000  # pairs of every kind and region of one problem (the example: 160K)
JSON_APPLICATIONS = ("operation", "page")
_SOCIAL = (
    "'social' needs every follower prefix's regions and is available from the Python API "
    "only (geoslo.control.costlo); use 'operation' or 'page'"
)


def _names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _build(cls, kwargs: dict, where: str):
    """``cls(**kwargs)`` with the dataclass's own checks reported at ``where``."""
    try:
        return cls(**kwargs)
    except InputError as error:
        raise InputError(f"{where}.{error.field}", error.problem) from None


# ---------------------------------------------------------------------------- parse


def _pairs(value: schema.Pairs, where: str) -> PairSamples:
    """The three arrays of (n, 2) pairs, as many in each as in ``network_ms``."""
    arrays = {}
    for key in ("network_ms", "service_ms", "arrival_ms"):
        rows = getattr(value, key)
        first = len(value.network_ms)
        if len(rows) != first:
            problem = f"must have as many pairs as network_ms ({first}), has {len(rows)}"
            raise InputError(f"{where}.{key}", problem)
        arrays[key] = np.array(rows, dtype=float).reshape(len(rows), 2)
    return _build(PairSamples, arrays, where)


def _region(value: schema.Region, where: str) -> RegionInput:
    storage = value.storage
    return RegionInput(
        name=value.name,
        prices=_build(StoragePrices, value.prices.model_dump(), f"{where}.prices"),
        storage=StorageMeasurements(
            **{
                k: _pairs(getattr(storage, k), f"{where}.storage.{k}")
                for k in schema.Storage.model_fields
            }
        ),
        ping_ms=np.array(value.ping_ms, dtype=float),
        relay_rps=value.relay_rps,
    )


def _expanded(rows: list[tuple], where: str) -> np.ndarray:
    """Lattice rows ``[..., count]`` as one row per sample (the count dropped), at most
    MAX_SAMPLES of them."""
    table = np.array(rows, dtype=np.int64)
    counts = table[:, -1]
    if int(counts.sum()) > MAX_SAMPLES:
        raise InputError(where, f"the counts add up to more than {MAX_SAMPLES} samples")
    return np.repeat(table[:, :-1], counts, axis=0)


def _compact_pairs(value: schema.CompactPairs, step_ms: float, where: str) -> PairSamples:
    """The pairs of the compact form on the lattice: the earlier arrival at 0, the later
    one ``gap`` steps after it (the inference looks only at a pair's arrival order, its
    gap and ties)."""
    network = _expanded(value.network, f"{where}.network")
    service = _expanded(value.service, f"{where}.service")
    if len(service) != len(network):
        problem = f"counts add up to {len(service)} pairs, network's to {len(network)}"
        raise InputError(f"{where}.service", problem)
    if len(network) < MIN_SAMPLES:
        raise InputError(f"{where}.network", f"counts must add up to at least {MIN_SAMPLES}")
    arrival = np.zeros((len(service), 2))
    arrival[:, 1] = service[:, 2] * step_ms
    return _build(
        PairSamples,
        {
            "network_ms": network * step_ms,
            "service_ms": service[:, :2] * step_ms,
            "arrival_ms": arrival,
        },
        where,
    )


def _compact_region(value: schema.CompactRegion, step_ms: float, where: str) -> RegionInput:
    storage = value.storage
    ping = _expanded(value.ping, f"{where}.ping")[:, 0] * step_ms
    if len(ping) < MIN_SAMPLES:
        raise InputError(f"{where}.ping", f"counts must add up to at least {MIN_SAMPLES}")
    kinds = schema.CompactStorage.model_fields
    return RegionInput(
        name=value.name,
        prices=_build(StoragePrices, value.prices.model_dump(), f"{where}.prices"),
        storage=StorageMeasurements(
            **{
                k: _compact_pairs(getattr(storage, k), step_ms, f"{where}.storage.{k}")
                for k in kinds
            }
        ),
        ping_ms=ping.astype(float),
        relay_rps=value.relay_rps,
    )


def _pair_count(value: schema.Region | schema.CompactRegion) -> int:
    """Pairs of every kind in a region (what MAX_PAIRS bounds)."""
    storage = value.storage
    if isinstance(value, schema.CompactRegion):
        kinds = schema.CompactStorage.model_fields
        return sum(sum(row[-1] for row in getattr(storage, k).network) for k in kinds)
    return sum(len(getattr(storage, k).network_ms) for k in schema.Storage.model_fields)


def _regions(value: list, step_ms: float | None) -> list[RegionInput]:
    """Regions with unique names, holding at most MAX_PAIRS pairs in all (``step_ms``:
    the compact form's lattice, None for the raw form)."""
    seen: dict[str, int] = {}
    out = []
    pairs = 0
    for k, item in enumerate(value):
        pairs += _pair_count(item)
        if pairs > MAX_PAIRS:
            raise InputError(
                f"regions[{k}].storage", f"the regions hold more than {MAX_PAIRS} pairs in all"
            )
        if item.name in seen:
            raise InputError(
                f"regions[{k}].name", f"{item.name!r} is already regions[{seen[item.name]}]"
            )
        seen[item.name] = k
        if step_ms is None:
            out.append(_region(item, f"regions[{k}]"))
        else:
            out.append(_compact_region(item, step_ms, f"regions[{k}]"))
    return out


def _region_name(name: str, field: str, names: list[str]) -> str:
    if name not in names:
        raise InputError(field, f"{name!r} is not the name of one of the regions {names}")
    return name


def _validated(data: Any) -> schema.ProblemInput:
    """The model's checks (the compact form's when ``step_ms`` is present); 'social' gets
    its pointer to the Python API."""
    compact = isinstance(data, dict) and "step_ms" in data
    try:
        return validate(schema.CompactProblemInput if compact else schema.ProblemInput, data)
    except InputError as error:
        slo = data.get("slo") if isinstance(data, dict) else None
        if error.field == "slo.application" and isinstance(slo, dict):
            if slo.get("application") == "social":
                raise InputError("slo.application", _SOCIAL) from None
        raise


def parse_problem(data: dict) -> CostloProblem:
    """A checked :class:`CostloProblem` from the problem.json contract (docs/costlo.md),
    raw or compact: the model's checks (``_schema.ProblemInput`` or
    ``CompactProblemInput``), then the pairs' lengths, the pairs in
    all, the regions' names and the dataclasses' own checks.

    The serving region is the one ``serving_region`` names; the other regions are the
    candidates, of which the second region is ``second_region`` or the one with the
    lowest median ping (§5.2). The optional ``prefix`` name is not part of the problem;
    pass it to :func:`selection_to_dict`.
    """
    problem = _validated(data)
    workload = _build(PrefixWorkload, problem.workload.model_dump(), "workload")
    slo = _build(Slo, problem.slo.model_dump(), "slo")
    limits = problem.limits.model_dump()
    limits["timeout_percentiles"] = tuple(limits["timeout_percentiles"])
    if limits["hedge_budget"] is not None:
        budget = limits["hedge_budget"]
        limits["hedge_budget"] = _build(HedgeBudget, budget, "limits")
    limits = _build(SearchLimits, limits, "limits")
    regions = _regions(problem.regions, getattr(problem, "step_ms", None))
    names = [r.name for r in regions]
    serving = _region_name(problem.serving_region, "serving_region", names)
    second = problem.second_region
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
    """The limits block; a hedge budget only when there is one."""
    out = {}
    for key in _names(SearchLimits):
        value = getattr(limits, key)
        if isinstance(value, HedgeBudget):
            value = dataclasses.asdict(value)
        elif value is None and key in ("hedge_budget", "max_requests_per_get"):
            continue
        out[key] = [float(x) for x in value] if isinstance(value, tuple) else value
    return out


def _others(problem: CostloProblem) -> list[RegionInput]:
    return [r for r in problem.candidates if r.name != problem.serving.name]


def _head(problem: CostloProblem, prefix: str | None) -> dict:
    """Both forms' fields before the regions."""
    out: dict[str, Any] = {} if prefix is None else {"prefix": prefix}
    w = problem.workload
    out["workload"] = {key: float(getattr(w, key)) for key in _names(PrefixWorkload)}
    out["slo"] = _slo_to_dict(problem.slo)
    out["serving_region"] = problem.serving.name
    if problem.second_region is not None:
        out["second_region"] = problem.second_region
    return out


def problem_to_dict(problem: CostloProblem, prefix: str | None = None) -> dict:
    """The problem.json form of ``problem`` (``parse_problem`` reads it back unchanged);
    the serving region comes first in ``regions``."""
    out = _head(problem, prefix)
    out["regions"] = [_region_to_dict(r) for r in (problem.serving, *_others(problem))]
    out["limits"] = _limits_to_dict(problem.limits)
    return out


def _steps(values: np.ndarray, step_ms: float) -> np.ndarray:
    """Lattice indices as ``LatencyDistribution.from_samples`` rounds them (nearest point),
    clipped to the contract's bound."""
    return np.clip(np.rint(np.asarray(values, dtype=float) / step_ms), 0, schema.MAX_STEP_INDEX)


def _counted(rows: np.ndarray) -> list:
    """Distinct rows with their counts appended: ``[[..., count], ...]``."""
    unique, counts = np.unique(rows.astype(np.int64), axis=0, return_counts=True)
    return np.column_stack([unique, counts]).tolist()


def _compact_pairs_to_dict(pairs: PairSamples, step_ms: float) -> dict:
    """One kind of pairs on the lattice (``_schema.CompactPairs``): network pairs sorted,
    service pairs in arrival order (ties: the shorter first) with their arrival gap; a
    tie stays a tie (``np.isclose``, as the inference decides it) and a distinct arrival
    keeps a gap of at least one step."""
    network = np.sort(_steps(pairs.network_ms, step_ms), axis=1)
    arrival, service = pairs.arrival_ms, pairs.service_ms
    tied = np.isclose(arrival[:, 0], arrival[:, 1])
    swap = np.where(tied, service[:, 1] < service[:, 0], arrival[:, 1] < arrival[:, 0])
    ordered = np.where(swap[:, None], service[:, ::-1], service)
    gap = np.maximum(_steps(np.abs(arrival[:, 1] - arrival[:, 0]), step_ms), 1.0)
    gap = np.where(tied, 0.0, gap)
    return {
        "network": _counted(network),
        "service": _counted(np.column_stack([_steps(ordered, step_ms), gap])),
    }


def problem_to_compact_dict(
    problem: CostloProblem, prefix: str | None = None, step_ms: float = DEFAULT_STEP_MS
) -> dict:
    """The compact problem.json form of ``problem``: every sample on the lattice of
    ``step_ms`` (the estimator's by default, where the storage model's and the pings'
    distributions come out the same as from the raw samples, docs/costlo.md)."""
    out = _head(problem, prefix)
    regions = []
    for region in (problem.serving, *_others(problem)):
        kinds = _names(StorageMeasurements)
        regions.append(
            {
                "name": region.name,
                "prices": {k: float(getattr(region.prices, k)) for k in _names(StoragePrices)},
                "relay_rps": float(region.relay_rps),
                "ping": _counted(_steps(region.ping_ms, step_ms)[:, None]),
                "storage": {
                    k: _compact_pairs_to_dict(getattr(region.storage, k), step_ms) for k in kinds
                },
            }
        )
    out["regions"] = regions
    out["limits"] = _limits_to_dict(problem.limits)
    out["step_ms"] = float(step_ms)
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
