"""The live testbed: real Redis servers per site and the WAN emulator between sites.

``Testbed.up(spec)`` starts, on loopback, ``servers_per_site`` Redis servers per site
(each holding a full replica of the data set) and one WAN-emulator process with a
delay path from every site to every server and every site agent of every other site.
It records every endpoint and PID in ``testbed.json`` in its state folder, so ``status``
and ``down`` work from another process, and ``down`` signals only those PIDs.
A *site agent* is the per-site controller process of a system (a Kurma instance); its
ports are reserved here so that agents reach each other only through the WAN.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._backend import ServiceWork, key_name
from geoslo.live._processes import (
    ManagedProcess,
    find_program,
    free_ports,
    process_alive,
    python_module_command,
    redis_server_command,
    stop_recorded,
)
from geoslo.live._resp import RedisConnection, encode_command
from geoslo.live._wan import DelayPath, WanConfig
from geoslo.topology import BaseRttSchedule, kurma_topology

__all__ = ["TestbedSpec", "Testbed", "default_state_dir", "canonical_sites"]

KNOWN_SITES = ("London", "Ireland", "Frankfurt")  # Kurma §7, Table 2 base RTT ranges


def default_state_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"geoslo-testbed-{os.getuid()}"


def canonical_sites(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Site names as the topology spells them (case-insensitive), at least two, no repeats."""
    by_lower = {s.lower(): s for s in KNOWN_SITES}
    sites = []
    for name in names:
        site = by_lower.get(name.strip().lower())
        if site is None:
            known = ", ".join(s.lower() for s in KNOWN_SITES)
            raise ConfigError("sites", f"unknown site {name!r}; known sites: {known}")
        if site in sites:
            raise ConfigError("sites", f"{site} is named twice")
        sites.append(site)
    if len(sites) < 2:
        raise ConfigError("sites", "name at least two sites, e.g. london,ireland,frankfurt")
    return tuple(sites)


@dataclass(frozen=True)
class TestbedSpec:
    """What to start. Defaults are the calibration in docs/live.md."""

    __test__ = False

    sites: tuple[str, ...] = KNOWN_SITES
    servers_per_site: int = 2
    service_mean_ms: float = 2.0  # per request: 2 servers saturate at ~1000 req/s per site
    keys: int = 10_000
    value_bytes: int = 375  # Kurma §7.1.3: 375-byte requests
    routing_mean_interval_s: float | None = 120.0  # route changes, as in the simulation
    schedule_s: float = 7200.0  # how long the base-RTT schedules run
    residual_rtt_mean_ms: float = 0.5  # WAN jitter on top of the base RTT
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sites", canonical_sites(self.sites))
        if not (isinstance(self.servers_per_site, int) and 1 <= self.servers_per_site <= 8):
            raise ConfigError("servers_per_site", "must be an integer from 1 to 8")
        if not self.keys >= 1 or not self.value_bytes >= 1:
            raise ConfigError("keys", "keys and value_bytes must be >= 1")
        ServiceWork(self.service_mean_ms)  # raises ConfigError for a bad mean

    @property
    def work(self) -> ServiceWork:
        return ServiceWork(self.service_mean_ms)

    def base_rtt_schedules(self) -> dict[tuple[str, str], BaseRttSchedule]:
        """Base RTT per directed site pair, from the Table 2 ranges (both ways the same)."""
        topology = kurma_topology(
            1.0,
            routing_mean_interval_s=self.routing_mean_interval_s,
            duration_s=self.schedule_s,
            seed=self.seed,
        )
        schedules = {}
        for link in topology.links:
            if link.src in self.sites and link.dst in self.sites:
                schedules[(link.src, link.dst)] = link.base_rtt
                schedules[(link.dst, link.src)] = link.base_rtt
        return schedules


@dataclass
class SiteEndpoints:
    servers: list[int]  # Redis ports of this site's own servers
    agent_port: int  # where the site's agent accepts its peers (reached through the WAN)
    agent_local_port: int  # where the site's agent accepts local clients
    metrics_port: int  # Prometheus exposition of the site's agent


@dataclass
class Testbed:
    """A running (or recorded) testbed: its spec, endpoints and processes."""

    __test__ = False  # not a pytest test class, despite the name

    spec: TestbedSpec
    state_dir: Path
    epoch_unix_s: float
    sites: dict[str, SiteEndpoints]
    paths: dict[str, int]  # "src>dst/kind" -> WAN port, kind = server index or "agent"
    processes: list[dict] = field(default_factory=list)

    # --- endpoints ---------------------------------------------------------------------------
    def server_port(self, src: str, dst: str, server: int) -> int:
        """The port a client at ``src`` uses for server ``server`` of ``dst`` (WAN if remote)."""
        if src == dst:
            return self.sites[dst].servers[server]
        return self.paths[f"{src}>{dst}/{server}"]

    def agent_port(self, src: str, dst: str) -> int:
        """The port ``src``'s agent uses to reach ``dst``'s agent, through the WAN."""
        return self.paths[f"{src}>{dst}/agent"]

    def base_rtt_ms(self, t_unix_s: float) -> np.ndarray:
        """The true base RTT matrix at a moment (for reports; agents measure their own)."""
        schedules = self.spec.base_rtt_schedules()
        n = len(self.spec.sites)
        rtt = np.zeros((n, n))
        for i, a in enumerate(self.spec.sites):
            for j, b in enumerate(self.spec.sites):
                if i != j:
                    rtt[i, j] = schedules[(a, b)].at(t_unix_s - self.epoch_unix_s)
        return rtt

    def max_one_way_ms(self) -> float:
        """The largest one-way base delay in the schedules (for the dissemination point)."""
        return max(s.max_ms for s in self.spec.base_rtt_schedules().values()) / 2

    # --- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def up(cls, spec: TestbedSpec, state_dir: Path | None = None, progress=print) -> Testbed:
        """Start Redis servers and the WAN emulator; fill every server with the data set."""
        state_dir = Path(state_dir or default_state_dir())
        existing = cls.load(state_dir)
        if existing is not None and existing.running():
            raise TestbedError(
                f"a testbed already runs from {state_dir}; `geoslo testbed down` first"
            )
        redis = find_program("redis-server", "redis-server")
        state_dir.mkdir(parents=True, exist_ok=True)
        testbed = cls._allocate(spec, state_dir)
        try:
            testbed._start_redis(redis, progress)
            testbed._start_wan(progress)
            asyncio.run(testbed._fill(progress))
        except BaseException:
            testbed.down()
            raise
        testbed.save()
        return testbed

    @classmethod
    def _allocate(cls, spec: TestbedSpec, state_dir: Path) -> Testbed:
        n, per = len(spec.sites), spec.servers_per_site
        remote_paths = n * (n - 1) * (per + 1)
        ports = iter(free_ports(n * (per + 3) + remote_paths))
        sites = {
            s: SiteEndpoints(
                [next(ports) for _ in range(per)], next(ports), next(ports), next(ports)
            )
            for s in spec.sites
        }
        paths = {}
        for src in spec.sites:
            for dst in spec.sites:
                if src != dst:
                    for k in range(per):
                        paths[f"{src}>{dst}/{k}"] = next(ports)
                    paths[f"{src}>{dst}/agent"] = next(ports)
        epoch = float(np.floor(time.time()))
        return cls(spec, state_dir, epoch, sites, paths)

    def _start_redis(self, redis: str, progress) -> None:
        for site, ends in self.sites.items():
            for k, port in enumerate(ends.servers):
                name = f"redis-{site.lower()}-{k}"
                self._launch(name, redis_server_command(redis, name, port, self.state_dir), port)
        progress(f"testbed: {sum(len(e.servers) for e in self.sites.values())} Redis servers up")

    def _start_wan(self, progress) -> None:
        schedules = self.spec.base_rtt_schedules()
        delay_paths = []
        for key, port in self.paths.items():
            pair, kind = key.split("/")
            src, dst = pair.split(">")
            target = (
                self.sites[dst].agent_port
                if kind == "agent"
                else self.sites[dst].servers[int(kind)]
            )
            delay_paths.append(
                DelayPath(
                    src, dst, port, target, schedules[(src, dst)], self.spec.residual_rtt_mean_ms
                )
            )
        config_path = self.state_dir / "wan.json"
        WanConfig(tuple(delay_paths), self.epoch_unix_s, self.spec.seed).write(config_path)
        command = python_module_command("geoslo.live", "wan", str(config_path))
        self._launch("wan", command, delay_paths[0].listen_port)
        progress(f"testbed: WAN emulator up ({len(delay_paths)} delay paths)")

    def _launch(self, name: str, command: list[str], port: int) -> None:
        process = ManagedProcess(name, command, self.state_dir / f"{name}.log", port)
        process.start(detached=True)
        self.processes.append({"name": name, "pid": process.pid, "port": port})
        self.save()

    async def _fill(self, progress) -> None:
        for ends in self.sites.values():
            for port in ends.servers:
                await self._fill_one(port)
        progress(f"testbed: {self.spec.keys} keys of {self.spec.value_bytes} B on every server")

    def running(self) -> bool:
        return any(process_alive(p["pid"]) for p in self.processes)

    def status(self) -> list[dict]:
        """Each recorded process: name, pid, port, alive."""
        return [dict(p, alive=process_alive(p["pid"])) for p in self.processes]

    def down(self) -> int:
        """Stop every process this testbed started (by PID); return how many were running."""
        stopped = stop_recorded(self.processes)
        self.processes = []
        self.save()
        return stopped

    def restart_process(self, name: str) -> None:
        """Start a recorded process again on its port (after a failure, or a test's kill)."""
        record = next(p for p in self.processes if p["name"] == name)
        if process_alive(record["pid"]):
            raise TestbedError(f"{name} still runs (pid {record['pid']})")
        if name.startswith("redis-"):
            redis = find_program("redis-server", "redis-server")
            command = redis_server_command(redis, name, record["port"], self.state_dir)
        else:
            command = python_module_command("geoslo.live", "wan", str(self.state_dir / "wan.json"))
        process = ManagedProcess(name, command, self.state_dir / f"{name}.log", record["port"])
        record["pid"] = process.start(detached=True).pid
        self.save()
        if name.startswith("redis-"):
            asyncio.run(self._fill_one(record["port"]))

    async def _fill_one(self, port: int, batch: int = 500) -> None:
        """Write the whole data set to one server (at ``up``, and after a restart: a full
        resync), in pipelined MSETs of ``batch`` keys."""
        connection = await RedisConnection.open(port)
        value = b"v" * self.spec.value_bytes
        for start in range(0, self.spec.keys, batch):
            args: list = [b"MSET"]
            for k in range(start, min(start + batch, self.spec.keys)):
                args += [key_name(k), value]
            await connection.send(encode_command(*args))
        await connection.close()

    # --- the state file ----------------------------------------------------------------------
    def save(self) -> None:
        data = {
            "spec": asdict(self.spec),
            "epoch_unix_s": self.epoch_unix_s,
            "sites": {s: asdict(e) for s, e in self.sites.items()},
            "paths": self.paths,
            "processes": self.processes,
        }
        tmp = self.state_dir / "testbed.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_dir / "testbed.json")

    @classmethod
    def load(cls, state_dir: Path | None = None) -> Testbed | None:
        state_dir = Path(state_dir or default_state_dir())
        path = state_dir / "testbed.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        spec_data = data["spec"]
        spec_data["sites"] = tuple(spec_data["sites"])
        return cls(
            TestbedSpec(**spec_data),
            state_dir,
            float(data["epoch_unix_s"]),
            {s: SiteEndpoints(**e) for s, e in data["sites"].items()},
            dict(data["paths"]),
            list(data["processes"]),
        )
