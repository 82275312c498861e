"""The outside prober: availability of the migrating VM as a client sees it (Supercloud,
SoCC 2016, §5.2: downtime measured from outside, beside the hypervisor's own figure).

Every ``period_s`` it writes a token on the probe serial port of both QEMUs (source and
destination); the guest's init answers ``<token> <pages dirtied> <ms since boot>``
wherever the VM runs. The downtime seen from outside is the gap between the source's last
answer and the destination's first. The guest's own page counter gives the dirty rate it
achieved.

A side may be gated: its tokens wait until its gate is opened. The destination's is opened
once its QEMU runs (``open_when_running``): a token written into the destination's serial
port while the incoming migration loaded made the guest crash after resuming, under TCG,
in 3 of 9 migrations here (its kernel's lists or the init's registers corrupt); with the
gate, none in the runs since. Polling every ``period_s`` adds up to that to the gap.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

from geoslo.errors import TestbedError

__all__ = [
    "Answer",
    "Prober",
    "dirty_rate_bytes_per_s",
    "largest_gap_s",
    "outside_downtime_s",
]

PAGE_BYTES = 4096


@dataclass(frozen=True)
class Answer:
    """One answer: when it arrived (``time.monotonic``), from which side, the guest's
    count of pages dirtied and its uptime."""

    at_s: float
    side: str
    pages_dirtied: int
    uptime_ms: int


def parse_answer(line: bytes, at_s: float, side: str) -> Answer | None:
    """An answer from one line, or None for a line that is not one (a token cut in two
    by the migration, the port's first bytes)."""
    fields = line.decode("ascii", "replace").split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        return None
    return Answer(at_s, side, int(fields[1]), int(fields[2]))


def outside_downtime_s(answers: list[Answer]) -> float | None:
    """From the source's last answer to the destination's first (None if either side
    never answered)."""
    source = [a.at_s for a in answers if a.side == "source"]
    destination = [a.at_s for a in answers if a.side == "destination"]
    if not source or not destination:
        return None
    return min(destination) - max(source)


def largest_gap_s(answers: list[Answer], side: str, before_s: float) -> float:
    """The longest silence between ``side``'s answers before ``before_s``: how much the
    prober's own view wobbles while the VM runs undisturbed (its margin)."""
    times = [a.at_s for a in answers if a.side == side and a.at_s < before_s]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def dirty_rate_bytes_per_s(
    answers: list[Answer], before_s: float = float("inf"), side: str = "source"
) -> float | None:
    """The rate the guest dirtied pages at, from its own counter over ``side``'s answers
    that came before ``before_s`` (the migration's start: the undisturbed rate)."""
    seen = [a for a in answers if a.side == side and a.at_s < before_s]
    if len(seen) < 2 or seen[-1].uptime_ms <= seen[0].uptime_ms:
        return None
    pages = seen[-1].pages_dirtied - seen[0].pages_dirtied
    return pages * PAGE_BYTES / ((seen[-1].uptime_ms - seen[0].uptime_ms) / 1e3)


@dataclass
class Prober:
    """Probes the VM on both QEMUs' probe sockets until ``stop()``."""

    sockets: dict[str, Path]  # side -> the QEMU's probe socket
    period_s: float = 0.01
    answers: list[Answer] = field(default_factory=list)
    last_at_s: dict[str, float] = field(default_factory=dict)  # side -> its latest answer
    gates: dict[str, asyncio.Event] = field(default_factory=dict)  # side -> when to write
    _tasks: list[asyncio.Task] = field(default_factory=list)

    async def start(self, timeout_s: float = 10.0) -> None:
        """Connect to every side's socket (QEMU creates them at start)."""
        for side, path in self.sockets.items():
            reader, writer = await _connect(path, timeout_s)
            self._tasks.append(asyncio.create_task(self._read(side, reader)))
            self._tasks.append(asyncio.create_task(self._write(writer, self.gates.get(side))))

    def open_when_running(self, side: str, qmp) -> None:
        """Gate ``side``'s tokens until its QEMU (``qmp``, a QmpClient used by nobody
        else meanwhile) says it runs, polled every ``period_s``."""
        gate = self.gates.setdefault(side, asyncio.Event())

        async def poll() -> None:
            while (await qmp.execute("query-status")).get("status") != "running":
                await asyncio.sleep(self.period_s)
            gate.set()

        self._tasks.append(asyncio.create_task(poll()))

    async def _write(self, writer: asyncio.StreamWriter, gate: asyncio.Event | None) -> None:
        token = 0
        try:
            if gate is not None:
                await gate.wait()
            while True:
                token += 1
                writer.write(b"%d\n" % token)
                await writer.drain()
                await asyncio.sleep(self.period_s)
        finally:
            writer.close()

    async def _read(self, side: str, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            answer = parse_answer(line, time.monotonic(), side)
            if answer is not None:
                self.answers.append(answer)
                self.last_at_s[side] = answer.at_s

    async def wait_for(self, side: str, after_s: float, timeout_s: float) -> None:
        """Until ``side`` answers after ``after_s``; TestbedError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.last_at_s.get(side, float("-inf")) > after_s:
                return
            await asyncio.sleep(self.period_s)
        raise TestbedError(f"the VM did not answer on the {side}'s probe port in {timeout_s} s")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()


async def _connect(path: Path, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await asyncio.open_unix_connection(str(path))
        except OSError as error:
            if time.monotonic() > deadline:
                raise TestbedError(f"no probe socket at {path}: {error}") from None
            await asyncio.sleep(0.05)
