"""Run one §5.2.2 procedure on a live ensemble: two site namespaces joined by the delay
proxy, ZooKeeper servers moved by dynamic reconfiguration, one loaded client per site."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from geoslo.errors import DependencyError, TestbedError
from geoslo.live._netns import run_in
from geoslo.live._processes import ManagedProcess, find_program, python_module_command
from geoslo.live.supercloud.zookeeper._client import ClientConfig
from geoslo.live.supercloud.zookeeper._ensemble import ZOOKEEPER_JAR, server_mode, start_server
from geoslo.live.supercloud.zookeeper._procedures import (
    INITIAL_IDS,
    SERVERS,
    Step,
    server_ids_of,
    steps_of,
)
from geoslo.live.supercloud.zookeeper._proxy import ProxyRoute, write_routes
from geoslo.live.supercloud.zookeeper._results import (
    OpRecords,
    ReconfigRun,
    dip_metrics,
    latency_summary,
    per_second_counts,
)
from geoslo.live.supercloud.zookeeper._settings import (
    CLIENT_PORT,
    PROXIED_PORTS,
    SITE_A,
    SITES,
    ZkLiveSettings,
    server_address,
)
from geoslo.live.supercloud.zookeeper._sites import SiteNamespaces

__all__ = ["cannot_run_reason", "run_reconfiguration"]

READ_PATH = "/geoslo/read"
_POLL_S = 0.1


def cannot_run_reason() -> str | None:
    """Why this machine cannot run the live ZooKeeper migration (None if it can): root,
    Java, Debian's zookeeper.jar, the kazoo client and network namespaces are needed."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("java") is None:
        return "java not found; install it with `apt-get install default-jre`"
    if importlib.util.find_spec("kazoo") is None:
        return "the kazoo ZooKeeper client is missing; install it with `pip install kazoo`"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} missing; install it with `apt-get install zookeeper`"
    try:
        ip = find_program("ip", "iproute2", install=False)
        probe = f"geoslo-zk-probe-{os.getpid()}"
        run_in(None, [ip, "netns", "add", probe])
        run_in(None, [ip, "netns", "delete", probe])
    except (DependencyError, TestbedError) as error:
        return f"network namespaces unavailable: {error}"
    return None


def _wait_until(what: str, probe, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(_POLL_S)
    raise TestbedError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@dataclass
class _Live:
    """Everything one run started, so that ``finally`` can stop exactly that."""

    settings: ZkLiveSettings
    state_dir: Path
    sites: SiteNamespaces | None = None
    servers: dict[int, ManagedProcess] = field(default_factory=dict)
    others: list[ManagedProcess] = field(default_factory=list)
    members: tuple[int, ...] = INITIAL_IDS

    def ns(self, server_id: int) -> str:
        return self.sites.of(SERVERS[server_id].site)

    def leader(self) -> int | None:
        """The member whose ``srvr`` says leader, asked in its own site."""
        for m in self.members:
            if server_mode(SERVERS[m], self.ns(m)) == "leader":
                return m
        return None

    def stop_all(self) -> None:
        for process in [*self.others, *self.servers.values()]:
            process.stop()
        if self.sites is not None:
            self.sites.delete()


def _start_proxy(live: _Live, server_ids: list[int]) -> None:
    routes = [
        ProxyRoute(live.sites.of(site), live.ns(i), server_address(i), port)
        for i in server_ids
        for site in SITES
        if site != SERVERS[i].site
        for port in PROXIED_PORTS
    ]
    config = live.state_dir / "proxy.json"
    write_routes(config, routes, live.settings.rtt_ms)
    command = python_module_command("geoslo.live", "zk-proxy", str(config))
    live.others.append(ManagedProcess("wan-proxy", command, live.state_dir / "proxy.log").start())
    ready = config.with_suffix(".ready")
    _wait_until("the delay proxy", ready.exists, 15)


def _start_servers(live: _Live, ids: tuple[int, ...], members: tuple[int, ...]) -> None:
    """Start ``ids`` with a dynamic config of ``members`` and wait until they serve."""
    listed = [SERVERS[m] for m in members]
    for i in ids:
        server = SERVERS[i]
        live.servers[i] = start_server(server, live.ns(i), listed, live.settings, live.state_dir)
    for i in ids:
        _wait_until(
            f"server {i} to serve (log {live.servers[i].log_path})",
            lambda i=i: server_mode(SERVERS[i], live.ns(i)),
            live.settings.step_timeout_s,
        )


def _operator(live: _Live, leader_id: int) -> tuple[str, list]:
    """Where the operator's session runs (the leader's site) and whom it tries, leader first."""
    order = [leader_id, *(m for m in live.members if m != leader_id)]
    return live.ns(leader_id), [SERVERS[m] for m in order]


def _create_znodes(live: _Live, leader_id: int) -> None:
    from geoslo.live.supercloud.zookeeper import _admin  # imports kazoo

    paths = [READ_PATH, *(f"/geoslo/write-{site}" for site in SITES)]
    _admin.create_znodes(*_operator(live, leader_id), live.settings, paths)


def _reconfig(live: _Live, leader_id: int, joining: tuple[int, ...], leaving: tuple[int, ...]):
    from geoslo.live.supercloud.zookeeper import _admin  # imports kazoo

    servers = [SERVERS[i] for i in joining]
    _admin.reconfig(*_operator(live, leader_id), live.settings, servers, leaving)


def _run_step(live: _Live, step: Step, t0_unix_s: float) -> dict:
    started_s = time.time() - t0_unix_s
    leader_id = _wait_until("a leader", live.leader, live.settings.step_timeout_s)
    _start_servers(live, step.start_ids, live.members + step.start_ids)
    leaving = step.leaving(live.members, leader_id)
    servers_ready_s = time.time() - t0_unix_s
    _reconfig(live, leader_id, step.start_ids, leaving)
    reconfig_done_s = time.time() - t0_unix_s
    live.members = tuple(m for m in live.members + step.start_ids if m not in leaving)
    timeout_s = live.settings.step_timeout_s
    new_leader = _wait_until("a leader in the new ensemble", live.leader, timeout_s)
    leader_ready_s = time.time() - t0_unix_s
    for i in leaving:  # decommissioned: a removed server no longer serves anyway
        live.servers[i].stop()
    return {
        "name": step.name,
        "start_s": started_s,
        "servers_ready_s": servers_ready_s,
        "reconfig_done_s": reconfig_done_s,
        "leader_ready_s": leader_ready_s,
        "joined": list(step.start_ids),
        "left": list(leaving),
        "members": list(live.members),
        "leader_id": new_leader,
        "leader_site": SERVERS[new_leader].site,
    }


def _client_hosts(site: str, server_ids: list[int]) -> list[str]:
    own_first = sorted(server_ids, key=lambda i: (SERVERS[i].site != site, i))
    return [f"{server_address(i)}:{CLIENT_PORT}" for i in own_first]


def _start_clients(live: _Live, server_ids: list[int]) -> dict[str, Path]:
    outputs = {}
    for k, site in enumerate(SITES):
        s = live.settings
        out = live.state_dir / f"ops-{site}.jsonl"
        config = ClientConfig(
            site, _client_hosts(site, server_ids), s.threads_per_site, s.read_fraction,
            READ_PATH, f"/geoslo/write-{site}", s.value_bytes, s.session_timeout_s,
            s.op_timeout_s, str(out), s.seed + k,
        )  # fmt: skip
        path = live.state_dir / f"client-{site}.json"
        config.write(path)
        command = [
            find_program("ip", "iproute2"), "netns", "exec", live.sites.of(site),
            *python_module_command("geoslo.live", "zk-client", str(path)),
        ]  # fmt: skip
        log = live.state_dir / f"client-{site}.log"
        live.others.append(ManagedProcess(f"client-{site}", command, log).start())
        outputs[site] = out
    for site in SITES:
        ready = (live.state_dir / f"client-{site}.json").with_suffix(".ready")
        _wait_until(f"the {site} client", ready.exists, 40)
    return outputs


def _summarize(
    procedure: str,
    live: _Live,
    outputs: dict[str, Path],
    t0_unix_s: float,
    end_s: float,
    steps: list[dict],
    leaders: tuple[int, int],
) -> ReconfigRun:
    n_bins = int(math.floor(end_s))
    records = {site: OpRecords.read(path, t0_unix_s) for site, path in outputs.items()}
    throughput = {site: per_second_counts(r, n_bins) for site, r in records.items()}
    failed = {site: per_second_counts(r, n_bins, ok=False) for site, r in records.items()}
    first_s, after_s = steps[0]["start_s"], steps[-1]["leader_ready_s"]
    windows = {"before": (0.0, first_s), "during": (first_s, after_s), "after": (after_s, end_s)}
    latency = {site: latency_summary(r, windows) for site, r in records.items()}
    total = [sum(per_site) for per_site in zip(*throughput.values(), strict=True)]
    medians_before, medians_after = {}, {}
    for name, counts in {**throughput, "total": total}.items():
        dip = dip_metrics(counts, first_s, after_s)
        medians_before[name] = dip["median_before_ops_per_s"]
        medians_after[name] = dip["median_after_ops_per_s"]
    dip = dip_metrics(total, first_s, after_s)
    before_id, after_id = leaders
    return ReconfigRun(
        procedure, asdict(live.settings), end_s, throughput, failed, latency, steps,
        after_s - first_s, before_id, SERVERS[before_id].site, after_id, SERVERS[after_id].site,
        medians_before, medians_after, dip["lowest_ops_per_s"], dip["lowest_fraction"],
        dip["seconds_below_half"],
    )  # fmt: skip


def run_reconfiguration(procedure: str, settings: ZkLiveSettings, state_dir: Path) -> ReconfigRun:
    """Run the "2-step" or "3-step" procedure of §5.2.2 live and measure it; every process
    and namespace it made is gone when it returns or raises."""
    steps = steps_of(procedure)
    server_ids = server_ids_of(procedure)
    live = _Live(settings, Path(state_dir))
    live.state_dir.mkdir(parents=True, exist_ok=True)
    try:
        live.sites = SiteNamespaces.create(live.state_dir, server_ids)
        _start_proxy(live, server_ids)
        _start_servers(live, INITIAL_IDS, INITIAL_IDS)
        leader_before = _wait_until("the first leader", live.leader, settings.step_timeout_s)
        if SERVERS[leader_before].site != SITE_A:
            raise TestbedError(f"the first leader is server {leader_before}, not in {SITE_A}")
        _create_znodes(live, leader_before)
        outputs = _start_clients(live, server_ids)
        time.sleep(settings.warmup_s)
        t0_unix_s = time.time()
        time.sleep(settings.baseline_s)
        records = []
        for k, step in enumerate(steps):
            if k:
                time.sleep(settings.step_gap_s)
            records.append(_run_step(live, step, t0_unix_s))
        time.sleep(settings.after_s)
        leader_after = _wait_until("the final leader", live.leader, settings.step_timeout_s)
        end_s = time.time() - t0_unix_s
        for process in live.others:
            if process.name.startswith("client-"):
                process.stop()
        leaders = (leader_before, leader_after)
        return _summarize(procedure, live, outputs, t0_unix_s, end_s, records, leaders)
    finally:
        live.stop_all()
