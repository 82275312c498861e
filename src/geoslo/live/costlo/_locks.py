"""CosTLO's lock and version service, one per region (§5.4).

Per object it holds the latest version number and two locks: L_S ("S", synchronous PUTs
to the local storage service) and L_A ("A", asynchronous propagation to the remaining
copies), each held by an owner id under a lease. State lives in memory with a persistent
backup: an append-only JSON-lines file, flushed and fsync'd before a request is answered,
replayed (and rewritten as one snapshot) on start. ``acquire`` waits until the lock is
free, in arrival order, up to a timeout; an owner that already holds the lock gets it at
once, which is how a VM library that restarted takes back the locks of its unfinished
operations. A holder renews its lease; a lease not renewed in time expires when someone
waits for the lock, and an expired L_S raises the object's version by one (the holder may
have written version v+1). A service started without a backup has lost its state: it says
so (``known: false``) for every object it has not seen since, and the VM library then
learns the version from storage.

Protocol (JSON lines, see ``_jsonlines``): ``acquire`` (kind, key, owner, lease_s,
timeout_s) -> version, known (or timed_out, holder); ``renew`` (kind, key, owner,
lease_s) -> held; ``release`` (kind, key, owner, version or null) -> version, held;
``version`` (key); ``holder`` (kind, key) -> owner; ``hedge`` (pool, budget, primaries,
extra) -> admitted: a hedge budget shared by a fleet (:class:`FleetBudgets`).

Where it listens is its configuration's ``host`` (loopback by default). With a
``secret_file`` every request must be sealed with that secret and addressed to
``SERVICE_NAME`` (``_jsonlines.Sealing``); other requests are refused and their connection
closed. A service beyond loopback must have one: nobody else takes a lock or sets a version.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from geoslo.control.costlo._budget import BudgetWindow
from geoslo.control.costlo.types import HedgeBudget
from geoslo.errors import InputError, LockTimeoutError, TestbedError
from geoslo.live._processes import JsonConfigFile
from geoslo.live.costlo._jsonlines import (
    JsonLineClient,
    Sealing,
    listener_sealing,
    run_until_sigterm,
    serve_until,
)

__all__ = [
    "LOCK_KINDS",
    "LockTable",
    "LockService",
    "LockClient",
    "LockGrant",
    "LockServiceConfig",
    "LockEndpoint",
    "serve_lock_service",
    "run_lock_service",
    "read_json_lines",
    "initialise_backup",
]

SERVICE_NAME = "costlo-locks"  # what a sealed request is addressed to
MAX_POOLS = 1_000  # hedge budgets one service keeps (memory stays bounded)
LOCK_KINDS = ("S", "A")  # §5.4: L_S for synchronous PUTs, L_A for asynchronous ones
RESTART_POLL_S = 0.05  # how often a client asks a restarting lock service again
DEFAULT_LEASE_S = 5.0  # ours: §5.4 assumes a dead VM restarts; a lease bounds the wait if not


def _check_kind(kind: str) -> None:
    if kind not in LOCK_KINDS:
        raise InputError("kind", f"lock kind must be 'S' or 'A', got {kind!r}")


class LockTable:
    """The service's state as a pure state machine: versions and lock holders.

    :meth:`acquire` answers ``"granted"`` (the state changed), ``"held"`` (the owner
    already holds it) or ``"busy"``; :meth:`apply` replays a record of the backup.
    ``complete`` is False when the state was lost: then only the objects in ``versions``
    have a known version (:meth:`known`).
    """

    def __init__(self, complete: bool = True) -> None:
        self.versions: dict[str, int] = {}
        self.holders: dict[tuple[str, str], str] = {}
        self.complete = complete

    def version(self, key: str) -> int:
        return self.versions.get(key, 0)

    def known(self, key: str) -> bool:
        """Whether the version of ``key`` is known (always, unless the state was lost)."""
        return self.complete or key in self.versions

    def holder(self, kind: str, key: str) -> str | None:
        return self.holders.get((kind, key))

    def acquire(self, kind: str, key: str, owner: str) -> str:
        _check_kind(kind)
        current = self.holders.get((kind, key))
        if current == owner:
            return "held"
        if current is not None:
            return "busy"
        self.holders[(kind, key)] = owner
        return "granted"

    def release(self, kind: str, key: str, owner: str, version: int | None = None) -> None:
        """Free the lock; set the object's version when given (it never goes back)."""
        _check_kind(kind)
        current = self.holders.get((kind, key))
        if current != owner:
            raise InputError("owner", f"{owner!r} does not hold L_{kind} of {key!r} ({current!r})")
        del self.holders[(kind, key)]
        self.note_version(key, version)

    def note_version(self, key: str, version: int | None) -> None:
        """Raise the object's version to ``version`` (a written version is never above it)."""
        if version is not None:
            self.versions[key] = max(self.version(key), int(version))

    def expire(self, kind: str, key: str) -> str | None:
        """Take the lock from a holder whose lease ran out; the former holder. An expired
        L_S raises a known version by one: its holder may have written v+1 (§5.4)."""
        _check_kind(kind)
        owner = self.holders.pop((kind, key), None)
        if owner is not None and kind == "S" and self.known(key):
            self.versions[key] = self.version(key) + 1
        return owner

    def snapshot(self) -> dict:
        return {
            "op": "snapshot",
            "versions": dict(self.versions),
            "holders": [[kind, key, owner] for (kind, key), owner in self.holders.items()],
            "complete": self.complete,
        }

    def apply(self, record: dict) -> None:
        """Replay one backup record (``grant``, ``release``, ``version``, ``expire`` or
        ``snapshot``)."""
        op = record.get("op")
        if op == "grant":
            self.holders[(record["kind"], record["key"])] = record["owner"]
        elif op == "release":
            self.release(record["kind"], record["key"], record["owner"], record.get("version"))
        elif op == "version":
            self.note_version(record["key"], record["version"])
        elif op == "expire":
            self.expire(record["kind"], record["key"])
        elif op == "snapshot":
            self.versions = {k: int(v) for k, v in record["versions"].items()}
            self.holders = {(kind, key): owner for kind, key, owner in record["holders"]}
            self.complete = bool(record.get("complete", True))
        else:
            raise InputError("op", f"unknown lock record {record!r}")


def read_json_lines(path: Path) -> list[dict]:
    """Every complete record of an append-only JSON-lines file; a torn last line (a crash
    mid-write) is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            break  # only the last line can be torn: nothing after it was acknowledged
    return records


def fsync_append(file, record: dict) -> None:
    """Append one record and make it durable before returning."""
    file.write(json.dumps(record, separators=(",", ":")) + "\n")
    file.flush()
    os.fsync(file.fileno())


def initialise_backup(backup_path: Path) -> None:
    """Write the backup of a new deployment: no object, state complete. A service that
    starts without any backup treats its state as lost (``LockTable.complete`` False)."""
    path = Path(backup_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as file:
        fsync_append(file, LockTable().snapshot())


class FleetBudgets:
    """Hedge budgets shared by many clients (issue 38, item 7): one ``BudgetWindow`` per
    pool, on this service's clock. A request ``{"op": "hedge", "pool", "budget",
    "primaries", "extra"}`` deposits the client's primaries since its last request, then
    asks for ``extra`` requests (0: a deposit only). Kept in memory: a restarted service
    starts every window empty (the budget is a load limit, not a safety property)."""

    def __init__(self, max_pools: int = MAX_POOLS) -> None:
        self.windows: dict[str, BudgetWindow] = {}
        self.max_pools = max_pools

    def ask(self, message: dict) -> bool:
        pool, budget = str(message["pool"]), HedgeBudget(**message["budget"])
        primaries, extra = int(message["primaries"]), int(message["extra"])
        if primaries < 0 or extra < 0:
            raise InputError("hedge", "primaries and extra must be >= 0")
        window = self.windows.get(pool)
        if window is None:
            if len(self.windows) >= self.max_pools:
                raise InputError("pool", f"this service holds {self.max_pools} pools already")
            window = self.windows[pool] = BudgetWindow(budget)
        elif window.budget != budget:
            raise InputError("budget", f"pool {pool!r} has {window.budget}, not {budget}")
        now_s = time.monotonic()
        window.record_primary(now_s, primaries)
        return extra == 0 or window.try_extra(now_s, extra)


class LockService:
    """The in-memory service with its persistent backup (one per region).

    Leases are kept in memory, on the monotonic clock: a holder found in the backup at
    start gets a fresh lease of ``lease_s``.
    """

    def __init__(self, backup_path: Path, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.hedges = FleetBudgets()  # hedge budgets shared by a fleet's clients (op "hedge")
        self.backup_path = Path(backup_path)
        records = read_json_lines(self.backup_path)
        self.table = LockTable(complete=any(r.get("op") == "snapshot" for r in records))
        for record in records:
            self.table.apply(record)
        self.lease_s = lease_s
        self._rewrite_backup()
        self._backup = open(self.backup_path, "a")  # noqa: SIM115 (closed by close())
        self._waiters: dict[tuple[str, str], deque[tuple[str, asyncio.Future, float]]] = {}
        now = time.monotonic()
        self._expires_at: dict[tuple[str, str], float] = {
            lock: now + lease_s for lock in self.table.holders
        }

    def _rewrite_backup(self) -> None:
        """Compact the backup into one snapshot record (atomically: write, fsync, rename)."""
        self.backup_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.backup_path.with_suffix(".tmp")
        with open(tmp, "w") as file:
            fsync_append(file, self.table.snapshot())
        tmp.replace(self.backup_path)

    def close(self) -> None:
        self._backup.close()

    def _persist(self, record: dict) -> None:
        fsync_append(self._backup, record)

    def _grant(self, kind: str, key: str, owner: str, lease_s: float) -> bool:
        """Grant (or renew for its holder) if the lock is free; False if it is busy."""
        outcome = self.table.acquire(kind, key, owner)
        if outcome == "busy":
            return False
        if outcome == "granted":
            self._persist({"op": "grant", "kind": kind, "key": key, "owner": owner})
        self._expires_at[(kind, key)] = time.monotonic() + lease_s
        return True

    async def acquire(
        self,
        kind: str,
        key: str,
        owner: str,
        lease_s: float | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Wait until ``owner`` holds the lock; the object's version. A holder whose lease
        ran out loses the lock to the oldest waiter; after ``timeout_s`` the request gives
        up with :class:`LockTimeoutError` (its place in the queue is dropped)."""
        lease_s = self.lease_s if lease_s is None else float(lease_s)
        if self._grant(kind, key, owner, lease_s):
            return self.table.version(key)
        give_up = None if timeout_s is None else time.monotonic() + float(timeout_s)
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault((kind, key), deque()).append((owner, future, lease_s))
        try:
            while not future.done():
                now = time.monotonic()
                expires = self._expires_at.get((kind, key), now)
                if expires <= now:
                    self._expire(kind, key)
                    continue
                if give_up is not None and now >= give_up:
                    holder = self.table.holder(kind, key)
                    raise LockTimeoutError(
                        f"L_{kind} of {key!r} not granted to {owner!r} within {timeout_s:.3g} s "
                        f"(held by {holder!r})"
                    )
                wake = expires if give_up is None else min(expires, give_up)
                await asyncio.wait({future}, timeout=wake - now)
        finally:
            if not future.done():
                future.cancel()  # timed out or cancelled (client gone): the hand-over skips it
        return self.table.version(key)

    def _expire(self, kind: str, key: str) -> None:
        former = self.table.expire(kind, key)
        self._expires_at.pop((kind, key), None)
        if former is not None:
            self._persist({"op": "expire", "kind": kind, "key": key})
        self._hand_over(kind, key)

    def renew(self, kind: str, key: str, owner: str, lease_s: float | None = None) -> bool:
        """Extend the holder's lease; False if ``owner`` does not hold the lock (any more)."""
        _check_kind(kind)
        if self.table.holder(kind, key) != owner:
            return False
        self._expires_at[(kind, key)] = time.monotonic() + (
            self.lease_s if lease_s is None else float(lease_s)
        )
        return True

    def release(
        self, kind: str, key: str, owner: str, version: int | None = None
    ) -> tuple[int, bool]:
        """Free the lock and set the version; ``(version, held)``. An owner that lost the
        lock (lease expired, state lost) frees nothing, but the version it wrote is noted:
        the service's version is never below a written one."""
        _check_kind(kind)
        if self.table.holder(kind, key) != owner:
            if version is not None and int(version) > self.table.version(key):
                self.table.note_version(key, version)
                self._persist({"op": "version", "key": key, "version": int(version)})
            return self.table.version(key), False
        self.table.release(kind, key, owner, version)
        self._expires_at.pop((kind, key), None)
        self._persist(
            {"op": "release", "kind": kind, "key": key, "owner": owner, "version": version}
        )
        self._hand_over(kind, key)
        return self.table.version(key), True

    def _hand_over(self, kind: str, key: str) -> None:
        """Grant a freed lock to the oldest live waiter (and its owner's other waiters)."""
        queue = self._waiters.get((kind, key))
        while queue:
            owner, future, lease_s = queue.popleft()
            if future.done():
                continue
            self._grant(kind, key, owner, lease_s)
            future.set_result(None)
            for other_owner, other, _ in queue:
                if other_owner == owner and not other.done():
                    other.set_result(None)
            break
        if queue is not None and not queue:
            self._waiters.pop((kind, key), None)

    async def handle(self, message: dict) -> dict:
        op = message.get("op")
        if op == "acquire":
            kind, key, owner = message["kind"], message["key"], message["owner"]
            lease_s, timeout_s = message.get("lease_s"), message.get("timeout_s")
            try:
                version = await self.acquire(kind, key, owner, lease_s, timeout_s)
            except LockTimeoutError as error:
                return {"timed_out": str(error)}
            return {"version": version, "known": self.table.known(key)}
        if op == "renew":
            args = (message["kind"], message["key"], message["owner"], message.get("lease_s"))
            return {"held": self.renew(*args)}
        if op == "release":
            version = message.get("version")
            args = (message["kind"], message["key"], message["owner"], version)
            version, held = self.release(*args)
            return {"version": version, "held": held}
        if op == "hedge":
            return {"admitted": self.hedges.ask(message)}
        if op == "version":
            return {"version": self.table.version(message["key"])}
        if op == "holder":
            _check_kind(message["kind"])
            return {"owner": self.table.holder(message["kind"], message["key"])}
        raise InputError("op", f"unknown lock-service operation {op!r}")


@dataclass(frozen=True)
class LockGrant:
    """A granted lock: the object's version, and whether the service knows it (False
    after the service lost its state: then the VM library learns it from storage)."""

    version: int
    known: bool = True


@dataclass(frozen=True)
class LockEndpoint:
    """Where a lock service listens, and the secret its requests are sealed with (None: a
    service on loopback that takes plain requests)."""

    port: int
    host: str = "127.0.0.1"
    secret: bytes | None = field(default=None, repr=False)

    @property
    def sealing(self) -> Sealing | None:
        return None if self.secret is None else Sealing(self.secret, SERVICE_NAME)


class LockClient:
    """A VM library's connection to its region's lock service (local: no WAN delay).

    A lost connection (the service restarted) is reopened on the next request; a waiting
    ``acquire`` asks again, as the same owner, until its timeout.
    """

    def __init__(self, where: int | LockEndpoint, connection: JsonLineClient | None = None) -> None:
        self.endpoint = where if isinstance(where, LockEndpoint) else LockEndpoint(where)
        self.port = self.endpoint.port
        self._connection = connection
        self._reconnecting = asyncio.Lock()

    @classmethod
    async def open(cls, where: int | LockEndpoint, wait_s: float = 0.0) -> LockClient:
        """Connected; a service that refuses is asked again for up to ``wait_s`` (a VM
        that starts while its lock service restarts waits for it), then TestbedError."""
        client = cls(where)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_s
        while True:
            try:
                await client._connected()
                return client
            except TestbedError:
                if loop.time() >= give_up:
                    raise
            await asyncio.sleep(min(RESTART_POLL_S, max(give_up - loop.time(), 0.0)))

    async def _connect(self) -> JsonLineClient:
        e = self.endpoint
        return await JsonLineClient.open(
            e.port, "lock service", host=e.host, sealing=e.sealing
        )  # fmt: skip

    async def close(self) -> None:
        async with self._reconnecting:
            if self._connection is not None:
                await self._connection.close()
            self._connection = None

    async def _request(self, message: dict) -> dict:
        return await (await self._connected()).request(message)

    async def _connected(self) -> JsonLineClient:
        """The connection, reopened if it was lost. One request reopens it and the others
        wait for it: each opening its own, all but the last would be dropped unclosed."""
        async with self._reconnecting:
            if self._connection is None or self._connection.closed:
                if self._connection is not None:
                    await self._connection.close()
                self._connection = None
                self._connection = await self._connect()
            return self._connection

    async def grant(
        self,
        kind: str,
        key: str,
        owner: str,
        lease_s: float | None = None,
        timeout_s: float | None = None,
    ) -> LockGrant:
        """Wait for the lock (at most ``timeout_s``: then LockTimeoutError)."""
        message = {"op": "acquire", "kind": kind, "key": key, "owner": owner}
        message.update(lease_s=lease_s, timeout_s=timeout_s)
        if timeout_s is None:
            reply = await self._request(message)
        else:
            reply = await self._grant_within(message, float(timeout_s))
        if "timed_out" in reply:
            raise LockTimeoutError(f"lock service: {reply['timed_out']}")
        return LockGrant(int(reply["version"]), bool(reply.get("known", True)))

    async def _grant_within(self, message: dict, timeout_s: float) -> dict:
        """Ask until granted or ``timeout_s`` passed; a lost service is asked again."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        while True:
            left_s = give_up - loop.time()
            try:
                # The service answers timed_out itself; the margin covers a mute service.
                return await asyncio.wait_for(
                    self._request(dict(message, timeout_s=max(left_s, 0.0))), left_s + 1.0
                )
            except TimeoutError:
                raise LockTimeoutError(
                    f"lock service at port {self.port}: no answer within {timeout_s} s"
                ) from None
            except TestbedError:
                if loop.time() >= give_up:
                    raise
                await asyncio.sleep(RESTART_POLL_S)  # the service is restarting: ask again

    async def acquire(
        self,
        kind: str,
        key: str,
        owner: str,
        lease_s: float | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Wait for the lock; the object's current version."""
        return (await self.grant(kind, key, owner, lease_s, timeout_s)).version

    async def renew(self, kind: str, key: str, owner: str, lease_s: float | None = None) -> bool:
        """Extend the lease; False if ``owner`` no longer holds the lock."""
        message = {"op": "renew", "kind": kind, "key": key, "owner": owner, "lease_s": lease_s}
        return bool((await self._request(message))["held"])

    async def release_lock(
        self, kind: str, key: str, owner: str, version: int | None = None
    ) -> tuple[int, bool]:
        """Release; ``(version, held)``, held False if the lock had been lost."""
        message = {"op": "release", "kind": kind, "key": key, "owner": owner, "version": version}
        reply = await self._request(message)
        return int(reply["version"]), bool(reply.get("held", True))

    async def release(self, kind: str, key: str, owner: str, version: int | None = None) -> int:
        return (await self.release_lock(kind, key, owner, version))[0]

    async def hedge(self, pool: str, budget: HedgeBudget, primaries: int, extra: int) -> bool:
        """Deposit ``primaries`` into the pool's shared budget and ask for ``extra``."""
        message = {"op": "hedge", "pool": pool, "budget": asdict(budget)}
        message.update(primaries=primaries, extra=extra)
        return bool((await self._request(message))["admitted"])

    async def version(self, key: str) -> int:
        return int((await self._request({"op": "version", "key": key}))["version"])

    async def holder(self, kind: str, key: str) -> str | None:
        reply = await self._request({"op": "holder", "kind": kind, "key": key})
        return reply["owner"]


@dataclass(frozen=True)
class LockServiceConfig(JsonConfigFile):
    """``python -m geoslo.live costlo-locks CONFIG``: where to listen (``host``, ``port``),
    where to back up, and the file of the secret requests are sealed with."""

    port: int
    backup_path: str
    lease_s: float = DEFAULT_LEASE_S
    host: str = "127.0.0.1"
    secret_file: str | None = None

    def sealing(self) -> Sealing | None:
        """The sealing requests need (`listener_sealing`)."""
        exposure = "anybody reaching it could take locks and set versions"
        return listener_sealing(self.host, self.secret_file, SERVICE_NAME, exposure)


async def serve_lock_service(config: LockServiceConfig, stop: asyncio.Event | None = None):
    """Serve until ``stop`` is set (or SIGTERM when run as a process)."""
    sealing = config.sealing()
    service = LockService(Path(config.backup_path), config.lease_s)

    async def close() -> None:
        service.close()

    await serve_until(service.handle, config.port, stop, close, config.host, sealing)


def run_lock_service(config_path: Path) -> None:
    """The ``costlo-locks`` process: serve until SIGTERM."""
    config = LockServiceConfig.read(config_path)
    run_until_sigterm(lambda stop: serve_lock_service(config, stop))
