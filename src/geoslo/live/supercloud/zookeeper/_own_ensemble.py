"""One's own ZooKeeper ensemble under the placement loop (``geoslo run``, ``kind =
"ensemble"``; docs/placement.md): Supercloud's scheduler (SoCC 2016 §3, §5.1) moves an
ensemble the operator runs, by ZooKeeper's dynamic reconfiguration (§5.2.2).

geoslo reaches the servers at the addresses the config lists (four-letter words and an
operator session on each server's client port); it never starts a process of its own on
them. A spare server joins through the operator's ``start`` command and a server that
left stops through its ``stop`` command. Each site's reads and writes come from counters
the application's clients export in the Prometheus text format (labelled by site); the
RTT between sites is the matrix the operator measured, since the controller, in one
place, cannot probe between two other sites.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import stat
import subprocess
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from geoslo.control.supercloud import FrontEnd, Node, Placement
from geoslo.errors import ConfigError, TestbedError
from geoslo.live.supercloud.zookeeper._ensemble import ZkServer
from geoslo.live.supercloud.zookeeper._live_ensemble import LiveEnsemble
from geoslo.live.supercloud.zookeeper._plan_steps import node_name
from geoslo.live.supercloud.zookeeper._settings import (
    CLIENT_PORT,
    ELECTION_PORT,
    QUORUM_PORT,
    ZkLiveSettings,
)

__all__ = [
    "EnsembleServer",
    "SiteCounters",
    "SupercloudEnsembleEnvironment",
    "site_increments",
]

READS_METRIC, WRITES_METRIC = "geoslo_zk_reads_total", "geoslo_zk_writes_total"


@dataclass(frozen=True)
class EnsembleServer:
    """A server of one's own ensemble: where it listens and, for one that may join or
    leave, the shell commands that start and stop it. ``start`` runs with
    ``GEOSLO_ZK_SERVER_ID``, ``GEOSLO_ZK_SITE``, ``GEOSLO_ZK_CONFIG_LINE`` (its own
    ``server.N=...`` line) and ``GEOSLO_ZK_DYNAMIC_CONFIG`` (the configuration it joins
    with, one line per server) in its environment, and returns once the server is
    started; ``stop`` returns once it has exited."""

    server_id: int
    site: str
    host: str
    client_port: int = CLIENT_PORT
    quorum_port: int = QUORUM_PORT
    election_port: int = ELECTION_PORT
    start: str | None = None
    stop: str | None = None

    @property
    def zk(self) -> ZkServer:
        return ZkServer(
            self.server_id, self.site, self.host,
            self.client_port, self.quorum_port, self.election_port,
        )  # fmt: skip


Series = tuple[str, int, tuple[tuple[str, str], ...]]  # (site, 0 reads / 1 writes, labels)


@dataclass(frozen=True)
class SiteCounters:
    """Where each site's reads and writes are counted: a Prometheus text page whose
    ``reads_metric`` and ``writes_metric`` samples carry the site in ``site_label``
    (several series of one site add up, so one page can hold every client's)."""

    url: str
    reads_metric: str = READS_METRIC
    writes_metric: str = WRITES_METRIC
    site_label: str = "site"
    timeout_s: float = 5.0

    def read(self, sites: Sequence[str]) -> dict[Series, float]:
        """Every series of the two counters whose site is one of ``sites``, so far."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:  # noqa: S310
                text = response.read().decode()
        except OSError as error:
            raise TestbedError(f"the site counters at {self.url}: {error}") from None
        return self.series(text, sites)

    def series(self, text: str, sites: Sequence[str]) -> dict[Series, float]:
        """(site, 0 for reads or 1 for writes, the sample's labels) -> its value, in a
        page of the Prometheus text format."""
        found = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                kind = {self.reads_metric: 0, self.writes_metric: 1}.get(sample.name)
                site = sample.labels.get(self.site_label)
                if kind is not None and site in sites:
                    labels = tuple(sorted(sample.labels.items()))
                    found[(site, kind, labels)] = float(sample.value)
        return found


def site_increments(
    now: Mapping[Series, float], before: Mapping[Series, float], sites: Sequence[str]
) -> dict[str, tuple[float, float]]:
    """Each site's (reads, writes) since ``before``: each series' growth, a series that
    went down having restarted from 0 (Prometheus's rule, per series), a new one counted
    whole."""
    totals = {site: [0.0, 0.0] for site in sites}
    for (site, kind, labels), value in now.items():
        totals[site][kind] += increments(value, before.get((site, kind, labels), 0.0))
    return {site: (r, w) for site, (r, w) in totals.items()}


def read_digest(path: Path) -> str:
    """The operator session's ``user:password`` in ``path`` (ZooKeeper's digest scheme),
    a file not readable by group or others."""
    try:
        mode = path.stat().st_mode
        digest = path.read_text().strip()
    except OSError as error:
        raise ConfigError("digest_file", f"cannot read {path}: {error.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError("digest_file", f"{path} is readable by others; chmod 600 {path}")
    user, _, password = digest.partition(":")
    if not user or not password:
        raise ConfigError("digest_file", f"{path} must hold user:password on one line")
    return digest


def increments(now: float, before: float) -> float:
    """A counter's growth since ``before``; a counter that went down restarted from 0
    (Prometheus's rule), so all of ``now`` is new."""
    return now - before if now >= before else now


class SupercloudEnsembleEnvironment(LiveEnsemble):
    """The operator's ensemble: ``servers`` lists every member and every spare (by id);
    ``rtt_ms`` is one row per site of ``sites``; ``digest_file`` holds the ``user:password``
    the operator session authenticates with (ZooKeeper lets only its super user, or an
    ACL on ``/zookeeper/config``, reconfigure unless it runs with ``skipACL=yes``).
    ``close()`` leaves the ensemble running (it was never ours), after a reconfiguration
    in progress has ended or given up."""

    def __init__(
        self,
        servers: Sequence[EnsembleServer],
        sites: Sequence[str],
        rtt_ms: Sequence[Sequence[float]],
        counters: SiteCounters,
        interval_s: float,
        step_timeout_s: float = 60.0,
        digest_file: Path | None = None,
    ) -> None:
        self.sites = tuple(sites)
        rtt = tuple(tuple(float(x) for x in row) for row in rtt_ms)
        # the servers' tick and sync limit are the operator's: ours only need to allow the RTTs
        ticks = max(20, math.ceil(4 * max(max(row) for row in rtt) / 200.0))
        settings = ZkLiveSettings(
            sites=self.sites, site_rtt_ms=rtt, step_timeout_s=step_timeout_s,
            tick_time_ms=200, sync_limit_ticks=ticks,
        )  # fmt: skip
        super().__init__(settings, interval_s)
        self.servers: Mapping[int, EnsembleServer] = {s.server_id: s for s in servers}
        if len(self.servers) != len(servers):
            raise ConfigError("servers", "each server needs its own id")
        unknown = sorted({s.site for s in servers} - set(self.sites))
        if unknown:
            raise ConfigError("servers", f"sites {unknown} are not among {list(self.sites)}")
        self.rtt_ms = settings.rtt_matrix_ms()
        self.counters = counters
        self.digest = None if digest_file is None else read_digest(Path(digest_file))
        self._counted: dict[Series, float] = {}
        first = min(self.servers)
        # the loop reads the placement from each observation; this stands in until then
        self.start_placement = Placement(
            (Node(node_name(first), self.site_of(first)),), node_name(first)
        )

    # --- where the servers are --------------------------------------------------------
    def site_of(self, server_id: int) -> str:
        return self._listed(server_id).site

    def server(self, server_id: int) -> ZkServer:
        return self._listed(server_id).zk

    def _listed(self, server_id: int) -> EnsembleServer:
        listed = self.servers.get(server_id)
        if listed is None:
            raise TestbedError(f"server {server_id} is a member but not in the config's servers")
        return listed

    def ids_of(self, site: str) -> list[int]:
        """The spares of ``site`` that can be started (a ``start`` command)."""
        return sorted(i for i, s in self.servers.items() if s.site == site and s.start)

    # --- start and close ---------------------------------------------------------------
    async def start(self) -> None:
        """Find the ensemble (``conf`` of the first listed server in it) and its leader,
        and take the counters' values as the start of the first interval (a page
        without any of them is refused: a misspelt metric or label would read 0)."""
        self.members = tuple(sorted(self.servers))
        members, leader = await asyncio.to_thread(self.membership)
        if leader is None:
            raise TestbedError(f"no leader answers among the servers {sorted(self.servers)}")
        for m in members:
            self._listed(m)
        self.members = members
        self._counted = await asyncio.to_thread(self.counters.read, self.sites)
        if not self._counted:
            c = self.counters
            raise TestbedError(
                f"{c.url} has no {c.reads_metric} or {c.writes_metric} sample labelled "
                f"{c.site_label} = one of {list(self.sites)}"
            )

    async def close(self) -> None:
        """Let a reconfiguration in progress end: its waits end at once, a command or a
        reconfig call under way runs to its own limit (``step_timeout_s``)."""
        self._cancel.set()
        if self._worker is not None:
            await asyncio.to_thread(self._worker.join, 3 * self.settings.step_timeout_s)
            if self._worker.is_alive():
                raise TestbedError("a reconfiguration step still runs past its limits")

    # --- start and stop servers ---------------------------------------------------------
    def start_servers(self, ids: tuple[int, ...], members: tuple[int, ...]) -> None:
        dynamic = "\n".join(self.server(m).config_line() for m in sorted(members))
        for i in ids:
            listed = self._listed(i)
            environment = {
                "GEOSLO_ZK_SERVER_ID": str(i),
                "GEOSLO_ZK_SITE": listed.site,
                "GEOSLO_ZK_CONFIG_LINE": self.server(i).config_line(),
                "GEOSLO_ZK_DYNAMIC_CONFIG": dynamic,
            }
            self._run_command(f"start server {i}", listed.start, environment)
        for i in ids:
            self.wait(
                f"server {i} to serve", lambda i=i: self.mode(i), self.settings.step_timeout_s
            )

    def stop_server(self, server_id: int) -> None:
        listed = self._listed(server_id)
        if listed.stop:
            self._run_command(f"stop server {server_id}", listed.stop, {})

    def _run_command(self, what: str, command: str | None, environment: dict[str, str]) -> None:
        """Run an operator's command in a session of its own, its output in a temporary
        file (a server it leaves running keeps that file, not a pipe we would wait on);
        past ``step_timeout_s`` its whole process group is killed."""
        if not command:
            raise TestbedError(f"{what}: the config gives no command")
        timeout_s = self.settings.step_timeout_s
        with tempfile.TemporaryFile() as output:
            process = subprocess.Popen(
                command, shell=True, env={**os.environ, **environment}, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                code = process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # the group we started
                process.wait()
                raise TestbedError(f"{what}: {command!r} ran over {timeout_s:g} s") from None
            output.seek(0)
            said = output.read().decode(errors="replace").strip()[-500:]
        if code != 0:
            raise TestbedError(f"{what}: {command!r} exited {code}: {said}")

    # --- what the loop observes ---------------------------------------------------------
    def workload(self) -> tuple[FrontEnd, ...]:
        now = self.counters.read(self.sites)
        before, self._counted = self._counted, now
        counted = site_increments(now, before, self.sites)
        return tuple(FrontEnd(site, *counted[site]) for site in self.sites)

    def measure_rtt_ms(self) -> np.ndarray:
        """The operator's RTT matrix (the controller cannot probe between two sites)."""
        return self.rtt_ms.copy()
