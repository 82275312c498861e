"""The Redis Cluster testbed against real ``redis-server`` processes: the cluster forms and
serves a cluster client, a new node joins, a killed node comes back with its AOF data,
nothing outlives ``down``, the CLI round trip, and the per-node CPU quota."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode as ClientNode
from redis.cluster import RedisCluster
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.errors import TestbedError
from geoslo.live._processes import find_program, process_alive
from geoslo.live.director.rediscluster import ClusterSpec, RedisClusterTestbed, cluster_view

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("needs_redis")]

KEYS = 1000


def cluster_client(testbed: RedisClusterTestbed) -> RedisCluster:
    nodes = [ClientNode(host, port) for host, port in testbed.seed_nodes()]
    return RedisCluster(startup_nodes=nodes, decode_responses=True, socket_timeout=10)


def admin(port: int) -> redis.Redis:
    return redis.Redis("127.0.0.1", port, decode_responses=True, socket_timeout=10)


def write_keys(testbed: RedisClusterTestbed) -> None:
    with cluster_client(testbed) as client:
        for k in range(KEYS):
            assert client.set(f"key:{k}", f"value-{k}")


def read_keys(testbed: RedisClusterTestbed) -> list[str | None]:
    with cluster_client(testbed) as client:
        return [client.get(f"key:{k}") for k in range(KEYS)]


def wait_for(condition, timeout_s: float = 60.0) -> None:
    """Poll until ``condition()`` holds (a failover takes node_timeout plus an election)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def assert_all_exited(pids: list[int], state_dir: Path) -> None:
    assert pids and all(not process_alive(pid) for pid in pids), pids
    assert processes_running_in(state_dir) == []


def test_cluster_forms_serves_and_takes_a_new_node(tmp_path):
    spec = ClusterSpec(masters=3, replicas=1, standbys=1)
    testbed = RedisClusterTestbed.up(spec, tmp_path, progress=lambda line: None)
    pids = [n.pid for n in testbed.nodes()]
    try:
        nodes = testbed.nodes()
        assert [n.role for n in nodes] == ["master"] * 3 + ["replica"] * 3 + ["standby"]
        for node in nodes:
            with admin(node.port) as connection:
                assert "cluster_state:ok" in connection.execute_command("CLUSTER", "INFO")
        view = {n.node_id: n for n in cluster_view(nodes[0].port)}
        assert sum(view[n.node_id].slot_count for n in nodes[:3]) == 16384
        assert view[nodes[6].node_id].is_master and view[nodes[6].node_id].slot_count == 0
        assert view[nodes[3].node_id].master_id == nodes[0].node_id
        write_keys(testbed)
        assert read_keys(testbed) == [f"value-{k}" for k in range(KEYS)]
        held = [admin(n.port).dbsize() for n in nodes[:3]]
        assert sum(held) == KEYS and min(held) > KEYS / 6  # spread over the three masters

        new = testbed.start_node()
        pids.append(new.pid)
        assert new.name == "node-7" and new.role == "standby"
        for node in testbed.nodes():
            known = {n.node_id for n in cluster_view(node.port) if "handshake" not in n.flags}
            assert new.node_id in known, node.name
        assert RedisClusterTestbed.load(tmp_path).node("node-7").port == new.port

        # a killed master's replica takes over; the master comes back as its replica
        testbed.stop_node("node-0", kill=True)
        wait_for(lambda: testbed.live_view().get("node-3") == ("master", 5462))
        pids.append(testbed.restart_node("node-0").pid)
        wait_for(lambda: testbed.live_view().get("node-0") == ("replica", 0))
        refreshed = {n.name: (n.role, n.master) for n in testbed.refresh()}
        assert refreshed["node-0"] == ("replica", "node-3")
        assert refreshed["node-3"] == ("master", None) and refreshed["node-7"][0] == "standby"
        assert RedisClusterTestbed.load(tmp_path).node("node-0").role == "replica"
        assert read_keys(testbed) == [f"value-{k}" for k in range(KEYS)]
    finally:
        stopped = testbed.down()
    assert stopped == 8
    assert_all_exited(pids, tmp_path)
    assert RedisClusterTestbed.load(tmp_path).status() == []


def test_a_killed_master_restarts_with_its_aof_data(tmp_path):
    # appendfsync always: every acknowledged write is in the AOF before the reply
    spec = ClusterSpec(masters=3, replicas=0, standbys=0, appendfsync="always")
    with RedisClusterTestbed.up(spec, tmp_path, progress=lambda line: None) as testbed:
        write_keys(testbed)
        victim = testbed.node("node-1")
        held = admin(victim.port).dbsize()
        assert held > 0
        testbed.stop_node("node-1", kill=True)
        assert not process_alive(victim.pid)
        assert testbed.status()[1]["alive"] is False
        restarted = testbed.restart_node("node-1")
        assert restarted.port == victim.port and restarted.pid != victim.pid
        assert admin(victim.port).execute_command("CLUSTER", "MYID") == victim.node_id
        assert admin(victim.port).dbsize() == held  # loaded from its AOF: no replica to copy
        deadline = time.monotonic() + 30
        while "cluster_state:ok" not in admin(victim.port).execute_command("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "the cluster did not recover"
            time.sleep(0.1)
        assert read_keys(testbed) == [f"value-{k}" for k in range(KEYS)]
        pids = [n.pid for n in testbed.nodes()]
    assert_all_exited(pids + [victim.pid], tmp_path)


def test_a_users_template_without_a_bus_port_forms_a_cluster(tmp_path):
    """A user's own provisioning command: only {port} and {dir}; the bus is port + 10000."""
    redis_path = find_program("redis-server", "redis-server", install=False)
    template = (f"{redis_path} --port {{port}} --dir {{dir}} --bind 127.0.0.1"
                " --cluster-enabled yes --appendonly yes --save ''")  # fmt: skip
    spec = ClusterSpec(masters=2, standbys=1, command_template=template)
    with RedisClusterTestbed.up(spec, tmp_path, progress=lambda line: None) as testbed:
        assert all(n.bus_port == n.port + 10000 for n in testbed.nodes())
        assert testbed.live_view() == {
            "node-0": ("master", 8192), "node-1": ("master", 8192), "node-2": ("standby", 0)
        }  # fmt: skip
        assert testbed.start_node().bus_port == testbed.node("node-3").port + 10000
        pids = [n.pid for n in testbed.nodes()]
    assert_all_exited(pids, tmp_path)


def test_a_cluster_that_does_not_converge_names_the_node_and_stops(tmp_path):
    spec = ClusterSpec(masters=2, standbys=0, converge_timeout_s=0.001)
    with pytest.raises(TestbedError, match=r"node-\d \(port \d+\) does not know every node"):
        RedisClusterTestbed.up(spec, tmp_path, progress=lambda line: None)
    assert processes_running_in(tmp_path) == []


def processes_running_in(state_dir: Path) -> list[int]:
    """PIDs of live processes working in a folder under ``state_dir`` (a node's --dir:
    redis-server rewrites its command line, but it works in its own folder)."""
    pids = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            inside = Path(os.readlink(cwd)).is_relative_to(state_dir)
        except OSError:
            continue
        if inside and process_alive(int(cwd.parent.name)):
            pids.append(int(cwd.parent.name))
    return pids


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def run_geoslo(*args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it: its own process, its real exit status."""
    command = [sys.executable, "-m", "geoslo", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


STATUS_ROW = r"(node-\d)\s+(\w+)\s+port (\d+)\s+slots (\d+)\s+pid (\d+)\s+up"


def test_cli_up_status_down(tmp_path):
    state = str(tmp_path / "bed")
    pids: list[int] = []
    try:
        # up in its own process: the nodes outlive it; status and down find them by the file
        up = run_geoslo("testbed", "up", "--engine", "redis-cluster", "--masters", "2",
                        "--standbys", "1", "--state-dir", state)  # fmt: skip
        assert up.returncode == 0, up.stderr
        status = run("testbed", "status", "--state-dir", state)
        assert status.exit_code == 0, status.output
        rows = re.findall(STATUS_ROW, status.output)
        assert [(r[0], r[1], r[3]) for r in rows] == [
            ("node-0", "master", "8192"), ("node-1", "master", "8192"), ("node-2", "standby", "0")
        ]  # fmt: skip
        pids = [int(r[4]) for r in rows]
        assert all(process_alive(pid) for pid in pids)
    finally:
        down = run_geoslo("testbed", "down", "--state-dir", state)
    assert down.returncode == 0 and "stopped 3 process(es)" in down.stdout
    assert_all_exited(pids, tmp_path)
    assert run("testbed", "status", "--state-dir", state).exit_code == 1
    # the same folder again: a fresh cluster (old nodes.conf and AOF are not reused)
    try:
        again = run("testbed", "up", "--engine", "redis-cluster", "--masters", "1",
                    "--standbys", "0", "--state-dir", state)  # fmt: skip
        assert again.exit_code == 0, again.output
        assert re.findall(STATUS_ROW, again.output)[0][3] == "16384"
    finally:
        assert "stopped 1 process(es)" in run("testbed", "down", "--state-dir", state).output


def _cgroup_cpu_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make cgroups"
    if not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists():
        return "needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu"
    return None


BUSY_LUA = "for i = 1, 200000 do end return 1"  # ~1 ms of the server's CPU, nothing client-side


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share_serving(port: int, pid: int, duration_s: float = 2.0) -> float:
    """The server's CPU seconds per wall second while one client keeps it busy."""
    with admin(port) as connection:
        script = connection.script_load(BUSY_LUA)
        used_before, start = cpu_seconds(pid), time.monotonic()
        while time.monotonic() - start < duration_s:
            connection.evalsha(script, 0)
        return (cpu_seconds(pid) - used_before) / (time.monotonic() - start)


def throttled(group: Path) -> int:
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])


@pytest.mark.skipif(_cgroup_cpu_available() is not None, reason=str(_cgroup_cpu_available()))
def test_a_node_at_a_tenth_of_a_cpu_is_held_to_it(tmp_path):
    # Judged by the node's own CPU time and its cgroup's throttling, not by its throughput
    # against an unlimited node's: under two CPU hogs an unlimited node measured after it got
    # less CPU than the limited one (65 against 91 scripts a second).
    limited_spec = ClusterSpec(masters=1, standbys=0, cpu_quota_fraction=0.1)
    with RedisClusterTestbed.up(limited_spec, tmp_path / "limited", progress=lambda _: None) as tb:
        node = tb.node("node-0")
        group = Path(node.cgroup)
        assert int((group / "cpu.cfs_quota_us").read_text()) == 10_000
        assert str(node.pid) in (group / "cgroup.procs").read_text().split()
        assert "10% of a CPU" in tb.cpu_limit
        throttled_before = throttled(group)
        share = cpu_share_serving(node.port, node.pid)
        assert throttled(group) > throttled_before  # the quota, not the client, held it back
    print(f"the limited node's CPU share while kept busy: {share:.3f}")
    assert share <= 0.1 * 1.5  # a 10 ms quota per 100 ms period, measured in 10 ms ticks
    assert not group.exists()  # removed at down
    free_spec = ClusterSpec(masters=1, standbys=0)
    with RedisClusterTestbed.up(free_spec, tmp_path / "free", progress=lambda _: None) as tb:
        assert tb.node("node-0").cgroup is None
