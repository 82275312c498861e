"""A small live CosTLO deployment on loopback: two regions and the WAN between them.

``CostloCluster.up(state_dir)`` starts, for the regions ``serving`` and ``second``, N
storage servers each, a lock and version service per region, a relay per region, and one
WAN-emulator process with a delay path from the client/VM side to every server and to the
relay of the second region (the serving region is local). The storage engine is Redis
(``engine="redis"``, the testbed's command line) or S3 (``engine="s3"``: one versitygw
gateway per server, built from the Go module proxy, each with its own directory and one
bucket). It records every PID in ``cluster.json``; ``down`` stops only those PIDs.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from geoslo.errors import InputError, TestbedError
from geoslo.live._gobuild import go_program
from geoslo.live._processes import (
    ManagedProcess,
    find_program,
    free_ports,
    process_alive,
    python_module_command,
    redis_server_command,
    stop_recorded,
    wait_for_port,
)
from geoslo.live._wan import DelayPath, WanConfig
from geoslo.live.costlo._locks import DEFAULT_LEASE_S, LockServiceConfig, initialise_backup
from geoslo.live.costlo._objects import (
    REGIONS,
    SECOND,
    SERVING,
    RegionEndpoints,
    Regions,
    S3Access,
)
from geoslo.live.costlo._plan import object_copies
from geoslo.live.costlo._relay import RelayConfig
from geoslo.live.costlo._storage import Store, region_store
from geoslo.live.costlo._vm_process import VmProcessConfig
from geoslo.topology import BaseRttSchedule

__all__ = ["CostloCluster", "ENGINES"]

ENGINES = ("redis", "s3")
S3_BUCKET = "geoslo-costlo"


@dataclass
class CostloCluster:
    """A running (or recorded) two-region deployment: its ports and its processes."""

    state_dir: Path
    second_rtt_ms: float
    servers: dict[str, list[int]]  # region -> its Redis ports (direct, local)
    relays: dict[str, int]  # region -> its relay's port (direct)
    locks: dict[str, int]  # region -> its lock service's port
    wan_servers: list[int]  # WAN ports to the second region's servers, in order
    wan_relay: int  # WAN port to the second region's relay
    processes: list[dict] = field(default_factory=list)
    lease_s: float = DEFAULT_LEASE_S  # the lock services' default lease
    engine: str = "redis"
    s3: dict | None = None  # the S3Access of every server (engine "s3")

    # --- endpoints ---------------------------------------------------------------------------
    def _endpoints(self, ports: list[int], relay_port: int) -> RegionEndpoints:
        access = None if self.s3 is None else S3Access(**self.s3)
        return RegionEndpoints(tuple(ports), relay_port, s3=access)

    def regions(self) -> Regions:
        """The regions as a client or VM next to the serving region reaches them."""
        return Regions(
            self._endpoints(self.servers[SERVING], self.relays[SERVING]),
            self._endpoints(self.wan_servers, self.wan_relay),
        )

    def direct_regions(self) -> Regions:
        """Both regions without the WAN (for checks from a test)."""
        return Regions(
            self._endpoints(self.servers[SERVING], self.relays[SERVING]),
            self._endpoints(self.servers[SECOND], self.relays[SECOND]),
        )

    def store(self, region: str = SERVING) -> Store:
        """A store of one region's servers, reached directly (for checks and for filling)."""
        return region_store(self.direct_regions().region(region), f"direct-{region}")

    def server_name(self, region: str, index: int) -> str:
        """The recorded name of a storage server (to :meth:`kill` it)."""
        return f"{self.engine}-{region}-{index}"

    async def read_copies(self, configuration, key: str) -> dict[str, tuple[int, bytes] | None]:
        """Every copy of ``key`` that ``configuration`` keeps, read straight from its server
        (no WAN, no relay): ``{"serving/0": (version, value) or None, ...}``."""
        stores = {r: self.store(r) for r in (SERVING, SECOND)}
        try:
            return {
                str(ref): await stores[ref.region].read(key, ref.copy)
                for ref in object_copies(configuration)
            }
        finally:
            for store in stores.values():
                await store.close()

    def lock_port(self, region: str = SERVING) -> int:
        return self.locks[region]

    # --- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def up(
        cls,
        state_dir: Path,
        servers_per_region: int = 2,
        second_rtt_ms: float = 10.0,
        residual_rtt_mean_ms: float = 0.5,
        seed: int = 0,
        lease_s: float = DEFAULT_LEASE_S,
        engine: str = "redis",
    ) -> CostloCluster:
        """Start every process (all at once, then wait for their ports). The lock services
        start from a new, empty backup (their state is complete, not lost)."""
        if engine not in ENGINES:
            raise InputError("engine", f"must be one of {ENGINES}, got {engine!r}")
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        ports = iter(free_ports(2 * servers_per_region + 4 + servers_per_region + 1))
        cluster = cls(
            state_dir,
            second_rtt_ms,
            {r: [next(ports) for _ in range(servers_per_region)] for r in REGIONS},
            {r: next(ports) for r in REGIONS},
            {r: next(ports) for r in REGIONS},
            [next(ports) for _ in range(servers_per_region)],
            next(ports),
            lease_s=lease_s,
            engine=engine,
        )
        if engine == "s3":
            cluster.s3 = {
                "bucket": S3_BUCKET,
                "access_key": f"geoslo{secrets.token_hex(4)}",
                "secret_key": secrets.token_hex(16),
            }
        for region in REGIONS:
            initialise_backup(Path(cluster._locks_config(region).backup_path))
        try:
            cluster._start_all(cluster._program(), residual_rtt_mean_ms, seed)
        except BaseException:
            cluster.down()
            raise
        return cluster

    def _start_all(self, program: str, residual_rtt_mean_ms: float, seed: int) -> None:
        for region in REGIONS:
            for k, port in enumerate(self.servers[region]):
                name = self.server_name(region, k)
                self._launch(name, self._server_command(program, name, port), port)
        for region in REGIONS:
            locks = self._locks_config(region)
            self._launch_module("costlo-locks", f"locks-{region}", locks, locks.port)
            relay = RelayConfig(self.relays[region], tuple(self.servers[region]), s3=self.s3)
            self._launch_module("costlo-relay", f"relay-{region}", relay, relay.port)
        wan = self._wan_config(residual_rtt_mean_ms, seed)
        self._launch_module("wan", "wan", wan, wan.paths[0].listen_port)
        for record in self.processes:
            try:
                wait_for_port(record["port"], 15.0, pid=record["pid"])
            except TestbedError as error:
                log = self.state_dir / f"{record['name']}.log"
                raise TestbedError(f"{record['name']}: {error}; see {log}") from None
        if self.engine == "s3":
            from geoslo.live.costlo._s3 import ensure_bucket

            for region in REGIONS:
                asyncio.run(ensure_bucket(self.direct_regions().region(region)))
        self.save()

    def _server_command(self, program: str, name: str, port: int) -> list[str]:
        """A storage server's command line: Redis, or a versitygw gateway on a directory."""
        if self.engine == "redis":
            return redis_server_command(program, name, port, self.state_dir)
        root = self.state_dir / name
        root.mkdir(parents=True, exist_ok=True)
        access = S3Access(**self.s3)
        credentials = ["--access", access.access_key, "--secret", access.secret_key]
        return [program, *credentials, "--port", f"127.0.0.1:{port}", "posix", str(root)]

    def _locks_config(self, region: str) -> LockServiceConfig:
        backup = self.state_dir / f"locks-{region}.jsonl"
        return LockServiceConfig(self.locks[region], str(backup), self.lease_s)

    def _wan_config(self, residual_rtt_mean_ms: float, seed: int) -> WanConfig:
        rtt = BaseRttSchedule.constant(self.second_rtt_ms)
        targets = list(zip(self.wan_servers, self.servers[SECOND], strict=True))
        targets.append((self.wan_relay, self.relays[SECOND]))
        paths = tuple(
            DelayPath(SERVING, SECOND, listen, target, rtt, residual_rtt_mean_ms)
            for listen, target in targets
        )
        return WanConfig(paths, float(time.time()), seed)

    def _launch_module(self, role: str, name: str, config, port: int) -> None:
        """Write a process's config next to its log and start ``python -m geoslo.live``."""
        path = self.state_dir / f"{name}.json"
        config.write(path)
        self._launch(name, python_module_command("geoslo.live", role, str(path)), port)

    def _launch(self, name: str, command: list[str], port: int | None) -> ManagedProcess:
        process = ManagedProcess(name, command, self.state_dir / f"{name}.log")
        process.start(detached=True)
        process.port = port
        self.processes.append({"name": name, "pid": process.pid, "port": port})
        self.save()
        return process

    def start_vm(self, config: VmProcessConfig, name: str = "vm") -> ManagedProcess:
        """Start a ``costlo-vm`` process (recorded, so ``down`` stops it too)."""
        path = self.state_dir / f"{name}.json"
        config.write(path)
        command = python_module_command("geoslo.live", "costlo-vm", str(path))
        self.processes = [p for p in self.processes if p["name"] != name or process_alive(p["pid"])]
        return self._launch(name, command, None)

    def kill(self, name: str) -> None:
        """SIGKILL one recorded process (``redis-serving-0``, ``locks-serving``, ...; see
        :meth:`server_name`) by its
        PID and wait until it is gone: a crash, for tests."""
        record = self._record(name)
        if process_alive(record["pid"]):
            os.kill(record["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while process_alive(record["pid"]):
            if time.monotonic() > deadline:
                raise TestbedError(f"{name} (pid {record['pid']}) did not die after SIGKILL")
            time.sleep(0.01)
        self.processes.remove(record)
        self.save()

    def restart_server(self, region: str, index: int) -> None:
        """Start a killed storage server again on its port: a versitygw gateway finds its
        objects on disk; a Redis server (no persistence) starts empty."""
        name = self.server_name(region, index)
        if any(p["name"] == name for p in self.processes):
            raise TestbedError(f"{name} is running; kill it first")
        program = self._program()
        port = self.servers[region][index]
        process = self._launch(name, self._server_command(program, name, port), port)
        wait_for_port(port, 15.0, pid=process.pid)

    def _program(self) -> str:
        if self.engine == "redis":
            return find_program("redis-server", "redis-server")
        return go_program("versitygw")

    def pause(self, name: str) -> None:
        """SIGSTOP one recorded process: a stalled server that answers nothing (tests)."""
        os.kill(self._record(name)["pid"], signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT a process :meth:`pause` stopped."""
        os.kill(self._record(name)["pid"], signal.SIGCONT)

    def _record(self, name: str) -> dict:
        (record,) = [p for p in self.processes if p["name"] == name]
        return record

    def restart_lock_service(
        self, region: str = SERVING, lose_state: bool = False, old_backup: Path | None = None
    ) -> None:
        """Kill a region's lock service and start it again on its port: from its backup,
        with the backup deleted (``lose_state``: every version and lock forgotten), or from
        a copy of an earlier backup (``old_backup``: stale versions)."""
        name = f"locks-{region}"
        self.kill(name)
        config = self._locks_config(region)
        if lose_state:
            Path(config.backup_path).unlink(missing_ok=True)
        elif old_backup is not None:
            Path(config.backup_path).write_bytes(Path(old_backup).read_bytes())
        self._launch_module("costlo-locks", name, config, config.port)
        record = self._record(name)
        wait_for_port(config.port, 15.0, pid=record["pid"])

    def down(self) -> int:
        """Stop every process this cluster started (by PID); how many were running."""
        stopped = stop_recorded(self.processes)
        self.processes = []
        self.save()
        return stopped

    # --- the state file ----------------------------------------------------------------------
    def save(self) -> None:
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        tmp = self.state_dir / "cluster.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_dir / "cluster.json")

    @classmethod
    def load(cls, state_dir: Path) -> CostloCluster | None:
        path = Path(state_dir) / "cluster.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["state_dir"] = Path(data["state_dir"])
        return cls(**data)
