"""The state.json and shares.json contract of ``geoslo replication decide`` (Dürango et
al., CDC 2016, §IV). Per-stream values are objects keyed by ``application``,
``replication`` and ``vm_image``; trajectories are such objects of lists over the horizon.
Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path. Schema: docs/replication.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from geoslo._json import as_list, check_keys, integer, number, numbers, string
from geoslo.control.replication.types import (
    STREAMS,
    Decision,
    Measurement,
    ReplicationConfig,
    ReplicationState,
    Weights,
)
from geoslo.errors import InputError
from geoslo.models import ARRIVAL_MODEL_KINDS, ArrivalModel, FilterState

__all__ = ["parse_state", "state_to_dict", "decision_to_dict"]

_TOP = {
    "config",
    "now_s",
    "buffers_mb",
    "sent_mb",
    "arrived_mb",
    "shares",
    "filters",
    "integral_mb",
}
_CONFIG = {
    "capacity_mbps",
    "interval_s",
    "horizon",
    "weights",
    "buffer_limits_mb",
    "arrival_model",
    "image_mb",
    "image_period_s",
}
_WEIGHTS = {"buffer", "moves", "integral"}
_MODEL = {"kind", "process_noise_mb", "measurement_noise_mb"}
_FILTERED = STREAMS[:2]


def parse_state(data: Any) -> ReplicationState:
    """A checked :class:`ReplicationState` from decoded JSON."""
    check_keys(data, _TOP, {"config", "now_s", "buffers_mb", "sent_mb", "arrived_mb"}, "")
    config = _config(data["config"])
    measurement = Measurement(
        _per_stream(data["buffers_mb"], "buffers_mb"),
        _per_stream(data["sent_mb"], "sent_mb"),
        _per_stream(data["arrived_mb"], "arrived_mb", non_negative=False),
    )
    shares = _per_stream(data.get("shares", dict.fromkeys(STREAMS, 1 / 3)), "shares")
    if shares.max() > 1 or shares.sum() > 1 + 1e-9:
        raise InputError("shares", f"must be fractions that sum to at most 1, sum {shares.sum()}")
    filters = None
    if data.get("filters") is not None:
        filters = _filters(data["filters"], config.arrival_model)
    integral = number(data.get("integral_mb", 0.0), "integral_mb")
    if integral < 0:
        raise InputError("integral_mb", f"must be >= 0, not {integral}")
    now_s = number(data["now_s"], "now_s")
    return ReplicationState(config, now_s, measurement, shares, filters, integral)


def _per_stream(value: Any, name: str, non_negative: bool = True) -> np.ndarray:
    check_keys(value, set(STREAMS), set(STREAMS), name)
    out = np.array([number(value[s], f"{name}.{s}") for s in STREAMS])
    for s, x in zip(STREAMS, out, strict=True):
        if non_negative and x < 0:
            raise InputError(f"{name}.{s}", f"must be >= 0, not {x}")
    return out


def _config(value: Any) -> ReplicationConfig:
    check_keys(value, _CONFIG, set(), "config")
    defaults = ReplicationConfig()
    kwargs: dict[str, Any] = {}
    for key in ("capacity_mbps", "interval_s", "image_mb", "image_period_s"):
        if key in value:
            kwargs[key] = _positive(value[key], f"config.{key}")
    if "horizon" in value:
        kwargs["horizon"] = integer(value["horizon"], "config.horizon", lowest=1)
    if "weights" in value:
        kwargs["weights"] = _weights(value["weights"], defaults.weights)
    if "buffer_limits_mb" in value:
        kwargs["buffer_limits_mb"] = _limits(value["buffer_limits_mb"])
    if "arrival_model" in value:
        kwargs["arrival_model"] = _model(value["arrival_model"])
    return ReplicationConfig(**kwargs)


def _positive(value: Any, name: str) -> float:
    x = number(value, name)
    if x <= 0:
        raise InputError(name, f"must be > 0, not {x}")
    return x


def _weights(value: Any, defaults: Weights) -> Weights:
    check_keys(value, _WEIGHTS, set(), "config.weights")
    out = {}
    for key in ("buffer", "moves"):
        if key in value:
            v = numbers(value[key], f"config.weights.{key}", 3, "stream")
            for k, x in enumerate(v):
                if x < 0:
                    raise InputError(f"config.weights.{key}[{k}]", f"must be >= 0, not {x}")
            out[key] = tuple(float(x) for x in v)
    if "integral" in value:
        x = number(value["integral"], "config.weights.integral")
        if x < 0:
            raise InputError("config.weights.integral", f"must be >= 0, not {x}")
        out["integral"] = x
    return Weights(
        **{"buffer": defaults.buffer, "moves": defaults.moves, "integral": defaults.integral} | out
    )


def _limits(value: Any) -> tuple[float, float, float]:
    items = as_list(value, "config.buffer_limits_mb", 3, "stream")
    out = []
    for k, x in enumerate(items):
        out.append(math.inf if x is None else _positive(x, f"config.buffer_limits_mb[{k}]"))
    return tuple(out)


def _model(value: Any) -> ArrivalModel:
    check_keys(value, _MODEL, set(), "config.arrival_model")
    kind = string(value.get("kind", "random-walk"), "config.arrival_model.kind")
    if kind not in ARRIVAL_MODEL_KINDS:
        raise InputError("config.arrival_model.kind", f"must be one of {ARRIVAL_MODEL_KINDS}")
    kwargs = {"kind": kind}
    for key in ("process_noise_mb", "measurement_noise_mb"):
        if key in value:
            kwargs[key] = _positive(value[key], f"config.arrival_model.{key}")
    return ArrivalModel(**kwargs)


def _filters(value: Any, model: ArrivalModel) -> tuple[FilterState, FilterState]:
    check_keys(value, set(_FILTERED), set(_FILTERED), "filters")
    out = []
    for stream in _FILTERED:
        where = f"filters.{stream}"
        check_keys(value[stream], {"mean", "covariance"}, {"mean", "covariance"}, where)
        mean = numbers(value[stream]["mean"], f"{where}.mean", model.order, "state")
        rows = as_list(value[stream]["covariance"], f"{where}.covariance", model.order, "state")
        covariance = np.array(
            [numbers(r, f"{where}.covariance[{k}]", model.order) for k, r in enumerate(rows)]
        )
        if not np.allclose(covariance, covariance.T) or np.linalg.eigvalsh(covariance).min() < 0:
            raise InputError(f"{where}.covariance", "must be symmetric positive semi-definite")
        out.append(FilterState(mean, covariance))
    return out[0], out[1]


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
    """shares.json: the shares, the plan over the horizon, the new filter state."""
    return {
        "shares": _streams(decision.shares),
        "status": decision.status,
        "objective": decision.objective,
        "solve_ms": decision.solve_ms,
        "planned_shares": _trajectories(decision.planned_shares),
        "predicted_buffers_mb": _trajectories(decision.predicted_buffers_mb),
        "predicted_arrivals_mb": _trajectories(decision.predicted_arrivals_mb),
        "filters": _filter_dict(decision.filters),
        "integral_mb": decision.integral_mb,
    }
