"""The SCADS Director's action scheduler (FAST 2011, §5.3 and §5.6).

* Long copies are split: the copy-duration model predicts each bin's copy time, and a
  copy or move of many bins becomes several of at most ``max_action_s`` each (§5.3).
* Concurrency: an action may start only if every bin keeps at least one replica on a
  ready server that no running copy involves (§5.6). The scheduler walks its list in
  order and starts everything that passes; it walks again when an action ends. A copy
  that cannot pass even with nothing else running (its source and target share a bin
  that has no third replica) runs alone once no copy runs: §5.6 executes the list to its
  end ("repeats this process with the remaining unscheduled actions"), one at a time
  where it must, so no action waits forever.
* Actions that run far past their prediction are cancelled (§5.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from geoslo.control.director.types import (
    Action,
    DirectorConfig,
    Plan,
    RunningAction,
    ServerState,
)
from geoslo.models import CopyDurationModel

__all__ = ["copy_duration_s", "split_long", "scheduled_actions", "runnable", "overdue"]


def copy_duration_s(
    action: Action,
    bin_bytes: np.ndarray,
    copy_model: CopyDurationModel,
    config: DirectorConfig,
    plan: Plan,
) -> float:
    """Predicted seconds for a copy or move, at the target's planned load (the copy
    mostly affects the target, §5.4); 0 for the other kinds."""
    if not action.copies_data:
        return 0.0
    size = float(np.sum(np.asarray(bin_bytes, dtype=float)[list(action.bins)]))
    target = action.target or ""
    get_rps, put_rps = plan.get_rps.get(target, 0.0), plan.put_rps.get(target, 0.0)
    return copy_model.duration_s(size, config.copy_rate_bytes_per_s, get_rps, put_rps)


def split_long(actions: Iterable[Action], duration_s, max_action_s: float) -> list[Action]:
    """Copies and moves cut into chunks of bins predicted to take ``max_action_s`` at most
    (a single bin that takes longer stays one action). ``duration_s(action)`` predicts."""
    out: list[Action] = []
    for action in actions:
        if not action.copies_data or len(action.bins) < 2:
            out.append(action)
            continue
        chunk: list[int] = []
        chunk_s = 0.0
        for b in action.bins:  # a copy's time is additive over its bins
            bin_s = duration_s(_with_bins(action, (b,)))
            if chunk and chunk_s + bin_s > max_action_s:
                out.append(_with_bins(action, tuple(chunk)))
                chunk, chunk_s = [], 0.0
            chunk.append(b)
            chunk_s += bin_s
        out.append(_with_bins(action, tuple(chunk)))
    return out


def scheduled_actions(
    plan: Plan, bin_bytes: np.ndarray, copy_model: CopyDurationModel, config: DirectorConfig
) -> list[tuple[Action, float]]:
    """The plan's actions with long copies split (§5.3), each with its predicted seconds
    (the copy-duration model at the target's planned load; 0 for non-copies)."""

    def predict(action: Action) -> float:
        return copy_duration_s(action, bin_bytes, copy_model, config, plan)

    actions = split_long(plan.actions, predict, config.max_action_s)
    return [(action, predict(action)) for action in actions]


def _with_bins(action: Action, bins: tuple[int, ...]) -> Action:
    return Action(action.kind, bins, action.source, action.target, action.server)


def runnable(
    pending: Sequence[Action], running: Sequence[RunningAction], servers: Sequence[ServerState]
) -> list[Action]:
    """The pending actions that may start now, in order (module docstring)."""
    by_name = {server.name: server for server in servers}
    holders: dict[int, list[str]] = {}
    for server in servers:
        for b in server.bins:
            holders.setdefault(b, []).append(server.name)
    busy = {name for r in running if r.action.copies_data for name in r.action.servers}
    if not _bins_keep_a_free_replica(busy, by_name, holders, busy):
        busy = set(by_name)  # a copy runs alone: no other copy starts beside it
    involved = {name for r in running for name in r.action.servers}
    chosen: list[Action] = []
    for action in pending:
        if not _can_start(action, by_name, involved):
            continue
        if action.copies_data:
            trial = busy | {action.source, action.target}
            if not _every_bin_has_a_free_replica(action, by_name, holders, trial):
                continue
            busy = trial
        involved |= set(action.servers)
        chosen.append(action)
    if busy or any(a.copies_data for a in chosen):
        return chosen
    alone = _first_copy_that_can_start(pending, by_name, involved)
    return chosen + ([alone] if alone is not None else [])


def _first_copy_that_can_start(
    pending: Sequence[Action], by_name: dict[str, ServerState], involved: set[str]
) -> Action | None:
    """With no copy running and none able to start beside others, the first copy whose
    servers are ready runs alone (§5.6: the list is executed to its end)."""
    for action in pending:
        if action.copies_data and _can_start(action, by_name, involved):
            return action
    return None


def _can_start(action: Action, by_name: dict[str, ServerState], involved: set[str]) -> bool:
    """Preconditions of each kind, ignoring the replica constraint."""
    if action.kind == "add-server":
        return True
    if action.kind == "remove-server":
        server = by_name.get(action.server or "")
        return server is not None and not server.bins and action.server not in involved
    if action.kind == "delete-replica":
        return action.server in by_name and action.server not in involved
    source, target = by_name.get(action.source or ""), by_name.get(action.target or "")
    if source is None or target is None or not (source.ready and target.ready):
        return False
    return set(action.bins) <= set(source.bins)


def _every_bin_has_a_free_replica(
    action: Action,
    by_name: dict[str, ServerState],
    holders: dict[int, list[str]],
    busy: set[str],
) -> bool:
    """Each bin on the action's servers keeps a replica on a ready server outside ``busy``
    (bins with a single replica are exempt: they have no other)."""
    return _bins_keep_a_free_replica(
        {action.source or "", action.target or ""}, by_name, holders, busy
    )


def _bins_keep_a_free_replica(
    names: set[str],
    by_name: dict[str, ServerState],
    holders: dict[int, list[str]],
    busy: set[str],
) -> bool:
    """Each bin on the servers ``names`` keeps a replica on a ready server outside
    ``busy`` (bins with a single replica are exempt)."""
    for name in names:
        for b in by_name[name].bins if name in by_name else ():
            copies = holders.get(b, [])
            if len(copies) < 2:
                continue
            if not any(c not in busy and by_name[c].ready for c in copies):
                return False
    return True


def overdue(running: Iterable[RunningAction], now_s: float, config: DirectorConfig) -> list:
    """Copies running ``cancel_factor`` times longer than predicted, and at least a period."""
    late = []
    for item in running:
        if not item.action.copies_data:
            continue
        allowed = max(config.cancel_factor * item.predicted_s, config.period_s)
        if now_s - item.started_s > allowed:
            late.append(item.action)
    return late
