"""The live ZooKeeper ensemble as an environment handle: the Supercloud scheduler's loop
drives a real ensemble (SoCC 2016 §5.1's loop, §5.2.2's reconfiguration).

``start()`` brings up the testbed (a namespace per site joined by the delay proxy, each
pair of sites its own RTT apart; by default §5.2.2's: a leader and a follower in
Virginia, a follower in Tokyo; a closed-loop client per site and an echo server per
site); ``observe()`` reads the membership (``conf``) and the leader (``srvr``) from the
servers themselves, each site's reads and writes from its client's record, and the RTT
between every pair of sites from probes across the emulated WAN; ``apply(plan)``
starts the plan's reconfigurations in the background (``observe()`` reports busy until
they end; one that fails surfaces from the next ``observe()``); ``close()`` stops it all.

Server N's site is ``sites[(N - 1) % len(sites)]`` (Virginia for odd N and Tokyo for even
N with §5.2.2's two), and each new server takes the next unused id of its site: a
newcomer has the highest id, which ZooKeeper's leader election prefers, as §5.2.2's
procedures assume.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geoslo.control.supercloud import FrontEnd, Node, Placement
from geoslo.errors import ConfigError, TestbedError
from geoslo.live._netns import socket_in
from geoslo.live._processes import ManagedProcess, find_program, python_module_command
from geoslo.live._sites import echo_server_command, rtts_on
from geoslo.live.supercloud.imagestore import ImageService
from geoslo.live.supercloud.zookeeper._client import ClientConfig
from geoslo.live.supercloud.zookeeper._ensemble import ZkServer, start_server
from geoslo.live.supercloud.zookeeper._images import ImageSettings, NodeImages
from geoslo.live.supercloud.zookeeper._live_ensemble import LiveEnsemble
from geoslo.live.supercloud.zookeeper._plan_steps import node_name
from geoslo.live.supercloud.zookeeper._proxy import ProxyRoute, write_routes
from geoslo.live.supercloud.zookeeper._run import cannot_run_reason
from geoslo.live.supercloud.zookeeper._settings import (
    CLIENT_PORT,
    PROBE_PORT,
    PROXIED_PORTS,
    SITE_A,
    SITE_B,
    ZkLiveSettings,
    probe_address,
    server_address,
)
from geoslo.live.supercloud.zookeeper._sites import SiteNamespaces

__all__ = ["SupercloudTestbedEnvironment", "site_of_server"]

READ_PATH = "/geoslo/read"
START_SITES = (SITE_A, SITE_A, SITE_B)  # §5.2.2: the leader and a follower in Virginia
PROBES_PER_PAIR = 3  # RTT = the least of 3 echoes per pair of sites, every interval


def site_of_server(server_id: int) -> str:
    """The site of a server in §5.2.2's two-site layout."""
    return ZkLiveSettings().site_of(server_id)


def start_ids(start_sites: tuple[str, ...], site_of) -> tuple[int, ...]:
    """Server ids for nodes in ``start_sites`` (the leader's first, then the followers'):
    each follower its site's lowest free id, the leader its site's lowest id above them
    all, so that it is the one ZooKeeper's election picks (the highest id)."""
    taken: set[int] = set()

    def lowest_free(site: str, above: int = 0) -> int:
        i = above + 1
        while i in taken or site_of(i) != site:
            i += 1
        taken.add(i)
        return i

    followers = [lowest_free(site) for site in start_sites[1:]]
    return (lowest_free(start_sites[0], max(followers, default=0)), *followers)


@dataclass
class _Started:
    """What ``start()`` started, so that ``close()`` stops exactly that."""

    sites: SiteNamespaces | None = None
    servers: dict[int, ManagedProcess] = field(default_factory=dict)
    others: list[ManagedProcess] = field(default_factory=list)


class SupercloudTestbedEnvironment(LiveEnsemble):
    """A live ensemble under the placement loop, over ``settings.sites`` (§5.2.2's two by
    default). ``client_threads`` sets each site's closed-loop workers (sessions), each
    pausing ``think_ms`` after an operation so that what a site asks for, not how near
    the servers are, sets its count (with no pause the site nearest the servers would
    always look the busiest); ``ids_per_site`` bounds the server ids (and addresses) each
    site can use; ``start_sites`` are the first nodes' sites, the leader's first;
    ``think_schedules`` gives a site's pauses over its day instead (one per
    ``schedule_step_s``, cycling, from when the clients start). With ``images`` each
    node's VM image lives in the Supercloud image store and follows its node
    (``NodeImages``; each move in ``images.moves``)."""

    def __init__(
        self,
        settings: ZkLiveSettings,
        client_threads: Mapping[str, int],
        interval_s: float,
        state_dir: Path | None = None,
        ids_per_site: int = 8,
        think_ms: float = 200.0,
        start_sites: tuple[str, ...] = START_SITES,
        think_schedules: Mapping[str, Sequence[float]] | None = None,
        schedule_step_s: float = 0.0,
        images: ImageSettings | None = None,
    ) -> None:
        self.sites = settings.sites
        if set(client_threads) != set(self.sites) or min(client_threads.values()) < 0:
            raise ConfigError("client_threads", f"must give each of {self.sites} a count >= 0")
        if not start_sites or not set(start_sites) <= set(self.sites):
            raise ConfigError("start_sites", f"must name one or more of {self.sites}")
        schedules = dict(think_schedules or {})
        if not set(schedules) <= set(self.sites) or (schedules and not schedule_step_s > 0):
            raise ConfigError("think_schedules", "name sites, with a schedule_step_s > 0")
        if any(not v or min(v) < 0 or max(v) > 60_000 for v in schedules.values()):
            raise ConfigError("think_schedules", "pauses must be 0..60000 ms, at least one")
        self.think_schedules = {site: [float(x) for x in v] for site, v in schedules.items()}
        self.schedule_step_s = float(schedule_step_s)
        self.schedule_start_unix_s = 0.0  # set when the clients start
        if not 3 <= ids_per_site <= 60:
            raise ConfigError("ids_per_site", f"must be 3..60, got {ids_per_site}")
        if not 0 <= think_ms <= 60_000:
            raise ConfigError("think_ms", f"must be 0..60000 ms, got {think_ms}")
        super().__init__(settings, interval_s)
        self.think_ms = float(think_ms)
        self.client_threads = dict(client_threads)
        self._own_dir = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="geoslo-zk-run-"))
        self.pool = tuple(range(1, len(self.sites) * ids_per_site + 1))
        self.rtt_ms = settings.rtt_matrix_ms()
        first = start_ids(tuple(start_sites), self.site_of)
        self.members = tuple(sorted(first))
        nodes = tuple(Node(node_name(i), self.site_of(i)) for i in self.members)
        self.start_placement = Placement(nodes, node_name(first[0]))
        self._started = _Started()
        self._probes: dict[tuple[str, str], socket.socket] = {}  # (from, to) -> echo link
        self._read_offsets: dict[str, int] = {}
        self.image_settings = images
        self._image_service: ImageService | None = None

    # --- start and close ------------------------------------------------------------

    async def start(self) -> None:
        reason = cannot_run_reason()
        if reason:
            raise TestbedError(f"the live ZooKeeper testbed cannot run here: {reason}")
        await asyncio.to_thread(self._start_blocking)
        if self.image_settings is not None:
            try:
                await self._start_images(self.image_settings)
            except BaseException:
                await self.close()
                raise

    async def _start_images(self, images: ImageSettings) -> None:
        """The image store over the same sites and RTTs, an image per node (§4.1)."""
        rtt = {
            (a, b): float(self.rtt_ms[i, j])
            for i, a in enumerate(self.sites)
            for j, b in enumerate(self.sites)
            if a != b
        }
        self._image_service = await asyncio.to_thread(
            ImageService.up, self.sites, images.policy, rtt, self.state_dir / "images",
            None, self.settings.seed,
        )  # fmt: skip
        self.images = NodeImages(self._image_service, images, self.settings.seed)
        await self.images.start({i: self.site_of(i) for i in self.members})

    def _start_blocking(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._started.sites = SiteNamespaces.create(self.state_dir, list(self.pool), self.sites)
            self._start_proxy()
            self._start_echo()
            self.start_servers(self.members, self.members)
            leader = self.wait("the first leader", self.leader, self.settings.step_timeout_s)
            self._create_znodes(leader)
            self._start_clients()
            for site in self.sites:  # the first interval counts from here
                self._site_counts(site)
        except BaseException:
            self._stop_all()
            raise

    async def close(self) -> None:
        """Stop the clients, the servers and the proxy, wait for a reconfiguration still
        running to give up, and delete the namespaces."""
        if self.images is not None:
            await self.images.close()
        if self._image_service is not None:
            await asyncio.to_thread(self._image_service.down)
        await asyncio.to_thread(self._close_blocking)

    def _close_blocking(self) -> None:
        self._cancel.set()
        worker = self._worker
        for process in self._started.others:
            if process.name.startswith("client-"):
                process.stop()
        if worker is not None:
            worker.join()
        self._stop_all()
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def _stop_all(self) -> None:
        for link in self._probes.values():
            link.close()
        self._probes.clear()
        for process in [*self._started.others, *self._started.servers.values()]:
            process.stop()
        if self._started.sites is not None:
            self._started.sites.delete()
            self._started.sites = None

    # --- the testbed's parts ---------------------------------------------------------

    def site_of(self, server_id: int) -> str:
        return self.settings.site_of(server_id)

    def server(self, server_id: int) -> ZkServer:
        return ZkServer(server_id, self.site_of(server_id))

    def namespace_of(self, server_id: int) -> str:
        return self._started.sites.of(self.site_of(server_id))

    def ids_of(self, site: str) -> list[int]:
        return [i for i in self.pool if self.site_of(i) == site]

    def stop_server(self, server_id: int) -> None:
        self._started.servers[server_id].stop()

    def _rtt_ms(self, a: str, b: str) -> float:
        return float(self.rtt_ms[self.sites.index(a), self.sites.index(b)])

    def _start_proxy(self) -> None:
        """A route from every other site to each server address's ports and to each
        site's echo server, each pair of sites its own RTT apart."""
        ns = self._started.sites.of
        routes = [
            ProxyRoute(ns(site), self.namespace_of(i), server_address(i), port,
                       self._rtt_ms(site, self.site_of(i)))
            for i in self.pool
            for site in self.sites
            if site != self.site_of(i)
            for port in PROXIED_PORTS
        ]  # fmt: skip
        routes += [
            ProxyRoute(ns(src), ns(dst), probe_address(k), PROBE_PORT, self._rtt_ms(src, dst))
            for k, dst in enumerate(self.sites)
            for src in self.sites
            if src != dst
        ]
        config = self.state_dir / "proxy.json"
        write_routes(config, routes)
        command = python_module_command("geoslo.live", "zk-proxy", str(config))
        log = self.state_dir / "proxy.log"
        self._started.others.append(ManagedProcess("wan-proxy", command, log).start())
        self.wait("the delay proxy", config.with_suffix(".ready").exists, 20)

    def _start_echo(self) -> None:
        """An echo server in every site at its probe address (§5.1's RTT probes)."""
        ip = find_program("ip", "iproute2")
        for k, site in enumerate(self.sites):
            command = [ip, "netns", "exec", self._started.sites.of(site),
                       *echo_server_command(PROBE_PORT, probe_address(k))]  # fmt: skip
            log = self.state_dir / f"echo-{k}.log"
            self._started.others.append(ManagedProcess(f"echo-{k}", command, log).start())

    def start_servers(self, ids: tuple[int, ...], members: tuple[int, ...]) -> None:
        listed = [ZkServer(m, self.site_of(m)) for m in members]
        for i in ids:
            old = self._started.servers.pop(i, None)
            if old is not None:  # a reused id: the old server left the ensemble
                old.stop()
            shutil.rmtree(self.state_dir / f"zk{i}", ignore_errors=True)
            server = ZkServer(i, self.site_of(i))
            process = start_server(
                server, self.namespace_of(i), listed, self.settings, self.state_dir
            )
            self._started.servers[i] = process
        for i in ids:
            self.wait(
                f"server {i} to serve (log {self._started.servers[i].log_path})",
                lambda i=i: self.mode(i),
                self.settings.step_timeout_s,
            )

    def _create_znodes(self, leader_id: int) -> None:
        from geoslo.live.supercloud.zookeeper import _admin  # imports kazoo

        paths = [READ_PATH, *(f"/geoslo/write-{k}" for k in range(len(self.sites)))]
        _admin.create_znodes(*self.operator(leader_id), self.settings, paths)

    def _client_hosts(self, site: str) -> list[str]:
        """The members (a client that connects randomly follows the membership itself:
        kazoo gives each host its session timeout over the list's length, too short for a
        remote server with the whole pool listed), or the pool, the site's own first."""
        if self.settings.clients_connect_randomly:
            ids = list(self.members)
        else:
            ids = sorted(self.pool, key=lambda i: (self.site_of(i) != site, i))
        return [f"{server_address(i)}:{CLIENT_PORT}" for i in ids]

    def _ops_path(self, site: str) -> Path:
        return self.state_dir / f"ops-{self.sites.index(site)}.jsonl"

    def _start_clients(self) -> None:
        s = self.settings
        started = []
        self.schedule_start_unix_s = time.time()
        for k, site in enumerate(self.sites):
            if not self.client_threads[site]:
                continue
            config = ClientConfig(
                site, self._client_hosts(site), self.client_threads[site], s.read_fraction,
                READ_PATH, f"/geoslo/write-{k}", s.value_bytes, s.session_timeout_s,
                s.op_timeout_s, str(self._ops_path(site)), s.seed + k, self.think_ms,
                self.think_schedules.get(site), self.schedule_step_s, self.schedule_start_unix_s,
                s.clients_connect_randomly,
            )  # fmt: skip
            path = self.state_dir / f"client-{k}.json"
            config.write(path)
            command = [
                find_program("ip", "iproute2"), "netns", "exec", self._started.sites.of(site),
                *python_module_command("geoslo.live", "zk-client", str(path)),
            ]  # fmt: skip
            log = self.state_dir / f"client-{k}.log"
            self._started.others.append(ManagedProcess(f"client-{k}", command, log).start())
            started.append(path.with_suffix(".ready"))
        for ready in started:
            self.wait(f"the client ({ready.stem})", ready.exists, 40)

    # --- observe ---------------------------------------------------------------------

    def measure_rtt_ms(self) -> np.ndarray:
        """The RTT between every pair of sites: the least of ``PROBES_PER_PAIR`` echoes
        from one site's namespace to the other's echo server, across the emulated WAN,
        every pair at once (a pair whose probe fails keeps its configured RTT; 0 within a
        site)."""
        measured = self.rtt_ms.copy()
        pairs = [(i, j) for i in range(len(self.sites)) for j in range(len(self.sites)) if i != j]
        links = {}
        for i, j in pairs:  # opened one at a time: the probes dict is not shared
            with contextlib.suppress(OSError):
                links[(i, j)] = self._probe(self.sites[i], j)

        def least(link: socket.socket) -> float | None:
            try:
                return min(rtts_on(link, PROBES_PER_PAIR))
            except OSError:
                return None

        with ThreadPoolExecutor(max_workers=len(links) or 1) as pool:
            for (i, j), rtt in zip(links, pool.map(least, links.values()), strict=True):
                if rtt is not None:
                    measured[i, j] = rtt
        return measured

    def _probe(self, src: str, dst_index: int) -> socket.socket:
        """A connection, kept open, from ``src``'s namespace to a site's echo server."""
        key = (src, self.sites[dst_index])
        link = self._probes.get(key)
        if link is None:
            link = socket_in(self._started.sites.of(src))
            link.settimeout(5.0)
            try:
                link.connect((probe_address(dst_index), PROBE_PORT))
            except OSError:
                link.close()
                raise
            link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._probes[key] = link
        return link

    def workload(self) -> tuple[FrontEnd, ...]:
        """Each site's successful reads and writes since the last call (its client's
        record: one line per operation)."""
        return tuple(self._site_counts(site) for site in self.sites)

    def _site_counts(self, site: str) -> FrontEnd:
        path = self._ops_path(site)
        if not path.exists():
            return FrontEnd(site, 0.0, 0.0)
        with path.open("rb") as handle:
            handle.seek(self._read_offsets.get(site, 0))
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._read_offsets[site] = self._read_offsets.get(site, 0) + len(complete)
        reads = writes = 0
        for line in complete.splitlines():
            if line.endswith(b"true]"):
                if b'"r"' in line:
                    reads += 1
                else:
                    writes += 1
        return FrontEnd(site, float(reads), float(writes))
