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
from geoslo.live._netns import cannot_run_reason
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
from geoslo.live._sites import SiteNamespaces
from geoslo.live._toxiproxy import ToxiproxyApi, ToxiproxyServer
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
    # engine "s3": regions in their own network namespaces ("namespaces", as root) or on
    # loopback, and every client path through toxiproxy (the serving region's too)
    network: str = "loopback"
    hosts: dict[str, str] = field(default_factory=dict)  # region -> where it listens
    local_servers: list[int] = field(default_factory=list)  # paths to the serving region
    local_relay: int | None = None
    serving_rtt_ms: float = 0.0  # the end-host's RTT to the serving region (s3 paths)
    residual_rtt_mean_ms: float = 0.5
    toxiproxy_port: int | None = None

    # --- endpoints ---------------------------------------------------------------------------
    def _endpoints(
        self, ports: list[int], relay_port: int | None, host: str = "127.0.0.1"
    ) -> RegionEndpoints:
        access = None if self.s3 is None else S3Access(**self.s3)
        return RegionEndpoints(tuple(ports), relay_port, host, access)

    def regions(self) -> Regions:
        """The regions as a client or VM next to the serving region reaches them."""
        if self.local_servers:
            serving = self._endpoints(self.local_servers, self.local_relay)
        else:
            serving = self._endpoints(self.servers[SERVING], self.relays[SERVING])
        return Regions(serving, self._endpoints(self.wan_servers, self.wan_relay))

    def direct_regions(self) -> Regions:
        """Both regions without the WAN (for checks from a test)."""
        return Regions(
            self._endpoints(self.servers[SERVING], self.relays[SERVING], self.host(SERVING)),
            self._endpoints(self.servers[SECOND], self.relays[SECOND], self.host(SECOND)),
        )

    def host(self, region: str) -> str:
        """Where a region's servers and relay listen (its namespace's address, or loopback)."""
        return self.hosts.get(region, "127.0.0.1")

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
        network: str = "auto",
        serving_rtt_ms: float = 0.0,
    ) -> CostloCluster:
        """Start every process (all at once, then wait for their ports). The lock services
        start from a new, empty backup (their state is complete, not lost). ``network``
        (engine s3): "namespaces", "loopback", or "auto" (namespaces where root can make
        them)."""
        if engine not in ENGINES:
            raise InputError("engine", f"must be one of {ENGINES}, got {engine!r}")
        if network not in ("auto", "namespaces", "loopback"):
            raise InputError("network", f"must be auto, namespaces or loopback, not {network!r}")
        state_dir = Path(state_dir)
        running = cls.load(state_dir)
        if running is not None and any(p["alive"] for p in running.status()):
            raise TestbedError(
                f"a CosTLO testbed already runs in {state_dir}; stop it first "
                f"(`geoslo testbed down --state-dir {state_dir}`)"
            )
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
            serving_rtt_ms=serving_rtt_ms,
            residual_rtt_mean_ms=residual_rtt_mean_ms,
        )
        if engine == "s3":
            cluster.network = _choose_network(network)
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
        if self.network == "namespaces":
            sites = SiteNamespaces.create(self.state_dir, list(REGIONS), "geoslo-costlo")
            self.hosts = {region: sites.address(region) for region in REGIONS}
            self.save()
        for region in REGIONS:
            for k in range(len(self.servers[region])):
                self._start_server(program, region, k)
        for region in REGIONS:
            locks = self._locks_config(region)
            self._launch_module("costlo-locks", f"locks-{region}", locks, locks.port)
            relay = RelayConfig(
                self.relays[region],
                tuple(self.servers[region]),
                self.host(region),
                self.s3,
                self.host(region),
            )
            self._launch_module("costlo-relay", f"relay-{region}", relay, relay.port, region)
        if self.engine == "redis":
            wan = self._wan_config(residual_rtt_mean_ms, seed)
            self._launch_module("wan", "wan", wan, wan.paths[0].listen_port)
        for record in self.processes:
            self._wait(record)
        if self.engine == "s3":
            from geoslo.live.costlo._s3 import ensure_bucket

            for region in REGIONS:
                asyncio.run(ensure_bucket(self.direct_regions().region(region)))
            self._start_paths(seed)
        self.save()

    def _wait(self, record: dict) -> None:
        host = record.get("host", "127.0.0.1")
        try:
            wait_for_port(record["port"], 15.0, pid=record["pid"], host=host)
        except TestbedError as error:
            log = self.state_dir / f"{record['name']}.log"
            raise TestbedError(f"{record['name']}: {error}; see {log}") from None

    def _start_server(self, program: str, region: str, index: int) -> dict:
        """Start one storage server (in its region's namespace, if any); its record."""
        name, port = self.server_name(region, index), self.servers[region][index]
        self._launch(name, self._server_command(program, name, port, region), port, region)
        return self._record(name)

    def _server_command(self, program: str, name: str, port: int, region: str) -> list[str]:
        """A storage server's command line: Redis, or a versitygw gateway on a directory."""
        if self.engine == "redis":
            return redis_server_command(program, name, port, self.state_dir)
        root = self.state_dir / name
        root.mkdir(parents=True, exist_ok=True)
        access = S3Access(**self.s3)
        credentials = ["--access", access.access_key, "--secret", access.secret_key]
        listen = f"{self.host(region)}:{port}"
        return [program, *credentials, "--port", listen, "posix", str(root)]

    # --- the WAN of the s3 engine: toxiproxy paths -----------------------------------------------
    def _start_paths(self, seed: int) -> None:
        """toxiproxy, and one path per server and relay of each region: the second region
        ``second_rtt_ms`` away, the serving one ``serving_rtt_ms`` (both with the residual)."""
        toxiproxy = ToxiproxyServer.start(self.state_dir, seed)
        self.processes.append({"name": "toxiproxy", "pid": toxiproxy.pid, "port": toxiproxy.port})
        self.toxiproxy_port = toxiproxy.port
        self.save()
        api = toxiproxy.api
        ports = {}
        for region in REGIONS:
            rtt_ms = self.second_rtt_ms if region == SECOND else self.serving_rtt_ms
            targets = [(f"{region}-server-{k}", p) for k, p in enumerate(self.servers[region])]
            targets.append((f"{region}-relay", self.relays[region]))
            for name, port in targets:
                ports[name] = api.create_proxy(name, self.host(region), port)
                api.set_path_delay(name, rtt_ms, self.residual_rtt_mean_ms)
        serving, second = (
            [ports[f"{r}-server-{k}"] for k in range(len(self.servers[r]))] for r in REGIONS
        )
        self.local_servers, self.local_relay = serving, ports[f"{SERVING}-relay"]
        self.wan_servers, self.wan_relay = second, ports[f"{SECOND}-relay"]

    def region_paths(self, region: str) -> list[str]:
        """The toxiproxy paths from the client side to a region's servers and relay."""
        prefix = f"{region}-"
        return sorted(name for name in self._toxiproxy().proxies() if name.startswith(prefix))

    def slow_region(self, region: str, extra_rtt_ms: float, duration_s: float):
        """Every path to a region takes ``extra_rtt_ms`` longer for ``duration_s`` (a
        region-wide slowdown, at the delay injector); the timer that ends it."""
        return self._toxiproxy().stall_for(self.region_paths(region), extra_rtt_ms, duration_s)

    def _toxiproxy(self) -> ToxiproxyApi:
        if self.toxiproxy_port is None:
            raise TestbedError("this cluster has no delay injector (engine s3 has one)")
        return ToxiproxyApi(self.toxiproxy_port)

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

    def _launch_module(
        self, role: str, name: str, config, port: int, region: str | None = None
    ) -> None:
        """Write a process's config next to its log and start ``python -m geoslo.live``."""
        path = self.state_dir / f"{name}.json"
        config.write(path)
        command = python_module_command("geoslo.live", role, str(path))
        self._launch(name, command, port, region)

    def _launch(
        self, name: str, command: list[str], port: int | None, region: str | None = None
    ) -> ManagedProcess:
        """Start a process (inside ``region``'s namespace when the regions have their own)
        and record it: name, PID, port and the host it listens on."""
        host = "127.0.0.1"
        if region is not None and self.network == "namespaces":
            sites = SiteNamespaces.recorded_in(self.state_dir)
            command, host = sites.command_in(region, command), self.host(region)
        process = ManagedProcess(name, command, self.state_dir / f"{name}.log")
        process.start(detached=True)
        process.port = port
        self.processes.append({"name": name, "pid": process.pid, "port": port, "host": host})
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
        self._wait(self._start_server(self._program(), region, index))

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

    def status(self) -> list[dict]:
        """Each recorded process: name, pid, port, host, alive."""
        return [dict(p, alive=process_alive(p["pid"])) for p in self.processes]

    def down(self) -> int:
        """Stop every process this cluster started (by PID) and remove the namespaces it
        made; how many processes were running."""
        stopped = stop_recorded(self.processes)
        self.processes = []
        sites = SiteNamespaces.recorded_in(self.state_dir)
        if sites is not None:
            sites.delete()
        self.save()
        return stopped

    # --- the state file ----------------------------------------------------------------------
    def save(self) -> None:
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        tmp = self.state_dir / "cluster.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.chmod(0o600)  # it holds the S3 secret key
        tmp.replace(self.state_dir / "cluster.json")

    @classmethod
    def load(cls, state_dir: Path) -> CostloCluster | None:
        path = Path(state_dir) / "cluster.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["state_dir"] = Path(data["state_dir"])
        return cls(**data)


def _choose_network(network: str) -> str:
    """Namespaces where asked for or possible ("auto"); loopback otherwise."""
    if network == "loopback":
        return network
    reason = cannot_run_reason()
    if reason is None:
        return "namespaces"
    if network == "namespaces":
        raise TestbedError(f"cannot make network namespaces here: {reason}")
    return "loopback"
