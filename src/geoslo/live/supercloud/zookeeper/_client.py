"""One site's closed-loop client (§5.2.2): ``threads`` workers, one ZooKeeper session
each, read:write 9:1, each pausing ``think_ms`` between operations (0 in §5.2.2's runs),
or the pause its schedule gives for the moment (a site's day: ``think_ms_at``);
a read gets a 1 KB znode, a write overwrites the site's 1 KB znode.

Run inside the site's namespace as ``python -m geoslo.live.supercloud.zookeeper._client <config>``.
Every operation becomes a line ``[end_unix_s, "r"|"w", latency_ms, ok]`` in the output
file; the client touches ``<config>.ready`` once every session is up and stops on SIGTERM.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from geoslo.live._processes import JsonConfigFile
from geoslo.live.supercloud.zookeeper._settings import CLIENT_PORT, parse_members, server_address

__all__ = ["ClientConfig", "main", "think_ms_at"]

CONFIG_ZNODE = "/zookeeper/config"  # the dynamic configuration in force (ZooKeeper 3.5+)

_BACKOFF_S = 0.02  # after a failed operation (no session yet), so as not to spin


@dataclass(frozen=True)
class ClientConfig(JsonConfigFile):
    site: str
    hosts: list[str]  # "address:port", in the order kazoo tries them
    threads: int
    read_fraction: float
    read_path: str
    write_path: str
    value_bytes: int
    session_timeout_s: float
    op_timeout_s: float
    out_path: str
    seed: int
    think_ms: float = 0.0  # a worker's pause after each operation (0: back to back)
    # or one pause per step of schedule_step_s from schedule_start_unix_s, cycling
    think_schedule_ms: list[float] | None = None
    schedule_step_s: float = 0.0
    schedule_start_unix_s: float = 0.0
    # each session connects to a random member, and follows the membership (the
    # ensemble's dynamic configuration) to reconnect to a random member after a move
    shuffle_hosts: bool = False


def think_ms_at(config: ClientConfig, t_unix_s: float) -> float:
    """A worker's pause after an operation that ends at ``t_unix_s``."""
    schedule = config.think_schedule_ms
    if not schedule or config.schedule_step_s <= 0:
        return config.think_ms
    step = int(max(t_unix_s - config.schedule_start_unix_s, 0.0) // config.schedule_step_s)
    return schedule[step % len(schedule)]


class _Worker(threading.Thread):
    def __init__(self, config: ClientConfig, index: int, stop: threading.Event, sink) -> None:
        super().__init__(daemon=True)
        self.config, self.stop, self.sink = config, stop, sink
        self.rng = random.Random(config.seed * 1000 + index)
        self.value = bytes(self.rng.getrandbits(8) for _ in range(config.value_bytes))
        from kazoo.client import KazooClient  # this module is also imported where kazoo is not

        self.client = KazooClient(
            hosts=",".join(config.hosts),
            timeout=config.session_timeout_s,
            randomize_hosts=config.shuffle_hosts,  # kazoo shuffles at each connection
        )

    def connect(self) -> None:
        self.client.start(timeout=30)
        if self.config.shuffle_hosts:
            self.client.DataWatch(CONFIG_ZNODE, self._on_membership)

    def _on_membership(self, data: bytes | None, _stat) -> None:
        """The ensemble's configuration changed: the next reconnection (this session's
        server stopped) goes to a random member of the new one."""
        ids = parse_members((data or b"").decode())
        if ids:
            hosts = [f"{server_address(i)}:{CLIENT_PORT}" for i in ids]
            self.client.set_hosts(",".join(hosts))

    def run(self) -> None:
        c = self.config
        # a random phase within the first pause, so that sessions do not move in lockstep
        self.stop.wait(self.rng.random() * think_ms_at(c, time.time()) / 1e3)
        while not self.stop.is_set():
            is_read = self.rng.random() < c.read_fraction
            start_s = time.time()
            try:
                if is_read:
                    self.client.get_async(c.read_path).get(timeout=c.op_timeout_s)
                else:
                    self.client.set_async(c.write_path, self.value).get(timeout=c.op_timeout_s)
                ok = True
            except Exception:  # connection loss, session expiry, timeout: a failed op
                ok = False
            end_s = time.time()
            self.sink("r" if is_read else "w", start_s, end_s, ok)
            if not ok:
                time.sleep(_BACKOFF_S)
            think_ms = think_ms_at(c, end_s)
            if think_ms:
                self.stop.wait(think_ms / 1e3)


def main(argv: list[str]) -> None:
    config_path = Path(argv[0])
    config = ClientConfig.read(config_path)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()
    out = open(config.out_path, "w", buffering=1 << 16)

    def sink(op: str, start_s: float, end_s: float, ok: bool) -> None:
        line = json.dumps([round(end_s, 4), op, round((end_s - start_s) * 1e3, 3), ok])
        with lock:
            if not out.closed:
                out.write(line + "\n")

    workers = [_Worker(config, i, stop, sink) for i in range(config.threads)]
    for worker in workers:
        worker.connect()
    config_path.with_suffix(".ready").write_text("ready\n")
    for worker in workers:
        worker.start()
    while not stop.wait(0.5):
        with lock:
            out.flush()
    for worker in workers:
        worker.join(timeout=config.op_timeout_s + 1)
    with lock:
        out.close()
    for worker in workers:
        worker.client.stop()
