"""A Redis Cluster as a user makes one: ``redis-server`` nodes started here (their PIDs
kept, only those stopped), joined by ``redis-cli --cluster create`` (optionally with
``--cluster-replicas``), keys written by redis-py, and a load of the user's: a separate
process running plain redis-py ``RedisCluster`` (no geoslo code, no hash tags)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.cluster import ClusterNode as RCNode
from redis.cluster import RedisCluster

from geoslo.live._processes import ManagedProcess, find_program, free_ports, stop_pid

HOST = "127.0.0.1"


@dataclass
class UsersCluster:
    """``masters`` masters and ``replicas`` replicas each; ``password`` (requirepass and
    masterauth) and ``acl_user`` (an ACL user with that password, all permissions)."""

    folder: Path
    masters: int = 3
    replicas: int = 0
    password: str | None = None
    acl_user: str | None = None
    ports: list[int] = field(default_factory=list)
    processes: list[ManagedProcess] = field(default_factory=list)

    def auth(self) -> dict:
        out: dict = {}
        if self.password:
            out["password"] = self.password
        if self.acl_user:
            out["username"] = self.acl_user
        return out

    def node_command(self, port: int, directory: Path) -> list[str]:
        command = [
            find_program("redis-server", "redis-server"), "--port", str(port),
            "--bind", HOST, "--dir", str(directory), "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
            "--appendonly", "no", "--save", "", "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if self.password:
            command += ["--requirepass", self.password, "--masterauth", self.password]
            if self.acl_user:
                command += ["--masteruser", self.acl_user]
        return command

    def up(self) -> UsersCluster:
        count = self.masters * (1 + self.replicas)
        while len(self.processes) < count:
            self._start_one()
        if self.acl_user:
            for port in self.ports:
                with redis.Redis(HOST, port, password=self.password) as node:
                    node.execute_command(
                        "ACL", "SETUSER", self.acl_user, "on", f">{self.password}", "~*", "&*",
                        "+@all",
                    )  # fmt: skip
        create = [find_program("redis-cli", "redis-server"), "--cluster", "create"]
        create += [f"{HOST}:{p}" for p in self.ports]
        create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        if self.acl_user:
            create += ["--user", self.acl_user]
        if self.password:
            create += ["-a", self.password, "--no-auth-warning"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        self.wait_ok()
        return self

    def _start_one(self, attempts: int = 5) -> None:
        """One node on a free port; on a shared machine another process can take the port
        between the check and the bind: then another port (the node must answer as
        itself, its folder ours)."""
        tries, last_error = 0, None
        for _ in range(100):  # a port whose bus port (+10000) exists is not an attempt
            if tries == attempts:
                break
            (port,) = free_ports(1)
            if port + 10000 > 65535 or port in self.ports:
                continue
            tries += 1
            directory = self.folder / f"user-{port}"
            directory.mkdir(parents=True, exist_ok=True)
            command = self.node_command(port, directory)
            process = ManagedProcess(f"user-{port}", command, directory / "redis.log", port)
            try:
                process.start()
                time.sleep(0.1)
                default_user = {"password": self.password} if self.password else {}
                with redis.Redis(HOST, port, decode_responses=True, **default_user) as node:
                    if node.config_get("dir")["dir"] == str(directory) and process.alive:
                        self.ports.append(port)
                        self.processes.append(process)
                        return
            except Exception as error:  # the port was taken: try another
                last_error = error
            if process.pid is not None:
                stop_pid(process.pid, timeout_s=10.0)
        raise AssertionError(f"no node after {tries} tries; the last: {last_error!r}")

    def add_empty_master_with_replica(self) -> tuple[int, int]:
        """``redis-cli --cluster add-node`` of an empty master and of a replica of it (as a
        user grows a cluster before resharding); their ports."""
        cli = find_program("redis-cli", "redis-server")
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        self._start_one()
        master = self.ports[-1]
        self._cli(
            [cli, "--cluster", "add-node", f"{HOST}:{master}", f"{HOST}:{self.ports[0]}", *auth]
        )
        self.wait_ok()
        with redis.Redis(HOST, master, decode_responses=True, **self.auth()) as node:
            master_id = node.execute_command("CLUSTER", "MYID")
        self._start_one()
        replica = self.ports[-1]
        self._cli([
            cli, "--cluster", "add-node", f"{HOST}:{replica}", f"{HOST}:{self.ports[0]}",
            "--cluster-slave", "--cluster-master-id", master_id, *auth,
        ])  # fmt: skip
        self.wait_ok()
        return master, replica

    @staticmethod
    def _cli(command: list[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    def wait_ok(self, timeout_s: float = 60.0) -> None:
        """Until every node says cluster_state:ok, every replica's link is up and every
        node's view has each node in the role the node itself reports (gossip settled)."""
        deadline = time.monotonic() + timeout_s
        while True:
            pending = [p for p in self.ports if not self._ready(p)]
            if not pending:
                truth = {r["id"]: r["role"] for r in self.roles().values()}
                pending = [p for p in self.ports if not self._agrees(p, truth)]
            if not pending:
                return
            assert time.monotonic() < deadline, f"nodes {pending} not ready"
            time.sleep(0.1)

    def _ready(self, port: int) -> bool:
        """OK, its replication link up, and its view of the roles as it should be."""
        with redis.Redis(HOST, port, decode_responses=True, **self.auth()) as node:
            if "cluster_state:ok" not in node.execute_command("CLUSTER", "INFO"):
                return False
            info = node.info("replication")
            if info["role"] != "master" and info.get("master_link_status") != "up":
                return False
        view = self.nodes(port)
        masters = sum(1 for n in view if "master" in n["flags"])
        replicas = sum(1 for n in view if "slave" in n["flags"])
        failed = sum(1 for n in view if {"fail", "fail?", "handshake"} & set(n["flags"]))
        return not failed and masters + replicas == len(self.ports) == len(view)

    def _agrees(self, port: int, truth: dict[str, str]) -> bool:
        view = {n["id"]: ("slave" if "slave" in n["flags"] else "master") for n in self.nodes(port)}
        return view == truth

    def seeds(self) -> list[str]:
        return [f"{HOST}:{p}" for p in self.ports]

    def client(self) -> RedisCluster:
        return RedisCluster(startup_nodes=[RCNode(HOST, p) for p in self.ports], **self.auth())

    def write_keys(self, names: Sequence[str], value: bytes) -> None:
        with self.client() as rc:
            for name in names:
                rc.set(name, value)

    def nodes(self, port: int | None = None) -> list[dict]:
        """``CLUSTER NODES`` of one node as dicts: id, port, flags, master, slots."""
        with redis.Redis(HOST, port or self.ports[0], decode_responses=True, **self.auth()) as n:
            text = n.execute_command("CLUSTER", "NODES")
        out = []
        for line in text.strip().splitlines():
            f = line.split()
            out.append(
                {
                    "id": f[0], "port": int(f[1].split("@")[0].rsplit(":", 1)[1]),
                    "flags": f[2].split(","), "master": None if f[3] == "-" else f[3],
                    "slots": f[8:],
                }
            )  # fmt: skip
        return out

    def roles(self) -> dict[int, dict]:
        """Each node as it sees itself: id, role, its master's port and its own slots."""
        out = {}
        for port in self.ports:
            with redis.Redis(HOST, port, decode_responses=True, **self.auth()) as node:
                info = node.info("replication")
                myself = next(
                    line.split()
                    for line in node.execute_command("CLUSTER", "NODES").splitlines()
                    if "myself" in line.split()[2]
                )
            out[port] = {
                "id": myself[0], "role": info["role"], "slots": myself[8:],
                "master_port": info.get("master_port"), "link": info.get("master_link_status"),
            }  # fmt: skip
        return out

    def down(self) -> None:
        for process in self.processes:
            if process.pid is not None:
                stop_pid(process.pid, timeout_s=30.0)

    def __enter__(self) -> UsersCluster:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()


# The user's load: plain redis-py, paced to ``rps``, its own counts written at the end.
LOAD_SCRIPT = """
import json, os, random, sys, time
from redis.cluster import RedisCluster, ClusterNode
ports, rps, seconds, hot, hot_share, keys, out, auth = json.loads(sys.argv[1])
rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports], **auth)
rng = random.Random(1)
done = {"gets": 0, "puts": 0, "failed": 0, "hot": 0, "start": time.time()}
start = time.monotonic()
n = 0
while time.monotonic() - start < seconds:
    n += 1
    wait = start + n / rps - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    try:
        if hot and rng.random() < hot_share:
            rc.get(rng.choice(hot)); done["hot"] += 1; done["gets"] += 1
        elif rng.random() < 0.9:
            rc.get(f"k:{rng.randrange(keys)}"); done["gets"] += 1
        else:
            rc.set(f"k:{rng.randrange(keys)}", b"u" * 100); done["puts"] += 1
    except Exception:
        done["failed"] += 1
    if n % 100 == 0:
        done["end"] = time.time()
        open(out + ".tmp", "w").write(json.dumps(done)); os.replace(out + ".tmp", out)
done["end"] = time.time()
open(out + ".tmp", "w").write(json.dumps(done)); os.replace(out + ".tmp", out)
"""


@dataclass
class UsersLoad:
    """The load process (its PID is the only one stopped); ``counts()`` what it did."""

    cluster: UsersCluster
    rps: float
    seconds: float
    hot: Sequence[str] = ()
    hot_share: float = 0.0
    keys: int = 2000
    out: Path | None = None
    process: subprocess.Popen | None = None

    def start(self) -> UsersLoad:
        self.out = self.cluster.folder / f"load-{time.monotonic_ns()}.json"
        args = [
            self.cluster.ports, self.rps, self.seconds, list(self.hot), self.hot_share,
            self.keys, str(self.out), self.cluster.auth(),
        ]  # fmt: skip
        self.process = subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT, json.dumps(args)])
        return self

    def counts(self) -> dict:
        """What it did so far (written every 100 requests; {} before the first 100)."""
        assert self.out is not None
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):  # not written yet, or being written
            return {}

    async def running(self, timeout_s: float = 60.0) -> None:
        """Until it has sent its first hundred requests."""
        deadline = time.monotonic() + timeout_s
        while not self.counts():
            assert self.process is not None and self.process.poll() is None, "load exited"
            assert time.monotonic() < deadline, "the load process sent nothing"
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # our own child, by its PID
        if self.process is not None:
            self.process.wait(timeout=30)

    def __enter__(self) -> UsersLoad:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


async def drain_period(env) -> None:
    """Observe until a period ends, dropping it (its start preceded the load)."""
    for _ in range(300):
        if (await env.observe()).histograms:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"no period ended by {env.observer.now_s():.1f} s")


async def observed_under_load(env, load: UsersLoad, periods: int) -> tuple[list, dict, dict]:
    """``periods`` observed periods that began after ``load`` started (bounded: about 15 s
    a period at most, never a hang), and the load's own counts before and after them."""
    await load.running()
    await drain_period(env)  # a period that began before the load
    first = load.counts()
    observed: list = []
    for _ in range(30 * periods):
        await asyncio.sleep(0.5)
        observed += list((await env.observe()).histograms)
        if len(observed) >= periods:
            break
    assert len(observed) >= periods, (len(observed), env.observer.now_s())
    return observed, first, load.counts()
