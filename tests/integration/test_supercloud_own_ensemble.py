"""``geoslo run`` moves an ensemble it did not start (``kind = "ensemble"``,
docs/placement.md): three real ZooKeeper servers in site "east" on loopback, three spares
in "west" that join through the operator's start command, each site's load counted on a
Prometheus page. The scheduler (SoCC 2016 §3, §5.1) moves the ensemble to the busy site
and the data written before the move is read from the new members. No root needed."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from _run import Running, gauges, write_config
from geoslo.live._processes import free_ports, stop_pid
from geoslo.live.supercloud.zookeeper._ensemble import ZOOKEEPER_JAR, ZkServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SPARE = Path(__file__).with_name("_zk_spare.py")
EAST, WEST = (1, 2, 3), (4, 5, 6)


@pytest.fixture
def zookeeper_ok() -> None:
    if shutil.which("java") is None or not ZOOKEEPER_JAR.exists():
        pytest.skip(f"needs java and {ZOOKEEPER_JAR} (Debian's zookeeper package)")


def _servers() -> dict[int, ZkServer]:
    ports = free_ports(3 * 6)
    return {
        i: ZkServer(i, "east" if i in EAST else "west", "127.0.0.1", *ports[3 * k : 3 * k + 3])
        for k, i in enumerate(EAST + WEST)
    }


def _command(verb: str, state_dir: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(SPARE), verb, str(state_dir), *extra])


def _config(
    servers: dict[int, ZkServer], state_dir: Path, counters_url: str, extra: str = ""
) -> str:
    entries = "".join(
        f"""
[[environment.servers]]
id = {s.server_id}
site = "{s.site}"
host = "{s.host}"
client_port = {s.client_port}
quorum_port = {s.quorum_port}
election_port = {s.election_port}
start = "{_command("start", state_dir)}"
stop = "{_command("stop", state_dir, str(s.server_id))}"
"""
        for s in servers.values()
    )
    return f"""\
system = "supercloud"
interval_s = 2.0
[environment]
kind = "ensemble"
sites = ["east", "west"]
rtt_ms = [[0.0, 100.0], [100.0, 0.0]]
counters_url = "{counters_url}"
step_timeout_s = 60.0
{extra}
{entries}
[service]
listen = "127.0.0.1:0"
intervals = 0
"""


def _start_east(servers: dict[int, ZkServer], state_dir: Path) -> None:
    """The operator's ensemble as it runs before geoslo: three servers in east."""
    dynamic = "\n".join(servers[i].config_line() for i in EAST)
    for i in EAST:
        environment = {**os.environ, "GEOSLO_ZK_SERVER_ID": str(i)}
        environment["GEOSLO_ZK_DYNAMIC_CONFIG"] = dynamic
        subprocess.run(_command("start", state_dir), shell=True, env=environment, check=True)


def _super_digest(user_password: str) -> str:
    """ZooKeeper's stored form of a digest user: user:base64(sha1(user:password))."""
    user = user_password.split(":", 1)[0]
    return f"{user}:{base64.b64encode(hashlib.sha1(user_password.encode()).digest()).decode()}"


class SiteLoad:
    """Each site's reads and writes on a Prometheus page: west ten times east."""

    def __init__(self) -> None:
        registry = CollectorRegistry()
        self.reads = Counter("geoslo_zk_reads", "reads", ["site"], registry=registry)
        self.writes = Counter("geoslo_zk_writes", "writes", ["site"], registry=registry)
        self.server, _ = start_http_server(0, "127.0.0.1", registry=registry)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._count, daemon=True)
        self._thread.start()

    def _count(self) -> None:
        while not self._stop.wait(0.1):
            for site, per_tick in (("east", 2), ("west", 20)):
                self.reads.labels(site).inc(9 * per_tick)
                self.writes.labels(site).inc(per_tick)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.server.shutdown()
        self.server.server_close()


def _kazoo(servers: list[ZkServer]):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=",".join(f"{s.address}:{s.client_port}" for s in servers))
    client.start(timeout=60)  # a quorum forming on a busy machine
    return client


def _in_west(base_url: str) -> dict | None:
    observed = gauges(base_url, "observation")
    settled = observed.get("busy") == 0 and observed.get("nodes:west") == 3
    return observed if settled and "nodes:east" not in observed else None


def _still_running(state_dir: Path) -> dict[int, int]:
    """Server id -> PID of the servers started here (by the helper) still running: a
    PID is taken only if its command line names this test's folder (not a reused one)."""
    running = {}
    for pid_file in state_dir.glob("zk*.pid"):
        pid = int(pid_file.read_text())
        if str(state_dir) in " ".join(_command_line(pid)):
            running[int(pid_file.stem[2:])] = pid
    return running


def _command_line(pid: int) -> list[str]:
    """The command line of ``pid`` (empty if it has exited)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _refused(run: Running) -> dict | None:
    return next((e for e in run.result().events("error") if "no permission" in e["error"]), None)


def _members(servers: list[ZkServer], digest: str | None) -> tuple[bytes, list[int]]:
    """What /kept holds and the ids of the configuration, read from ``servers``."""
    client = _kazoo(servers)
    try:
        if digest:
            client.add_auth("digest", digest)
        kept, _ = client.get("/kept")
        config = client.get("/zookeeper/config")[0].decode()
    finally:
        client.stop()
        client.close()
    ids = [
        int(line.split("=")[0][7:]) for line in config.splitlines() if line.startswith("server.")
    ]
    return kept, sorted(ids)


@pytest.mark.parametrize(
    "acl, give_digest",
    [  # the open ensemble's move is the authenticated one's without ACLs: the slow set
        pytest.param(False, False, id="open", marks=pytest.mark.slow),
        pytest.param(True, True, id="acl-authenticated"),
        pytest.param(True, False, id="acl-refused"),
    ],
)
def test_run_moves_ones_own_ensemble_to_the_busy_site(
    zookeeper_ok, tmp_path, monkeypatch, acl, give_digest
):
    """With an open ensemble, or one that enforces ACLs and the super user's digest given,
    the ensemble moves west and keeps its data; without the digest the reconfiguration is
    refused, reported, and the ensemble stays where it was."""
    state_dir = tmp_path / "zk"
    state_dir.mkdir()
    servers = _servers()
    digest = "super:geoslo-test-secret"
    if acl:  # every server started through the helper enforces ACLs
        monkeypatch.setenv("ZK_SUPER_DIGEST", _super_digest(digest))
    extra = ""
    if give_digest:
        digest_file = tmp_path / "zk-digest"
        digest_file.write_text(digest + "\n")
        digest_file.chmod(0o600)
        extra = f'digest_file = "{digest_file}"'
    load = SiteLoad()
    try:
        _start_east(servers, state_dir)
        before = _kazoo([servers[i] for i in EAST])
        try:
            before.create("/kept", b"written before the move")
        finally:
            before.stop()
            before.close()
        config = write_config(tmp_path, _config(servers, state_dir, load.url, extra))
        run = Running(config, wait_s=150)
        try:
            if acl and not give_digest:
                refused = run.wait_for(lambda: _refused(run), "the refused reconfiguration")
            else:
                observed = run.wait_for(lambda: _in_west(run.base_url()), "three west members")
            assert run.stop() == 0
        finally:
            run.close()
        moved = acl and not give_digest
        kept, members = _members([servers[i] for i in (EAST if moved else WEST)], digest)
    finally:
        load.close()
        left_running = _still_running(state_dir)
        for pid in left_running.values():  # the servers this test started
            stop_pid(pid, timeout_s=15.0)
    result = run.result()
    assert kept == b"written before the move"
    if acl and not give_digest:
        assert "refused it (no permission" in refused["error"] and members == list(EAST)
        # the spare that step started was stopped: it never joined
        assert sorted(left_running) == list(EAST), left_running
        return
    decided = [r for r in result.events("interval") if r["status"] != "no_plan"]
    assert decided and all(r["applied"] for r in decided)
    assert not any(r["errors"] for r in result.events("interval")), result.records
    assert observed["reads:west"] > 5 * observed["reads:east"] > 0
    assert members == list(WEST)
    assert sorted(left_running) == list(WEST), left_running  # east's stopped by `stop`
