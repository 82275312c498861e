"""The SCADS Director's controller (FAST 2011, §5.3, Algorithm 1): a pure function from the
cluster's layout and smoothed per-bin workload to an ordered list of actions.

The steady-state model is a logistic regression, so "server s meets the SLO" is the linear
condition ``b_get * get + b_put * put < boundary`` (§5.4). Each replica of a bin therefore
has a scalar *work* in the model's units and each server a capacity, ``boundary``:
best-fit placement is one-dimensional and runs on a sorted list with bisection, which
keeps a decision for 1,000 servers and 10,000 bins well under a second.

Steps, in order (§5.3):

1. Restore bins that lost replicas (below ``replicas``) by copying them.
2. Hot bins: a bin whose replica would not fit an empty server gets as many replicas as
   its gets need, each on a dedicated (empty) server; replicas no longer needed go.
3. Overloaded servers: move their hottest bins, best fit, to the most loaded server that
   can take them, or to an empty server.
4. Coalesce: empty the least loaded underloaded servers (under ``coalesce_below`` of the
   boundary) into servers that stay underloaded with them, best fit; a server is emptied
   only if all its bins find a place (moving only some would shuffle data without
   freeing a server). The gap between ``coalesce_below`` and the boundary is the
   hysteresis that keeps a coalesced server from being overloaded by the next uptick.
5. Add and remove servers so that exactly ``standbys`` empty servers remain.

A plan adds at most ``max_servers_added`` servers and leaves at most ``max_servers``
leased (ours: a cluster cannot usefully grow by orders of magnitude in one period). A
step that needs a server beyond that bound is skipped, the plan names the bound in
``limited_by``, and the servers it could not relieve stay over the SLO: so a decision
takes bounded time whatever the model says.

The plan's outcome (the one status vocabulary): ``feasible`` when every server's predicted
violation probability is below the threshold and no bin lost every replica (a greedy
search, not proven optimal), else ``infeasible`` with the best effort found; the solver
status is ``greedy`` or the bound that limited the plan; the objective is the servers
leased after the plan.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from geoslo.control import Outcome
from geoslo.control.director.types import (
    Action,
    ClusterState,
    DirectorConfig,
    Plan,
    ServerState,
    replica_loads,
)
from geoslo.errors import InputError
from geoslo.models import SteadyStateModel

__all__ = ["decide", "plan_outcome", "work_capacity", "replicas_needed", "MAX_REPLICAS"]

MAX_REPLICAS = 64  # a bin needing more replicas is capped here (its puts alone overload)


def work_capacity(model: SteadyStateModel) -> float:
    """The model's boundary ``logit(threshold) - intercept``: a server meets the SLO while
    ``b_get * get_rps + b_put * put_rps`` stays below it."""
    if model.get_coefficient <= 0 or model.put_coefficient < 0:
        raise InputError("model", "needs get_coefficient > 0 and put_coefficient >= 0")
    boundary = math.log(model.threshold / (1.0 - model.threshold)) - model.intercept
    if boundary <= 0:
        raise InputError("model", "predicts a violation even with no load")
    return boundary


def replicas_needed(
    get_rps: np.ndarray,
    put_rps: np.ndarray,
    model: SteadyStateModel,
    config: DirectorConfig,
    capacity: float,
) -> np.ndarray:
    """Per bin, the fewest replicas (at least ``config.replicas``, at most
    ``MAX_REPLICAS``) whose share of the bin's work stays below ``capacity``: a replica
    carries ``get * fanout / n`` gets and every put, so ``n > b_get * get * fanout /
    (capacity - b_put * put)``."""
    room = np.maximum(capacity - model.put_coefficient * np.asarray(put_rps, float), 1e-12)
    share = model.get_coefficient * np.asarray(get_rps, float) * config.read_fanout / room
    needed = np.floor(np.minimum(share, MAX_REPLICAS)).astype(np.int64) + 1  # no overflow
    return np.clip(needed, config.replicas, MAX_REPLICAS)


def decide(state: ClusterState, model: SteadyStateModel, config: DirectorConfig) -> Plan:
    """One controller iteration (module docstring)."""
    started = time.perf_counter()
    layout = _Layout(state, model, config)
    layout.restore_replicas()
    layout.fix_hot_bins()
    layout.fix_overloaded()
    layout.coalesce()
    layout.keep_standbys()
    plan = layout.plan()
    decide_ms = (time.perf_counter() - started) * 1e3
    return dataclasses.replace(plan, outcome=dataclasses.replace(plan.outcome, decide_ms=decide_ms))


def plan_outcome(plan: Plan, threshold: float, lost_bins: int) -> Outcome:
    """The plan's status (module docstring): ``feasible`` when every server's violation
    probability is below ``threshold`` and no bin is lost, else ``infeasible``."""
    meets = all(p < threshold for p in plan.violation_probability.values()) and not lost_bins
    return Outcome(
        status="feasible" if meets else "infeasible",
        solver_status=plan.limited_by or "greedy",
        objective=float(len(plan.servers)),
    )


@dataclass
class _Server:
    name: str
    bins: set[int]
    ready: bool
    work: float = 0.0
    new: bool = False  # added by this plan
    removed: bool = False
    touched: bool = False  # source or target of a move/copy in this plan
    dedicated: bool = False  # holds one hot bin's replica


@dataclass
class _Steps:
    """Actions in the order they were decided, merged per (kind, source, target)."""

    order: list[tuple] = field(default_factory=list)
    bins: dict[tuple, list[int]] = field(default_factory=dict)

    def add(self, kind: str, bin_index: int | None = None, **where: str) -> None:
        key = (kind, where.get("source"), where.get("target"), where.get("server"))
        if key not in self.bins:
            self.order.append(key)
            self.bins[key] = []
        if bin_index is not None:
            self.bins[key].append(bin_index)

    def actions(self) -> tuple[Action, ...]:
        rank = {"add-server": 0, "copy": 1, "move": 1, "delete-replica": 2, "remove-server": 3}
        ordered = sorted(self.order, key=lambda key: rank[key[0]])
        return tuple(
            Action(kind, tuple(self.bins[(kind, s, t, v)]), source=s, target=t, server=v)
            for kind, s, t, v in ordered
        )


class _Layout:
    """The cluster as the plan reshapes it: who holds which bin, and each server's work."""

    def __init__(self, state: ClusterState, model: SteadyStateModel, config: DirectorConfig):
        self.config = config
        self.model = model
        self.capacity = work_capacity(model)
        scale = 1.0 + config.overprovisioning
        self.get_rps = np.asarray(state.get_rps, dtype=float) * scale
        self.bin_bytes = np.asarray(state.bin_bytes, dtype=float)
        self.put_rps = np.asarray(state.put_rps, dtype=float) * scale
        self.servers = [_Server(s.name, set(s.bins), s.ready) for s in state.servers]
        self.index = {server.name: i for i, server in enumerate(self.servers)}
        self.holders: list[set[int]] = [set() for _ in range(state.bins)]
        for i, server in enumerate(self.servers):
            for b in server.bins:
                self.holders[b].add(i)
        self.initial_holders = [frozenset(h) for h in self.holders]  # copy sources
        self.replica_work = self._replica_work(np.array([len(h) for h in self.holders]))
        for server in self.servers:
            server.work = float(sum(self.replica_work[b] for b in server.bins))
            extra = [len(self.holders[b]) > config.replicas for b in server.bins]
            server.dedicated = bool(extra) and all(extra)  # only hot bins' replicas
        self.steps = _Steps()
        self.deleted: set[tuple[int, int]] = set()  # (bin, server): not a target again
        self.limited_by: str | None = None  # the bound that stopped an add-server
        self._added = 0
        self._live = len(self.servers)  # leased after the plan so far
        self._next_number = _next_server_number(self.index)
        self._empties = {i for i, s in enumerate(self.servers) if self._is_empty(s)}
        self._sorted = sorted(  # (work, server) of the best-fit targets
            (s.work, i) for i, s in enumerate(self.servers) if self._candidate(s)
        )

    # ------------------------------------------------------------ work bookkeeping

    def _replica_work(self, replicas: np.ndarray) -> np.ndarray:
        get, put = replica_loads(self.get_rps, self.put_rps, replicas, self.config.read_fanout)
        return self.model.get_coefficient * get + self.model.put_coefficient * put

    def _work_with(self, b: int, replicas: int) -> float:
        """The work of one replica of ``b`` when it has ``replicas`` of them."""
        share = min(self.config.read_fanout, replicas) / max(replicas, 1)
        get_work = self.model.get_coefficient * self.get_rps[b] * share
        return float(get_work + self.model.put_coefficient * self.put_rps[b])

    def _candidate(self, server: _Server) -> bool:
        """Best-fit targets: servers that hold data and stay, except those dedicated to a
        hot bin's replicas (empty servers are standbys, taken only when nothing fits)."""
        return bool(server.bins) and not server.removed and not server.dedicated

    def _set_work(self, i: int, work: float) -> None:
        server = self.servers[i]
        if self._candidate(server):
            self._sorted_remove(i)
        server.work = work
        if self._candidate(server):
            bisect.insort(self._sorted, (work, i))

    def _sorted_remove(self, i: int) -> None:
        key = (self.servers[i].work, i)
        at = bisect.bisect_left(self._sorted, key)
        if at < len(self._sorted) and self._sorted[at] == key:
            del self._sorted[at]

    def _attach(self, b: int, i: int) -> None:
        server = self.servers[i]
        was_candidate = self._candidate(server)
        if was_candidate:
            self._sorted_remove(i)
        server.bins.add(b)
        self._empties.discard(i)
        self.holders[b].add(i)
        server.work += self.replica_work[b]
        if self._candidate(server):
            bisect.insort(self._sorted, (server.work, i))

    def _detach(self, b: int, i: int) -> None:
        server = self.servers[i]
        if self._candidate(server):
            self._sorted_remove(i)
        server.bins.discard(b)
        self.holders[b].discard(i)
        server.work -= self.replica_work[b]
        if not server.bins:
            server.work = 0.0
            server.dedicated = False  # an empty server is a standby again (or goes)
            if not server.removed:
                self._empties.add(i)
        if self._candidate(server):
            bisect.insort(self._sorted, (server.work, i))

    def _set_replicas(self, b: int, replicas: int) -> None:
        """Re-price every replica of ``b`` for a new replica count."""
        new_work = self._work_with(b, replicas)
        delta = new_work - self.replica_work[b]
        self.replica_work[b] = new_work
        for i in self.holders[b]:
            self._set_work(i, self.servers[i].work + delta)

    # ------------------------------------------------------------ placement

    def _best_fit(self, b: int, exclude: set[int], fill: float | None = None) -> int | None:
        """The most loaded data-holding server that can take a replica of ``b`` and stay
        under the boundary (or under ``fill``, if given)."""
        limit = self.capacity if fill is None else min(fill, self.capacity)
        at = bisect.bisect_left(self._sorted, (limit - self.replica_work[b], -1)) - 1
        while at >= 0:
            _, i = self._sorted[at]
            if i not in exclude and i not in self.holders[b] and (b, i) not in self.deleted:
                return i
            at -= 1
        return None

    @staticmethod
    def _is_empty(server: _Server) -> bool:
        """Empty and staying, and not reserved for a hot bin: a standby."""
        return not server.bins and not server.removed and not server.dedicated

    def _empty_server(self, b: int) -> int | None:
        """An empty server that stays: a ready standby, a booting one, else a new one
        (not one whose replica of ``b`` this plan deletes); None past the plan's bound."""
        empty = [i for i in self._empties if (b, i) not in self.deleted]
        if empty:
            return min(empty, key=self._standby_rank)
        return self._new_server()

    def _standby_rank(self, i: int) -> tuple:
        """Empty servers in the order they are taken: ready, then booting, then new."""
        return (not self.servers[i].ready, self.servers[i].new, i)

    def _new_server(self) -> int | None:
        """An ``add-server``, unless the plan's bound forbids it (then None, and the
        plan says which bound)."""
        if self._added >= self.config.max_servers_added:
            self.limited_by = self.limited_by or "max_servers_added"
            return None
        if self._live >= self.config.max_servers:
            self.limited_by = self.limited_by or "max_servers"
            return None
        name = f"server-{self._next_number}"
        self._next_number += 1
        self._added += 1
        self._live += 1
        self.servers.append(_Server(name, set(), ready=False, new=True))
        self.index[name] = len(self.servers) - 1
        self._empties.add(len(self.servers) - 1)
        self.steps.add("add-server", server=name)
        return len(self.servers) - 1

    def _copy(self, b: int, target: int, sources: list[int] | None = None) -> None:
        """A new replica of ``b`` on ``target``, copied from the least loaded of
        ``sources`` (by default the servers that held it before the plan)."""
        sources = sources or list(self.initial_holders[b])
        source = min(sources, key=lambda i: self.servers[i].work)
        self._attach(b, target)
        self.servers[target].touched = True
        self.steps.add(
            "copy", b, source=self.servers[source].name, target=self.servers[target].name
        )

    def _move(self, b: int, source: int, target: int) -> None:
        self._detach(b, source)
        self._attach(b, target)
        self.servers[source].touched = self.servers[target].touched = True
        self.steps.add(
            "move", b, source=self.servers[source].name, target=self.servers[target].name
        )

    def _overloaded(self, i: int) -> bool:
        return self.servers[i].work >= self.capacity

    # ------------------------------------------------------------ the steps

    def restore_replicas(self) -> None:
        """Bins below the configured replica count get copies (after a server failure)."""
        for b, holders in enumerate(self.holders):
            if not holders:
                continue  # no copy survives to copy from; nothing the controller can do
            while len(self.holders[b]) < self.config.replicas:
                self._set_replicas(b, len(self.holders[b]) + 1)
                target = self._best_fit(b, exclude=set())
                target = target if target is not None else self._empty_server(b)
                if target is None:
                    self._set_replicas(b, len(self.holders[b]))  # the plan's bound
                    break
                self._copy(b, target)

    def fix_hot_bins(self) -> None:
        """Bins too hot for one server go to dedicated servers (Alg. 1, line 5; §6.2): as
        many replicas as their gets need, and a replica that overloads the server it
        shares with other bins moves to a dedicated server of its own, rather than the
        other bins moving away (a hot bin is one bin's data; its neighbours are many).
        Extra replicas of bins that cooled down are deleted."""
        counts = np.array([len(h) for h in self.holders])
        needed = replicas_needed(self.get_rps, self.put_rps, self.model, self.config, self.capacity)
        hot = needed > self.config.replicas
        for b in np.flatnonzero(hot | (needed != np.maximum(counts, self.config.replicas))):
            b = int(b)
            have, need = len(self.holders[b]), int(needed[b])
            if not have:
                continue  # no copy survives to copy from
            if need < have:
                self._drop_replicas(b, have - need)
            new = self._reserve_empty(b, need - have)
            self._set_replicas(b, len(self.holders[b]) + len(new))
            moving = self._overloaded_shared(b) if hot[b] else []
            for_moves = self._reserve_empty(b, len(moving))
            # Past the plan's bound some replicas stay; fix_overloaded then moves others.
            self._place_hot_replicas(b, moving[: len(for_moves)], new + for_moves)

    def _overloaded_shared(self, b: int) -> list[int]:
        """The servers that share a replica of ``b`` with other bins and are overloaded
        (Alg. 1, lines 4-5: that replica moves to a dedicated server), most loaded first."""
        shared = [i for i in self.holders[b] if not self.servers[i].dedicated]
        return sorted(
            (i for i in shared if self._overloaded(i)), key=lambda i: (-self.servers[i].work, i)
        )

    def _place_hot_replicas(self, b: int, moving: list[int], reserved: list[int]) -> None:
        """Move ``b`` off ``moving`` and copy it to the rest of the servers ``reserved``
        for it. The moves take the ready standbys first: they relieve overloaded servers.
        Copies come from a server that keeps its replica; if every one moved, from where
        the moves land (the scheduler starts such a copy once its move has landed)."""
        pool = sorted(reserved, key=self._standby_rank)
        for source, target in zip(moving, pool, strict=False):
            self._move(b, source, target)
        kept = [i for i in self.initial_holders[b] if i in self.holders[b]]
        sources = kept or list(self.holders[b])
        for target in pool[len(moving) :]:
            self._copy(b, target, sources)

    def _reserve_empty(self, b: int, count: int) -> list[int]:
        """Up to ``count`` empty servers for replicas of ``b`` (fewer past the plan's
        bound)."""
        targets = []
        for _ in range(count):
            target = self._empty_server(b)
            if target is None:
                break
            self._reserve(target)
            targets.append(target)
        return targets

    def _reserve(self, i: int) -> None:
        """Dedicate empty server ``i`` to a hot bin's replica."""
        self.servers[i].dedicated = True
        self._empties.discard(i)

    def _drop_replicas(self, b: int, count: int) -> None:
        """Delete the replicas whose servers would then be empty first, so they can go."""
        order = sorted(self.holders[b], key=lambda i: (len(self.servers[i].bins), -i))
        for i in order[:count]:
            self._detach(b, i)
            self.deleted.add((b, i))
            self.servers[i].touched = True
            self.steps.add("delete-replica", b, server=self.servers[i].name)
        self._set_replicas(b, len(self.holders[b]))

    def fix_overloaded(self) -> None:
        """Move bins off each overloaded server to the most loaded servers that can take
        them (Alg. 1, 4-10), as little data as relieves it (§2.2): the smallest bin whose
        departure is enough, else the hottest and look again. Hot bins left their shared
        servers in ``fix_hot_bins``; a replica still here (the plan's bound) goes last."""
        for i in sorted(range(len(self.servers)), key=lambda i: -self.servers[i].work):
            while self._overloaded(i) and len(self.servers[i].bins) > 1:
                b = self._bin_to_move(i)
                target = self._best_fit(b, exclude={i})
                target = target if target is not None else self._empty_server(b)
                if target is None:
                    break  # the plan's bound: the server stays overloaded
                self._move(b, i, target)

    def _bin_to_move(self, i: int) -> int:
        bins = self.servers[i].bins
        plain = [b for b in bins if len(self.holders[b]) <= self.config.replicas]
        candidates = plain or list(bins)  # a lone bin that overloads needs replicas instead
        excess = self.servers[i].work - self.capacity
        enough = [b for b in candidates if self.replica_work[b] > excess]
        if enough:
            return min(enough, key=lambda b: (self.replica_work[b], b))
        return max(candidates, key=lambda b: (self.replica_work[b], -b))

    def coalesce(self) -> None:
        """Empty the least loaded underloaded servers into the others (Alg. 1, 12-19)."""
        limit = self.config.coalesce_below * self.capacity
        order = [
            i
            for i, s in enumerate(self.servers)
            if s.bins and not s.touched and not s.dedicated and s.work < limit
        ]
        order.sort(key=lambda i: self.servers[i].work)
        for i in order:
            if self.servers[i].touched:
                continue  # took bins from an emptied server in this round
            self._try_to_empty(i, limit)

    def _try_to_empty(self, i: int, limit: float) -> bool:
        """Move every bin of server ``i`` to servers that stay under ``limit`` with it,
        or none."""
        server = self.servers[i]
        self._sorted_remove(i)  # not a target while it is being emptied
        placed: list[tuple[int, int]] = []
        for b in sorted(server.bins, key=lambda b: -self.replica_work[b]):
            target = self._best_fit(b, exclude={i}, fill=limit)
            if target is None:
                break
            self._attach(b, target)
            placed.append((b, target))
        if len(placed) < len(server.bins):
            for b, target in placed:
                self._detach(b, target)
            bisect.insort(self._sorted, (server.work, i))
            return False
        for b, target in placed:
            self.holders[b].discard(i)
            self.servers[target].touched = True
            self.steps.add("move", b, source=server.name, target=self.servers[target].name)
        server.bins.clear()
        server.work = 0.0
        server.touched = True
        self._remove(i)
        return True

    def _remove(self, i: int) -> None:
        self.servers[i].removed = True
        self._live -= 1
        self._empties.discard(i)
        self.steps.add("remove-server", server=self.servers[i].name)

    def keep_standbys(self) -> None:
        """Exactly ``standbys`` empty servers remain after the plan (§5.3)."""
        empty = [
            i
            for i, s in enumerate(self.servers)
            if not s.bins and not s.removed and not s.dedicated
        ]
        missing = self.config.standbys - len(empty)
        for _ in range(missing):
            if self._new_server() is None:
                break  # the plan's bound: fewer standbys
        # Release surplus empty servers, booting ones first: the ready ones can serve now.
        for i in sorted(empty, key=lambda i: self.servers[i].ready)[: max(-missing, 0)]:
            self._remove(i)

    # ------------------------------------------------------------ the answer

    def plan(self) -> Plan:
        live = [s for s in self.servers if not s.removed]
        layout = tuple(ServerState(s.name, tuple(sorted(s.bins)), s.ready) for s in live)
        replicas = np.array([len(h) for h in self.holders])
        get, put = replica_loads(self.get_rps, self.put_rps, replicas, self.config.read_fanout)
        gets, puts, risk = {}, {}, {}
        for s in live:
            bins = sorted(s.bins)
            gets[s.name] = float(get[bins].sum())
            puts[s.name] = float(put[bins].sum())
            risk[s.name] = float(self.model.violation_probability(gets[s.name], puts[s.name]))
        actions = self.steps.actions()
        copied = [b for a in actions if a.copies_data for b in a.bins]
        moved_bytes = float(self.bin_bytes[copied].sum())
        plan = Plan(actions, layout, gets, puts, risk, self.limited_by, moved_bytes)
        lost = sum(1 for holders in self.initial_holders if not holders)
        return dataclasses.replace(plan, outcome=plan_outcome(plan, self.model.threshold, lost))


def _next_server_number(names) -> int:
    """One past the highest ``server-<n>`` among ``names``: the next new server's number."""
    numbers = [-1]
    for name in names:
        head, _, tail = name.rpartition("-")
        if head == "server" and tail.isdigit():
            numbers.append(int(tail))
    return max(numbers) + 1
