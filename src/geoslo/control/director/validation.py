"""The state.json and actions.json contract of ``geoslo director decide`` (FAST 2011, §5).

state.json carries what one controller iteration (§5.3) reads: the servers with the bins
they hold, the smoothed per-bin workload (§5.5) and sizes, the steady-state and
copy-duration models (§5.4) and the controller's parameters (§5.7). actions.json is the
plan: the ordered actions, long copies split by the copy-duration model (§5.3), each
with its predicted duration, and every server's predicted load after them.

Every bad input raises :class:`~geoslo.errors.InputError` naming the field by its JSON
path (``servers[3].bins[7]``, ``bins.get_rps[12]``). The structure, types and ranges are
the pydantic models of ``_schema.py`` (every number has a range and every list a length
bound, docs/director.md "Ranges", so that whatever passes is decided in bounded time and
memory); the checks across fields are here. Schema: ``geoslo director schema``,
docs/director.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from geoslo._schema import validate
from geoslo.control.director import _schema as schema
from geoslo.control.director._schema import (
    CONFIG_RANGES,
    MAX_BIN_BYTES,
    MAX_BIN_RPS,
    MAX_BINS,
    MAX_NAME_CHARS,
    MAX_PLACEMENTS,
    MAX_SERVERS,
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
    "MAX_NAME_CHARS",
    "MAX_BIN_RPS",
    "MAX_BIN_BYTES",
]


# ---------------------------------------------------------------------------- parse


def _bins(value: schema.Bins) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columnar per-bin arrays of equal length: get and put req/s and size in bytes."""
    count = len(value.get_rps)
    for key in ("put_rps", "bytes"):
        given = len(getattr(value, key))
        if given != count:
            problem = f"must have {count} entries (one per bin, as bins.get_rps), has {given}"
            raise InputError(f"bins.{key}", problem)
    return tuple(np.array(getattr(value, k), dtype=float) for k in ("get_rps", "put_rps", "bytes"))


def _server_bins(value: list[int], where: str, bins: int) -> tuple[int, ...]:
    """Bin indices in [0, bins), each at most once on one server."""
    seen: dict[int, int] = {}
    for j, b in enumerate(value):
        if b >= bins:
            problem = f"bin {b} is out of range: there are {bins} bins, in [0, {bins - 1}]"
            raise InputError(f"{where}[{j}]", problem)
        if b in seen:
            raise InputError(f"{where}[{j}]", f"bin {b} is already {where}[{seen[b]}]")
        seen[b] = j
    return tuple(seen)


def _servers(value: list[schema.Server], bins: int) -> tuple[ServerState, ...]:
    """Servers with unique names, listing at most ``MAX_PLACEMENTS`` replicas in all."""
    seen: dict[str, int] = {}
    out = []
    placements = 0
    for k, server in enumerate(value):
        where = f"servers[{k}]"
        placements += len(server.bins)
        if placements > MAX_PLACEMENTS:
            problem = f"brings the replicas listed to {placements}; at most {MAX_PLACEMENTS}"
            raise InputError(f"{where}.bins", problem)
        if server.name in seen:
            raise InputError(
                f"{where}.name", f"{server.name!r} is already servers[{seen[server.name]}]"
            )
        seen[server.name] = k
        held = _server_bins(server.bins, f"{where}.bins", bins)
        out.append(ServerState(name=server.name, bins=held, ready=server.ready))
    return tuple(out)


def _steady_state(value: schema.SteadyState) -> SteadyStateModel:
    """The logistic model (§5.4); its boundary must leave room for some load."""
    model = SteadyStateModel(
        value.intercept, value.get_coefficient, value.put_coefficient, value.threshold
    )
    try:
        work_capacity(model)
    except InputError as error:
        problem = f"{error.problem} (intercept >= logit(threshold))"
        raise InputError("model.steady_state", problem) from None
    return model


def _config(value: schema.Config) -> DirectorConfig:
    """The config's fields across one another (``read_fanout <= replicas``)."""
    try:
        return DirectorConfig(**value.model_dump())
    except InputError as error:
        raise InputError(f"config.{error.field}", error.problem) from None


def parse_state(
    data: dict,
) -> tuple[ClusterState, SteadyStateModel, CopyDurationModel, DirectorConfig]:
    """A checked cluster state, both models and the config from state.json
    (docs/director.md): the model's checks (``_schema.StateInput``), then the lists'
    lengths, the bins' indices, the names and the config across fields. A bin that no
    server holds is accepted (every replica was lost: the controller cannot copy it) and
    reported by :func:`plan_to_dict`."""
    state = validate(schema.StateInput, data, root="state")
    get_rps, put_rps, size_bytes = _bins(state.bins)
    servers = _servers(state.servers, len(get_rps))
    model = _steady_state(state.model.steady_state)
    given = state.model.copy_duration
    copy_model = CopyDurationModel(tuple(given.coefficients), given.min_factor)
    config = _config(state.config)
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
