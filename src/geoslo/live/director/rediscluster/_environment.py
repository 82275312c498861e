"""A Redis Cluster as the SCADS Director's environment handle (``geoslo.control.Environment``;
FAST 2011 §5.3, §5.5, §5.6). The binned store's counterpart:
``geoslo.live.director.DirectorTestbedEnvironment``.

``start()`` starts the local testbed when asked, then, before anything else, repairs the
moves its journal says a crash left half-way (``_repairs``; observations repair a move
that fails while it runs, once every master answers again), then, with a load of its
own (the testbed, reproductions), opens the timed client and replays the load round
after round; without one (a user's cluster) it writes no key and observes the users'
requests from the cluster (``_observe``). ``observe()`` reads ``CLUSTER NODES`` (the
servers: masters with their bins, the replicas its copies made with their master's; the
user's replicas are never servers) and the histograms of the periods that ended.
``apply(step)`` cancels and starts the Director's actions as cluster operations, less
the moves the guard refuses (``_actions``; docs/director-live.md, "The Director on Redis
Cluster: the mapping" and "On your own cluster").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from redis.exceptions import RedisError

from geoslo.control.director import Observation, Step
from geoslo.control.director.types import Action, Histogram, RunningAction
from geoslo.errors import ConfigError, TestbedError
from geoslo.live._backend import key_name
from geoslo.live.director._loadgen import LoadSpec
from geoslo.live.director.rediscluster._actions import (
    BINS,
    copy_refusal,
    migration_slots,
    node_name,
    overpacked_moves,
    server_states,
)
from geoslo.live.director.rediscluster._client import ClientConfig, RedisClusterClient
from geoslo.live.director.rediscluster._engine import (
    SLOTS_PER_BIN,
    ClusterNode,
    ClusterSpec,
    RedisClusterTestbed,
    parse_cluster_nodes,
)
from geoslo.live.director.rediscluster._link import Credentials, NodeLink
from geoslo.live.director.rediscluster._loadgen import preload_keys, replay_cluster_load
from geoslo.live.director.rediscluster._migrate import MigrationProgress, migrate_slots
from geoslo.live.director.rediscluster._observe import (
    ClusterObserver,
    ObservedPeriod,
    ObserverSettings,
    read_bin_bytes,
)
from geoslo.live.director.rediscluster._repairs import JournalRepairs
from geoslo.live.director.rediscluster._stats import bin_of_key
from geoslo.models import SteadyStateModel

__all__ = [
    "ACTIONS_FILE",
    "ClusterActionFailed",
    "FinishedClusterAction",
    "RedisClusterEnvironment",
    "EnvSettings",
]

_LOG = logging.getLogger("geoslo.director.rediscluster")
ACTIONS_FILE = "director-actions.jsonl"  # in the state dir: one line per action that ended
_REFRESHES_AFTER_CHANGE = 5  # observations (seconds) that reload the slot map after a change
_KICK_AFTER_S = 3.0  # a new node not serving by then gets the masters' epochs bumped
_UNPACED_BYTES_PER_S = 1e12  # a cancelled move's roll-back is not throttled (§5.6: undo fast)
_KEY_OVERHEAD_BYTES = 50  # Redis's per-key cost beside the value (MEMORY USAGE of a 1 KB value)
OWN_REPLICAS_FILE = "director-replicas.json"  # in the state dir: the replicas copies made
_GUARD_PERIODS = 3  # the move guard holds a plan to the busiest of the last periods served


class ClusterActionFailed(TestbedError):
    """An action could not be done on the cluster; the message says why."""


@dataclass(frozen=True)
class FinishedClusterAction:
    """How an action ended (``detail``: why it failed, or what it did)."""

    action: Action
    ok: bool
    duration_s: float
    detail: str = ""


@dataclass(frozen=True)
class EnvSettings:
    """What the environment drives. ``seed_nodes``: the cluster's nodes to start from (a
    user's cluster); ``testbed``: start a local testbed instead (tests, reproduction).
    ``command_template`` starts new nodes for ``add-server`` on a user's cluster
    (``{port}``, ``{dir}``, optionally ``{bus_port}``); the testbed uses its own.
    ``keys`` ``k:0 .. k:<keys-1>`` of ``value_bytes`` are what the environment's own load
    (``load`` given to it: the testbed, reproductions) reads and writes, preloaded when
    ``preload``, and what the bins' sizes are estimated from without ``bin_bytes_from``
    the cluster. ``observe``: "cluster" reads every request the nodes served
    (``_observe``: commandstats and sampled MONITOR; the users' load), "client" samples
    the environment's own client (§5.5 as the paper; opened even without a ``load``, for a
    caller that drives the load itself, as the reproduction does), "auto" the first without
    a load of its own. ``guard_model``: moves that would load a master past it on the observed
    rates are refused (``overpacked_moves``). ``credentials``: AUTH and TLS for every
    connection the environment opens."""

    seed_nodes: tuple[tuple[str, int], ...] = ()
    testbed: ClusterSpec | None = None
    command_template: str | None = None
    copy_rate_bytes_per_s: float = 4e6  # §5.7's Table
    client: ClientConfig = field(default_factory=lambda: ClientConfig(read_from_replicas=True))
    keys: int = 10_000
    value_bytes: int = 1024
    preload: bool = True
    node_wait_s: float = 60.0  # a replica's sync, a failover, a new node known to all
    # A move's fixed cost per slot beside its bytes (SETSLOT on both ends and the other
    # masters): 128 empty slots moved in ~45 ms here idle; 2 ms a slot leaves room for load.
    move_overhead_s_per_slot: float = 0.002
    # A copy (a new Redis replica) ends once the master lists it in CLUSTER SLOTS, which
    # without writes waits for Redis's 10 s repl-ping-replica-period (7 s measured here).
    copy_overhead_s: float = 12.0
    observe: str = "auto"  # "cluster", "client" or "auto"
    observer: ObserverSettings | None = None  # None: the client's period, defaults
    guard_model: SteadyStateModel | None = None
    credentials: Credentials = field(default_factory=Credentials)
    new_node_host: str = "127.0.0.1"  # {host} of the command template: where nodes start
    retire_template: str | None = None  # stops a node it started ({host}, {port}, {dir})

    def __post_init__(self) -> None:
        if self.observe not in ("auto", "cluster", "client"):
            raise ConfigError(
                "observe", f'must be "auto", "cluster" or "client", not {self.observe!r}'
            )
        if not self.seed_nodes and self.testbed is None:
            raise ConfigError("seed_nodes", "give the cluster's seed nodes or start a testbed")
        if self.copy_rate_bytes_per_s <= 0:
            raise ConfigError("copy_rate_bytes_per_s", "must be > 0")


def bin_bytes_of_keys(keys: int, value_bytes: int) -> np.ndarray:
    """Stored bytes per bin of ``k:0 .. k:<keys-1>`` (what a move of the bin carries)."""
    counts = np.zeros(BINS)
    for i in range(keys):
        counts[bin_of_key(key_name(i))] += 1
    return counts * (value_bytes + _KEY_OVERHEAD_BYTES)


class RedisClusterEnvironment:
    """The Director's handle on one Redis Cluster; real time (``simulated = False``)."""

    simulated = False

    def __init__(
        self,
        state_dir: Path,
        settings: EnvSettings,
        load: LoadSpec | None = None,
        log: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.settings = settings
        self.load = load
        self.log = log
        self.testbed: RedisClusterTestbed | None = None
        self.client: RedisClusterClient | None = None
        self.repair_report = None
        # the moves' journal, repairs
        self.repairs = JournalRepairs(self.state_dir, log, settings.credentials)
        self.rounds = 0
        self.requests = 0
        self.actions_done = 0
        self.actions_failed = 0
        self._seeds = list(settings.seed_nodes)
        self._names: dict[str, str] = {}  # node id -> the Director's name of the node
        self._booting: list[str] = []  # add-server actions whose node is not up yet
        self._hidden: set[str] = set()  # node ids being removed
        self._running: dict[Action, tuple[RunningAction, asyncio.Task]] = {}
        self._finished: list[FinishedClusterAction] = []
        self._provisioner: RedisClusterTestbed | None = None
        self._load_task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._topology: frozenset = frozenset()
        self._membership = asyncio.Lock()  # nodes join and leave one at a time
        self._refreshes_due = 0
        self.link = NodeLink(settings.credentials)
        self.observer: ClusterObserver | None = None
        self._recent: list[tuple[np.ndarray, np.ndarray]] = []  # the last periods' rates
        self._own_replicas: set[str] = self._load_own_replicas()
        self.refused_moves = 0
        self._bin_bytes: np.ndarray | None = None
        self._last_view: list[ClusterNode] | None = None

    # --- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """The testbed (if asked), then ``repair`` before anything else, the client, the load."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.settings.testbed is not None:
            self.testbed = await asyncio.to_thread(
                RedisClusterTestbed.up, self.settings.testbed, self.state_dir / "cluster", self.log
            )
            self._seeds = self.testbed.seed_nodes()
        self.repair_report = await self.repairs.startup(self._seeds[0])
        self._name_testbed_nodes()
        if self._observes_cluster():
            period_s = self.settings.client.period_s
            settings = self.settings.observer or ObserverSettings(period_s=period_s)
            self.observer = ClusterObserver(settings, self.link, log=self.log)
            await self.observer.start(await self.view())
        if self.load is None and self.settings.observe != "client":  # no client of its own
            credentials = self.settings.credentials.redis_kwargs()
            sizes = await asyncio.to_thread(read_bin_bytes, self._seeds, credentials)
            self.bin_bytes()[:] = sizes
            return
        self.client = await RedisClusterClient.connect(self._seeds, self.settings.client)
        if self.load is not None:
            if self.settings.preload:
                await preload_keys(self.client, self.settings.keys, self.settings.value_bytes)
            self._stop = asyncio.Event()
            self._load_task = asyncio.create_task(self._replay_rounds(self.client, self.load))

    def _observes_cluster(self) -> bool:
        if self.settings.observe == "auto":
            return self.load is None
        return self.settings.observe == "cluster"

    def _load_own_replicas(self) -> set[str]:
        """The ids of the replicas this controller's copies made (the user's are others)."""
        path = self.state_dir / OWN_REPLICAS_FILE
        with contextlib.suppress(OSError, ValueError):
            return set(json.loads(path.read_text()))
        return set()

    def _save_own_replicas(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_dir / (OWN_REPLICAS_FILE + ".tmp")
        tmp.write_text(json.dumps(sorted(self._own_replicas)))
        tmp.replace(self.state_dir / OWN_REPLICAS_FILE)

    def users_replicas(self, view: list[ClusterNode]) -> set[str]:
        """Replicas the Director did not make (the user's, or a node's own durability
        replicas): never servers of the Director's view, never its copies, never reset."""
        return {n.node_id for n in view if not n.is_master and n.node_id not in self._own_replicas}

    async def _replay_rounds(self, client: RedisClusterClient, load: LoadSpec) -> None:
        while not self._stop.is_set():
            result = await replay_cluster_load(
                client, load, self.settings.keys, self.settings.value_bytes, self._stop
            )
            self.rounds += 1
            self.requests += result.requests

    def _name_testbed_nodes(self) -> None:
        """Names of the nodes a testbed or an earlier run of this controller started (the
        ``server-N`` of its add-servers, recorded in ``provisioned/``)."""
        self._provisioner = RedisClusterTestbed.load(self.state_dir / "provisioned")
        if self._provisioner is not None:  # credentials are never written to its file
            self._provisioner.credentials = self.settings.credentials.redis_kwargs()
        for tb in (self.testbed, RedisClusterTestbed.load(self.state_dir / "cluster")):
            if tb is not None:
                self._names |= {n.node_id: n.name for n in tb.nodes() if n.node_id}
        if self._provisioner is not None:
            self._names |= {n.node_id: n.name for n in self._provisioner.nodes() if n.node_id}

    async def close(self) -> None:
        """Stop the load, cancel the actions, close the client, stop the testbed it
        started (not the nodes it added to a user's cluster: they hold its data)."""
        self._stop.set()
        if self.observer is not None:
            await self.observer.aclose()
        if self._load_task is not None:
            with contextlib.suppress(Exception):
                await self._load_task
            self._load_task = None
        with contextlib.suppress(Exception):
            await self.cancel(*self._running)
        await self.repairs.close()
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        await self.link.aclose()  # last: a cancelled move's roll-back still used it
        if self.testbed is not None:
            await asyncio.to_thread(self.testbed.down)
        # Nodes started for a user's cluster stay: they serve its slots (recorded in
        # provisioned/redis-cluster.json; `geoslo testbed down --state-dir` stops them).
        self._provisioner = self.testbed = None

    # --- the Director's handle ------------------------------------------------------------
    def bin_bytes(self) -> np.ndarray:
        """Stored bytes per bin. Without a load of its own, ``start()`` fills this same
        array in place from the cluster (its keys per bin, its bytes per key): the
        Director's loop holds it from before the start."""
        if self._bin_bytes is None:
            self._bin_bytes = bin_bytes_of_keys(self.settings.keys, self.settings.value_bytes)
        return self._bin_bytes

    async def view(self) -> list[ClusterNode]:
        """``CLUSTER NODES`` from the first seed that answers as a member of the cluster (a
        node that serves no slot and knows no node that does, e.g. one just reset, is
        skipped); the seeds then follow the cluster's nodes."""
        errors = []
        for host, port in list(self._seeds):
            connection = self.link.client(host, port, 5.0)
            try:
                text = (await connection.execute_command("CLUSTER", "NODES")).decode()
            except (RedisError, OSError) as error:
                errors.append(f"{host}:{port}: {error}")
                continue
            finally:
                await connection.aclose()
            view = parse_cluster_nodes(text)
            if not any(n.slots for n in view):
                errors.append(f"{host}:{port}: knows no node serving slots")
                continue
            usable = [(n.host, n.port) for n in view if not n.failed]
            rest = [a for a in self._seeds if a not in usable]
            self._seeds = [(host, port)] + [a for a in usable + rest if a != (host, port)]
            return view
        raise TestbedError("no seed node of the cluster answers: " + "; ".join(errors))

    async def observe(self) -> Observation:
        if self.observer is None and self.client is None:
            raise RuntimeError("start() the environment before using it")
        if self._load_task is not None and self._load_task.done():
            self._load_task.result()  # the load generator failed: say why
        view = self._last_view = await self.view()
        self.repairs.poll(self._seeds[0])  # a failed move's slots, once every master answers
        if self.client is not None:
            await self._follow_topology(self.client, view)
        hidden = self._hidden | self.users_replicas(view)
        servers = server_states(view, self._names, hidden, self._booting)
        measured = {
            "servers": float(len(servers)),
            "actions_done": float(self.actions_done),
            "actions_failed": float(self.actions_failed),
            "moves_refused": float(self.refused_moves),
        }
        if self.observer is not None:
            observed = await self.observer.poll(view)
            histograms = tuple(Histogram(p.get_rps, p.put_rps) for p in observed)
            now_s = self.observer.now_s()
            if observed:
                measured |= _observed_gauges(observed[-1])
        else:
            client = self._client()
            periods = client.collect()
            if periods:
                last = periods[-1]
                measured |= {"period_p99_ms": last.get_p99_ms, "period_gets": float(last.gets)}
            histograms = tuple(Histogram(p.get_rps, p.put_rps) for p in periods)
            now_s = client.now_s()
        self._recent = (self._recent + [(h.get_rps, h.put_rps) for h in histograms])[
            -_GUARD_PERIODS:
        ]
        running = tuple(item for item, _ in self._running.values())
        return Observation(now_s, servers, running, histograms, measured)

    async def _follow_topology(self, client: RedisClusterClient, view: list[ClusterNode]) -> None:
        """Reload the client's slot map for a few ticks after the nodes or their roles
        changed: redis-py learns of a new replica only so, and Redis lists a replica in
        ``CLUSTER SLOTS`` only once gossip brought its offset (a copy's reads need it)."""
        topology = frozenset((n.node_id, n.master_id, n.failed) for n in view)
        if topology != self._topology:
            self._topology, self._refreshes_due = topology, _REFRESHES_AFTER_CHANGE
        if self._refreshes_due > 0:
            self._refreshes_due -= 1
            await client.refresh_slot_map()

    async def apply(self, step: Step) -> None:
        """Cancel what the step cancels (overruns, §5.3; their roll-backs run together),
        then start what it starts, less the moves the guard refuses (a master loaded past
        the steady-state model on the rates the cluster last served)."""
        await self.cancel(*step.cancel)
        refused = await self._guard([item.action for item in step.start])
        for item in step.start:
            if item.action in refused:
                self._refuse(item.action, refused[item.action])
                continue
            self.start_action(item)

    async def _guard(self, actions: list[Action]) -> dict[Action, str]:
        model = self.settings.guard_model
        moves = [a for a in actions if a.kind == "move"]
        if model is None or not moves or not self._recent:
            return {}
        get_rps = np.max([g for g, _ in self._recent], axis=0)
        put_rps = np.max([p for _, p in self._recent], axis=0)
        view = self._last_view or await self.view()  # this tick's observation
        servers = server_states(view, self._names, self._hidden | self.users_replicas(view))
        running = [item.action for item, _ in self._running.values() if item.action.kind == "move"]
        return {
            move: reason
            for move, reason in overpacked_moves(
                running + moves, servers, get_rps, put_rps, model
            ).items()
            if move in moves
        }

    def _refuse(self, action: Action, reason: str) -> None:
        self.refused_moves += 1
        self.actions_failed += 1
        self._finished.append(FinishedClusterAction(action, False, 0.0, reason))
        self._journal(action, False, 0.0, reason)
        message = f"{action.kind} {action.to_dict()}: {reason}"
        self.log(message)
        _LOG.warning(message)

    def start_action(self, item: RunningAction) -> None:
        """Start ``item.action`` now. The predicted duration the loop checks for overruns
        gains what the copy model's bytes do not carry: a move's fixed cost per slot
        (``SETSLOT`` rounds), a copy's replica attach (sync, then listed)."""
        action = item.action
        if action in self._running:
            self._finished.append(FinishedClusterAction(action, False, 0.0, "already running"))
            return
        if action.kind == "add-server" and action.server:
            self._booting.append(action.server)
        extra_s = 0.0
        if action.kind == "move":
            extra_s = len(action.bins) * SLOTS_PER_BIN * self.settings.move_overhead_s_per_slot
        elif action.kind == "copy":
            extra_s = self.settings.copy_overhead_s
        if extra_s:
            item = RunningAction(action, item.started_s, item.predicted_s + extra_s)
        task = asyncio.get_running_loop().create_task(self._run(action))
        self._running[action] = (item, task)

    async def cancel(self, *actions: Action) -> int:
        """Stop running actions (a move rolls its migrated slots back) and wait until they
        ended; how many were running."""
        tasks = [self._running[a][1] for a in actions if a in self._running]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        return len(tasks)

    def running(self) -> tuple[RunningAction, ...]:
        return tuple(item for item, _ in self._running.values())

    def finished(self) -> list[FinishedClusterAction]:
        """Actions that ended since the last call (drained)."""
        done, self._finished = self._finished, []
        return done

    async def wait_idle(self, timeout_s: float) -> bool:
        tasks = [task for _, task in self._running.values()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    # --- running one action ---------------------------------------------------------------
    async def _run(self, action: Action) -> None:
        started = time.monotonic()
        ok, detail = False, ""
        try:
            detail = await self._execute(action)
            ok = True
        except asyncio.CancelledError:
            detail = "cancelled"
            raise
        except Exception as error:  # any failure ends the action, the cluster repairs later
            detail = f"{type(error).__name__}: {error}"
        finally:
            self._running.pop(action, None)
            self.actions_done += ok
            self.actions_failed += not ok
            if action.kind == "add-server" and action.server in self._booting:
                self._booting.remove(action.server)
            duration_s = time.monotonic() - started
            self._finished.append(FinishedClusterAction(action, ok, duration_s, detail))
            self._journal(action, ok, duration_s, detail)
            message = f"{action.kind} {action.to_dict()}: {'done' if ok else 'failed'} {detail}"
            self.log(message)
            if not ok:  # reaches the service's log (a library's warning)
                _LOG.warning(message)

    def _journal(self, action: Action, ok: bool, duration_s: float, detail: str) -> None:
        """One line of ``director-actions.jsonl``: what the cluster was asked and how it went."""
        line = {**action.to_dict(), "ok": ok, "duration_s": round(duration_s, 3), "detail": detail}
        with contextlib.suppress(OSError), (self.state_dir / ACTIONS_FILE).open("a") as out:
            out.write(json.dumps(line) + "\n")

    async def _execute(self, action: Action) -> str:
        if action.kind == "move":
            return await self._move(action)
        if action.kind == "copy":
            return await self._copy(action)
        if action.kind == "delete-replica":
            return await self._delete_replica(action)
        if action.kind == "add-server":
            return await self._add_server(action)
        return await self._remove_server(action)

    async def _node(self, name: str | None, view: list[ClusterNode] | None = None) -> ClusterNode:
        for node in view if view is not None else await self.view():
            if node_name(node, self._names) == name and not node.failed:
                return node
        raise ClusterActionFailed(f"no usable node named {name!r} in the cluster")

    def _master_of(self, node: ClusterNode, view: list[ClusterNode]) -> ClusterNode | None:
        if node.is_master:
            return node
        return next((n for n in view if n.node_id == node.master_id), None)

    # move: migrate the bins' slots (§5.6), paced at the copy rate (§5.4)
    async def _move(self, action: Action) -> str:
        view = await self.view()
        source = self._master_of(await self._node(action.source, view), view)
        target = await self._node(action.target, view)
        if source is None or not target.is_master:
            raise ClusterActionFailed(f"move: {action.source} -> {action.target} needs two masters")
        await self._check_master(target, "move: target")
        slots = migration_slots(action, source)
        # Drained, a master stays an empty master (the Director's empty server), instead of
        # Redis turning it into a replica of the node that took its last slot.
        # (The target too: a roll-back drains it.)
        for node in (source, target):
            await self._command(node, "CONFIG", "SET", "cluster-allow-replica-migration", "no")
        progress = MigrationProgress()
        rate, credentials = self.settings.copy_rate_bytes_per_s, self.settings.credentials
        with self.repairs.moving(source.node_id, target.node_id, slots) as journaled:
            try:
                await migrate_slots(
                    source, target, slots, rate, progress=progress, credentials=credentials
                )
            except asyncio.CancelledError:
                await self._roll_back(source, target, slots)
                journaled.closed("rolled-back")
                raise
            journaled.closed("done")
        await self._bump_epoch(target)
        return f"{len(slots)} slots, {progress.keys} keys, {progress.bytes} bytes"

    async def _check_master(self, node: ClusterNode, what: str, empty: bool = False) -> None:
        """The node itself says it is a master (and, with ``empty``, serves no slot): a
        seed's view can be stale (gossip), and a replica of the user's must never be
        taken for an empty master and reset or re-pointed."""
        role = (await self._command(node, "INFO", "replication")).get("role")
        if role != "master":
            raise ClusterActionFailed(f"{what} {node.host}:{node.port} is a {role}, not a master")
        if empty:
            text = (await self._command(node, "CLUSTER", "NODES")).decode()
            myself = next(n for n in parse_cluster_nodes(text) if "myself" in n.flags)
            if myself.slots:
                raise ClusterActionFailed(f"{what} {node.host}:{node.port} serves slots")

    async def _roll_back(self, source: ClusterNode, target: ClusterNode, slots: list[int]) -> None:
        """A cancelled move leaves nothing on its target: its migrated slots go back."""
        now = await self._node(node_name(target, self._names))
        moved = {s for lo, hi in now.slots for s in range(lo, hi + 1)} & set(slots)
        if moved:
            self.log(f"move cancelled: {len(moved)} slots back to {source.host}:{source.port}")
            credentials = self.settings.credentials
            await migrate_slots(
                target, source, sorted(moved), _UNPACED_BYTES_PER_S, credentials=credentials
            )
            await self._bump_epoch(source)

    async def _bump_epoch(self, owner: ClusterNode) -> None:
        """``CLUSTER BUMPEPOCH`` on a node that received slots: the greatest config epoch,
        so its claim wins at every node, also one that joined during the move (it was not
        told by ``SETSLOT`` and may hold an older claim of a source that has since taken a
        higher epoch for slots of its own: a new node then stays ``cluster_state:fail``)."""
        await self._command(owner, "CLUSTER", "BUMPEPOCH")

    # copy: a Redis replica of a master holding exactly the bins (the mapping)
    async def _copy(self, action: Action) -> str:
        view = await self.view()
        source = await self._node(action.source, view)
        master = self._master_of(source, view)
        target = await self._node(action.target, view)
        refusal = copy_refusal(action, master, target, view)
        if refusal:
            raise ClusterActionFailed(refusal)
        assert master is not None
        await self._check_master(target, "copy: target", empty=True)
        self._own_replicas.add(target.node_id)  # before: a replica not known as ours is hidden
        self._save_own_replicas()
        await self._command(target, "CLUSTER", "REPLICATE", master.node_id)
        await self._wait_replica(target, master)
        return f"{action.target} replicates {node_name(master, self._names)}"

    async def _wait_replica(self, replica: ClusterNode, master: ClusterNode) -> None:
        """Until the replica's link is up and the master lists it in ``CLUSTER SLOTS``
        (clients learn replicas there; Redis lists one only once its replication offset
        is known, which for a master without writes takes up to its 10 s
        ``repl-ping-replica-period``): the copy then serves reads."""
        deadline = time.monotonic() + self.settings.node_wait_s
        while not await self._serves_reads(replica, master):
            if time.monotonic() > deadline:
                raise ClusterActionFailed(
                    f"copy: {replica.host}:{replica.port} did not sync and get listed"
                )
            await asyncio.sleep(0.1)
        self._refreshes_due = _REFRESHES_AFTER_CHANGE  # the client's map learns of it

    async def _serves_reads(self, replica: ClusterNode, master: ClusterNode) -> bool:
        info = await self._command(replica, "INFO", "replication")  # parsed: a dict
        if info.get("master_link_status") != "up":
            return False
        if (await self._node(node_name(replica, self._names))).master_id != master.node_id:
            return False
        ranges = await self._command(master, "CLUSTER", "SLOTS")
        return any(int(node[1]) == replica.port for entry in ranges for node in entry[3:])

    # delete-replica: detach a Redis replica; a master with replicas fails over first
    async def _delete_replica(self, action: Action) -> str:
        view = await self.view()
        node = await self._node(action.server, view)
        if not node.is_master and node.node_id not in self._own_replicas:
            raise ClusterActionFailed(
                f"delete-replica: {action.server} is a replica the user made; never deleted"
            )
        if node.is_master:
            replicas = [
                n
                for n in view
                if n.master_id == node.node_id and not n.failed and n.node_id in self._own_replicas
            ]
            if not replicas:
                raise ClusterActionFailed(
                    f"delete-replica: {action.server} holds the bin's only copy of the "
                    "Director's (its other replicas, if any, are the user's and stay)"
                )
            self._own_replicas.add(node.node_id)  # a replica of the Director's once failed over
            self._save_own_replicas()
            await self._fail_over(replicas[0], node)
            self._own_replicas.discard(replicas[0].node_id)  # a master now
            node = await self._node(action.server)
        async with self._membership:
            await self._detach(node, action.server or "")
        return f"{action.server} detached, an empty master again"

    async def _fail_over(self, replica: ClusterNode, master: ClusterNode) -> None:
        """``CLUSTER FAILOVER`` on the replica (coordinated, no write lost); until the old
        master reports itself a replica."""
        await self._command(replica, "CLUSTER", "FAILOVER")
        deadline = time.monotonic() + self.settings.node_wait_s
        while True:
            info = await self._command(master, "INFO", "replication")
            if info.get("role") == "slave":
                return
            if time.monotonic() > deadline:
                raise ClusterActionFailed(f"delete-replica: failover to {replica.port} timed out")
            await asyncio.sleep(0.1)

    async def _detach(self, node: ClusterNode, name: str) -> None:
        """``CLUSTER RESET HARD`` (its data flushed, a new id), every other node forgets
        the old id, then it is met again: an empty master (a standby)."""
        old_id = node.node_id
        await self._command(node, "CLUSTER", "RESET", "HARD")
        new_id = (await self._command(node, "CLUSTER", "MYID")).decode()
        self._names[new_id] = self._names.pop(old_id, name)
        self._own_replicas.discard(old_id)
        self._save_own_replicas()
        for other in await self.view():
            if other.node_id not in (old_id, new_id) and not other.failed:
                with contextlib.suppress(RedisError):
                    await self._command(other, "CLUSTER", "FORGET", old_id)
        await self._meet(node.host, node.port, new_id)

    async def _meet(self, host: str, port: int, node_id: str) -> None:
        seed = next(a for a in self._seeds if a != (host, port))
        bus_port = await self._bus_port(host, port)
        connection = self.link.client(seed[0], seed[1], 5.0)
        try:
            await connection.execute_command("CLUSTER", "MEET", host, port, bus_port)
        finally:
            await connection.aclose()
        await self._wait_known(node_id)
        await self._wait_serving(host, port)

    async def _wait_serving(self, host: str, port: int) -> None:
        """Until the node says ``cluster_state:ok``: a node just met has not learnt the
        slots' owners yet (and Redis delays a new master's ok), and refuses ``MIGRATE``
        with ``CLUSTERDOWN`` until then (§5.6: a new server boots before it serves). If
        it is still not serving after ``_KICK_AFTER_S`` (it joined during a move and was
        left with slots it believes unassigned: measured, 16 of a moved bin's slots, for
        good), it is told their owners."""
        started = time.monotonic()
        next_kick = started + _KICK_AFTER_S
        node = ClusterNode("", host, port, frozenset(), None, "", ())
        while (await self._command(node, "CLUSTER", "INFO")).find(b"cluster_state:ok") < 0:
            now = time.monotonic()
            if now > started + self.settings.node_wait_s:
                raise ClusterActionFailed(f"{host}:{port} is not serving (cluster_state)")
            if now > next_kick:
                next_kick = now + _KICK_AFTER_S
                await self._teach_owners(node)
            await asyncio.sleep(0.1)

    async def _teach_owners(self, node: ClusterNode) -> None:
        """Tell ``node`` the owner of every slot it has unassigned (``SETSLOT NODE``, as a
        migration tells every master), and give the masters new greatest epochs so their
        claims win over any stale one it holds."""
        view = await self.view()
        owner = {
            s: n.node_id
            for n in view
            if n.is_master
            for lo, hi in n.slots
            for s in range(lo, hi + 1)
        }
        text = (await self._command(node, "CLUSTER", "NODES")).decode()
        known = {
            s for n in parse_cluster_nodes(text) for lo, hi in n.slots for s in range(lo, hi + 1)
        }
        missing = [s for s in sorted(owner) if s not in known]
        self.log(f"{node.host}:{node.port} not serving: told the owners of {len(missing)} slots")
        connection = self.link.client(node.host, node.port, 10.0)
        try:
            async with connection.pipeline(transaction=False) as pipe:
                for slot in missing:
                    pipe.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner[slot])
                await pipe.execute(raise_on_error=False)
        finally:
            await connection.aclose()
        for master in view:
            if master.is_master and master.slots and not master.failed:
                await self._bump_epoch(master)

    async def _bus_port(self, host: str, port: int) -> int:
        connection = self.link.client(host, port, 5.0)
        try:
            reply = await connection.execute_command("CONFIG", "GET", "cluster-port")
        finally:
            await connection.aclose()
        configured = int(reply.get(b"cluster-port") or reply.get("cluster-port") or 0)  # a dict
        return configured or port + 10000  # Redis's default bus port

    async def _wait_known(self, node_id: str) -> None:
        """Until every usable node knows ``node_id`` and it knows them (none in handshake):
        a node that does not know a master yet cannot ``CLUSTER REPLICATE`` it."""
        deadline = time.monotonic() + self.settings.node_wait_s
        while True:
            view = await self.view()
            usable = {
                n.node_id
                for n in view
                if not n.failed and (n.node_id not in self._hidden or n.node_id == node_id)
            }
            missing = node_id not in usable
            for node in view:
                if node.node_id not in usable:
                    continue
                theirs = parse_cluster_nodes(
                    (await self._command(node, "CLUSTER", "NODES")).decode()
                )
                known = {n.node_id for n in theirs if not n.flags & {"handshake", "noaddr"}}
                wanted = usable if node.node_id == node_id else {node_id}
                missing = missing or not wanted <= known
            if not missing:
                return
            if time.monotonic() > deadline:
                raise ClusterActionFailed(
                    f"node {node_id[:8]} and the cluster do not know each other"
                )
            await asyncio.sleep(0.1)

    # add-server: a new node from the command template, met (§5.6: it boots, then serves)
    async def _add_server(self, action: Action) -> str:
        """A new empty master; when the cluster's data masters have replicas of the user's,
        it gets as many (the fewest any of them has) from the same command, so a bin
        moved onto it keeps as many copies as it had (§6.1)."""
        name = action.server or ""
        if self.testbed is None and self.settings.command_template is None:
            raise ClusterActionFailed(
                "add-server: no command_template to start a node with (environment section)"
            )
        view = await self.view()
        wanted = _replicas_per_master(view, self.users_replicas(view))
        host, port, node_id = await self._start_node("standby", None)
        self._names[node_id] = name
        replicas = []
        for _ in range(wanted):
            replica_host, replica_port, replica_id = await self._start_node("replica", name)
            self._hidden.add(replica_id)  # never a standby of the Director's, even briefly
            try:
                await self._command(
                    _address(replica_host, replica_port), "CLUSTER", "REPLICATE", node_id
                )
                await self._wait_link_up(replica_host, replica_port)
            finally:
                self._hidden.discard(replica_id)
            replicas.append(f"{replica_host}:{replica_port}")
        with_replicas = f" with replicas {', '.join(replicas)}" if replicas else ""
        return f"{name} on {host}:{port}{with_replicas}"

    async def _start_node(self, role: str, master: str | None) -> tuple[str, int, str]:
        """One node started (the testbed's, or the command template's), known to every
        node and serving (``cluster_state:ok``); hidden from the Director until then."""
        if self.testbed is not None:
            async with self._membership:
                info = await asyncio.to_thread(self.testbed.start_node)
            if role != "standby":
                self.testbed.set_role(info.name, role, master)
            self._hidden.add(info.node_id)  # shown as the booting server until it serves
            try:
                await self._wait_known(info.node_id)
                await self._wait_serving(info.host, info.port)
            finally:
                self._hidden.discard(info.node_id)
            return info.host, info.port, info.node_id
        if self._provisioner is None:
            template = self.settings.command_template or ""
            spec = ClusterSpec(masters=1, standbys=0, command_template=template)
            folder = self.state_dir / "provisioned"
            folder.mkdir(parents=True, exist_ok=True)
            self._provisioner = RedisClusterTestbed(
                spec, folder, template, host=self.settings.new_node_host,
                retire_template=self.settings.retire_template,
                credentials=self.settings.credentials.redis_kwargs(),
            )  # fmt: skip
        # Its own folder: a name an earlier run used (the Director numbers from 0 after a
        # restart) gets a new one, never that run's folder (its AOF).
        folder_name = f"node-{len(self._provisioner.records)}"
        async with self._membership:
            record = await asyncio.to_thread(
                self._provisioner.launch_node, folder_name, role, master
            )
        self._hidden.add(record["node_id"])  # shown as the booting server until it serves
        try:
            async with self._membership:
                await self._meet(record["host"], record["port"], record["node_id"])
        finally:
            self._hidden.discard(record["node_id"])
        return record["host"], record["port"], record["node_id"]

    async def _wait_link_up(self, host: str, port: int) -> None:
        deadline = time.monotonic() + self.settings.node_wait_s
        while True:
            info = await self._command(_address(host, port), "INFO", "replication")
            if info.get("master_link_status") == "up":
                return
            if time.monotonic() > deadline:
                raise ClusterActionFailed(f"{host}:{port} did not sync with its master")
            await asyncio.sleep(0.1)

    # remove-server: an empty node leaves (drain, reset, FORGET), then its process stops
    async def _remove_server(self, action: Action) -> str:
        name = action.server or ""
        view = await self.view()
        node = await self._node(name, view)
        if node.slots or not node.is_master:
            raise ClusterActionFailed(f"remove-server: {name} still serves bins; move them first")
        await self._check_master(node, "remove-server:", empty=True)
        self._hidden.add(node.node_id)
        async with self._membership:  # a node joining waits for every live node to know it
            kept = await self._release_replicas(node, view)
            await self._leave(node)
            stopped = await asyncio.to_thread(self._stop_started, node.host, node.port)
        done = f"{name} left the cluster" + (" and stopped" if stopped else " (not ours to stop)")
        return done + (f"; {kept}" if kept else "")

    async def _release_replicas(self, node: ClusterNode, view: list[ClusterNode]) -> str:
        """The replicas of an empty master that leaves: those this environment started
        for it leave and stop with it, the Director's copies become empty masters, and
        the user's replicate the data master with the fewest replicas (never reset)."""
        done = []
        for replica in await self._replicas_of(node, view):
            if self._started_here(replica.host, replica.port):
                await self._leave(replica)
                await asyncio.to_thread(self._stop_started, replica.host, replica.port)
                done.append(f"{replica.host}:{replica.port} stopped")
            elif replica.node_id in self._own_replicas:
                await self._detach(replica, node_name(replica, self._names))
                done.append(f"{replica.host}:{replica.port} detached")
            else:
                master = _fewest_replicas(view, exclude=node.node_id)
                if master is None:
                    raise ClusterActionFailed(
                        f"remove-server: no master left for the user's replica "
                        f"{replica.host}:{replica.port}"
                    )
                await self._command(replica, "CLUSTER", "REPLICATE", master.node_id)
                await self._wait_link_up(replica.host, replica.port)
                view = await self.view()
                done.append(f"the user's replica {replica.host}:{replica.port} now replicates "
                            f"{node_name(master, self._names)}")  # fmt: skip
        return "; ".join(done)

    async def _replicas_of(self, master: ClusterNode, view: list[ClusterNode]) -> list[ClusterNode]:
        """The master's replicas by the seed's view and by the master itself (``INFO
        replication``: a replica that attached after the seed last heard is not missed)."""
        found = {
            (n.host, n.port): n for n in view if n.master_id == master.node_id and not n.failed
        }
        info = await self._command(master, "INFO", "replication")
        for key, entry in info.items():
            if key.startswith("slave") and isinstance(entry, dict):
                address = (str(entry.get("ip")), int(entry.get("port", 0)))
                by_address = next((n for n in view if (n.host, n.port) == address), None)
                found.setdefault(address, by_address or _address(*address))
        return list(found.values())

    def _started_here(self, host: str, port: int) -> bool:
        return any(
            info.host == host and info.port == port
            for tb in (self.testbed, self._provisioner)
            if tb is not None
            for info in tb.nodes()
        )

    async def _leave(self, node: ClusterNode) -> None:
        """An empty master leaves: ``CLUSTER RESET HARD`` (it forgets the cluster, so it
        cannot gossip its way back), then every other node ``FORGET``s it. (Not
        ``remove_master``: it also evens the others' slots out, moves the Director did
        not ask for.)"""
        await self._command(node, "CLUSTER", "RESET", "HARD")
        for other in await self.view():
            if other.node_id != node.node_id and not other.failed:
                with contextlib.suppress(RedisError):
                    await self._command(other, "CLUSTER", "FORGET", node.node_id)

    def _stop_started(self, host: str, port: int) -> bool:
        """Stop the node at ``host:port`` if this environment started it (its id may have
        changed since: a detached replica gets a new one)."""
        for tb in (self.testbed, self._provisioner):
            if tb is None:
                continue
            for info in tb.nodes():
                if info.port == port and info.host == host:
                    tb.stop_node(info.name)
                    return True
        return False

    async def _command(self, node: ClusterNode, *args):
        return await self.link.command(node, *args)

    def _client(self) -> RedisClusterClient:
        if self.client is None:
            raise RuntimeError("start() the environment before using it")
        return self.client


def _observed_gauges(period: ObservedPeriod) -> dict[str, float]:
    """What the cluster served in the last period, for the service's metrics."""
    duration_s = max(period.end_s - period.start_s, 1e-9)
    return {
        "period_read_p99_ms": period.read_p99_ms,
        "period_reads_rps": period.reads / duration_s,
        "period_writes_rps": period.writes / duration_s,
        "period_monitor_samples": float(period.samples),
    }


def _address(host: str, port: int) -> ClusterNode:
    return ClusterNode("", host, port, frozenset(), None, "", ())


def _replicas_per_master(view: list[ClusterNode], users: set[str]) -> int:
    """The fewest replicas of the user's any master holding slots has (0 without)."""
    counts = [
        sum(1 for r in view if r.master_id == m.node_id and r.node_id in users and not r.failed)
        for m in view
        if m.is_master and m.slots and not m.failed
    ]
    return min(counts) if counts else 0


def _fewest_replicas(view: list[ClusterNode], exclude: str) -> ClusterNode | None:
    """The master holding slots with the fewest replicas (a re-homed replica's new master)."""
    masters = [m for m in view if m.is_master and m.slots and not m.failed and m.node_id != exclude]
    if not masters:
        return None

    def replicas(master: ClusterNode) -> int:
        return sum(1 for r in view if r.master_id == master.node_id and not r.failed)

    return min(masters, key=lambda m: (replicas(m), m.node_id))
