"""CosTLO's lock and version service, one per region (§5.4).

Per object it holds the latest version number and two locks: L_S ("S", synchronous PUTs
to the local storage service) and L_A ("A", asynchronous propagation to the remaining
copies), each held by an owner id. State lives in memory with a persistent backup: an
append-only JSON-lines file, flushed and fsync'd before a request is answered, replayed
(and rewritten as one snapshot) on start. ``acquire`` waits until the lock is free, in
arrival order; an owner that already holds the lock gets it at once, which is how a VM
library that restarted takes back the locks of its unfinished operations.

Protocol (JSON lines, see ``_jsonlines``): ``acquire`` (kind, key, owner) -> version;
``release`` (kind, key, owner, version or null) -> version; ``version`` (key);
``holder`` (kind, key) -> owner.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import InputError
from geoslo.live._processes import JsonConfigFile
from geoslo.live.costlo._jsonlines import JsonLineClient, run_until_sigterm, serve_until

__all__ = [
    "LOCK_KINDS",
    "LockTable",
    "LockService",
    "LockClient",
    "LockServiceConfig",
    "serve_lock_service",
    "run_lock_service",
    "read_json_lines",
]

LOCK_KINDS = ("S", "A")  # §5.4: L_S for synchronous PUTs, L_A for asynchronous ones


def _check_kind(kind: str) -> None:
    if kind not in LOCK_KINDS:
        raise InputError("kind", f"lock kind must be 'S' or 'A', got {kind!r}")


class LockTable:
    """The service's state as a pure state machine: versions and lock holders.

    :meth:`acquire` answers ``"granted"`` (the state changed), ``"held"`` (the owner
    already holds it) or ``"busy"``; :meth:`apply` replays a record of the backup.
    """

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}
        self.holders: dict[tuple[str, str], str] = {}

    def version(self, key: str) -> int:
        return self.versions.get(key, 0)

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
        if version is not None:
            self.versions[key] = max(self.version(key), int(version))

    def snapshot(self) -> dict:
        return {
            "op": "snapshot",
            "versions": dict(self.versions),
            "holders": [[kind, key, owner] for (kind, key), owner in self.holders.items()],
        }

    def apply(self, record: dict) -> None:
        """Replay one backup record (``grant``, ``release`` or ``snapshot``)."""
        op = record.get("op")
        if op == "grant":
            self.holders[(record["kind"], record["key"])] = record["owner"]
        elif op == "release":
            self.release(record["kind"], record["key"], record["owner"], record.get("version"))
        elif op == "snapshot":
            self.versions = {k: int(v) for k, v in record["versions"].items()}
            self.holders = {(kind, key): owner for kind, key, owner in record["holders"]}
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


class LockService:
    """The in-memory service with its persistent backup (one per region)."""

    def __init__(self, backup_path: Path) -> None:
        self.table = LockTable()
        self.backup_path = Path(backup_path)
        for record in read_json_lines(self.backup_path):
            self.table.apply(record)
        self._rewrite_backup()
        self._backup = open(self.backup_path, "a")  # noqa: SIM115 (closed by close())
        self._waiters: dict[tuple[str, str], deque[tuple[str, asyncio.Future]]] = {}

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

    async def acquire(self, kind: str, key: str, owner: str) -> int:
        """Wait until ``owner`` holds the lock; the object's version."""
        outcome = self.table.acquire(kind, key, owner)
        if outcome == "granted":
            self._persist({"op": "grant", "kind": kind, "key": key, "owner": owner})
        if outcome != "busy":
            return self.table.version(key)
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault((kind, key), deque()).append((owner, future))
        await future  # cancelled (client gone): the hand-over skips it
        return self.table.version(key)

    def release(self, kind: str, key: str, owner: str, version: int | None = None) -> int:
        self.table.release(kind, key, owner, version)
        self._persist(
            {"op": "release", "kind": kind, "key": key, "owner": owner, "version": version}
        )
        self._hand_over(kind, key)
        return self.table.version(key)

    def _hand_over(self, kind: str, key: str) -> None:
        """Grant a freed lock to the oldest live waiter (and its owner's other waiters)."""
        queue = self._waiters.get((kind, key))
        while queue:
            owner, future = queue.popleft()
            if future.done():
                continue
            self.table.acquire(kind, key, owner)
            self._persist({"op": "grant", "kind": kind, "key": key, "owner": owner})
            future.set_result(None)
            for other_owner, other in queue:
                if other_owner == owner and not other.done():
                    other.set_result(None)
            break
        if queue is not None and not queue:
            self._waiters.pop((kind, key), None)

    async def handle(self, message: dict) -> dict:
        op = message.get("op")
        if op == "acquire":
            kind, key, owner = message["kind"], message["key"], message["owner"]
            return {"version": await self.acquire(kind, key, owner)}
        if op == "release":
            version = message.get("version")
            args = (message["kind"], message["key"], message["owner"], version)
            return {"version": self.release(*args)}
        if op == "version":
            return {"version": self.table.version(message["key"])}
        if op == "holder":
            _check_kind(message["kind"])
            return {"owner": self.table.holder(message["kind"], message["key"])}
        raise InputError("op", f"unknown lock-service operation {op!r}")


class LockClient:
    """A VM library's connection to its region's lock service (local: no WAN delay)."""

    def __init__(self, connection: JsonLineClient) -> None:
        self._connection = connection

    @classmethod
    async def open(cls, port: int) -> LockClient:
        return cls(await JsonLineClient.open(port, "lock service"))

    async def close(self) -> None:
        await self._connection.close()

    async def acquire(self, kind: str, key: str, owner: str) -> int:
        """Wait for the lock; the object's current version."""
        message = {"op": "acquire", "kind": kind, "key": key, "owner": owner}
        return int((await self._connection.request(message))["version"])

    async def release(self, kind: str, key: str, owner: str, version: int | None = None) -> int:
        message = {"op": "release", "kind": kind, "key": key, "owner": owner, "version": version}
        return int((await self._connection.request(message))["version"])

    async def version(self, key: str) -> int:
        return int((await self._connection.request({"op": "version", "key": key}))["version"])

    async def holder(self, kind: str, key: str) -> str | None:
        reply = await self._connection.request({"op": "holder", "kind": kind, "key": key})
        return reply["owner"]


@dataclass(frozen=True)
class LockServiceConfig(JsonConfigFile):
    """``python -m geoslo.live costlo-locks CONFIG``: where to listen, where to back up."""

    port: int
    backup_path: str


async def serve_lock_service(config: LockServiceConfig, stop: asyncio.Event | None = None):
    """Serve until ``stop`` is set (or SIGTERM when run as a process)."""
    service = LockService(Path(config.backup_path))

    async def close() -> None:
        service.close()

    await serve_until(service.handle, config.port, stop, close)


def run_lock_service(config_path: Path) -> None:
    """The ``costlo-locks`` process: serve until SIGTERM."""
    config = LockServiceConfig.read(config_path)
    run_until_sigterm(lambda stop: serve_lock_service(config, stop))
