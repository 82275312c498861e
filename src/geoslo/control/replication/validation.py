"""The state.json and shares.json contract of ``geoslo replication decide`` (Dürango et
al., CDC 2016, §IV). Per-stream values are objects keyed by ``application``,
``replication`` and ``vm_image``; trajectories are such objects of lists over the horizon.
Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path. The structure, types and ranges are the pydantic models of ``_schema.py`` (every
number has a range, ``RANGES``, and the horizon a bound, ``MAX_HORIZON``, so that whatever
passes is decided in bounded time and memory: docs/replication.md, "Ranges"); the checks
across fields are here. Schema: ``geoslo replication schema``, docs/replication.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from geoslo._schema import validate
from geoslo.control.replication import _schema as schema
from geoslo.control.replication._schema import MAX_HORIZON, RANGES
from geoslo.control.replication.types import (
    STREAMS,
    Decision,
    Measurement,
    ReplicationConfig,
    ReplicationState,
    Weights,
)
from geoslo.errors import InputError
from geoslo.models import ArrivalModel, FilterState

__all__ = ["parse_state", "state_to_dict", "decision_to_dict", "RANGES", "MAX_HORIZON"]

_FILTERED = STREAMS[:2]


def parse_state(data: Any) -> ReplicationState:
    """A checked :class:`ReplicationState` from decoded JSON: the model's checks
    (``_schema.StateInput``), then the shares' sum and the filters' shapes."""
    state = validate(schema.StateInput, data, root="state")
    config = _config(state.config)
    measurement = Measurement(
        _per_stream(state.buffers_mb), _per_stream(state.sent_mb), _per_stream(state.arrived_mb)
    )
    shares = np.full(3, 1 / 3) if state.shares is None else _per_stream(state.shares)
    if shares.sum() > 1 + 1e-9:
        raise InputError("shares", f"must be fractions that sum to at most 1, sum {shares.sum()}")
    filters = None if state.filters is None else _filters(state.filters, config.arrival_model)
    return ReplicationState(config, state.now_s, measurement, shares, filters, state.integral_mb)


def _per_stream(value: Any) -> np.ndarray:
    return np.array([getattr(value, s) for s in STREAMS], dtype=float)


def _config(value: schema.Config) -> ReplicationConfig:
    given = value.weights
    weights = Weights(tuple(given.buffer), tuple(given.moves), given.integral)
    limits = tuple(math.inf if x is None else x for x in value.buffer_limits_mb or [None] * 3)
    model = value.arrival_model
    return ReplicationConfig(
        capacity_mbps=value.capacity_mbps,
        interval_s=value.interval_s,
        horizon=value.horizon,
        weights=weights,
        buffer_limits_mb=limits,
        arrival_model=ArrivalModel(model.kind, model.process_noise_mb, model.measurement_noise_mb),
        image_mb=value.image_mb,
        image_period_s=value.image_period_s,
    )


def _filters(value: schema.Filters, model: ArrivalModel) -> tuple[FilterState, FilterState]:
    """Each filter's mean and covariance have one entry per state of ``model``; the
    covariance is symmetric positive semi-definite."""
    out = []
    for stream in _FILTERED:
        where, given = f"filters.{stream}", getattr(value, stream)
        order = model.order
        mean = _entries(given.mean, f"{where}.mean", order)
        rows = _entries(given.covariance, f"{where}.covariance", order)
        covariance = np.array(
            [_entries(r, f"{where}.covariance[{k}]", order) for k, r in enumerate(rows)]
        )
        if not np.allclose(covariance, covariance.T) or np.linalg.eigvalsh(covariance).min() < 0:
            raise InputError(f"{where}.covariance", "must be symmetric positive semi-definite")
        out.append(FilterState(np.asarray(mean, dtype=float), covariance))
    return out[0], out[1]


def _entries(items: list, name: str, order: int) -> list:
    if len(items) != order:
        raise InputError(name, f"must have {order} entries (one per state), has {len(items)}")
    return items


def _streams(values) -> dict:
    return {s: float(v) for s, v in zip(STREAMS, values, strict=True)}


def _trajectories(rows: np.ndarray) -> dict:
    return {s: [float(v) for v in rows[:, i]] for i, s in enumerate(STREAMS)}


def _filter_dict(filters) -> dict:
    return {
        s: {"mean": f.mean.tolist(), "covariance": f.covariance.tolist()}
        for s, f in zip(_FILTERED, filters, strict=True)
    }


def state_to_dict(state: ReplicationState) -> dict:
    """The state.json for ``state`` (what ``parse_state`` reads back)."""
    config = state.config
    limits = [None if math.isinf(x) else x for x in config.buffer_limits_mb]
    model = config.arrival_model
    out = {
        "config": {
            "capacity_mbps": config.capacity_mbps,
            "interval_s": config.interval_s,
            "horizon": config.horizon,
            "weights": {
                "buffer": list(config.weights.buffer),
                "moves": list(config.weights.moves),
                "integral": config.weights.integral,
            },
            "buffer_limits_mb": limits,
            "arrival_model": {
                "kind": model.kind,
                "process_noise_mb": model.process_noise_mb,
                "measurement_noise_mb": model.measurement_noise_mb,
            },
            "image_mb": config.image_mb,
            "image_period_s": config.image_period_s,
        },
        "now_s": state.now_s,
        "buffers_mb": _streams(state.measurement.buffers_mb),
        "sent_mb": _streams(state.measurement.sent_mb),
        "arrived_mb": _streams(state.measurement.arrived_mb),
        "shares": _streams(state.shares),
        "integral_mb": state.integral_mb,
    }
    if state.filters is not None:
        out["filters"] = _filter_dict(state.filters)
    return out


def decision_to_dict(decision: Decision) -> dict:
    """shares.json: the allocation (the shares in force when the solve failed), how the
    decision ended (the one status vocabulary, OSQP's word, J, the decision's time) and, for
    the MPC, its plan over the horizon and the new filter state."""
    allocation = decision.allocation
    out: dict = {}
    if allocation.mode == "shares":
        out["shares"] = _streams(decision.shares)
    else:
        out["priority"] = [STREAMS[i] for i in allocation.order]
    out |= decision.outcome.to_dict()
    if decision.planned_shares is not None:
        out |= {
            "planned_shares": _trajectories(decision.planned_shares),
            "predicted_buffers_mb": _trajectories(decision.predicted_buffers_mb),
            "predicted_arrivals_mb": _trajectories(decision.predicted_arrivals_mb),
            "filters": _filter_dict(decision.filters),
            "integral_mb": decision.integral_mb,
        }
    return out
