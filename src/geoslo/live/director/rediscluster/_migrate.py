"""Slot migration on Redis Cluster: the Director's moves, adding and removing masters, repair.

A move of a bin is a migration of its hash slots (FAST 2011 §5.6 "move"; the Redis Cluster
specification, "Live reconfiguration"). Per slot, in the specification's order:

1. target ``CLUSTER SETSLOT s IMPORTING <source-id>``, then source ``... MIGRATING <target-id>``
   (importing first: once the source says ``ASK``, the target must accept ``ASKING``);
2. ``CLUSTER GETKEYSINSLOT`` and ``MIGRATE host port "" 0 timeout REPLACE [AUTH2 user
   password] KEYS ...`` in batches (a key a crash left on the target takes the source's
   copy: the owner's), paced to a specified bytes/s as the paper throttles copies (§5.4,
   ``_throttle``);
3. ``CLUSTER SETSLOT s NODE <target-id>`` on the target (it bumps its epoch), the source,
   and every other master.

Before the first slot it waits until the target knows the greatest config epoch, so that
its bump wins over any claim still travelling in gossip (``epochs_settled``); after the
last, a slot the target's own view lost anyway is claimed again with a new greatest epoch.

While a slot migrates, a key still on the source is served there; a key already gone is
redirected with ``ASK`` to the target, so a client never reads a value older than one it
was told was written. A cancelled migration (an overrun, §5.6) finishes the few slots in
progress and stops: every slot is then wholly on the source or wholly on the target.
``repair`` finishes or rolls back slots that a crash left half-way; a key a crash left on
both nodes keeps the copy of the slot's owner (the node that acknowledged its writes).

Every connection opened here, and every ``MIGRATE`` (the source's own connection to the
target), carries the cluster's ``Credentials`` (docs/director-live.md, "On your own cluster").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import AskError, ResponseError

from geoslo.errors import InputError, TestbedError
from geoslo.live.director._throttle import pace_delay_s
from geoslo.live.director.rediscluster._engine import SLOTS, ClusterNode, parse_cluster_nodes
from geoslo.live.director.rediscluster._link import Credentials

__all__ = [
    "MigrationProgress",
    "MigrationResult",
    "Orphan",
    "RepairStep",
    "RepairReport",
    "add_master",
    "batch_bytes_for_rate",
    "decide_repairs",
    "find_orphans",
    "migrate_slots",
    "config_epochs",
    "epochs_settled",
    "plan_batches",
    "plan_rebalance",
    "remove_master",
    "repair",
]

Address = tuple[str, int]
MigrationOrder = Literal["spec", "assign-before-keys"]
_EPOCH_SETTLE_TIMEOUT_S = 10.0  # gossip pings every node within about a second


# --------------------------------------------------------------------------- parsing


def config_epochs(text: str | bytes) -> dict[str, int]:
    """Each node's config epoch from ``CLUSTER NODES`` (its seventh field)."""
    if isinstance(text, bytes):
        text = text.decode()
    fields = (line.split() for line in text.splitlines())
    return {f[0]: int(f[6]) for f in fields if len(f) >= 8}


def epochs_settled(target_current_epoch: int, own_epochs: Mapping[str, int]) -> bool:
    """Whether a target's ``SETSLOT NODE`` would take an epoch no master holds or knows.

    The target bumps its epoch *without consensus*: to one more than the greatest it knows
    of. If it has not yet heard of a master's newer epoch (the previous migration's target
    bumped a moment ago), it can end up at or below that master, and a gossip message of
    the source sent before it was told can then take a slot back: the source was told the
    target owns it and the target believes the source does. Settled: the target knows the
    greatest epoch, and one master alone holds it (a collision is resolved by gossip).
    """
    greatest = max(own_epochs.values(), default=0)
    holders = sum(1 for epoch in own_epochs.values() if epoch == greatest)
    return target_current_epoch >= greatest and holders <= 1


def _slots_of(node: ClusterNode) -> list[int]:
    return [s for lo, hi in node.slots for s in range(lo, hi + 1)]


def _claims(node: ClusterNode, slot: int) -> bool:
    return any(lo <= slot <= hi for lo, hi in node.slots)


# --------------------------------------------------------------------------- planning


def batch_bytes_for_rate(
    rate_bytes_per_s: float, max_batch_bytes: int, pace_interval_s: float = 0.05
) -> int:
    """Bytes per ``MIGRATE`` batch: what the rate sends in ``pace_interval_s``, capped.

    Small batches keep the pacing smooth (§5.4's throttled copy) and bound how long one
    ``MIGRATE`` blocks the source; the cap bounds it at high rates.
    """
    return int(max(1, min(max_batch_bytes, rate_bytes_per_s * pace_interval_s)))


def plan_batches(key_sizes: Sequence[tuple[bytes, int]], batch_bytes: int) -> list[list[bytes]]:
    """Split ``(key, size_bytes)`` in order into batches of at most ``batch_bytes``.

    A batch holds at least one key, so a key larger than the batch goes alone.
    """
    batches: list[list[bytes]] = []
    current: list[bytes] = []
    current_bytes = 0
    for key, size_bytes in key_sizes:
        if current and current_bytes + size_bytes > batch_bytes:
            batches.append(current)
            current, current_bytes = [], 0
        current.append(key)
        current_bytes += size_bytes
    if current:
        batches.append(current)
    return batches


def _even_shares(total: int, members: Sequence[str]) -> dict[str, int]:
    base, extra = divmod(total, len(members))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}


def plan_rebalance(
    owned: Mapping[str, Sequence[int]],
    joining: Sequence[str] = (),
    leaving: Sequence[str] = (),
) -> list[tuple[str, str, list[int]]]:
    """Moves ``(source, target, slots)`` that spread the slots evenly over the new masters.

    ``owned`` maps each master to its slots. A leaving master gives all of its slots, the
    others give only their excess, from the end of their ranges, so contiguous ranges stay
    contiguous; joining and under-loaded masters receive them.
    """
    members = sorted(m for m in {*owned, *joining} if m not in leaving)
    if not members:
        raise ValueError("plan_rebalance: no master would be left to own the slots")
    total = sum(len(s) for s in owned.values())
    shares = _even_shares(total, members)
    surplus: list[tuple[str, list[int]]] = []
    for node in sorted(owned):
        slots = sorted(owned[node])
        keep = 0 if node in leaving else shares.get(node, 0)
        if len(slots) > keep:
            surplus.append((node, slots[keep:]))
    deficits = [(m, shares[m] - len(owned.get(m, ()))) for m in members]
    moves: list[tuple[str, str, list[int]]] = []
    for target, need in deficits:
        while need > 0 and surplus:
            source, slots = surplus[0]
            taken, rest = slots[:need], slots[need:]
            moves.append((source, target, taken))
            need -= len(taken)
            if rest:
                surplus[0] = (source, rest)
            else:
                surplus.pop(0)
    return moves


RepairKind = Literal["finish", "roll-back", "assign"]


@dataclass(frozen=True)
class RepairStep:
    """What ``repair`` does to one slot, and why. ``keep``: the node whose copy a key found
    on both ends keeps (the slot's owner by the config epochs; None for an assignment)."""

    slot: int
    kind: RepairKind
    source: str | None  # node id the keys come from (finish) or the owner (roll-back)
    target: str | None  # node id that ends up owning the slot (None: any master)
    reason: str
    keep: str | None = None


def _owner_of(slot: int, selves: Sequence[ClusterNode], epochs: Mapping[str, int]) -> str | None:
    """The claimant of ``slot`` with the highest config epoch (how Redis settles it)."""
    claimants = [n.node_id for n in selves if _claims(n, slot)]
    return max(claimants, key=lambda n: (epochs.get(n, 0), n), default=None)


def decide_repairs(
    selves: Sequence[ClusterNode],
    epochs: Mapping[str, int],
    keys_in_slot: Mapping[tuple[str, int], int],
) -> list[RepairStep]:
    """Repair decisions from each master's own ``CLUSTER NODES`` line (its ``myself``).

    ``epochs`` are the masters' config epochs; ``keys_in_slot[(node_id, slot)]`` counts
    a node's keys in a slot (missing: 0). The rule, per slot:

    * half-migrated from S to T, it **finishes** (keys to T, T owns it) if T already owns
      it or holds any of its keys;
    * otherwise no key has left S and it **rolls back** (markers cleared, S keeps it);
    * either way a key found on both S and T keeps the copy of the slot's **owner** (the
      claimant with the greatest config epoch, ``keep``): a crash inside a ``MIGRATE``
      leaves the batch on both, and the owner (S, restarted) then acknowledges writes to
      those keys, since it has them; T's copy never sees a write while S has the key
      (S answers ``ASK`` only for keys it lacks). ``redis-cli --cluster fix`` keeps the
      owner's copy too;
    * no master claims it: it is **assigned** to the master holding most of its keys
      (``target`` None when none holds any: ``repair`` picks the least loaded master).
    """
    steps: dict[int, RepairStep] = {}
    for node in selves:
        for slot, target in node.migrating.items():
            step = _decide_open(slot, node.node_id, target, selves, epochs, keys_in_slot)
            steps.setdefault(slot, step)
        for slot, source in node.importing.items():
            step = _decide_open(slot, source, node.node_id, selves, epochs, keys_in_slot)
            steps.setdefault(slot, step)
    claimed = [False] * SLOTS
    for node in selves:
        for lo, hi in node.slots:
            claimed[lo : hi + 1] = [True] * (hi - lo + 1)
    for slot in (s for s in range(SLOTS) if not claimed[s]):
        holders = {n.node_id: keys_in_slot.get((n.node_id, slot), 0) for n in selves}
        holders = {n: c for n, c in holders.items() if c > 0}
        target = max(sorted(holders), key=holders.__getitem__) if holders else None
        steps[slot] = RepairStep(slot, "assign", None, target, "no master owns it")
    return [steps[s] for s in sorted(steps)]


def _decide_open(
    slot: int,
    source: str,
    target: str,
    selves: Sequence[ClusterNode],
    epochs: Mapping[str, int],
    keys_in_slot: Mapping[tuple[str, int], int],
) -> RepairStep:
    owner = _owner_of(slot, selves, epochs)
    keep = owner or source
    if owner == target:
        return RepairStep(slot, "finish", source, target, "the target already owns it", keep)
    if keys_in_slot.get((target, slot), 0) > 0:
        reason = "the target holds some of its keys"
        return RepairStep(slot, "finish", source, target, reason, keep)
    return RepairStep(slot, "roll-back", keep, None, "no key reached the target", keep)


@dataclass(frozen=True)
class Orphan:
    """Keys of ``slot`` on ``holder``, a master that does not own it; they go to ``owner``,
    whose copy of a key on both wins."""

    slot: int
    holder: str
    owner: str
    keys: int


def find_orphans(
    selves: Sequence[ClusterNode],
    epochs: Mapping[str, int],
    keys_in_slot: Mapping[tuple[str, int], int],
) -> list[Orphan]:
    """Keys on a master that does not own their slot (by the config epochs), slot by slot:
    a write that followed an ``ASK`` just before a roll-back cleared the marker."""
    orphans = []
    for (node_id, slot), count in sorted(keys_in_slot.items(), key=lambda item: item[0][::-1]):
        owner = _owner_of(slot, selves, epochs)
        if count and owner is not None and owner != node_id:
            orphans.append(Orphan(slot, node_id, owner, count))
    return orphans


# --------------------------------------------------------------------------- node access


@dataclass
class _Node:
    """An admin connection to one node, with its id and the cluster's credentials (the
    nodes it reaches from here, and its ``MIGRATE`` targets, ask for the same)."""

    address: Address
    node_id: str
    conn: aioredis.Redis
    credentials: Credentials

    async def cmd(self, *args: Any) -> Any:
        return await self.conn.execute_command(*args)


def _address_of(node: Any) -> Address:
    if isinstance(node, tuple):
        return (str(node[0]), int(node[1]))
    return (str(node.host), int(node.port))


async def _connect(node: Any, credentials: Credentials, timeout_s: float = 10.0) -> _Node:
    host, port = _address_of(node)
    kwargs = credentials.redis_kwargs()
    conn = aioredis.Redis(host=host, port=port, socket_timeout=timeout_s, **kwargs)
    try:
        node_id = (await conn.execute_command("CLUSTER", "MYID")).decode()
    except BaseException:
        await conn.aclose()
        raise
    return _Node((host, port), node_id, conn, credentials)


def _migrate_auth(credentials: Credentials) -> tuple[str, ...]:
    """``MIGRATE``'s own login at the target (Redis 6+): ``AUTH password`` as the default
    user, ``AUTH2 username password`` as an ACL user, nothing without a password. (TLS
    between nodes is the cluster's own setting, ``tls-cluster``.)"""
    if credentials.password is None:
        return ()
    if credentials.username is None:
        return ("AUTH", credentials.password)
    return ("AUTH2", credentials.username, credentials.password)


async def _cluster_entries(node: _Node) -> list[ClusterNode]:
    return parse_cluster_nodes((await node.cmd("CLUSTER", "NODES")).decode())


async def _close(nodes: Iterable[_Node]) -> None:
    for node in nodes:
        await node.conn.aclose()


# --------------------------------------------------------------------------- migration


@dataclass(frozen=True)
class MigrationResult:
    """What one ``migrate_slots`` call moved (observed rate: §5.4's copy-duration model)."""

    slots_moved: int
    keys_moved: int
    bytes_moved: int
    duration_s: float
    rate_bytes_per_s: float  # the specified rate
    cancelled: bool

    @property
    def observed_bytes_per_s(self) -> float:
        return self.bytes_moved / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class MigrationProgress:
    """Live counters of a migration; pass one in to read them after a cancel."""

    rate_bytes_per_s: float = 0.0
    started_s: float = field(default_factory=time.monotonic)
    slots: int = 0
    keys: int = 0
    bytes: int = 0
    paced: bool = True
    cancelled: bool = False

    def result(self) -> MigrationResult:
        return MigrationResult(
            slots_moved=self.slots,
            keys_moved=self.keys,
            bytes_moved=self.bytes,
            duration_s=time.monotonic() - self.started_s,
            rate_bytes_per_s=self.rate_bytes_per_s,
            cancelled=self.cancelled,
        )


async def _key_sizes(
    node: _Node, keys: Sequence[bytes], asking: bool = False
) -> list[tuple[bytes, int]]:
    """Each key's size in bytes as the node stores it (``MEMORY USAGE``, one pipeline)."""
    async with node.conn.pipeline(transaction=False) as pipe:
        for key in keys:
            if asking:
                pipe.execute_command("ASKING")
            pipe.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")
        replies = await pipe.execute()
    sizes = replies[1::2] if asking else replies
    return [(k, int(s or 0)) for k, s in zip(keys, sizes, strict=True)]


async def _local(node: _Node, asking: bool, *args: Any) -> Any:
    """A keyed command on ``node``; ``asking`` lets a node importing the slot serve it."""
    if not asking:
        return await node.cmd(*args)
    async with node.conn.pipeline(transaction=False) as pipe:
        pipe.execute_command("ASKING")
        pipe.execute_command(*args)
        return (await pipe.execute())[1]


async def _migrate_batch(
    source: _Node,
    target: _Node,
    keys: Sequence[bytes],
    timeout_ms: int,
    asking: bool = False,
    keep_source: bool = True,
) -> None:
    """``MIGRATE`` a batch. A key already on the target keeps the owner's copy: the
    source's (``REPLACE``) when the source owns the slot, else the target's."""
    host, port = target.address
    auth = _migrate_auth(target.credentials)
    if keep_source:
        replace = ("MIGRATE", host, port, "", 0, timeout_ms, "REPLACE", *auth, "KEYS")
        await _local(source, asking, *replace, *keys)
        return
    migrate = ("MIGRATE", host, port, "", 0, timeout_ms, *auth, "KEYS")
    try:
        await _local(source, asking, *migrate, *keys)
    except ResponseError as err:
        if "BUSYKEY" not in str(err):
            raise
        # Keys restored before the clash were deleted on the source; the rest are on both,
        # and the target (the owner) keeps its copy. ASKING: the target may be importing.
        on_target = [bool(await _local(target, True, "EXISTS", k)) for k in keys]
        for key, there in zip(keys, on_target, strict=True):
            if there:  # ASK: the MIGRATE moved it, it is gone from a migrating source
                with contextlib.suppress(AskError):
                    await _local(source, asking, "DEL", key)
        left = [k for k, there in zip(keys, on_target, strict=True) if not there]
        if left:
            await _local(source, asking, *migrate, *left)


async def _move_keys(
    source: _Node,
    target: _Node,
    slot: int,
    progress: MigrationProgress,
    batch_bytes: int,
    keys_per_scan: int,
    timeout_ms: int,
    asking: bool = False,
    keep_source: bool = True,
) -> None:
    """Move every key of ``slot`` from source to target in batches paced to the rate; a key
    on both keeps the source's copy if ``keep_source`` (the source owns the slot)."""
    while keys := await source.cmd("CLUSTER", "GETKEYSINSLOT", slot, keys_per_scan):
        key_sizes = await _key_sizes(source, keys, asking)
        size_of = dict(key_sizes)
        for batch in plan_batches(key_sizes, batch_bytes):
            if progress.paced:
                elapsed_s = time.monotonic() - progress.started_s
                await asyncio.sleep(
                    pace_delay_s(progress.bytes, elapsed_s, progress.rate_bytes_per_s)
                )
            await _migrate_batch(source, target, batch, timeout_ms, asking, keep_source)
            progress.keys += len(batch)
            progress.bytes += sum(size_of[k] for k in batch)


async def _setslots(node: _Node, slots: Sequence[int], *args: Any) -> None:
    """``CLUSTER SETSLOT <slot> <args>`` for each slot, in one pipeline (in order)."""
    async with node.conn.pipeline(transaction=False) as pipe:
        for slot in slots:
            pipe.execute_command("CLUSTER", "SETSLOT", slot, *args)
        await pipe.execute()


async def _assign(slots: Sequence[int], owner: _Node, others: Sequence[_Node]) -> None:
    """``SETSLOT NODE`` on the new owner first (it bumps its epoch), then on the others."""
    await _setslots(owner, slots, "NODE", owner.node_id)
    await asyncio.gather(*(_tell(node, slots, owner) for node in others))


async def _tell(node: _Node, slots: Sequence[int], owner: _Node) -> None:
    try:
        await _setslots(node, slots, "NODE", owner.node_id)
    except (OSError, aioredis.ConnectionError):
        pass  # gossip carries the new owner's higher epoch to a node that is down
    except ResponseError as error:
        # A master that gave away its last slot may already have turned into a replica
        # (cluster-allow-replica-migration); a replica follows its master's map. A node
        # that joined a moment ago may not know the owner yet ("Unknown node"): gossip
        # brings it both. (The source knows the owner: it was MIGRATING to it.)
        if "only with masters" not in str(error) and "Unknown node" not in str(error):
            raise


async def _other_masters(source: _Node, exclude: set[str]) -> list[_Node]:
    entries = await _cluster_entries(source)
    wanted = [
        e
        for e in entries
        if e.is_master
        and e.node_id not in exclude
        and "fail" not in e.flags
        and "handshake" not in e.flags
        and "noaddr" not in e.flags
    ]
    nodes = []
    for e in wanted:
        try:
            nodes.append(await _connect((e.host, e.port), source.credentials))
        except (OSError, aioredis.ConnectionError):
            continue
    return nodes


async def _migrate_group(
    source: _Node,
    target: _Node,
    others: Sequence[_Node],
    slots: Sequence[int],
    progress: MigrationProgress,
    order: MigrationOrder,
    **move: int,
) -> None:
    """A few slots at once, each in the specification's order (one pipeline per step)."""
    await _setslots(target, slots, "IMPORTING", source.node_id)
    await _setslots(source, slots, "MIGRATING", target.node_id)
    if order == "assign-before-keys":
        # Deliberately broken (for the safety tests only): the target and the other
        # masters take the slots before their keys moved.
        await _assign(slots, target, others)
    for slot in slots:
        await _move_keys(source, target, slot, progress, **move)
    await _assign(slots, target, [source, *others])
    progress.slots += len(slots)


def _check_owner(source: ClusterNode, target: _Node, slots: Sequence[int]) -> None:
    """Refuse before any marker is set: a slot the source does not own, or no move."""
    if target.node_id == source.node_id:
        raise InputError("target", "is the source; a migration needs two masters")
    foreign = [s for s in slots if not _claims(source, s)]
    if foreign:
        shown = ", ".join(map(str, foreign[:5])) + (" …" if len(foreign) > 5 else "")
        raise InputError("slots", f"{len(foreign)} not owned by the source ({shown})")


def _groups(slots: Iterable[int], size: int) -> list[list[int]]:
    ordered = list(slots)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


async def migrate_slots(
    source: Any,
    target: Any,
    slots: Iterable[int],
    bytes_per_s: float,
    *,
    max_batch_bytes: int = 64 * 1024,
    keys_per_scan: int = 256,
    migrate_timeout_ms: int = 5000,
    slots_per_step: int = 16,
    progress: MigrationProgress | None = None,
    order: MigrationOrder = "spec",
    credentials: Credentials | None = None,
) -> MigrationResult:
    """Move ``slots`` from ``source`` to ``target`` (addresses or ``NodeInfo``), paced.

    The copy runs at most at ``bytes_per_s`` (§5.4). Slots go ``slots_per_step`` at a
    time: each step's ``SETSLOT`` commands share one pipeline per node (a slot without
    keys then costs a fraction of a round trip). Cancelled (§5.6's overrun), it finishes
    the step in progress unpaced and re-raises: the slots up to it are then on the target,
    the others untouched on the source, and ``progress`` (if given) holds what moved.
    ``order="assign-before-keys"`` breaks the specification's order, for the safety
    tests only. ``credentials``: the cluster's AUTH and TLS (None: none).
    """
    if bytes_per_s <= 0:
        raise InputError("bytes_per_s", f"must be > 0, got {bytes_per_s}")
    slots = list(slots)
    progress = progress or MigrationProgress()
    progress.rate_bytes_per_s, progress.started_s = bytes_per_s, time.monotonic()
    credentials = credentials or Credentials()
    src, dst = await _connect(source, credentials), await _connect(target, credentials)
    batch_bytes = batch_bytes_for_rate(bytes_per_s, max_batch_bytes)
    move = dict(batch_bytes=batch_bytes, keys_per_scan=keys_per_scan, timeout_ms=migrate_timeout_ms)
    others: list[_Node] = []
    try:
        _check_owner(await _myself(src), dst, slots)
        others = await _other_masters(src, {src.node_id, dst.node_id})
        await _await_epochs_settled(dst, [src, dst, *others], _EPOCH_SETTLE_TIMEOUT_S)
        for group in _groups(slots, slots_per_step):
            step = _migrate_group(src, dst, others, group, progress, order, **move)
            await _finish_even_if_cancelled(asyncio.ensure_future(step), progress)
        await _reclaim(dst, slots)
    finally:
        await _close([src, dst, *others])
    return progress.result()


async def _finish_even_if_cancelled(task: asyncio.Future, progress: MigrationProgress) -> None:
    """Await ``task``; on cancel let it finish unpaced, then re-raise the cancel."""
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            progress.cancelled, progress.paced = True, False
            if task.done():
                break
    if progress.cancelled:
        task.result()
        raise asyncio.CancelledError


# --------------------------------------------------------------------------- masters


async def _owned_slots(seed: _Node) -> tuple[list[ClusterNode], dict[str, list[int]]]:
    entries = await _cluster_entries(seed)
    owned = {e.node_id: _slots_of(e) for e in entries if e.is_master and e.slots}
    return entries, owned


async def _run_moves(
    entries: Sequence[ClusterNode],
    moves: Sequence[tuple[str, str, list[int]]],
    bytes_per_s: float,
    **options: Any,
) -> list[MigrationResult]:
    address = {e.node_id: (e.host, e.port) for e in entries}
    results = []
    for source, target, slots in moves:
        results.append(
            await migrate_slots(address[source], address[target], slots, bytes_per_s, **options)
        )
    return results


async def add_master(
    seed: Any,
    new_master: Any,
    bytes_per_s: float,
    *,
    credentials: Credentials | None = None,
    **options: Any,
) -> list[MigrationResult]:
    """Give ``new_master`` (a standby or a fresh node already met) an even share of slots.

    The slots come from the masters with more than their share (``plan_rebalance``), each
    move a paced ``migrate_slots`` (the Director's add-server then move, §5.6), with the
    cluster's ``credentials`` (None: none).
    """
    credentials = credentials or Credentials()
    seed_node, new = await _connect(seed, credentials), await _connect(new_master, credentials)
    try:
        entries, owned = await _owned_slots(seed_node)
    finally:
        await _close([seed_node, new])
    if new.node_id not in {e.node_id for e in entries}:
        raise ValueError(f"add_master: {new.address} is not in the cluster; CLUSTER MEET it first")
    moves = plan_rebalance(owned, joining=[new.node_id])
    return await _run_moves(entries, moves, bytes_per_s, credentials=credentials, **options)


async def remove_master(
    seed: Any,
    leaving: Any,
    bytes_per_s: float,
    *,
    credentials: Credentials | None = None,
    **options: Any,
) -> list[MigrationResult]:
    """Drain every slot of ``leaving`` to the other masters, then drop it and its replicas.

    The drained node and its replicas are reset (``CLUSTER RESET HARD``: they forget the
    cluster, so they cannot gossip their way back), then every other node
    ``CLUSTER FORGET``s them. Stopping their processes is the caller's (the testbed's).
    ``credentials``: the cluster's (None: none).
    """
    credentials = credentials or Credentials()
    seed_node, gone = await _connect(seed, credentials), await _connect(leaving, credentials)
    try:
        entries, owned = await _owned_slots(seed_node)
    finally:
        await _close([seed_node])
    owned.setdefault(gone.node_id, [])
    # Emptied, it must stay a master until reset, not turn into a replica of a receiver.
    await gone.cmd("CONFIG", "SET", "cluster-allow-replica-migration", "no")
    try:
        moves = plan_rebalance(owned, leaving=[gone.node_id])
        results = await _run_moves(entries, moves, bytes_per_s, credentials=credentials, **options)
    finally:
        await _close([gone])
    removed = [e for e in entries if e.node_id == gone.node_id or e.master_id == gone.node_id]
    await _forget(entries, removed, credentials)
    return results


async def _forget(
    entries: Sequence[ClusterNode], removed: Sequence[ClusterNode], credentials: Credentials
) -> None:
    removed_ids = {e.node_id for e in removed}
    for entry in removed:
        try:
            node = await _connect((entry.host, entry.port), credentials)
        except (OSError, aioredis.ConnectionError):
            continue  # already stopped
        try:
            await node.cmd("CLUSTER", "RESET", "HARD")
        finally:
            await _close([node])
    for entry in entries:
        if entry.node_id in removed_ids or "fail" in entry.flags:
            continue
        node = await _connect((entry.host, entry.port), credentials)
        try:
            for node_id in removed_ids:
                try:
                    await node.cmd("CLUSTER", "FORGET", node_id)
                except ResponseError as err:
                    if "Unknown node" not in str(err):
                        raise
        finally:
            await _close([node])


# --------------------------------------------------------------------------- repair


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` found and did (``dry_run``: what it would do, nothing done).

    ``steps`` are the slots repaired, ``orphans`` the stranded keys found (moved to their
    owner unless a dry run); ``foreign`` the decisions for open slots outside the slots
    ``repair`` was given, left as they are."""

    steps: tuple[RepairStep, ...]
    keys_moved: int
    orphan_keys_moved: int
    orphans: tuple[Orphan, ...] = ()
    foreign: tuple[RepairStep, ...] = ()
    dry_run: bool = False


_UNREACHABLE = (OSError, aioredis.ConnectionError, aioredis.TimeoutError)


async def _masters(seed: Any, credentials: Credentials) -> list[_Node]:
    """Admin connections to every master the seed knows; all must answer."""
    host, port = _address_of(seed)
    try:
        seed_node = await _connect(seed, credentials)
    except _UNREACHABLE as err:
        raise TestbedError(f"repair: the seed node {host}:{port} does not answer ({err})") from err
    try:
        entries = await _cluster_entries(seed_node)
    finally:
        await _close([seed_node])
    nodes = []
    for entry in entries:
        if not entry.is_master or "handshake" in entry.flags or "noaddr" in entry.flags:
            continue
        try:
            nodes.append(await _connect((entry.host, entry.port), credentials))
        except _UNREACHABLE as err:
            await _close(nodes)
            raise TestbedError(
                f"repair: master {entry.node_id[:8]} at {entry.host}:{entry.port} does not "
                f"answer ({err}); restart it (its AOF and nodes.conf keep its keys and "
                "markers) and repair again"
            ) from err
    return nodes


async def _self_views(nodes: Sequence[_Node]) -> tuple[list[ClusterNode], dict[str, int]]:
    """Each master's own line (its slots and markers) and its own config epoch."""
    selves, epochs = [], {}
    for node in nodes:
        text = (await node.cmd("CLUSTER", "NODES")).decode()
        selves.append(next(e for e in parse_cluster_nodes(text) if "myself" in e.flags))
        epochs[node.node_id] = config_epochs(text)[node.node_id]
    return selves, epochs


async def _current_epoch(node: _Node) -> int:
    info = (await node.cmd("CLUSTER", "INFO")).decode()
    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
    return int(fields["cluster_current_epoch"])


async def _await_epochs_settled(target: _Node, masters: Sequence[_Node], timeout_s: float) -> None:
    """Wait (bounded) until ``epochs_settled``; gossip settles it within a few pings."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _, own = await _self_views(masters)
            if epochs_settled(await _current_epoch(target), own):
                return
        except (OSError, aioredis.ConnectionError, aioredis.TimeoutError):
            return  # a master that does not answer: gossip carries the epochs later
        await asyncio.sleep(0.05)


async def _reclaim(target: _Node, slots: Sequence[int]) -> None:
    """Claim again, with the greatest epoch, any moved slot the target's view lost."""
    view = await _myself(target)
    lost = [s for s in slots if not _claims(view, s)]
    if lost:
        await target.cmd("CLUSTER", "BUMPEPOCH")
        await _setslots(target, lost, "NODE", target.node_id)


async def _myself(node: _Node) -> ClusterNode:
    return next(e for e in await _cluster_entries(node) if "myself" in e.flags)


async def _key_counts(
    nodes: Sequence[_Node], slots: Iterable[int] = range(SLOTS)
) -> dict[tuple[str, int], int]:
    """Every master's key count in each of ``slots`` (one pipeline per master)."""
    slots = list(slots)
    counts: dict[tuple[str, int], int] = {}
    for node in nodes:
        async with node.conn.pipeline(transaction=False) as pipe:
            for slot in slots:
                pipe.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
            replies = await pipe.execute()
        counts.update(
            {(node.node_id, s): int(c) for s, c in zip(slots, replies, strict=True) if int(c)}
        )
    return counts


def _slots_to_count(selves: Sequence[ClusterNode], scope: set[int] | None) -> Iterable[int]:
    """All slots, or (scoped) the scope's, the marked ones and the unowned ones: what the
    decisions on the scope and the report of the open slots outside it need."""
    if scope is None:
        return range(SLOTS)
    claimed = [False] * SLOTS
    for node in selves:
        for lo, hi in node.slots:
            claimed[lo : hi + 1] = [True] * (hi - lo + 1)
    marked = {s for n in selves for s in (*n.migrating, *n.importing)}
    return sorted(scope | marked | {s for s in range(SLOTS) if not claimed[s]})


async def repair(
    seed: Any,
    *,
    slots: Iterable[int] | None = None,
    dry_run: bool = False,
    bytes_per_s: float | None = None,
    serving_timeout_s: float = 30.0,
    log: Callable[[str], Any] | None = None,
    credentials: Credentials | None = None,
) -> RepairReport:
    """Finish or roll back every half-migrated slot, assign unowned ones, rehome orphans.

    For after a crash of the controller or of a node (restarted from its AOF and
    nodes.conf, which keep its keys and its ``MIGRATING``/``IMPORTING`` markers). Every
    master must answer. The decisions are ``decide_repairs``'; a key on two nodes keeps
    the copy of its slot's owner. ``slots`` limits what is touched (None: every slot):
    open slots outside it are only reported (``RepairReport.foreign``). ``dry_run``
    decides and reports, and changes nothing. ``bytes_per_s`` paces the keys it moves
    (None: unpaced). Keys left on a master that does not own their slot (an
    ``ASK``-redirected write racing a roll-back) go to the owner; the owner's copy wins.
    Unowned slots are assigned first; keyed commands then wait (up to ``serving_timeout_s``)
    until every master says ``cluster_state:ok`` (a restarted master refuses them at first).
    ``credentials``: the cluster's AUTH and TLS (None: none), for every connection and
    ``MIGRATE``.
    """
    say = log or (lambda _message: None)
    scope = None if slots is None else set(slots)
    nodes = await _masters(seed, credentials or Credentials())
    by_id = {n.node_id: n for n in nodes}
    progress = MigrationProgress(rate_bytes_per_s=bytes_per_s or 0.0, paced=bytes_per_s is not None)
    try:
        selves, epochs = await _self_views(nodes)
        counts = await _key_counts(nodes, _slots_to_count(selves, scope))
        decided = decide_repairs(selves, epochs, counts)
        steps = [s for s in decided if scope is None or s.slot in scope]
        foreign = tuple(s for s in decided if scope is not None and s.slot not in scope)
        if dry_run:
            stepped = {s.slot for s in steps}
            orphans = [
                o
                for o in find_orphans(selves, epochs, counts)
                if (scope is None or o.slot in scope) and o.slot not in stepped
            ]
            return RepairReport(tuple(steps), 0, 0, tuple(orphans), foreign, dry_run=True)
        steps.sort(key=lambda step: step.kind != "assign")
        waited = False
        for step in steps:
            if step.kind != "assign" and not waited:
                waited = await _wait_serving(nodes, serving_timeout_s)
            say(f"repair slot {step.slot}: {step.kind} ({step.reason})")
            await _apply_step(step, by_id, nodes, progress)
        await _wait_serving(nodes, serving_timeout_s)
        keys_moved = progress.keys
        orphans = await _rehome_orphans(nodes, progress, say, scope)
    finally:
        await _close(nodes)
    moved = progress.keys - keys_moved
    return RepairReport(tuple(steps), keys_moved, moved, tuple(orphans), foreign)


_MOVE = dict(batch_bytes=64 * 1024, keys_per_scan=256, timeout_ms=5000)


async def _wait_serving(nodes: Sequence[_Node], timeout_s: float) -> bool:
    """Until every master says ``cluster_state:ok``; True, or TestbedError at the timeout."""
    deadline = time.monotonic() + timeout_s
    pending = list(nodes)
    while pending:
        pending = [n for n in pending if b"cluster_state:ok" not in await n.cmd("CLUSTER", "INFO")]
        if pending and time.monotonic() > deadline:
            names = ", ".join(f"{h}:{p}" for h, p in (n.address for n in pending))
            raise TestbedError(f"repair: {names} not serving (cluster_state) after {timeout_s} s")
        await asyncio.sleep(0.05 if pending else 0)
    return True


async def _apply_step(
    step: RepairStep,
    by_id: Mapping[str, _Node],
    nodes: Sequence[_Node],
    progress: MigrationProgress,
) -> None:
    slot = step.slot
    if step.kind == "assign":
        owner = by_id[step.target] if step.target else await _least_loaded(nodes)
        await owner.cmd("CLUSTER", "ADDSLOTS", slot)
        return
    unknown = {step.source, step.target} - {None, *by_id}
    if step.kind == "roll-back" or unknown:
        # A marker naming a node no longer in the cluster can only be cleared.
        owner = by_id.get(step.source or "")
        for node in ([owner] if owner else []) + [n for n in nodes if n is not owner]:
            await node.cmd("CLUSTER", "SETSLOT", slot, "STABLE")  # the owner first: no new ASK
        return
    source, target = by_id[step.source or ""], by_id[step.target or ""]
    if _claims(await _myself(source), slot):
        if not _claims(await _myself(target), slot):  # an owner cannot be IMPORTING
            await target.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            await source.cmd("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        keep_source = step.keep != target.node_id
        await _move_keys(source, target, slot, progress, keep_source=keep_source, **_MOVE)
    elif int(await source.cmd("CLUSTER", "COUNTKEYSINSLOT", slot)):
        await _evacuate(source, target, slot, progress)
    await _assign([slot], target, [n for n in nodes if n is not target])


async def _least_loaded(nodes: Sequence[_Node]) -> _Node:
    """The master with the fewest slots among those with any (standbys stay empty)."""
    loads = []
    for node in nodes:
        count = sum(hi - lo + 1 for lo, hi in (await _myself(node)).slots)
        loads.append((count == 0, count, node.node_id, node))
    return min(loads, key=lambda t: t[:3])[3]


async def _evacuate(holder: _Node, owner: _Node, slot: int, progress: MigrationProgress) -> None:
    """Move a non-owner's keys of ``slot`` to its owner, whose copy of a key on both wins
    (the holder is marked importing so that ``ASKING`` reaches its keys)."""
    await holder.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", owner.node_id)
    try:
        await _move_keys(holder, owner, slot, progress, asking=True, keep_source=False, **_MOVE)
    finally:
        await holder.cmd("CLUSTER", "SETSLOT", slot, "STABLE")


async def _rehome_orphans(
    nodes: Sequence[_Node],
    progress: MigrationProgress,
    say: Callable[[str], Any],
    scope: set[int] | None,
) -> list[Orphan]:
    selves, epochs = await _self_views(nodes)
    counts = await _key_counts(nodes, _slots_to_count(selves, scope))
    by_id = {n.node_id: n for n in nodes}
    found = [o for o in find_orphans(selves, epochs, counts) if scope is None or o.slot in scope]
    for orphan in found:
        holder, owner = orphan.holder[:8], orphan.owner[:8]
        say(f"repair slot {orphan.slot}: {orphan.keys} orphan key(s) on {holder} go to {owner}")
        await _evacuate(by_id[orphan.holder], by_id[orphan.owner], orphan.slot, progress)
    return found
