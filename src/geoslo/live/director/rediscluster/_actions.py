"""The Director's view of a Redis Cluster and its actions as cluster operations (FAST 2011
§5.3, §5.6; docs/director-live.md, "The Director on Redis Cluster: the mapping").

Pure functions, no I/O: a bin is ``SLOTS_PER_BIN`` contiguous hash slots; a master holds
the bins of which it serves most slots; a Redis replica holds its master's bins (it is a
read replica of them, through ``READONLY``). A ``move`` is a migration of the bins' slots
that its source serves; a ``copy`` is ``CLUSTER REPLICATE`` of a source that holds exactly
the copied bins (a hot bin isolated on its own master, §6.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from geoslo.control.director.types import Action, DirectorConfig, ServerState
from geoslo.errors import ConfigError
from geoslo.live.director.rediscluster._engine import SLOTS, SLOTS_PER_BIN, ClusterNode
from geoslo.models import SteadyStateModel

__all__ = [
    "BINS",
    "bin_owners",
    "check_director_config",
    "copy_refusal",
    "overpacked_moves",
    "migration_slots",
    "node_name",
    "server_states",
    "slot_ranges_of",
    "slots_of_bins",
]

BINS = SLOTS // SLOTS_PER_BIN


def check_director_config(config: DirectorConfig) -> None:
    """Refuse what Redis Cluster cannot do: a bin lives on one master (``replicas = 1``)
    and a get goes to one node (``read_fanout = 1``); extra copies of hot bins are Redis
    replicas of a master holding only them (``copy``)."""
    if config.replicas != 1:
        raise ConfigError(
            "controller.replicas",
            "must be 1 on Redis Cluster: Redis replicates whole masters, not bins, so a bin "
            f"has one owner (got {config.replicas}); hot bins still get extra copies as "
            "replicas of a master that holds only them (docs/director-live.md)",
        )
    if config.read_fanout != 1:
        raise ConfigError(
            "controller.read_fanout",
            f"must be 1 on Redis Cluster: a get goes to one node (got {config.read_fanout})",
        )


def slots_of_bins(bins: Iterable[int]) -> list[int]:
    """The hash slots of ``bins``, ascending."""
    slots: list[int] = []
    for b in sorted(set(bins)):
        if not 0 <= b < BINS:
            raise ConfigError("bin", f"must be in [0, {BINS}), got {b}")
        slots.extend(range(b * SLOTS_PER_BIN, (b + 1) * SLOTS_PER_BIN))
    return slots


def slot_ranges_of(slots: Iterable[int]) -> list[tuple[int, int]]:
    """Inclusive ranges of consecutive slots (what a dry run prints)."""
    ranges: list[tuple[int, int]] = []
    for slot in sorted(set(slots)):
        if ranges and ranges[-1][1] == slot - 1:
            ranges[-1] = (ranges[-1][0], slot)
        else:
            ranges.append((slot, slot))
    return ranges


def _slots_of(node: ClusterNode) -> set[int]:
    return {s for lo, hi in node.slots for s in range(lo, hi + 1)}


def bin_owners(masters: Sequence[ClusterNode]) -> dict[str, tuple[int, ...]]:
    """Each master's bins: those of which it serves the most slots (a bin split by a
    crash or a migration in progress belongs to the node serving most of it; ties to the
    lower node id). Masters without slots hold no bins."""
    counts: dict[int, dict[str, int]] = {}
    for node in masters:
        for slot in _slots_of(node):
            per_node = counts.setdefault(slot // SLOTS_PER_BIN, {})
            per_node[node.node_id] = per_node.get(node.node_id, 0) + 1
    owned: dict[str, list[int]] = {node.node_id: [] for node in masters}
    for b, per_node in sorted(counts.items()):
        owner = min(per_node, key=lambda node_id: (-per_node[node_id], node_id))
        owned[owner].append(b)
    return {node_id: tuple(bins) for node_id, bins in owned.items()}


def node_name(node: ClusterNode, names: Mapping[str, str]) -> str:
    """The Director's name of a node: its given name (a testbed's ``node-3``, an added
    server's ``server-7``), else ``host:port``."""
    return names.get(node.node_id) or f"{node.host}:{node.port}"


def _usable(node: ClusterNode) -> bool:
    return not node.failed and "noaddr" not in node.flags


def server_states(
    view: Sequence[ClusterNode],
    names: Mapping[str, str],
    hidden: Iterable[str] = (),
    booting: Iterable[str] = (),
) -> tuple[ServerState, ...]:
    """The Director's servers: every usable master with its bins, every replica with its
    master's bins (it serves them to ``READONLY`` reads), then the ``booting`` names (not
    ready, empty). Nodes whose id is in ``hidden`` (being removed) are left out."""
    hidden = set(hidden)
    masters = [n for n in view if n.is_master and _usable(n)]
    owned = bin_owners(masters)
    servers = []
    for node in sorted(view, key=lambda n: node_name(n, names)):
        if node.node_id in hidden or not _usable(node):
            continue
        if node.is_master:
            bins = owned.get(node.node_id, ())
        else:
            bins = owned.get(node.master_id or "", ())
        servers.append(ServerState(node_name(node, names), bins, True))
    servers += [ServerState(name, (), False) for name in booting]
    return tuple(servers)


def migration_slots(action: Action, source: ClusterNode) -> list[int]:
    """The slots a ``move`` migrates: those of its bins that its source serves."""
    held = _slots_of(source)
    return [s for s in slots_of_bins(action.bins) if s in held]


def copy_refusal(
    action: Action, source_master: ClusterNode | None, target: ClusterNode | None, view
) -> str:
    """Why a ``copy`` cannot be a ``CLUSTER REPLICATE`` of ``target`` to the master
    holding the bins ("" if it can): the master must hold exactly the copied bins (a
    Redis replica copies all of its master), the target must be an empty master."""
    if source_master is None:
        return f"copy: source {action.source} is not a usable node"
    if target is None:
        return f"copy: target {action.target} is not a usable node"
    masters = [n for n in view if n.is_master and _usable(n)]
    held = set(bin_owners(masters).get(source_master.node_id, ()))
    if held != set(action.bins):
        return (
            f"copy: {action.source} holds bins {sorted(held)}; a Redis replica copies a whole "
            f"master, so only a master holding exactly {sorted(action.bins)} can be copied"
        )
    if not target.is_master or target.slots:
        return f"copy: target {action.target} must be an empty master (a standby)"
    if any(n.master_id == target.node_id for n in view):
        return f"copy: target {action.target} has replicas of its own"
    return ""


def overpacked_moves(
    moves: Sequence[Action],
    servers: Sequence[ServerState],
    get_rps: np.ndarray,
    put_rps: np.ndarray,
    model: SteadyStateModel,
) -> dict[Action, str]:
    """The moves to refuse, with why: taken in order on the layout ``servers``, a move is
    refused when its target would then carry more observed load (``get_rps``,
    ``put_rps`` per bin, every request of a bin on its one master) than the steady-state
    model lets a server carry and meet the SLO (§5.4: P(violation) below its threshold).
    A move onto a target the observed load already overloads is refused too. A target
    left holding one bin is never refused: a bin too hot for any server alone is moved
    alone to an empty one and copied there (§6.2; Redis replicas split its reads). The
    Director's own plan stays within the model on its smoothed rates; this holds an
    applied plan to the rates the cluster last served, whatever the plan saw."""
    held = {s.name: set(s.bins) for s in servers}
    get_rps, put_rps = np.asarray(get_rps, float), np.asarray(put_rps, float)

    def violation(bins: set[int]) -> float:
        index = sorted(bins)
        return float(model.violation_probability(get_rps[index].sum(), put_rps[index].sum()))

    refused: dict[Action, str] = {}
    for move in moves:
        target = held.setdefault(move.target or "", set())
        after = target | set(move.bins)
        p = violation(after)
        if p >= model.threshold and len(after) > 1:
            load = sorted(after)
            refused[move] = (
                f"move refused: {move.target} would serve {get_rps[load].sum():.0f} gets/s "
                f"and {put_rps[load].sum():.0f} puts/s observed, P(violation) {p:.2f} >= "
                f"{model.threshold} (the steady-state model)"
            )
            continue
        target |= set(move.bins)
        held.setdefault(move.source or "", set()).difference_update(move.bins)
    return refused
