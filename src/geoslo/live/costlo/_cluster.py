"""A small live CosTLO deployment on one machine: named regions and the WAN to them.

``CostloCluster.up(state_dir)`` starts, for each region (``serving`` and ``second`` unless
``regions`` names others, the serving one first, each with the clients' RTT to it), N
storage servers, a lock and version service, a relay, and delay paths from the client/VM
side to every server and relay of the other regions. The storage engine is Redis
(``engine="redis"``: the paths are the ``_wan.py`` emulator's, and the serving region is
local) or S3 (``engine="s3"``: one versitygw gateway per server, built from the Go module
proxy, each with its own directory and one bucket; every path, the serving region's too,
goes through toxiproxy). It records every PID in ``cluster.json``; ``down`` stops only
those PIDs.

A configuration names two roles (§5.2): the serving region and the second one, the closest
other. Methods that take a region take its name or a role: ``"serving"`` is the first
region, ``"second"`` the other one with the lowest RTT (``regions(second=...)`` picks
another).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from geoslo.errors import InputError, TestbedError
from geoslo.live._exchange import create_secret_file
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
from geoslo.live._sites import SiteNamespaces, choose_network
from geoslo.live._toxiproxy import STATE_FILE as TOXIPROXY_STATE_FILE
from geoslo.live._toxiproxy import ToxiproxyApi, ToxiproxyServer
from geoslo.live._wan import DelayPath, WanConfig
from geoslo.live.costlo._locks import DEFAULT_LEASE_S, LockServiceConfig, initialise_backup
from geoslo.live.costlo._objects import (
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
from geoslo.topology import BaseRttSchedule, load_ibm_latency

__all__ = ["CostloCluster", "ENGINES", "region_rtts"]

ENGINES = ("redis", "s3")
S3_BUCKET = "geoslo-costlo"
RELAY_SECRET_FILE = "relay.key"  # the relays' requests are sealed with it
MAX_REGIONS = 6  # each one is N gateways, a relay and a lock service on this machine
_REGION_NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")


@dataclass
class CostloCluster:
    """A running (or recorded) deployment of named regions: their ports and processes."""

    state_dir: Path
    rtts_ms: dict[str, float]  # region -> the clients' RTT to it; the first one serves
    servers: dict[str, list[int]]  # region -> its storage servers' ports (direct)
    relays: dict[str, int]  # region -> its relay's port (direct)
    locks: dict[str, int]  # region -> its lock service's port
    # region -> the delay injector's ports to its servers, in order, and to its relay (the
    # regions the clients reach over the WAN: every one but the serving region on Redis,
    # all of them on S3)
    paths: dict[str, list[int]] = field(default_factory=dict)
    path_relays: dict[str, int] = field(default_factory=dict)
    processes: list[dict] = field(default_factory=list)
    lease_s: float = DEFAULT_LEASE_S  # the lock services' default lease
    engine: str = "redis"
    s3: dict | None = None  # the S3Access of every server (engine "s3")
    # engine "s3": regions in their own network namespaces ("namespaces", as root) or on
    # loopback, and every client path through toxiproxy (the serving region's too)
    network: str = "loopback"
    hosts: dict[str, str] = field(default_factory=dict)  # region -> where it listens
    residual_rtt_mean_ms: float = 0.5
    toxiproxy_port: int | None = None

    def __post_init__(self) -> None:
        self._pauses: Counter[str] = Counter()  # name -> pauses not yet resumed (this process)

    # --- regions and roles -------------------------------------------------------------------
    @property
    def serving(self) -> str:
        """The serving region's name (the first)."""
        return next(iter(self.rtts_ms))

    def name(self, region: str) -> str:
        """A region's name from its name or its role (``"serving"``; ``"second"``: the
        other region with the lowest RTT)."""
        if region in self.rtts_ms:
            return region
        if region == SERVING:
            return self.serving
        if region == SECOND:
            return min(self.others(), key=lambda other: self.rtts_ms[other])
        raise InputError("region", f"no region {region!r}; regions: {list(self.rtts_ms)}")

    def others(self) -> list[str]:
        """Every region but the serving one, in the order they were given."""
        return [name for name in self.rtts_ms if name != self.serving]

    # --- endpoints ---------------------------------------------------------------------------
    def _endpoints(
        self, ports: list[int], relay_port: int | None, host: str = "127.0.0.1"
    ) -> RegionEndpoints:
        access = None if self.s3 is None else S3Access(**self.s3)
        secret = self.state_dir / RELAY_SECRET_FILE
        secret_file = str(secret) if secret.exists() else None  # none before relays sealed
        return RegionEndpoints(tuple(ports), relay_port, host, access, secret_file)

    def reach(self, region: str) -> RegionEndpoints:
        """A region as a client or VM next to the serving region reaches it: through the
        delay injector, or directly when it is local."""
        name = self.name(region)
        if name in self.paths:
            return self._endpoints(self.paths[name], self.path_relays[name])
        return self.direct(name)

    def direct(self, region: str) -> RegionEndpoints:
        """A region without the WAN: its own address (for checks from a test, filling, and
        the agent at the region's boundary)."""
        name = self.name(region)
        return self._endpoints(self.servers[name], self.relays[name], self.host(name))

    def regions(self, second: str | None = None) -> Regions:
        """The serving region and ``second`` (by default the closest other) as a client
        next to the serving one reaches them."""
        return Regions(self.reach(SERVING), self.reach(second or SECOND))

    def direct_regions(self, second: str | None = None) -> Regions:
        """The serving region and ``second`` without the WAN (for checks from a test)."""
        return Regions(self.direct(SERVING), self.direct(second or SECOND))

    def host(self, region: str) -> str:
        """Where a region's servers and relay listen (its namespace's address, or loopback)."""
        return self.hosts.get(self.name(region), "127.0.0.1")

    def store(self, region: str = SERVING) -> Store:
        """A store of one region's servers, reached directly (for checks and for filling)."""
        return region_store(self.direct(region), f"direct-{self.name(region)}")

    def server_name(self, region: str, index: int) -> str:
        """The recorded name of a storage server (to :meth:`kill` it)."""
        return f"{self.engine}-{self.name(region)}-{index}"

    async def read_copies(
        self, configuration, key: str, second: str = SECOND
    ) -> dict[str, tuple[int, bytes] | None]:
        """Every copy of ``key`` that ``configuration`` keeps, read straight from its server
        (no WAN, no relay): ``{"serving/0": (version, value) or None, ...}``."""
        stores = {SERVING: self.store(SERVING), SECOND: self.store(second)}
        try:
            return {
                str(ref): await stores[ref.region].read(key, ref.copy)
                for ref in object_copies(configuration)
            }
        finally:
            for store in stores.values():
                await store.close()

    def lock_port(self, region: str = SERVING) -> int:
        return self.locks[self.name(region)]

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
        regions: dict[str, float] | None = None,
    ) -> CostloCluster:
        """Start every process (all at once, then wait for their ports). The lock services
        start from a new, empty backup (their state is complete, not lost). ``regions``:
        name -> the clients' RTT (ms), the serving region first (see :func:`region_rtts`);
        by default ``serving`` and ``second`` at ``serving_rtt_ms`` and ``second_rtt_ms``.
        ``network`` (engine s3): "namespaces", "loopback", or "auto" (namespaces where
        root can make them)."""
        if regions is None:
            regions = {SERVING: serving_rtt_ms, SECOND: second_rtt_ms}
        regions = _checked_regions(regions)
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
        ports = iter(free_ports(len(regions) * (2 * servers_per_region + 3)))
        cluster = cls(
            state_dir,
            regions,
            {r: [next(ports) for _ in range(servers_per_region)] for r in regions},
            {r: next(ports) for r in regions},
            {r: next(ports) for r in regions},
            lease_s=lease_s,
            engine=engine,
            residual_rtt_mean_ms=residual_rtt_mean_ms,
        )
        if engine == "redis":  # the _wan.py emulator's ports, to every other region
            for region in cluster.others():
                cluster.paths[region] = [next(ports) for _ in range(servers_per_region)]
                cluster.path_relays[region] = next(ports)
        if engine == "s3":
            cluster.network = choose_network(network)[0]
            cluster.s3 = {
                "bucket": S3_BUCKET,
                "access_key": f"geoslo{secrets.token_hex(4)}",
                "secret_key": secrets.token_hex(16),
            }
        for region in regions:
            initialise_backup(Path(cluster._locks_config(region).backup_path))
        try:
            cluster._start_all(cluster._program(), residual_rtt_mean_ms, seed)
        except BaseException:
            cluster.down()
            raise
        return cluster

    def _start_all(self, program: str, residual_rtt_mean_ms: float, seed: int) -> None:
        if self.network == "namespaces":
            sites = SiteNamespaces.create(self.state_dir, list(self.rtts_ms), "geoslo-costlo")
            self.hosts = {region: sites.address(region) for region in self.rtts_ms}
            self.save()
        for region in self.rtts_ms:
            for k in range(len(self.servers[region])):
                self._start_server(program, region, k)
        relay_secret = create_secret_file(self.state_dir / RELAY_SECRET_FILE)
        for region in self.rtts_ms:
            locks = self._locks_config(region)
            self._launch_module("costlo-locks", f"locks-{region}", locks, locks.port)
            relay = RelayConfig(
                self.relays[region], tuple(self.servers[region]), self.host(region), self.s3,
                self.host(region), str(relay_secret),
            )  # fmt: skip
            self._launch_module("costlo-relay", f"relay-{region}", relay, relay.port, region)
        if self.engine == "redis":
            wan = self._wan_config(residual_rtt_mean_ms, seed)
            self._launch_module("wan", "wan", wan, wan.paths[0].listen_port)
        for record in self.processes:
            self._wait(record)
        if self.engine == "s3":
            from geoslo.live.costlo._s3 import ensure_bucket

            for region in self.rtts_ms:
                asyncio.run(ensure_bucket(self.direct(region)))
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
        """toxiproxy, and one path per server and relay of each region, its RTT away (with
        the residual)."""
        toxiproxy = ToxiproxyServer.start(self.state_dir, seed)
        self.processes.append({"name": "toxiproxy", "pid": toxiproxy.pid, "port": toxiproxy.port})
        self.toxiproxy_port = toxiproxy.port
        self.save()
        api = toxiproxy.api
        for region, rtt_ms in self.rtts_ms.items():
            targets = [(f"{region}-server-{k}", p) for k, p in enumerate(self.servers[region])]
            targets.append((f"{region}-relay", self.relays[region]))
            ports = []
            for name, port in targets:
                ports.append(api.create_proxy(name, self.host(region), port))
                api.set_path_delay(name, rtt_ms, self.residual_rtt_mean_ms)
            self.paths[region], self.path_relays[region] = ports[:-1], ports[-1]

    def region_paths(self, region: str) -> list[str]:
        """The toxiproxy paths from the client side to a region's servers and relay."""
        prefix = f"{self.name(region)}-"
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
        name = self.name(region)
        backup = self.state_dir / f"locks-{name}.jsonl"
        return LockServiceConfig(self.locks[name], str(backup), self.lease_s)

    def _wan_config(self, residual_rtt_mean_ms: float, seed: int) -> WanConfig:
        paths = []
        for region in self.others():
            rtt = BaseRttSchedule.constant(self.rtts_ms[region])
            targets = list(zip(self.paths[region], self.servers[region], strict=True))
            targets.append((self.path_relays[region], self.relays[region]))
            paths += [
                DelayPath(self.serving, region, listen, target, rtt, residual_rtt_mean_ms)
                for listen, target in targets
            ]
        return WanConfig(tuple(paths), float(time.time()), seed)

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
        """SIGSTOP one recorded process: a stalled server that answers nothing (the stall
        injector's and the tests'). Pauses nest: it runs again when every pause has been
        resumed, so an injected stall that ends cannot cut short a longer one."""
        self._pauses[name] += 1
        if self._pauses[name] == 1:
            os.kill(self._record(name)["pid"], signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """End one :meth:`pause`; SIGCONT once none is left."""
        if self._pauses[name] == 0:
            raise TestbedError(f"{name} is not paused")
        self._pauses[name] -= 1
        if self._pauses[name] == 0:
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
        name = f"locks-{self.name(region)}"
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
        (self.state_dir / TOXIPROXY_STATE_FILE).unlink(missing_ok=True)  # its PID is gone
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
        data = _upgraded(json.loads(path.read_text()))
        data["state_dir"] = Path(data["state_dir"])
        return cls(**data)


def _upgraded(data: dict) -> dict:
    """A cluster.json written before regions had names (two, "serving" and "second"), in
    today's form, so that ``status`` and ``down`` still find its processes."""
    if "rtts_ms" in data:
        return data
    rtts = {SERVING: data.pop("serving_rtt_ms", 0.0), SECOND: data.pop("second_rtt_ms")}
    local, local_relay = data.pop("local_servers", []), data.pop("local_relay", None)
    data["paths"] = {SECOND: data.pop("wan_servers")} | ({SERVING: local} if local else {})
    data["path_relays"] = {SECOND: data.pop("wan_relay")}
    if local_relay is not None:
        data["path_relays"][SERVING] = local_relay
    return {"rtts_ms": rtts, **data}


def _checked_regions(regions: dict[str, float]) -> dict[str, float]:
    """Two to MAX_REGIONS regions with short lower-case names and RTTs in [0, 1000] ms."""
    if not 2 <= len(regions) <= MAX_REGIONS:
        raise InputError("regions", f"need 2 to {MAX_REGIONS} regions, got {len(regions)}")
    for name, rtt_ms in regions.items():
        if not isinstance(name, str) or not _REGION_NAME.match(name):
            raise InputError(
                "regions", f"{name!r}: a name is a-z, 0-9 and '-', at most 20, a letter first"
            )
        if not 0.0 <= float(rtt_ms) <= 1000.0:
            raise InputError("regions", f"{name}: RTT must be in [0, 1000] ms, got {rtt_ms}")
    return {name: float(rtt_ms) for name, rtt_ms in regions.items()}


def region_rtts(spec: str, serving_rtt_ms: float = 2.0) -> dict[str, float]:
    """``--regions``: comma-separated regions, the serving one first, each ``NAME=RTT_MS``
    (the clients' round trip to it) or an IBM Cloud region (``washington-dc``): the
    clients sit ``serving_rtt_ms`` from the first region, and an IBM region's RTT is the
    first one's to it in the latest publication (the first must then be an IBM region)."""
    names, rtt_ms = load_ibm_latency()
    ibm = {name.lower().replace(" ", "-"): k for k, name in enumerate(names)}
    entries = [entry.strip().lower() for entry in spec.split(",") if entry.strip()]
    regions: dict[str, float] = {}
    for position, entry in enumerate(entries):
        name, given, rtt = entry.partition("=")
        name = name.strip()
        if name in regions:
            raise InputError("regions", f"{name!r} is named twice")
        if given:
            regions[name] = _parse_rtt(name, rtt)
        elif name not in ibm:
            raise InputError(
                "regions", f"{name!r}: give NAME=RTT_MS or an IBM region: {sorted(ibm)}"
            )
        elif position == 0:
            regions[name] = serving_rtt_ms
        elif entries[0] not in ibm:
            raise InputError(
                "regions",
                f"{name!r}: an IBM region's RTT is from the first region, "
                "which must then be an IBM region too",
            )
        else:
            regions[name] = float(rtt_ms[ibm[entries[0]], ibm[name]])
    return _checked_regions(regions)


def _parse_rtt(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError("regions", f"{name}: RTT {text!r} is not a number of ms") from None
