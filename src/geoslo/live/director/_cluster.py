"""A live binned key-value cluster for the SCADS Director, on loopback (FAST 2011 §5-§6).

``await DirectorCluster.up(state_dir, config)`` starts ``servers + standbys`` Redis
processes, lays the bins out (``replicas`` each, round robin), writes the data set and
opens the client. It owns the servers, the router, the client, the action executor and
the statistics, and is the Director's environment handle: ``servers()``, ``running()``,
``start(...)``, ``cancel(...)``, ``finished()``, ``collect_stats()``. Every PID it starts
is recorded in ``<state_dir>/director-cluster.json``; ``down()`` stops only those.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from geoslo.control.director.loop import DirectorLoop
from geoslo.control.director.types import (
    Action,
    Histogram,
    Observation,
    RunningAction,
    ServerState,
    Step,
)
from geoslo.errors import TestbedError
from geoslo.live._backend import key_name
from geoslo.live._processes import find_program, process_alive, stop_recorded
from geoslo.live._resp import encode_command
from geoslo.live.director._client import ClusterClient
from geoslo.live.director._config import ClusterConfig
from geoslo.live.director._executor import ActionExecutor, FinishedAction
from geoslo.live.director._layout import (
    BinLayout,
    VersionClock,
    decode_value,
    encode_value,
    initial_placement,
)
from geoslo.live.director._router import Router
from geoslo.live.director._servers import ServerPool
from geoslo.live.director._stats import PeriodStats, WorkloadStats

__all__ = ["DirectorCluster", "STATE_FILE", "initial_payload", "stop_recorded_in"]

STATE_FILE = "director-cluster.json"
_LOAD_BATCH_KEYS = 500


def initial_payload(index: int, value_bytes: int) -> bytes:
    """The value of key ``index`` at start (version 0)."""
    return (b"init-%d-" % index).ljust(value_bytes, b".")[:value_bytes]


class DirectorCluster:
    """Servers, router, client, executor and statistics of one live cluster."""

    def __init__(self, state_dir: Path, config: ClusterConfig, redis_path: str) -> None:
        self.state_dir = Path(state_dir)
        self.config = config
        self.layout = BinLayout(config.keys, config.bins)
        self.router = Router(config.bins, config.read_fanout)
        self.stats = WorkloadStats(
            config.bins,
            config.period_s,
            config.get_sample_fraction,
            config.put_sample_fraction,
            config.latency_threshold_ms,
            config.seed + 1,
            failed_get_ms=config.get_timeout_s * 1e3,
        )
        self.pool = ServerPool(self.state_dir, redis_path)
        self.clock = VersionClock()  # shared by this cluster's clients (unique versions)
        self.client = ClusterClient(
            config, self.router, self.stats, self._server_died, client_id=0, clock=self.clock
        )
        self.executor = ActionExecutor(config, self.router, self.client, self.pool, self.save)
        self.deaths: list[str] = []  # servers the router dropped because they died

    # --- lifecycle --------------------------------------------------------------------------
    @classmethod
    async def up(cls, state_dir: Path, config: ClusterConfig | None = None) -> DirectorCluster:
        """Start the servers, lay out and write the data set (version 0), open the client."""
        redis = find_program("redis-server", "redis-server")
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        old = _read_state(state_dir)
        if old and any(_alive(p) for p in old.get("processes", [])):
            raise TestbedError(f"a cluster recorded in {state_dir} still runs; stop it first")
        cluster = cls(state_dir, config or ClusterConfig(), redis)
        try:
            await cluster._start()
        except BaseException:
            await cluster.down()
            raise
        return cluster

    async def _start(self) -> None:
        names = [f"server-{i}" for i in range(self.config.server_count)]
        servers = [self.pool.reserve(name) for name in names]
        await asyncio.gather(*(self.pool.launch(server) for server in servers))
        self.save()
        for server in servers:
            await self.client.attach(server.name, server.port)
            server.ready = True
        placement = initial_placement(self.config.bins, self.config.servers, self.config.replicas)
        for b, holders in enumerate(placement):
            for i in holders:
                self.router.add_replica(b, names[i])
        await self._load_data()
        self.stats.restart(self.client.now_s())
        self.save()

    async def _load_data(self) -> None:
        """Every replica of every bin gets the initial values (version 0)."""
        for server in self.pool.in_use():
            bins = self.router.bins_of(server.name)
            connection = await self.client.open_connection(server.name, server.port)
            try:
                for b in bins:
                    indices = self.layout.indices(b)
                    for start in range(indices.start, indices.stop, _LOAD_BATCH_KEYS):
                        stop = min(start + _LOAD_BATCH_KEYS, indices.stop)
                        pairs = []
                        for i in range(start, stop):
                            pairs += [key_name(i), encode_value(0, self._initial(i))]
                        await self.client.call(
                            server.name, connection, encode_command(b"MSET", *pairs)
                        )
            finally:
                await connection.close()

    def _initial(self, index: int) -> bytes:
        return initial_payload(index, self.config.value_bytes)

    async def open_client(self) -> ClusterClient:
        """Another client of this cluster (its own connections, the next client id, the
        shared version clock): several writers of the same keys (docs/director-live.md)."""
        client = ClusterClient(
            self.config,
            self.router,
            self.stats,
            self._server_died,
            client_id=len(self.executor.clients),
            clock=self.clock,
        )
        self.executor.clients.append(client)
        for server in self.pool.in_use():
            if server.pid is not None:
                await client.attach(server.name, server.port)
        return client

    async def down(self) -> int:
        """Cancel running actions, close the clients, stop every recorded PID; how many ran."""
        try:
            await self.executor.close()
        finally:
            for client in self.executor.clients:
                await client.close()
            stopped = await asyncio.to_thread(stop_recorded, self.pool.records)
            self.pool.records = []
            self.save()
        return stopped

    async def __aenter__(self) -> DirectorCluster:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.down()

    # --- the Director's handle --------------------------------------------------------------
    def servers(self) -> tuple[ServerState, ...]:
        """Servers in use (dead and removed ones are gone), their bins, booted or not."""
        return tuple(
            ServerState(s.name, self.router.bins_of(s.name), s.ready) for s in self.pool.in_use()
        )

    def running(self) -> tuple[RunningAction, ...]:
        return self.executor.running()

    def start(self, item: RunningAction, rate_bytes_per_s: float | None = None) -> None:
        """Start an action (``config.copy_rate_bytes_per_s`` unless a rate is given)."""
        self.executor.start(item, rate_bytes_per_s)

    async def cancel(self, action: Action) -> bool:
        return await self.executor.cancel(action)

    def finished(self) -> list[FinishedAction]:
        return self.executor.finished()

    async def wait_idle(self, timeout_s: float = 60.0) -> bool:
        return await self.executor.wait_idle(timeout_s)

    def collect_stats(self) -> list[PeriodStats]:
        """Statistics periods that ended since the last call (§5.5)."""
        return self.stats.collect(self.client.now_s())

    def bin_bytes(self) -> np.ndarray:
        """Stored bytes per bin at start (what a copy of the bin moves)."""
        sizes = [self.layout.size(b) for b in range(self.config.bins)]
        return np.asarray(sizes, dtype=float) * (self.config.value_bytes + 2)

    def observation(self, now_s: float, periods: list[PeriodStats]) -> Observation:
        """What the loop reads at ``now_s``: the servers, the running actions and the
        histograms of ``periods`` (``collect_stats()``), the last period's p99."""
        last = periods[-1] if periods else None
        measured = {"servers": float(len(self.pool.in_use()))}
        if last is not None:
            measured |= {"period_p99_ms": last.get_p99_ms, "period_gets": float(last.gets)}
        histograms = tuple(Histogram(p.get_rps, p.put_rps) for p in periods)
        return Observation(now_s, self.servers(), self.running(), histograms, measured)

    async def apply(self, step: Step) -> None:
        """Cancel what the step cancels, then start what it starts."""
        for action in step.cancel:
            await self.cancel(action)
        for item in step.start:
            self.start(item)

    async def step_director(self, director: DirectorLoop, now_s: float) -> list[PeriodStats]:
        """One tick of the control loop: its observation (the ended periods), then what
        it starts and cancels (``geoslo.control.director.loop``); the periods fed."""
        periods = self.collect_stats()
        step = director.step(self.observation(now_s, periods))
        if step is not None:
            await self.apply(step)
        return periods

    # --- failures and checks ----------------------------------------------------------------
    def kill_server(self, name: str) -> int:
        """SIGKILL one of this cluster's servers by its PID (failure injection)."""
        return self.pool.kill(name)

    def _server_died(self, name: str) -> None:
        self.pool.mark_dead(name)
        self.deaths.append(name)
        self.save()

    async def read_bin(self, server: str, b: int) -> dict[int, tuple[int, bytes] | None]:
        """Key index -> (version, payload) of bin ``b`` as stored on ``server`` (checks)."""
        process = self.pool.get(server)
        if process is None:
            raise TestbedError(f"{server} is not in use")
        connection = await self.client.open_connection(server, process.port)
        try:
            indices = list(self.layout.indices(b))
            keys = [key_name(i) for i in indices]
            values = await self.client.call(server, connection, encode_command(b"MGET", *keys))
        finally:
            await connection.close()
        return {
            i: None if v is None else decode_value(v) for i, v in zip(indices, values, strict=True)
        }

    # --- the state file ---------------------------------------------------------------------
    def save(self) -> None:
        """``director-cluster.json``: config, servers (port, pid, bins, ready) and every
        process started (name, pid, port; emptied by ``down``)."""
        servers = {
            s.name: {
                "port": s.port,
                "pid": s.pid,
                "ready": s.ready,
                "dead": s.dead,
                "removed": s.removed,
                "bins": list(self.router.bins_of(s.name)),
            }
            for s in self.pool.servers.values()
        }
        data = {"config": asdict(self.config), "servers": servers, "processes": self.pool.records}
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_dir / STATE_FILE)


def stop_recorded_in(state_dir: Path) -> int:
    """Stop the processes a cluster recorded in ``state_dir`` (after a crash)."""
    data = _read_state(Path(state_dir))
    if not data:
        return 0
    stopped = stop_recorded(data.get("processes", []))
    data["processes"] = []
    (Path(state_dir) / STATE_FILE).write_text(json.dumps(data, indent=1))
    return stopped


def _read_state(state_dir: Path) -> dict | None:
    path = state_dir / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def _alive(record: dict) -> bool:
    return process_alive(record["pid"])
