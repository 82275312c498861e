"""The state.json and actions.json contract of ``geoslo director decide`` (FAST 2011, §5).

state.json carries what one controller iteration (§5.3) reads: the servers with the bins
they hold, the smoothed per-bin workload (§5.5) and sizes, the steady-state and
copy-duration models (§5.4) and the controller's parameters (§5.7). actions.json is the
plan: the ordered actions, long copies split by the copy-duration model (§5.3), each
with its predicted duration, and every server's predicted load after them.

Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path (``servers[3].bins[7]``, ``bins.get_rps[12]``). Schema: docs/director.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from geoslo._json import (
    as_list,
    boolean,
    check_keys,
    check_non_negative,
    fraction,
    integer,
    number,
    numbers,
    string,
)
from geoslo.control.director.controller import work_capacity
from geoslo.control.director.scheduler import scheduled_actions
from geoslo.control.director.types import (
    ClusterState,
    DirectorConfig,
    Plan,
    ServerState,
)
from geoslo.errors import InputError
from geoslo.models import CopyDurationModel, SteadyStateModel

__all__ = [
    "parse_state",
    "state_to_dict",
    "plan_to_dict",
]

_TOP_KEYS = {"servers", "bins", "model", "config"}
_SERVER_KEYS = {"name", "bins", "ready"}
_BIN_KEYS = {"get_rps", "put_rps", "bytes"}
_MODEL_KEYS = {"steady_state", "copy_duration"}
_STEADY_KEYS = {"intercept", "get_coefficient", "put_coefficient", "threshold"}
_COPY_KEYS = {"coefficients", "min_factor"}
_COPY_TERMS = 7  # [1, r, r^2, g, g^2, p, p^2] (§5.4)


# ---------------------------------------------------------------------------- parse


def _bins(value: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columnar per-bin arrays of equal length: get and put req/s and size in bytes."""
    check_keys(value, _BIN_KEYS, _BIN_KEYS, "bins")
    get_rps = check_non_negative(numbers(value["get_rps"], "bins.get_rps"), "bins.get_rps")
    count = len(get_rps)
    put_rps = numbers(value["put_rps"], "bins.put_rps", count, "bin, as bins.get_rps")
    size_bytes = numbers(value["bytes"], "bins.bytes", count, "bin, as bins.get_rps")
    check_non_negative(put_rps, "bins.put_rps")
    check_non_negative(size_bytes, "bins.bytes")
    return get_rps, put_rps, size_bytes


def _server_bins(value: Any, where: str, bins: int) -> tuple[int, ...]:
    """Bin indices in [0, bins), each at most once on one server."""
    seen: dict[int, int] = {}
    for j, item in enumerate(as_list(value, where)):
        path = f"{where}[{j}]"
        b = integer(item, path, 0)
        if b >= bins:
            problem = f"bin {b} is out of range: there are {bins} bins (0..{bins - 1})"
            raise InputError(path, problem)
        if b in seen:
            raise InputError(path, f"bin {b} is already {where}[{seen[b]}]")
        seen[b] = j
    return tuple(seen)


def _server(value: Any, where: str, bins: int) -> ServerState:
    check_keys(value, _SERVER_KEYS, {"name", "bins"}, where)
    ready = boolean(value["ready"], f"{where}.ready") if "ready" in value else True
    return ServerState(
        name=string(value["name"], f"{where}.name"),
        bins=_server_bins(value["bins"], f"{where}.bins", bins),
        ready=ready,
    )


def _servers(value: Any, bins: int) -> tuple[ServerState, ...]:
    """Servers with unique names."""
    seen: dict[str, int] = {}
    out = []
    for k, item in enumerate(as_list(value, "servers")):
        server = _server(item, f"servers[{k}]", bins)
        if server.name in seen:
            raise InputError(
                f"servers[{k}].name", f"{server.name!r} is already servers[{seen[server.name]}]"
            )
        seen[server.name] = k
        out.append(server)
    return tuple(out)


def _steady_state(value: Any) -> SteadyStateModel:
    """The logistic model (§5.4); its boundary must leave room for some load."""
    where = "model.steady_state"
    check_keys(value, _STEADY_KEYS, _STEADY_KEYS - {"threshold"}, where)
    get = number(value["get_coefficient"], f"{where}.get_coefficient")
    put = number(value["put_coefficient"], f"{where}.put_coefficient")
    if get <= 0:
        raise InputError(f"{where}.get_coefficient", f"must be > 0 (gets add load), not {get}")
    if put < 0:
        raise InputError(f"{where}.put_coefficient", f"must be >= 0, not {put}")
    threshold = fraction(value.get("threshold", 0.5), f"{where}.threshold")
    if not 0.0 < threshold < 1.0:
        raise InputError(f"{where}.threshold", f"must be in (0, 1), not {threshold}")
    model = SteadyStateModel(number(value["intercept"], f"{where}.intercept"), get, put, threshold)
    try:
        work_capacity(model)
    except InputError as error:
        raise InputError(where, f"{error.problem} (intercept >= logit(threshold))") from None
    return model


def _copy_duration(value: Any) -> CopyDurationModel:
    """The copy-rate factor's linear regression (§5.4)."""
    where = "model.copy_duration"
    check_keys(value, _COPY_KEYS, {"coefficients"}, where)
    path = f"{where}.coefficients"
    coefficients = numbers(
        value["coefficients"], path, _COPY_TERMS, "term [1, r, r^2, g, g^2, p, p^2]"
    )
    min_factor = fraction(value.get("min_factor", 0.05), f"{where}.min_factor")
    if min_factor <= 0:
        raise InputError(f"{where}.min_factor", "must be > 0 (a copy always progresses)")
    return CopyDurationModel(tuple(float(c) for c in coefficients), min_factor)


def _model(value: Any) -> tuple[SteadyStateModel, CopyDurationModel]:
    check_keys(value, _MODEL_KEYS, _MODEL_KEYS, "model")
    return _steady_state(value["steady_state"]), _copy_duration(value["copy_duration"])


def _config(value: Any) -> DirectorConfig:
    """Each field optional, read by the type of its default (int or float)."""
    names = [f.name for f in dataclasses.fields(DirectorConfig)]
    check_keys(value, set(names), set(), "config")
    defaults = DirectorConfig()
    kwargs: dict[str, Any] = {}
    for key in names:
        if key in value:
            path = f"config.{key}"
            is_int = isinstance(getattr(defaults, key), int)
            kwargs[key] = integer(value[key], path) if is_int else number(value[key], path)
    try:
        return DirectorConfig(**kwargs)
    except InputError as error:
        raise InputError(f"config.{error.field}", error.problem) from None


def parse_state(
    data: dict,
) -> tuple[ClusterState, SteadyStateModel, CopyDurationModel, DirectorConfig]:
    """A checked cluster state, both models and the config from state.json
    (docs/director.md). A bin that no server holds is accepted (every replica was lost:
    the controller cannot copy it) and reported by :func:`plan_to_dict`."""
    check_keys(data, _TOP_KEYS, {"servers", "bins", "model"}, "")
    get_rps, put_rps, size_bytes = _bins(data["bins"])
    servers = _servers(data["servers"], len(get_rps))
    model, copy_model = _model(data["model"])
    config = _config(data["config"]) if "config" in data else DirectorConfig()
    return ClusterState(servers, get_rps, put_rps, size_bytes), model, copy_model, config


# ---------------------------------------------------------------------------- write


def _floats(values: np.ndarray) -> list[float]:
    return np.asarray(values, dtype=float).tolist()


def state_to_dict(
    state: ClusterState,
    model: SteadyStateModel,
    copy_model: CopyDurationModel,
    config: DirectorConfig,
) -> dict:
    """The state.json form (``parse_state`` reads it back unchanged)."""
    return {
        "servers": [
            {"name": s.name, "bins": [int(b) for b in s.bins], "ready": bool(s.ready)}
            for s in state.servers
        ],
        "bins": {
            "get_rps": _floats(state.get_rps),
            "put_rps": _floats(state.put_rps),
            "bytes": _floats(state.bin_bytes),
        },
        "model": {"steady_state": model.to_dict(), "copy_duration": copy_model.to_dict()},
        "config": dataclasses.asdict(config),
    }


def _server_after(plan: Plan, server: ServerState) -> dict:
    return {
        "name": server.name,
        "bins": [int(b) for b in server.bins],
        "ready": bool(server.ready),
        "get_rps": float(plan.get_rps[server.name]),
        "put_rps": float(plan.put_rps[server.name]),
        "violation_probability": float(plan.violation_probability[server.name]),
    }


def plan_to_dict(
    plan: Plan,
    state: ClusterState,
    model: SteadyStateModel,
    copy_model: CopyDurationModel,
    config: DirectorConfig,
) -> dict:
    """The actions.json form of a plan for ``state`` (docs/director.md)."""
    actions = [
        {**action.to_dict(), "predicted_duration_s": float(seconds)}
        for action, seconds in scheduled_actions(plan, state.bin_bytes, copy_model, config)
    ]
    servers = [_server_after(plan, s) for s in plan.servers]
    lost = np.flatnonzero(state.replica_counts() == 0)
    return {
        "actions": actions,
        "servers": servers,
        "threshold": float(model.threshold),
        "all_meet_slo": all(s["violation_probability"] < model.threshold for s in servers),
        "limited_by": None if plan.limited_by is None else f"config.{plan.limited_by}",
        "moved_bytes": float(plan.moved_bytes),
        "unplaced_bins": [int(b) for b in lost],
    }
