"""The state.json and shares.json contract of ``geoslo replication decide`` (Dürango et
al., CDC 2016, §IV). Per-stream values are objects keyed by ``application``,
``replication`` and ``vm_image``; trajectories are such objects of lists over the horizon.
Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path. Every number has a range (``RANGES``) and the horizon a bound (``MAX_HORIZON``), so
that whatever passes is decided in bounded time and memory (docs/replication.md,
"Ranges"). Schema: docs/replication.md.
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

__all__ = ["parse_state", "state_to_dict", "decision_to_dict", "RANGES", "MAX_HORIZON"]

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

# H_p (ours): half an hour of the paper's 10 s intervals (three image periods), six times
# its 30. The QP grows with H and OSQP stops at its iteration limit, so the slowest step
# is bounded: about 1.6 s at 180 on a busy 2-core machine, 4 s at 360 (docs).
MAX_HORIZON = 180
_MB = 1e9  # 1 PB: more than any buffer, image or interval's data on one link
# [low, high] of every number, by the name of its field (docs/replication.md, "Ranges").
RANGES: dict[str, tuple[float, float]] = {
    "capacity_mbps": (1e-3, 1e6),  # 1 kb/s to 1 Tb/s
    "interval_s": (0.1, 3_600.0),
    "weights": (0.0, 1e9),  # the paper's largest is r = 1e6
    "buffer_limits_mb": (1e-3, _MB),
    "noise_mb": (1e-3, _MB),
    "image_mb": (1e-3, 1e7),  # 1 kB to 10 TB
    "image_period_s": (1.0, 1e7),  # a second to four months
    "now_s": (0.0, 1e10),  # Unix time until the year 2286
    "buffers_mb": (0.0, _MB),
    "sent_mb": (0.0, _MB),
    "arrived_mb": (-_MB, _MB),  # (3) from noisy measurements may come out negative
    "shares": (0.0, 1.0),
    "integral_mb": (0.0, 1e12),  # MB x intervals
    "filter_mean_mb": (-_MB, _MB),
    "filter_covariance_mb2": (-(_MB**2), _MB**2),
}


def parse_state(data: Any) -> ReplicationState:
    """A checked :class:`ReplicationState` from decoded JSON."""
    check_keys(data, _TOP, {"config", "now_s", "buffers_mb", "sent_mb", "arrived_mb"}, "")
    config = _config(data["config"])
    measurement = Measurement(
        _per_stream(data["buffers_mb"], "buffers_mb"),
        _per_stream(data["sent_mb"], "sent_mb"),
        _per_stream(data["arrived_mb"], "arrived_mb"),
    )
    shares = _per_stream(data.get("shares", dict.fromkeys(STREAMS, 1 / 3)), "shares")
    if shares.sum() > 1 + 1e-9:
        raise InputError("shares", f"must be fractions that sum to at most 1, sum {shares.sum()}")
    filters = None
    if data.get("filters") is not None:
        filters = _filters(data["filters"], config.arrival_model)
    integral = number(data.get("integral_mb", 0.0), "integral_mb", *RANGES["integral_mb"])
    now_s = number(data["now_s"], "now_s", *RANGES["now_s"])
    return ReplicationState(config, now_s, measurement, shares, filters, integral)


def _per_stream(value: Any, name: str) -> np.ndarray:
    """One number per stream, in ``RANGES[name]``."""
    check_keys(value, set(STREAMS), set(STREAMS), name)
    return np.array([number(value[s], f"{name}.{s}", *RANGES[name]) for s in STREAMS])


def _config(value: Any) -> ReplicationConfig:
    check_keys(value, _CONFIG, set(), "config")
    defaults = ReplicationConfig()
    kwargs: dict[str, Any] = {}
    for key in ("capacity_mbps", "interval_s", "image_mb", "image_period_s"):
        if key in value:
            kwargs[key] = number(value[key], f"config.{key}", *RANGES[key])
    if "horizon" in value:  # the range first, so that 1e308 is refused by its short form
        horizon = number(value["horizon"], "config.horizon", 1, MAX_HORIZON)
        kwargs["horizon"] = integer(horizon, "config.horizon")
    if "weights" in value:
        kwargs["weights"] = _weights(value["weights"], defaults.weights)
    if "buffer_limits_mb" in value:
        kwargs["buffer_limits_mb"] = _limits(value["buffer_limits_mb"])
    if "arrival_model" in value:
        kwargs["arrival_model"] = _model(value["arrival_model"])
    return ReplicationConfig(**kwargs)


def _weights(value: Any, defaults: Weights) -> Weights:
    check_keys(value, _WEIGHTS, set(), "config.weights")
    low, high = RANGES["weights"]
    out = {}
    for key in ("buffer", "moves"):
        if key in value:
            v = numbers(value[key], f"config.weights.{key}", 3, "stream", low, high)
            out[key] = tuple(float(x) for x in v)
    if "integral" in value:
        out["integral"] = number(value["integral"], "config.weights.integral", low, high)
    return Weights(
        **{"buffer": defaults.buffer, "moves": defaults.moves, "integral": defaults.integral} | out
    )


def _limits(value: Any) -> tuple[float, float, float]:
    items = as_list(value, "config.buffer_limits_mb", 3, "stream")
    low, high = RANGES["buffer_limits_mb"]
    out = []
    for k, x in enumerate(items):
        limit = None if x is None else number(x, f"config.buffer_limits_mb[{k}]", low, high)
        out.append(math.inf if limit is None else limit)
    return tuple(out)


def _model(value: Any) -> ArrivalModel:
    check_keys(value, _MODEL, set(), "config.arrival_model")
    kind = string(value.get("kind", "random-walk"), "config.arrival_model.kind")
    if kind not in ARRIVAL_MODEL_KINDS:
        raise InputError("config.arrival_model.kind", f"must be one of {ARRIVAL_MODEL_KINDS}")
    kwargs = {"kind": kind}
    for key in ("process_noise_mb", "measurement_noise_mb"):
        if key in value:
            kwargs[key] = number(value[key], f"config.arrival_model.{key}", *RANGES["noise_mb"])
    return ArrivalModel(**kwargs)


def _filters(value: Any, model: ArrivalModel) -> tuple[FilterState, FilterState]:
    check_keys(value, set(_FILTERED), set(_FILTERED), "filters")
    out = []
    for stream in _FILTERED:
        where = f"filters.{stream}"
        check_keys(value[stream], {"mean", "covariance"}, {"mean", "covariance"}, where)
        order = model.order
        mean_range = RANGES["filter_mean_mb"]
        mean = numbers(value[stream]["mean"], f"{where}.mean", order, "state", *mean_range)
        rows = as_list(value[stream]["covariance"], f"{where}.covariance", order, "state")
        low, high = RANGES["filter_covariance_mb2"]
        covariance = np.array(
            [
                numbers(r, f"{where}.covariance[{k}]", order, "state", low, high)
                for k, r in enumerate(rows)
            ]
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
