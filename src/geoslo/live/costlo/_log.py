"""The VM library's persistent log of PUT operations (CosTLO §5.4), and its replay.

Append-only JSON lines, each fsync'd before the library goes on. One operation writes:

* ``begin`` (op, key): before asking for L_S, so a restart can free a lock it was given;
* ``update`` (op, key, version, value in base64, requests [[region, copy, index], ...]):
  once L_S is held, the update and every synchronous PUT request the configuration
  requires; a request's id is its position in the list;
* ``skip`` (op, requests): redundant requests the probability gate left out;
* ``done`` (op, request): one request completed;
* ``released`` (op): L_S released with the new version;
* ``finished`` (op): propagation done, or not needed (a newer PUT covers it).

:func:`replay_log` turns a log into the operations it describes; a restarted library
re-issues the requests of unfinished ones that are not logged as done or skipped.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path

from geoslo.live.costlo._locks import fsync_append, read_json_lines
from geoslo.live.costlo._objects import CopyRef
from geoslo.live.costlo._plan import StorageRequest

__all__ = ["LoggedOp", "VmLog", "replay_log"]


@dataclass(frozen=True)
class LoggedOp:
    """What the log says about one PUT operation."""

    op: str
    key: str
    version: int | None = None  # None: L_S asked for, update not logged yet
    value: bytes | None = None
    requests: tuple[StorageRequest, ...] = ()
    done: frozenset[int] = frozenset()
    skipped: frozenset[int] = frozenset()
    released: bool = False
    finished: bool = False

    @property
    def missing(self) -> tuple[int, ...]:
        """Ids of the requests to re-issue: neither done nor skipped."""
        return tuple(
            i for i in range(len(self.requests)) if i not in self.done and i not in self.skipped
        )

    @property
    def written_copies(self) -> frozenset[CopyRef]:
        """Copies some completed synchronous request wrote."""
        return frozenset(self.requests[i].copy_ref for i in self.done)


@dataclass
class _Builder:
    op: str
    key: str
    fields: dict = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    skipped: set[int] = field(default_factory=set)


def replay_log(path: Path) -> list[LoggedOp]:
    """Every operation of a log, in the order they began (a torn last line is ignored)."""
    builders: dict[str, _Builder] = {}
    for record in read_json_lines(Path(path)):
        kind, op = record["t"], record["op"]
        if kind == "begin":
            builders[op] = _Builder(op, record["key"])
            continue
        builder = builders.get(op)
        if builder is None:
            continue  # its begin was compacted away: the operation had finished
        if kind == "update":
            requests = tuple(StorageRequest(r, int(c), int(i)) for r, c, i in record["requests"])
            builder.fields.update(
                version=int(record["version"]),
                value=base64.b64decode(record["value"]),
                requests=requests,
            )
        elif kind == "skip":
            builder.skipped.update(record["requests"])
        elif kind == "done":
            builder.done.add(int(record["request"]))
        elif kind in ("released", "finished"):
            builder.fields[kind] = True
    return [
        LoggedOp(b.op, b.key, done=frozenset(b.done), skipped=frozenset(b.skipped), **b.fields)
        for b in builders.values()
    ]


class VmLog:
    """The writer side: one record per call, durable when the call returns. When no
    operation is open and ``compact_after`` records were written, the log is truncated."""

    def __init__(self, path: Path, open_ops: set[str] | None = None, compact_after: int = 1000):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a")  # noqa: SIM115 (closed by close())
        self.open_ops: set[str] = set(open_ops or ())
        self.compact_after = compact_after
        self.records_since_compaction = 0
        self.compactions = 0

    def close(self) -> None:
        self._file.close()

    def _append(self, record: dict) -> None:
        fsync_append(self._file, record)
        self.records_since_compaction += 1

    def begin(self, op: str, key: str) -> None:
        self.open_ops.add(op)
        self._append({"t": "begin", "op": op, "key": key})

    def update(
        self, op: str, key: str, version: int, value: bytes, requests: tuple[StorageRequest, ...]
    ) -> None:
        self._append(
            {
                "t": "update",
                "op": op,
                "key": key,
                "version": version,
                "value": base64.b64encode(value).decode(),
                "requests": [[r.region, r.copy, r.index] for r in requests],
            }
        )

    def skip(self, op: str, requests: list[int]) -> None:
        self._append({"t": "skip", "op": op, "requests": requests})

    def done(self, op: str, request: int) -> None:
        self._append({"t": "done", "op": op, "request": request})

    def released(self, op: str) -> None:
        self._append({"t": "released", "op": op})

    def finished(self, op: str) -> None:
        self._append({"t": "finished", "op": op})
        self.open_ops.discard(op)
        if not self.open_ops and self.records_since_compaction >= self.compact_after:
            self.compact()

    def compact(self) -> None:
        """Drop every record: only when all operations are finished."""
        if self.open_ops:
            return
        self._file.truncate(0)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records_since_compaction = 0
        self.compactions += 1
