"""The live testbed: real Redis servers per site and a delay injector between sites.

``Testbed.up(spec)`` starts ``servers_per_site`` Redis servers per site (each holding a
full replica of the data set), a feedback process per site (its servers' queues and
service times, for C3: ``_feedback``) and a delay path from every site to every server,
site agent and feedback process of every other site. It comes in two forms, and every
run says which it used:

* **namespaces** (root): each site is a network namespace with its own address
  (``_sites.SiteNamespaces``); its Redis servers listen there, each under a CFS CPU quota,
  and serve real queries (``_backend.QueryWork``). The WAN is toxiproxy in the root
  namespace, one proxy per path listening on the source site's end of its link, with a
  per-pair base RTT from the IBM Cloud matrices (or Kurma's Table 2) and a residual of its
  own; a route keeper process changes the base RTTs while traffic flows (``_routes``).
* **loopback** (the rootless fallback): everything on 127.0.0.1, geoslo's own delay proxy
  (``_wan.py``) on every path, and the servers' work held by ``DEBUG SLEEP``
  (``_backend.SleepWork``).

Every endpoint and PID goes in ``testbed.json`` in the state folder, so ``status`` and
``down`` work from another process, and ``down`` signals only those PIDs.
A *site agent* is the per-site controller process of a system (a Kurma instance); its
ports are reserved here so that agents reach each other only through the WAN.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from geoslo.errors import ConfigError, DependencyError, TestbedError
from geoslo.live._backend import QueryWork, SleepWork, Workload
from geoslo.live._cgroup import cpu_limit_reason, limit_cpu, remove_group
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
)
from geoslo.live._resp import RedisConnection
from geoslo.live._routes import RoutedPath, RoutesConfig
from geoslo.live._sites import SiteNamespaces, choose_network, echo_server_command
from geoslo.live._toxiproxy import STATE_FILE as TOXIPROXY_STATE_FILE
from geoslo.live._toxiproxy import ToxiproxyServer
from geoslo.live._wan import DelayPath, WanConfig
from geoslo.live.kurma._client import StoreEndpoints
from geoslo.live.kurma._feedback import FeedbackConfig, info_counters
from geoslo.topology import (
    BaseRttSchedule,
    Site,
    Topology,
    WanLink,
    ibm_regions,
    ibm_routing_changes,
    kurma_topology,
)

__all__ = [
    "TestbedSpec", "Testbed", "default_state_dir", "canonical_sites", "time_per_command_us"
]  # fmt: skip

# IBM Cloud regions 11, 16 and 19 ms apart, as Kurma's own sites (Table 2: 9-27 ms) under
# its 30 ms SLO. (London, Frankfurt and Madrid are 13, 26 and 29 ms apart: a request sent
# 26-29 ms away has 1-4 ms left for service and residual, and Kurma's estimate for it then
# rests on sub-millisecond timing that a busy 2-core machine does not hold.)
DEFAULT_SITES = ("Toronto", "Montreal", "Washington-DC")
KURMA_SITES = ("London", "Ireland", "Frankfurt")  # Kurma §7, Table 2 base RTT ranges
AUTH_CONFIG = "redis-auth.conf"  # the servers' requirepass (namespaces form)
CLIENTS_SECRET_FILE = "kurma-clients.key"  # the clients' reports to their agent are sealed
# A server's group is weighted as the live experiment's (cpu_priority): its quota, not the
# machine's other work, sets its capacity.
SERVER_CPU_WEIGHT = 8
COST_READS = 2000  # reads timed at up to measure a query's CPU cost (QueryWork.cost_us)


def _slug(name: str) -> str:
    """A site name fit for files, proxies and URLs: IBM's "Washington DC" is Washington-DC."""
    return name.replace(" ", "-")


def _ibm_names() -> dict[str, str]:
    """Site name -> the IBM Cloud region's name in the matrices."""
    return {_slug(name): name for name in ibm_regions()}


def default_state_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"geoslo-testbed-{os.getuid()}"


def canonical_sites(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Site names as the data spells them (case-insensitive), at least two, no repeats:
    IBM Cloud regions (measured RTTs) or Kurma's three datacenters (Table 2), not mixed."""
    known = {_slug(s).lower(): _slug(s) for s in (*ibm_regions(), *KURMA_SITES)}
    sites: list[str] = []
    for name in names:
        site = known.get(_slug(name.strip()).lower())
        if site is None:
            listed = ", ".join(sorted(known))
            raise ConfigError("sites", f"unknown site {name!r}; known sites: {listed}")
        if site in sites:
            raise ConfigError("sites", f"{site} is named twice")
        sites.append(site)
    if len(sites) < 2:
        raise ConfigError("sites", "name at least two sites, e.g. london,frankfurt,madrid")
    if not (set(sites) <= set(_ibm_names()) or set(sites) <= set(KURMA_SITES)):
        raise ConfigError(
            "sites", "name IBM Cloud regions or Kurma's London, Ireland and Frankfurt, not both"
        )
    return tuple(sites)


@dataclass(frozen=True)
class TestbedSpec:
    """What to start. Defaults are the calibration in docs/live.md."""

    __test__ = False

    sites: tuple[str, ...] = DEFAULT_SITES
    servers_per_site: int = 2
    network: str = "auto"  # "namespaces" (root), "loopback", or the first that works
    keys: int = 10_000
    routing_mean_interval_s: float | None = 120.0  # route changes, as in the simulation
    schedule_s: float = 7200.0  # how long the base-RTT schedules run
    residual_rtt_mean_range_ms: tuple[float, float] = (0.5, 2.0)  # each pair's own mean
    seed: int = 0
    # the loopback form: DEBUG SLEEP of an exponential service time, GETs of 375 B
    service_mean_ms: float = 2.0  # per request: 2 servers saturate at ~1000 req/s per site
    value_bytes: int = 375  # Kurma §7.1.3: 375-byte requests
    # the namespaces form: SORT_RO of lists under a CPU quota per server
    list_length: int = 2000
    server_cpu_fraction: float = 0.10
    server_cpu_period_us: int = 10_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "sites", canonical_sites(self.sites))
        object.__setattr__(
            self, "residual_rtt_mean_range_ms", tuple(self.residual_rtt_mean_range_ms)
        )
        if not (isinstance(self.servers_per_site, int) and 1 <= self.servers_per_site <= 8):
            raise ConfigError("servers_per_site", "must be an integer from 1 to 8")
        if not self.keys >= 1 or not self.value_bytes >= 1:
            raise ConfigError("keys", "keys and value_bytes must be >= 1")
        if self.network not in ("auto", "namespaces", "loopback"):
            raise ConfigError("network", "must be auto, namespaces or loopback")
        low, high = self.residual_rtt_mean_range_ms
        if not 0 <= low <= high <= 20:
            raise ConfigError("residual_rtt_mean_range_ms", "needs 0 <= low <= high <= 20 ms")
        self.workload("loopback")  # raise ConfigError for a bad calibration
        self.workload("namespaces")

    def workload(self, network: str, cost_us: float | None = None) -> Workload:
        """What a request asks of a server in that form (``_backend``)."""
        if network == "namespaces":
            return QueryWork(
                self.list_length, 10, self.server_cpu_fraction, self.server_cpu_period_us,
                cost_us,
            )  # fmt: skip
        return SleepWork(self.service_mean_ms, self.value_bytes)

    def base_rtt_schedules(self) -> dict[tuple[str, str], BaseRttSchedule]:
        """Base RTT per directed site pair (both ways the same): the IBM matrices' weekly
        averages of the pair, one per route (``ibm_routing_changes``); for Kurma's three
        datacenters, Table 2's ranges."""
        if set(self.sites) <= set(KURMA_SITES):
            topology = kurma_topology(
                1.0,
                routing_mean_interval_s=self.routing_mean_interval_s,
                duration_s=self.schedule_s,
                seed=self.seed,
            )
            links = {(link.src, link.dst): link.base_rtt for link in topology.links}
        else:
            links = {}
            ibm = _ibm_names()
            for k, (a, b) in enumerate(self._pairs()):
                interval = self.routing_mean_interval_s or self.schedule_s
                routes = ibm_routing_changes(
                    ibm[a], ibm[b], interval, self.schedule_s, self.seed + k
                )
                if self.routing_mean_interval_s is None:  # static: the first route throughout
                    routes = BaseRttSchedule.constant(float(routes.rtt_ms[0]))
                links[(a, b)] = routes
        schedules = {}
        for (a, b), schedule in links.items():
            if a in self.sites and b in self.sites:
                schedules[(a, b)] = schedules[(b, a)] = schedule
        return schedules

    def topology(self, capacity_rps: float) -> Topology:
        """The sites and their base-RTT schedules as a topology (for the simulator)."""
        sites = tuple(Site(name, capacity_rps, self.servers_per_site) for name in self.sites)
        links = tuple(
            WanLink(src, dst, schedule)
            for (src, dst), schedule in self.base_rtt_schedules().items()
        )
        return Topology(sites, links)

    def residual_rtt_mean_ms(self, src: str, dst: str) -> float:
        """The pair's own residual mean: seeded, uniform over the range in 0.5 ms steps
        (toxiproxy's resolution); the same both ways. The IBM matrices hold monthly
        averages, not samples, so the residual is not from the data."""
        low, high = self.residual_rtt_mean_range_ms
        steps = np.arange(np.ceil(2 * low), np.floor(2 * high) + 1) / 2
        pair = tuple(sorted((src, dst)))
        k = self._pairs().index(pair)  # type: ignore[arg-type]
        draws = np.random.default_rng(self.seed).integers(len(steps), size=len(self._pairs()))
        return float(steps[draws[k]]) if len(steps) else float(low)

    def _pairs(self) -> list[tuple[str, str]]:
        return [
            tuple(sorted((a, b)))  # type: ignore[misc]
            for i, a in enumerate(self.sites)
            for b in self.sites[i + 1 :]
        ]


@dataclass
class SiteEndpoints:
    servers: list[int]  # Redis ports of this site's own servers
    agent_port: int  # where the site's agent accepts its peers (reached through the WAN)
    agent_local_port: int  # where the site's agent accepts local clients
    metrics_port: int  # Prometheus exposition of the site's agent
    host: str = "127.0.0.1"  # the site's address: its servers and agent listen there
    path_host: str = "127.0.0.1"  # where paths from this site listen (its end of the WAN)
    feedback_port: int = 0  # the site's feedback process (0: none, a testbed before it)


@dataclass
class Testbed:
    """A running (or recorded) testbed: its spec, form, endpoints and processes."""

    __test__ = False  # not a pytest test class, despite the name

    spec: TestbedSpec
    state_dir: Path
    epoch_unix_s: float
    sites: dict[str, SiteEndpoints]
    paths: dict[str, int]  # "src>dst/kind" -> port, kind = server index, agent or feedback
    processes: list[dict] = field(default_factory=list)
    network: str = "loopback"  # the form in use: "namespaces" or "loopback"
    network_reason: str = ""  # why that form (e.g. what the namespaces form lacked)
    read_cost_us: float | None = None  # measured CPU per read (the namespaces form)
    cgroups: list[str] = field(default_factory=list)  # the servers' CPU quota groups
    redis_password: str | None = None  # servers beyond loopback require AUTH (namespaces)

    # --- endpoints ---------------------------------------------------------------------------
    @property
    def workload(self) -> Workload:
        return self.spec.workload(self.network, self.read_cost_us)

    def server_address(self, src: str, dst: str, server: int) -> tuple[str, int]:
        """Where a client at ``src`` reaches server ``server`` of ``dst`` (WAN if remote)."""
        if src == dst:
            return self.sites[dst].host, self.sites[dst].servers[server]
        return self.sites[src].path_host, self.paths[f"{src}>{dst}/{server}"]

    def client_endpoints(self, site: str, agent: bool = True) -> StoreEndpoints:
        """Where a client at ``site`` reaches every store (and, with ``agent``, its agent)."""
        sites = self.spec.sites
        servers = tuple(
            tuple(self.server_address(site, dst, s) for s in range(len(self.sites[dst].servers)))
            for dst in sites
        )
        ends = self.sites[site]
        return StoreEndpoints(
            sites,
            site,
            servers,
            (ends.host, ends.agent_local_port) if agent else None,
            self.redis_password,
            None,
            tuple(float(x) for x in self.base_rtt_ms(time.time())[sites.index(site)]),
            self._feedback_addresses(site),
            agent_secret_file=self.clients_secret_file() if agent else None,
        )

    def clients_secret_file(self) -> str:
        """The secret the testbed's clients seal their reports to their agent with (made
        on first use, in the state folder; the agents' ``clients_secret_file``)."""
        return str(create_secret_file(self.state_dir / CLIENTS_SECRET_FILE))

    def _feedback_addresses(self, src: str) -> tuple[tuple[str, int], ...] | None:
        """Where a client at ``src`` reaches every site's feedback process (WAN if remote)."""
        if not all(ends.feedback_port for ends in self.sites.values()):
            return None
        return tuple(
            (self.sites[dst].host, self.sites[dst].feedback_port)
            if dst == src
            else (self.sites[src].path_host, self.paths[f"{src}>{dst}/feedback"])
            for dst in self.spec.sites
        )

    def agent_address(self, src: str, dst: str) -> tuple[str, int]:
        """Where ``src``'s agent reaches ``dst``'s agent, through the WAN."""
        return self.sites[src].path_host, self.paths[f"{src}>{dst}/agent"]

    def host(self, site: str) -> str:
        """The site's own address (its servers, its agent, its local clients)."""
        return self.sites[site].host

    def command_at(self, site: str, argv: list[str]) -> list[str]:
        """``argv`` run at ``site``: inside its namespace in that form, as is on loopback."""
        if self.network != "namespaces":
            return argv
        return self._namespaces().command_in(site, argv)

    def describe(self) -> str:
        """One sentence for reports and logs: which form, and why."""
        if self.network == "namespaces":
            cost = f"{self.read_cost_us:.0f} us" if self.read_cost_us else "unmeasured"
            return (
                "namespaces: a network namespace per site, WAN by toxiproxy, each Redis "
                f"server under a {self.spec.server_cpu_fraction:.0%} CPU quota serving SORT_RO of "
                f"{self.spec.list_length}-number lists ({cost} of CPU each)"
            )
        return (
            f"loopback ({self.network_reason}): WAN by geoslo's delay proxy, server work by "
            "DEBUG SLEEP"
        )

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
        """Start the Redis servers and the delay injector; fill every server."""
        state_dir = Path(state_dir or default_state_dir())
        existing = cls.load(state_dir)
        if existing is not None and existing.running():
            raise TestbedError(
                f"a testbed already runs from {state_dir}; `geoslo testbed down` first"
            )
        redis = find_program("redis-server", "redis-server")
        network, reason = choose_network(spec.network, _namespaces_lack)
        state_dir.mkdir(parents=True, exist_ok=True)
        testbed = cls._allocate(spec, state_dir, network, reason)
        try:
            if network == "namespaces":
                testbed._require_password()
                sites = SiteNamespaces.create(state_dir, list(spec.sites), "geoslo-kurma")
                for site in spec.sites:
                    testbed.sites[site].host = sites.address(site)
                    testbed.sites[site].path_host = sites.site(site).root_ip
                testbed.save()
            testbed._start_redis(redis, progress)
            asyncio.run(testbed._fill(progress))
            testbed._start_feedback(progress)
            if network == "namespaces":
                testbed._limit_servers(progress)
                testbed._start_paths(progress)
            else:
                testbed._start_wan(progress)
        except BaseException:
            testbed.down()
            raise
        testbed.save()
        progress(f"testbed: {testbed.describe()}")
        return testbed

    @classmethod
    def _allocate(cls, spec: TestbedSpec, state_dir: Path, network: str, reason: str) -> Testbed:
        n, per = len(spec.sites), spec.servers_per_site
        remote_paths = n * (n - 1) * (per + 2)
        ports = iter(free_ports(n * (per + 4) + remote_paths))
        sites = {
            s: SiteEndpoints(
                [next(ports) for _ in range(per)], next(ports), next(ports), next(ports),
                feedback_port=next(ports),
            )
            for s in spec.sites
        }  # fmt: skip
        paths = {}
        for src in spec.sites:
            for dst in spec.sites:
                if src != dst:
                    for k in range(per):
                        paths[f"{src}>{dst}/{k}"] = next(ports)
                    paths[f"{src}>{dst}/agent"] = next(ports)
                    paths[f"{src}>{dst}/feedback"] = next(ports)
        epoch = float(np.floor(time.time()))
        return cls(spec, state_dir, epoch, sites, paths, network=network, network_reason=reason)

    def _path_targets(self):
        """(path key, src, dst, target port) of every path."""
        for key in self.paths:
            pair, kind = key.split("/")
            src, dst = pair.split(">")
            ends = self.sites[dst]
            named = {"agent": ends.agent_port, "feedback": ends.feedback_port}
            yield key, src, dst, named[kind] if kind in named else ends.servers[int(kind)]

    def _start_redis(self, redis: str, progress) -> None:
        for site, ends in self.sites.items():
            for k in range(len(ends.servers)):
                self._start_server(redis, site, k)
        progress(f"testbed: {sum(len(e.servers) for e in self.sites.values())} Redis servers up")

    def _start_server(self, redis: str, site: str, index: int) -> dict:
        name, ends = f"redis-{site.lower()}-{index}", self.sites[site]
        port = ends.servers[index]
        config = self.state_dir / AUTH_CONFIG if self.redis_password else None
        command = redis_server_command(redis, name, port, self.state_dir, ends.host, config)
        return self._launch(name, self.command_at(site, command), port, ends.host)

    def _start_feedback(self, progress) -> None:
        """Every site's feedback process, beside its servers (in its namespace)."""
        for site, ends in self.sites.items():
            name = f"feedback-{site.lower()}"
            config = FeedbackConfig(
                site, ends.host, ends.feedback_port,
                tuple((ends.host, port) for port in ends.servers), self.redis_password,
                commands_per_request=self.workload.commands_per_request,
            )  # fmt: skip
            path = self.state_dir / f"{name}.json"
            config.write(path)
            command = python_module_command("geoslo.live", "feedback", str(path))
            self._launch(name, self.command_at(site, command), ends.feedback_port, ends.host)
        progress(f"testbed: a feedback process per site ({len(self.sites)})")

    def _require_password(self) -> None:
        """A random password every server requires (Redis refuses clients beyond loopback
        without one), in a config file readable by its owner only."""
        self.redis_password = secrets.token_hex(16)
        path = self.state_dir / AUTH_CONFIG
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(f"requirepass {self.redis_password}\n")
        self.save()

    async def connect(self, host: str, port: int, timeout_s: float = 2.0) -> RedisConnection:
        """A connection to one of the servers, authenticated if they require it."""
        return await RedisConnection.open(port, host, timeout_s, password=self.redis_password)

    def _start_wan(self, progress) -> None:
        """The loopback form's WAN: geoslo's delay proxy, one process for every path."""
        schedules = self.spec.base_rtt_schedules()
        delay_paths = [
            DelayPath(
                src, dst, self.paths[key], target, schedules[(src, dst)],
                self.spec.residual_rtt_mean_ms(src, dst),
            )
            for key, src, dst, target in self._path_targets()
        ]  # fmt: skip
        config_path = self.state_dir / "wan.json"
        WanConfig(tuple(delay_paths), self.epoch_unix_s, self.spec.seed).write(config_path)
        command = python_module_command("geoslo.live", "wan", str(config_path))
        self._launch("wan", command, delay_paths[0].listen_port)
        progress(f"testbed: WAN emulator up ({len(delay_paths)} delay paths)")

    def _start_paths(self, progress) -> None:
        """The namespaces form's WAN: a toxiproxy path from each site's end of its link to
        every server and agent of every other site, and the route keeper."""
        toxiproxy = ToxiproxyServer.start(self.state_dir, self.spec.seed)
        self.processes.append({"name": "toxiproxy", "pid": toxiproxy.pid, "port": toxiproxy.port})
        self.save()
        api, schedules, routed = toxiproxy.api, self.spec.base_rtt_schedules(), []
        for key, src, dst, target in self._path_targets():
            name = _proxy_name(key)
            listen = self.sites[src].path_host
            self.paths[key] = api.create_proxy(name, self.sites[dst].host, target, listen)
            residual = self.spec.residual_rtt_mean_ms(src, dst)
            routed.append(RoutedPath(name, schedules[(src, dst)], residual))
        routes = RoutesConfig(toxiproxy.port, self.epoch_unix_s, tuple(routed))
        routes.set_all(time.time() - self.epoch_unix_s)  # in force before up returns
        config_path = self.state_dir / "routes.json"
        routes.write(config_path)
        self._launch("routes", python_module_command("geoslo.live", "routes", str(config_path)))
        progress(f"testbed: toxiproxy up ({len(routed)} paths), routes follow the schedules")

    def cut(self, src: str, dst: str, cut: bool = True) -> list[str]:
        """Cut (or, with ``cut=False``, mend) every path from ``src`` to ``dst``: clients and
        the agent at ``src`` can no longer open connections to ``dst``, while ``dst``'s reach
        ``src`` as before (one direction of a partition, §9). The namespaces form only."""
        if self.network != "namespaces":
            raise TestbedError("cutting a path needs the namespaces form (toxiproxy)")
        toxiproxy = ToxiproxyServer.recorded_in(self.state_dir)
        if toxiproxy is None:
            raise TestbedError(f"no toxiproxy recorded in {self.state_dir}")
        names = [_proxy_name(key) for key in self.paths if key.startswith(f"{src}>{dst}/")]
        for name in names:
            toxiproxy.api.set_enabled(name, not cut)
        return names

    def start_echo(self) -> None:
        """An echo server on every site's agent port (the target of §6's probes, for a
        controller that runs no agents): recorded, so ``down`` stops them."""
        for site, ends in self.sites.items():
            command = self.command_at(site, echo_server_command(ends.agent_port, ends.host))
            self._launch(f"echo-{site.lower()}", command, ends.agent_port, ends.host)

    def _limit_servers(self, progress) -> None:
        """Measure a read's CPU cost on one server, then put every server under its quota."""
        first = next(p for p in self.processes if p["name"].startswith("redis-"))
        self.read_cost_us = asyncio.run(self._measure_cost_us(first))
        for record in self.processes:
            if record["name"].startswith("redis-"):
                self._limit(record)
        capacity = self.workload.capacity_per_server_rps
        progress(
            f"testbed: a read costs {self.read_cost_us:.0f} us of CPU; each server may use "
            f"{self.spec.server_cpu_fraction:.0%} of a CPU: ~{capacity:.0f} req/s nominal"
        )

    def _limit(self, record: dict) -> None:
        group = limit_cpu(
            record["pid"], self.spec.server_cpu_fraction,
            f"kurma-{os.getpid()}-{record['name']}", self.spec.server_cpu_period_us,
            SERVER_CPU_WEIGHT,
        )  # fmt: skip
        if group is None:
            raise TestbedError(f"could not put {record['name']} under a CPU quota")
        if str(group) not in self.cgroups:
            self.cgroups.append(str(group))
        self.save()

    async def _measure_cost_us(self, record: dict) -> float:
        """CPU time (from /proc) a server spends per read, over COST_READS pipelined reads."""
        connection = await self.connect(record["host"], record["port"])
        payload, replies = self.workload.read_payload(b"k:0", None)
        try:
            before = _cpu_seconds(record["pid"])
            for _ in range(COST_READS // 100):
                await connection.send(payload * 100, 100 * replies)
            used_s = _cpu_seconds(record["pid"]) - before
        finally:
            await connection.close()
        return max(used_s, 1e-3) / COST_READS * 1e6

    def _launch(
        self, name: str, command: list[str], port: int | None = None, host: str = "127.0.0.1"
    ) -> dict:
        process = ManagedProcess(name, command, self.state_dir / f"{name}.log", port, host=host)
        process.start(detached=True)
        record = {"name": name, "pid": process.pid, "port": port, "host": host}
        self.processes.append(record)
        self.save()
        return record

    async def _fill(self, progress) -> None:
        for ends in self.sites.values():
            for port in ends.servers:
                await self._fill_one(ends.host, port)
        what = "lists" if self.network == "namespaces" else "values"
        progress(f"testbed: {self.spec.keys} keys ({what}) on every server")

    def running(self) -> bool:
        return any(process_alive(p["pid"]) for p in self.processes)

    def status(self) -> list[dict]:
        """Each recorded process: name, pid, port, alive."""
        return [dict(p, alive=process_alive(p["pid"])) for p in self.processes]

    def down(self) -> int:
        """Stop every process this testbed started (by PID), then remove its namespaces and
        CPU groups; return how many processes were running."""
        stopped = stop_recorded(self.processes)
        self.processes = []
        (self.state_dir / TOXIPROXY_STATE_FILE).unlink(missing_ok=True)  # its PID is gone
        for group in self.cgroups:
            remove_group(group)
        self.cgroups = []
        sites = SiteNamespaces.recorded_in(self.state_dir)
        if sites is not None:
            sites.delete()
        self.save()
        return stopped

    def restart_process(self, name: str) -> None:
        """Start a recorded process again on its port (after a failure, or a test's kill);
        a restarted server is refilled with the initial data set (a full resync)."""
        record = next(p for p in self.processes if p["name"] == name)
        if process_alive(record["pid"]):
            raise TestbedError(f"{name} still runs (pid {record['pid']})")
        self.processes.remove(record)
        if name.startswith("redis-"):
            site = next(s for s in self.spec.sites if name.startswith(f"redis-{s.lower()}-"))
            index = int(name.rsplit("-", 1)[1])
            new = self._start_server(find_program("redis-server", "redis-server"), site, index)
            asyncio.run(self._fill_one(new["host"], new["port"]))
            if self.network == "namespaces":
                self._limit(new)
        else:
            config = str(self.state_dir / f"{name}.json")  # wan.json, routes.json
            self._launch(name, python_module_command("geoslo.live", name, config),
                         record["port"], record.get("host", "127.0.0.1"))  # fmt: skip

    def server_counters(self) -> dict[str, tuple[int, int, int]]:
        """Per server that answers: the commands the clients sent it so far, its
        microseconds running them (``INFO commandstats``) and the CPU it has used, user and
        system (``INFO cpu``), in us. Two readings give the time and the CPU per command
        over a run (``time_per_command_us``, ``cpu_per_command_us``)."""

        async def read() -> dict[str, tuple[int, int, int]]:
            counters = {}
            for record in self.processes:
                if not record["name"].startswith("redis-"):
                    continue
                try:
                    connection = await self.connect(record["host"], record["port"])
                except TestbedError:
                    continue
                try:
                    info = await asyncio.wait_for(connection.command(b"INFO", b"all"), 5.0)
                    text = info.decode()
                    _, calls, usec = info_counters(text)
                    counters[record["name"]] = (calls, usec, _cpu_us(text))
                except (TimeoutError, TestbedError, ValueError):
                    pass
                finally:
                    await connection.close()
            return counters

        return asyncio.run(read())

    async def _fill_one(self, host: str, port: int) -> None:
        """Write the whole data set to one server (at ``up``, and after a restart)."""
        connection = await self.connect(host, port)
        try:
            for payload, replies in self.workload.fill_commands(self.spec.keys, self.spec.seed):
                await connection.send(payload, replies)
        finally:
            await connection.close()

    def _namespaces(self) -> SiteNamespaces:
        sites = SiteNamespaces.recorded_in(self.state_dir)
        if sites is None:
            raise TestbedError(f"no site namespaces recorded in {self.state_dir}")
        return sites

    # --- the state file ----------------------------------------------------------------------
    def save(self) -> None:
        data = {
            "spec": asdict(self.spec),
            "epoch_unix_s": self.epoch_unix_s,
            "sites": {s: asdict(e) for s, e in self.sites.items()},
            "paths": self.paths,
            "processes": self.processes,
            "network": self.network,
            "network_reason": self.network_reason,
            "read_cost_us": self.read_cost_us,
            "cgroups": self.cgroups,
            "redis_password": self.redis_password,
        }
        tmp = self.state_dir / "testbed.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        tmp.chmod(0o600)  # it holds the servers' password
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
        spec_data.pop("residual_rtt_mean_ms", None)  # before residuals were per pair
        return cls(
            TestbedSpec(**spec_data),
            state_dir,
            float(data["epoch_unix_s"]),
            {s: SiteEndpoints(**e) for s, e in data["sites"].items()},
            dict(data["paths"]),
            list(data["processes"]),
            data.get("network", "loopback"),
            data.get("network_reason", ""),
            data.get("read_cost_us"),
            list(data.get("cgroups", [])),
            data.get("redis_password"),
        )


def time_per_command_us(before: dict, after: dict, measure: int = 1) -> float:
    """The servers' time per command between two ``server_counters`` readings, over the
    servers read both times whose counters did not go back (a restarted server's did);
    ``measure`` 2: their CPU per command."""
    calls = usec = 0
    for name, counters_after in after.items():
        counters_before = before.get(name)
        if counters_before is None:
            continue
        calls_after, usec_after = counters_after[0], counters_after[measure]
        calls_before, usec_before = counters_before[0], counters_before[measure]
        if calls_after >= calls_before and usec_after >= usec_before:
            calls, usec = calls + calls_after - calls_before, usec + usec_after - usec_before
    return usec / calls if calls else float("nan")


def cpu_per_command_us(before: dict, after: dict) -> float:
    """The servers' CPU (user + system) per command between two readings."""
    return time_per_command_us(before, after, measure=2)


def _cpu_us(info: str) -> int:
    """used_cpu_user + used_cpu_sys from ``INFO`` text, in us."""
    cpu_s = 0.0
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key in ("used_cpu_user", "used_cpu_sys"):
            cpu_s += float(value)
    return round(cpu_s * 1e6)


def _proxy_name(path_key: str) -> str:
    """toxiproxy's name of a path: "London>Madrid/0" is London-to-Madrid-0."""
    return path_key.replace(">", "-to-").replace("/", "-")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _namespaces_lack() -> str | None:
    """What else the namespaces form needs beyond namespaces: a CPU quota for the
    servers and toxiproxy (built from the Go module proxy)."""
    reason = cpu_limit_reason()
    if reason is not None:
        return reason
    try:
        go_program("toxiproxy")
    except (DependencyError, TestbedError) as error:
        return f"toxiproxy: {error}"
    return None
