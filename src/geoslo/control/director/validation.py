"""The state.json and actions.json contract of ``geoslo director decide`` (FAST 2011, §5).

state.json carries what one controller iteration (§5.3) reads: the servers with the bins
they hold, the smoothed per-bin workload (§5.5) and sizes, the steady-state and
copy-duration models (§5.4) and the controller's parameters (§5.7). actions.json is the
plan: the ordered actions, long copies split by the copy-duration model (§5.3), each
with its predicted duration, and every server's predicted load after them.

Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path (``servers[3].bins[7]``, ``bins.get_rps[12]``). Every number has a range and every
list a length bound (the tables below, docs/director.md "Ranges"), so that whatever passes
is decided in bounded time and memory. Schema: docs/director.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from geoslo._json import (
    as_list,
    boolean,
    check_keys,
    fraction,
    integer,
    number,
    numbers,
    string,
)
from geoslo.control.director.decide import work_capacity
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
    "CONFIG_RANGES",
    "MAX_SERVERS",
    "MAX_BINS",
    "MAX_PLACEMENTS",
]

_TOP_KEYS = {"servers", "bins", "model", "config"}
_SERVER_KEYS = {"name", "bins", "ready"}
_BIN_KEYS = {"get_rps", "put_rps", "bytes"}
_MODEL_KEYS = {"steady_state", "copy_duration"}
_STEADY_KEYS = {"intercept", "get_coefficient", "put_coefficient", "threshold"}
_COPY_KEYS = {"coefficients", "min_factor"}
_COPY_TERMS = 7  # [1, r, r^2, g, g^2, p, p^2] (§5.4)

# Counts (ours): twice the 1,000 servers and 10,000 bins the decision is benchmarked at,
# so that the slowest accepted state is decided in seconds (docs/director.md, "Ranges").
MAX_SERVERS = 2_000
MAX_BINS = 20_000
MAX_PLACEMENTS = 10 * MAX_BINS  # entries of all servers' bins lists: 10 replicas a bin
MAX_NAME_CHARS = 100

# Per bin: more than a whole cluster of MAX_SERVERS serves, and more than a server stores.
MAX_BIN_RPS = 1e8
MAX_BIN_BYTES = 1e13
# The logistic model (§5.4): e^700 is near the largest float, so P(violation) stays finite
# at any load; a coefficient of 1,000 logits per req/s is beyond any fitted server.
INTERCEPT_RANGE = (-700.0, 700.0)
COEFFICIENT_RANGE = (0.0, 1e3)
# The copy-rate regression: every term stays finite at the largest rates and loads.
COPY_COEFFICIENT_RANGE = (-1e6, 1e6)
MIN_FACTOR_RANGE = (1e-3, 1.0)  # a copy runs at 0.1% of the specified rate at worst

# [low, high] of every DirectorConfig field (DirectorConfig refuses the open ends);
# the reason for each is in docs/director.md's parameters table.
CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "period_s": (0.1, 86_400.0),  # up to one decision a day
    "alpha_up": (0.0, 1.0),
    "alpha_down": (0.0, 1.0),
    "standbys": (0, 100),
    "overprovisioning": (0.0, 10.0),  # the paper uses 0.1 and 0.3
    "copy_rate_bytes_per_s": (1e3, 1e11),  # 1 kB/s to 100 GB/s (an 800 Gb/s NIC)
    "replicas": (1, 5),
    "read_fanout": (1, 5),
    "max_action_s": (0.1, 86_400.0),
    "cancel_factor": (1.0, 1_000.0),
    "coalesce_below": (0.0, 1.0),
    "charge_interval_s": (1.0, 31_536_000.0),  # per-second billing to a year; null: none
    "max_servers_added": (0, 10_000),
    "max_servers": (1, 100_000),
}


# ---------------------------------------------------------------------------- parse


def _at_most(value: Any, name: str, most: int, what: str) -> list:
    """A JSON list of at most ``most`` entries (``what`` names them)."""
    items = as_list(value, name)
    if len(items) > most:
        raise InputError(name, f"has {len(items)} {what}; at most {most} are accepted")
    return items


def _bins(value: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columnar per-bin arrays of equal length: get and put req/s and size in bytes."""
    check_keys(value, _BIN_KEYS, _BIN_KEYS, "bins")
    count = len(_at_most(value["get_rps"], "bins.get_rps", MAX_BINS, "bins"))
    each = "bin, as bins.get_rps"
    get_rps = numbers(value["get_rps"], "bins.get_rps", low=0.0, high=MAX_BIN_RPS)
    put_rps = numbers(value["put_rps"], "bins.put_rps", count, each, 0.0, MAX_BIN_RPS)
    size_bytes = numbers(value["bytes"], "bins.bytes", count, each, 0.0, MAX_BIN_BYTES)
    return get_rps, put_rps, size_bytes


def _server_bins(value: Any, where: str, bins: int) -> tuple[int, ...]:
    """Bin indices in [0, bins), each at most once on one server."""
    seen: dict[int, int] = {}
    for j, item in enumerate(as_list(value, where)):
        path = f"{where}[{j}]"
        x = number(item, path)
        if not 0 <= x < bins:
            problem = f"bin {x:g} is out of range: there are {bins} bins, in [0, {bins - 1}]"
            raise InputError(path, problem)
        b = integer(x, path)
        if b in seen:
            raise InputError(path, f"bin {b} is already {where}[{seen[b]}]")
        seen[b] = j
    return tuple(seen)


def _server(value: Any, where: str, bins: int) -> ServerState:
    check_keys(value, _SERVER_KEYS, {"name", "bins"}, where)
    ready = boolean(value["ready"], f"{where}.ready") if "ready" in value else True
    name = string(value["name"], f"{where}.name")
    if len(name) > MAX_NAME_CHARS:
        raise InputError(f"{where}.name", f"has {len(name)} characters; at most {MAX_NAME_CHARS}")
    return ServerState(
        name=name,
        bins=_server_bins(value["bins"], f"{where}.bins", bins),
        ready=ready,
    )


def _servers(value: Any, bins: int) -> tuple[ServerState, ...]:
    """Servers with unique names, listing at most ``MAX_PLACEMENTS`` replicas in all."""
    seen: dict[str, int] = {}
    out = []
    placements = 0
    for k, item in enumerate(_at_most(value, "servers", MAX_SERVERS, "servers")):
        where = f"servers[{k}]"
        if isinstance(item, dict) and isinstance(item.get("bins"), list):
            placements += len(item["bins"])  # counted before the entries are read
            if placements > MAX_PLACEMENTS:
                problem = f"brings the replicas listed to {placements}; at most {MAX_PLACEMENTS}"
                raise InputError(f"{where}.bins", problem)
        server = _server(item, where, bins)
        if server.name in seen:
            raise InputError(
                f"{where}.name", f"{server.name!r} is already servers[{seen[server.name]}]"
            )
        seen[server.name] = k
        out.append(server)
    return tuple(out)


def _steady_state(value: Any) -> SteadyStateModel:
    """The logistic model (§5.4); its boundary must leave room for some load."""
    where = "model.steady_state"
    check_keys(value, _STEADY_KEYS, _STEADY_KEYS - {"threshold"}, where)
    get = number(value["get_coefficient"], f"{where}.get_coefficient", *COEFFICIENT_RANGE)
    put = number(value["put_coefficient"], f"{where}.put_coefficient", *COEFFICIENT_RANGE)
    if get <= 0:
        raise InputError(f"{where}.get_coefficient", f"must be > 0 (gets add load), not {get}")
    threshold = fraction(value.get("threshold", 0.5), f"{where}.threshold")
    if not 0.0 < threshold < 1.0:
        raise InputError(f"{where}.threshold", f"must be in (0, 1), not {threshold}")
    intercept = number(value["intercept"], f"{where}.intercept", *INTERCEPT_RANGE)
    model = SteadyStateModel(intercept, get, put, threshold)
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
    terms = "term [1, r, r^2, g, g^2, p, p^2]"
    coefficients = numbers(value["coefficients"], path, _COPY_TERMS, terms, *COPY_COEFFICIENT_RANGE)
    min_factor = number(value.get("min_factor", 0.05), f"{where}.min_factor", *MIN_FACTOR_RANGE)
    return CopyDurationModel(tuple(float(c) for c in coefficients), min_factor)


def _model(value: Any) -> tuple[SteadyStateModel, CopyDurationModel]:
    check_keys(value, _MODEL_KEYS, _MODEL_KEYS, "model")
    return _steady_state(value["steady_state"]), _copy_duration(value["copy_duration"])


def _config(value: Any) -> DirectorConfig:
    """Each field optional, read by the type of its default (int or float) within its
    range (``CONFIG_RANGES``); ``charge_interval_s`` may be null (release at once)."""
    names = [f.name for f in dataclasses.fields(DirectorConfig)]
    check_keys(value, set(names), set(), "config")
    defaults = DirectorConfig()
    kwargs: dict[str, Any] = {}
    for key in names:
        if key not in value:
            continue
        path, (low, high) = f"config.{key}", CONFIG_RANGES[key]
        if key == "charge_interval_s" and value[key] is None:
            kwargs[key] = None
        elif isinstance(getattr(defaults, key), int):  # the range first: 1e308 prints short
            kwargs[key] = integer(number(value[key], path, low, high), path)
        else:
            kwargs[key] = number(value[key], path, low, high)
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
    """The actions.json form of a plan for ``state`` (docs/director.md): the outcome's
    ``status``, ``solver_status``, ``objective`` (servers after the plan) and
    ``decide_ms`` first, then the actions and the servers after them."""
    actions = [
        {**action.to_dict(), "predicted_duration_s": float(seconds)}
        for action, seconds in scheduled_actions(plan, state.bin_bytes, copy_model, config)
    ]
    servers = [_server_after(plan, s) for s in plan.servers]
    lost = np.flatnonzero(state.replica_counts() == 0)
    return {
        **plan.outcome.to_dict(),
        "actions": actions,
        "servers": servers,
        "threshold": float(model.threshold),
        "all_meet_slo": all(s["violation_probability"] < model.threshold for s in servers),
        "limited_by": None if plan.limited_by is None else f"config.{plan.limited_by}",
        "moved_bytes": float(plan.moved_bytes),
        "unplaced_bins": [int(b) for b in lost],
    }
