"""The testbed's traffic as real processes (Dürango et al., CDC 2016, §V-C): the
application's clients and writers, each following a rate trace.

* ``reader``, in the remote site: GETs of ``value_bytes`` values from the application's
  Redis server at the trace's rate (open loop: a request is sent when it is due, whether
  or not earlier ones were answered), so the replies queue at the server when the link
  is short. Each request's wait, from sending to its whole reply, is logged: the
  application's waiting time of §V-B, measured.
* ``writer``, in the sending site: SETs of ``value_bytes`` values to the Redis master at
  the trace's rate; the master streams them to its replica across the link.

Rates are levels (Mbit/s of values) held ``level_period_s`` each in turn, counted from
``start_epoch_s``. ``python -m geoslo.live replication-load CONFIG.json`` runs one; it
stops on SIGTERM, writing its log (JSON: per request, when it was sent and how long it
waited; None if unanswered) to ``log_path``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from geoslo.live._processes import JsonConfigFile
from geoslo.live._resp import RedisConnection, encode_command
from geoslo.live.replication._schedule import cumulative_mb

__all__ = ["LoadConfig", "run_load", "run_load_process", "reply_bytes"]

TICK_S = 0.01
MAX_WAITING_MB = 512.0  # a reader stops sending while this much is unanswered (bounded memory)


@dataclass(frozen=True)
class LoadConfig(JsonConfigFile):
    role: str  # "reader" or "writer"
    host: str
    port: int
    password: str | None
    levels_mbps: tuple[float, ...]
    level_period_s: float
    start_epoch_s: float
    value_bytes: int = 65_536
    keys: int = 16
    log_path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels_mbps", tuple(self.levels_mbps))


def reply_bytes(value_bytes: int) -> int:
    """A GET's whole reply on the wire: ``$<n>\\r\\n<value>\\r\\n``."""
    return len(f"${value_bytes}\r\n") + value_bytes + 2


def due_requests(config: LoadConfig, now_epoch_s: float) -> int:
    """Requests due since the start: the trace's bytes over one value's."""
    mb = cumulative_mb(
        config.levels_mbps, config.level_period_s, now_epoch_s - config.start_epoch_s
    )
    return int(mb * 1e6 // config.value_bytes)


async def run_load(config: LoadConfig, stop: asyncio.Event) -> list[tuple[float, float | None]]:
    """Send the trace's requests until ``stop``; per request (sent at, waited s or None)."""
    connection = await RedisConnection.open(config.port, config.host, 5.0, password=config.password)
    value = bytes(range(256)) * (config.value_bytes // 256) + b"x" * (config.value_bytes % 256)
    keys = [f"value:{i}".encode() for i in range(config.keys)]
    log: list[list] = []
    sent = 0
    waiting = 0
    limit = int(MAX_WAITING_MB * 1e6 // config.value_bytes)

    def answered(entry: list, future: asyncio.Future) -> None:
        nonlocal waiting
        waiting -= 1
        if not future.cancelled() and future.exception() is None:
            entry[1] = time.time() - entry[0]

    while not stop.is_set():
        due = due_requests(config, time.time())
        while sent < due and waiting < limit:
            key = keys[sent % len(keys)]
            payload = (
                encode_command(b"GET", key)
                if config.role == "reader"
                else encode_command(b"SET", key, value)
            )
            entry = [time.time(), None]
            log.append(entry)
            connection.send(payload).add_done_callback(lambda f, e=entry: answered(e, f))
            sent += 1
            waiting += 1
        sent = max(sent, due)  # what could not be sent under the bound is skipped
        try:
            await asyncio.wait_for(stop.wait(), TICK_S)
        except TimeoutError:
            pass
    await connection.close()
    return [(e[0], e[1]) for e in log]


def run_load_process(config_path: Path) -> None:
    """The process's body: the load until SIGTERM, then its log."""
    asyncio.run(_main(config_path))


async def _main(config_path: Path) -> None:
    config = LoadConfig.read(Path(config_path))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log = await run_load(config, stop)
    if config.log_path:  # whole or not at all: a reader of a half-written log must not fail
        partial = Path(config.log_path).with_suffix(".partial")
        partial.write_text(json.dumps(log))
        partial.replace(config.log_path)
