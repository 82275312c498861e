"""The Director's migrations journal, and the repairs it allows (docs/director-live.md,
"Repair").

Every move the Director starts is a line of ``<state_dir>/director-migrations.jsonl``
written (and fsynced) before its first ``SETSLOT``; one more line closes it when it ended
leaving no marker (done, or cancelled and rolled back) or when ``repair`` closed its
slots. A move still open is one a crash (of a node or of the controller) may have left
half-way. Only those slots are repaired, at start-up and, while the Director runs, as soon
as every master answers again; open slots the Director did not make (an operator's
reshard) are reported and left alone: ``geoslo director repair`` repairs them on request.
Every repair connects with the cluster's ``Credentials`` (AUTH, TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from geoslo.errors import InputError, TestbedError
from geoslo.live.director.rediscluster._link import Credentials
from geoslo.live.director.rediscluster._migrate import Orphan, RepairReport, RepairStep, repair

__all__ = [
    "MIGRATIONS_FILE",
    "JournalRepairs",
    "MigrationJournal",
    "RepairPending",
    "describe_report",
    "describe_steps",
    "open_moves",
    "parse_seed_nodes",
    "repair_from_seeds",
    "slot_ranges_text",
]

_LOG = logging.getLogger("geoslo.director.rediscluster")
MIGRATIONS_FILE = "director-migrations.jsonl"
_RETRY_S = 2.0  # between attempts while a master does not answer


class RepairPending(TestbedError):
    """A move touches slots that a failed move left open and repair has not closed yet."""


# --------------------------------------------------------------------------- the journal


def _ranges(slots: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for slot in sorted(set(slots)):
        if out and out[-1][1] == slot - 1:
            out[-1][1] = slot
        else:
            out.append([slot, slot])
    return out


def slot_ranges_text(slots: Iterable[int]) -> str:
    """``0-127, 300`` for the slots given."""
    return ", ".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in _ranges(slots))


def open_moves(lines: Iterable[str]) -> tuple[dict[int, frozenset[int]], int]:
    """The moves begun and not ended, by id, with their slots; and how many lines could not
    be read (a line torn by a crash while it was written)."""
    begun: dict[int, frozenset[int]] = {}
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            move = int(record["move"])
            if record["event"] == "begin":
                begun[move] = frozenset(
                    s for lo, hi in record["slots"] for s in range(int(lo), int(hi) + 1)
                )
            elif record["event"] == "end":
                begun.pop(move, None)
        except (ValueError, KeyError, TypeError):
            bad += 1
    return begun, bad


class MigrationJournal:
    """``director-migrations.jsonl``: one ``begin`` line per move, one ``end`` line when
    it is closed (``how``: done, rolled-back, repaired); ``left-open`` says why not."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._last_id: int | None = None  # read from the file once, then counted

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text().splitlines()
        except FileNotFoundError:
            return []

    def open_moves(self) -> dict[int, frozenset[int]]:
        moves, bad = open_moves(self._lines())
        if bad:
            _LOG.warning("%s: %d unreadable line(s) skipped", self.path, bad)
        return moves

    def _next_id(self) -> int:
        if self._last_id is None:
            ids = [0]
            for line in self._lines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    ids.append(int(json.loads(line)["move"]))
            self._last_id = max(ids)
        self._last_id += 1
        return self._last_id

    def _append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps({**record, "time_s": round(time.time(), 3)}) + "\n")
            out.flush()
            os.fsync(out.fileno())  # on disk before the move sets its first marker

    def begin(self, source: str, target: str, slots: Iterable[int]) -> int:
        move = self._next_id()
        self._append(
            {"event": "begin", "move": move, "source": source, "target": target,
             "slots": _ranges(slots)}
        )  # fmt: skip
        return move

    def end(self, moves: Iterable[int], how: str) -> None:
        for move in moves:
            self._append({"event": "end", "move": move, "how": how})

    def left_open(self, move: int, why: str) -> None:
        self._append({"event": "left-open", "move": move, "why": why})


# --------------------------------------------------------------------------- reporting


def _group(steps: Sequence[RepairStep]) -> list[tuple[list[int], RepairStep]]:
    groups: list[tuple[list[int], RepairStep]] = []
    for step in sorted(steps, key=lambda s: s.slot):
        same = groups and groups[-1][0][-1] == step.slot - 1
        last = groups[-1][1] if same else None
        key = (step.kind, step.source, step.target, step.reason, step.keep)
        if (
            last is not None
            and (last.kind, last.source, last.target, last.reason, last.keep) == key
        ):
            groups[-1][0].append(step.slot)
        else:
            groups.append(([step.slot], step))
    return groups


def _short(node_id: str | None) -> str:
    return node_id[:8] if node_id else "the least loaded master"


def describe_steps(steps: Sequence[RepairStep]) -> list[str]:
    """One line per run of consecutive slots with the same decision."""
    lines = []
    for slots, step in _group(steps):
        where = f"slot{'s' if len(slots) > 1 else ''} {slot_ranges_text(slots)}"
        if step.kind == "finish":
            what = f"finish {_short(step.source)} -> {_short(step.target)}"
        elif step.kind == "roll-back":
            what = f"roll back to {_short(step.source)}"
        else:
            what = f"assign to {_short(step.target)}"
        keep = f"; a key on both keeps {_short(step.keep)}'s copy" if step.kind == "finish" else ""
        lines.append(f"{where}: {what} ({step.reason}{keep})")
    return lines


def _describe_orphans(orphans: Sequence[Orphan]) -> list[str]:
    return [
        f"slot {o.slot}: {o.keys} key(s) on {_short(o.holder)}, which does not own it, "
        f"go to its owner {_short(o.owner)}"
        for o in orphans
    ]


def describe_report(report: RepairReport) -> list[str]:
    """What ``repair`` did, or would do (dry run), in lines for a person."""
    lines = describe_steps(report.steps) + _describe_orphans(report.orphans)
    if report.dry_run:
        return lines or ["nothing to repair"]
    moved = f"{report.keys_moved} keys moved, {report.orphan_keys_moved} stranded keys rehomed"
    return [*lines, f"repaired {len(report.steps)} slots; {moved}"]


# --------------------------------------------------------------------------- the policy


@dataclass
class _Move:
    move: int
    how: str | None = None  # set when the move ended leaving no marker

    def closed(self, how: str) -> None:
        self.how = how


class JournalRepairs:
    """The environment's repairs: the journal's open moves at start-up, and while running,
    the moves that failed, once every master answers (``poll`` from each observation);
    with the cluster's ``credentials`` (None: none)."""

    def __init__(
        self,
        state_dir: Path,
        log: Callable[[str], Any] = lambda _m: None,
        credentials: Credentials | None = None,
    ) -> None:
        self.journal = MigrationJournal(Path(state_dir) / MIGRATIONS_FILE)
        self.log = log
        self.credentials = credentials or Credentials()
        self.repaired_moves = 0
        self.last_report: RepairReport | None = None
        self._pending: dict[int, frozenset[int]] = {}
        self._running: dict[int, frozenset[int]] = {}
        self._task: asyncio.Task | None = None
        self._next_try_s = 0.0
        self._failing = False

    def pending_slots(self) -> frozenset[int]:
        return frozenset().union(*self._pending.values())

    async def startup(self, seed: Any) -> RepairReport | None:
        """Repair what the journal left open; warn of open slots the Director did not make."""
        self._pending = self.journal.open_moves()
        try:
            report = await self._repair(seed, dict(self._pending))
        except (TestbedError, RedisError, OSError) as error:
            slots = slot_ranges_text(self.pending_slots())
            what = f"repair of the moves left open (slots {slots})" if slots else "open-slot check"
            _LOG.warning("start-up %s waits: %s", what, error)
            self._failing = True
            return None
        if report.foreign:
            _LOG.warning(
                "open slots this Director did not make, left as they are: %s; repair them "
                "with `geoslo director repair --seed-nodes HOST:PORT` once no reshard runs",
                "; ".join(describe_steps(report.foreign)),
            )
        return report

    async def _repair(self, seed: Any, moves: dict[int, frozenset[int]]) -> RepairReport:
        slots = frozenset().union(*moves.values())
        report = await repair(seed, slots=slots, log=self.log, credentials=self.credentials)
        self.journal.end(moves, "repaired")
        for move in moves:
            self._pending.pop(move, None)
        self.repaired_moves += len(moves)
        self.last_report = report
        if moves:
            self.log(f"repaired the slots of {len(moves)} move(s) left open: {len(report.steps)}")
        return report

    def poll(self, seed: Any) -> None:
        """Start a repair of the failed moves in the background (never waits for it)."""
        if self._task is not None:
            if not self._task.done():
                return
            self._collect(self._task)
            self._task = None
        if self._pending and time.monotonic() >= self._next_try_s:
            self._task = asyncio.get_running_loop().create_task(
                self._repair(seed, dict(self._pending))
            )

    def _collect(self, task: asyncio.Task) -> None:
        error = None if task.cancelled() else task.exception()
        if error is None:
            self._failing = False
            return
        self._next_try_s = time.monotonic() + _RETRY_S
        message = f"repair of slots {slot_ranges_text(self.pending_slots())} waits: {error}"
        self.log(message)
        if not self._failing:  # once per outage in the service's log
            _LOG.warning(message)
        self._failing = True

    @contextlib.contextmanager
    def moving(self, source: str, target: str, slots: Iterable[int]) -> Iterator[_Move]:
        """Journal a move around its migration; call ``closed(how)`` when it ended leaving
        no marker, else it stays open and is repaired. Refused on slots awaiting repair."""
        slots = frozenset(slots)
        busy = slots & (self.pending_slots() | frozenset().union(*self._running.values()))
        if busy:
            raise RepairPending(
                f"slots {slot_ranges_text(busy)} await repair after a failed move (it runs "
                "once every master answers)"
            )
        handle = _Move(self.journal.begin(source, target, slots))
        self._running[handle.move] = slots
        try:
            yield handle
        finally:
            del self._running[handle.move]
            if handle.how is not None:
                self.journal.end([handle.move], handle.how)
            else:
                error = sys.exc_info()[1]
                why = f"{type(error).__name__}: {error}" if error else "not closed"
                self._pending[handle.move] = slots
                self.journal.left_open(handle.move, why)

    async def close(self) -> None:
        """Stop a repair in progress (its moves stay open in the journal)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None


# --------------------------------------------------------------------------- the command


def parse_seed_nodes(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as addresses; InputError naming the option otherwise."""
    seeds = []
    for item in (part.strip() for part in text.split(",")):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError("--seed-nodes", f"expected host:port[,host:port...], got {item!r}")
        seeds.append((host.removeprefix("[").removesuffix("]"), int(port)))  # [IPv6]:port
    return seeds


async def _answers(host: str, port: int, timeout_s: float, credentials: Credentials) -> str | None:
    """None if the node answers ``CLUSTER MYID``, else why not."""
    kwargs = credentials.redis_kwargs()
    connection = aioredis.Redis(host=host, port=port, socket_timeout=timeout_s, **kwargs)
    try:
        await connection.execute_command("CLUSTER", "MYID")
    except (RedisError, OSError) as error:
        return str(error) or type(error).__name__
    finally:
        await connection.aclose()
    return None


async def repair_from_seeds(
    seeds: Sequence[tuple[str, int]],
    *,
    dry_run: bool = False,
    timeout_s: float = 5.0,
    credentials: Credentials | None = None,
) -> RepairReport:
    """``repair`` of every slot through the first seed that answers (``geoslo director
    repair``), with the cluster's ``credentials`` (None: none); TestbedError naming each
    seed and why when none does, or naming a master that does not answer."""
    credentials = credentials or Credentials()
    errors = []
    for host, port in seeds:
        why = await _answers(host, port, timeout_s, credentials)
        if why is None:
            try:
                return await repair((host, port), dry_run=dry_run, credentials=credentials)
            except RedisError as error:
                raise TestbedError(f"repair through {host}:{port} failed: {error}") from error
        errors.append(f"{host}:{port}: {why}")
    raise TestbedError("no seed node answers as a cluster node: " + "; ".join(errors))
