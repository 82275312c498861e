"""The Redis Cluster testbed: real ``redis-server`` nodes in cluster mode on loopback.

``RedisClusterTestbed.up(spec, state_dir)`` starts every node from one command template
(``{port}``, ``{dir}`` and optionally ``{bus_port}``), AOF on, each in its own folder and,
as root, its own CPU-limited cgroup; it assigns the 16384 hash slots to the masters in
contiguous ranges, MEETs every node, attaches the replicas and blocks until every node
reports ``cluster_state:ok`` and the same slot map. Standbys are empty masters already
known to the cluster (SCADS Director §5.6: servers kept ready). Every node's port, folder,
PID and cgroup is recorded in ``<state_dir>/redis-cluster.json``, so ``status`` and
``down`` work from another process, and only those PIDs are ever signalled.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from hashlib import sha1
from pathlib import Path

import redis

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._cgroup import limit_cpu, remove_group
from geoslo.live._processes import (
    ManagedProcess,
    find_program,
    free_ports,
    process_alive,
    stop_pid,
)

__all__ = [
    "SLOTS",
    "SLOTS_PER_BIN",
    "STATE_FILE",
    "ClusterNode",
    "ClusterSpec",
    "NodeInfo",
    "RedisClusterTestbed",
    "cluster_view",
    "default_command_template",
    "parse_cluster_nodes",
    "render_command",
    "roles_in_view",
    "slot_ranges",
]

SLOTS = 16384  # Redis Cluster specification: CRC16(key) mod 16384
# A bin (the Director's unit of data, §5.1) is a contiguous range of 128 hash slots:
# 128 bins, comparable to the binned store's 100, and one bin's keys move in a few
# paced MIGRATE batches.
SLOTS_PER_BIN = 128
STATE_FILE = "redis-cluster.json"
ROLES = ("master", "replica", "standby")
APPENDFSYNC = ("everysec", "always", "no")
HOST = "127.0.0.1"


def slot_ranges(masters: int, slots: int = SLOTS) -> list[tuple[int, int]]:
    """``slots`` spread evenly over ``masters`` as contiguous inclusive ranges (the first
    ``slots % masters`` masters get one slot more)."""
    if masters < 1:
        raise ConfigError("masters", "must be at least 1")
    base, extra = divmod(slots, masters)
    ranges, start = [], 0
    for index in range(masters):
        size = base + (1 if index < extra else 0)
        ranges.append((start, start + size - 1))
        start += size
    return ranges


def default_command_template(
    redis_path: str, node_timeout_ms: int = 2000, appendfsync: str = "everysec"
) -> str:
    """The command that starts one node: cluster mode, AOF on, loopback, ``DEBUG`` allowed."""
    return (
        f"{shlex.quote(redis_path)} --port {{port}} --cluster-port {{bus_port}}"
        " --bind 127.0.0.1 --dir {dir} --cluster-enabled yes"
        # a lone node otherwise reports its own host as "" until another node meets it
        " --cluster-announce-ip 127.0.0.1"
        " --cluster-config-file nodes.conf"
        f" --cluster-node-timeout {node_timeout_ms}"
        f" --appendonly yes --appendfsync {appendfsync} --save ''"
        " --enable-debug-command local"
        " --repl-diskless-sync-delay 0"  # a new replica syncs at once, not after 5 s
    )


def render_command(
    template: str, port: int, directory: Path, bus_port: int, host: str = HOST
) -> list[str]:
    """The argument list of one node: ``template`` with ``{host}`` (the address the node
    listens on and is met at), ``{port}``, ``{dir}`` and ``{bus_port}`` (the cluster bus;
    Redis uses port + 10000 unless the template sets it)."""
    try:
        text = template.format(
            port=port, dir=shlex.quote(str(directory)), bus_port=bus_port, host=host
        )
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            "command_template",
            f"only {{host}}, {{port}}, {{dir}} and {{bus_port}} may appear in braces ({error})",
        ) from None
    return shlex.split(text)


def uses_bus_port(template: str) -> bool:
    return "{bus_port}" in template


@dataclass(frozen=True)
class ClusterSpec:
    """What to start. ``cpu_quota_fraction``: each node's share of one CPU (cgroup CFS
    quota), None for no limit. ``command_template``: None for Debian's ``redis-server``
    with the settings below (:func:`default_command_template`)."""

    masters: int = 3
    replicas: int = 0  # replicas per master
    standbys: int = 1  # empty masters kept ready (§5.6)
    cpu_quota_fraction: float | None = None
    appendfsync: str = "everysec"  # as operators run AOF; "always" for no loss on a kill
    node_timeout_ms: int = 2000
    command_template: str | None = None
    converge_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name, low in (("masters", 1), ("replicas", 0), ("standbys", 0)):
            value = getattr(self, name)
            if not (isinstance(value, int) and low <= value <= 64):
                raise ConfigError(name, f"must be an integer from {low} to 64")
        quota = self.cpu_quota_fraction
        if quota is not None and not (0.01 <= quota <= (os.cpu_count() or 1)):
            raise ConfigError("cpu_quota_fraction", "must be from 0.01 to the CPU count, or None")
        if self.appendfsync not in APPENDFSYNC:
            raise ConfigError("appendfsync", f"must be one of {', '.join(APPENDFSYNC)}")
        if not (isinstance(self.node_timeout_ms, int) and self.node_timeout_ms >= 100):
            raise ConfigError("node_timeout_ms", "must be an integer of at least 100 ms")
        if self.command_template is not None:
            for placeholder in ("{port}", "{dir}"):
                if placeholder not in self.command_template:
                    raise ConfigError("command_template", f"must contain {placeholder}")
            render_command(self.command_template, 1, Path("/d"), 2)
        if not self.converge_timeout_s > 0:
            raise ConfigError("converge_timeout_s", "must be > 0")

    def template(self, redis_path: str) -> str:
        if self.command_template is not None:
            return self.command_template
        return default_command_template(redis_path, self.node_timeout_ms, self.appendfsync)


@dataclass(frozen=True)
class NodeInfo:
    """One node as the testbed started it. ``role``: master (holds slots at ``up``),
    replica (of ``master``, a node name) or standby (an empty master)."""

    name: str
    host: str
    port: int
    node_id: str
    role: str
    pid: int | None
    bus_port: int = 0
    dir: str = ""
    master: str | None = None
    cgroup: str | None = None


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``: a node as another node sees it. ``slots``: inclusive
    ranges it serves (slots in migration are listed in ``migrating``/``importing``)."""

    node_id: str
    host: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    link_state: str
    slots: tuple[tuple[int, int], ...]
    migrating: dict[int, str] = field(default_factory=dict)
    importing: dict[int, str] = field(default_factory=dict)

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "handshake", "noaddr"})

    @property
    def slot_count(self) -> int:
        return sum(end - start + 1 for start, end in self.slots)


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    """Parse the reply of ``CLUSTER NODES`` (Redis Cluster specification, "CLUSTER NODES")."""
    nodes = []
    for line in text.strip().splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        address = fields[1].split(",", 1)[0].split("@", 1)[0]
        host, _, port = address.rpartition(":")
        slots, migrating, importing = [], {}, {}
        for item in fields[8:]:
            if item.startswith("["):
                slot, arrow, peer = item[1:-1].partition("->-")
                if arrow:
                    migrating[int(slot)] = peer
                else:
                    slot, _, peer = item[1:-1].partition("-<-")
                    importing[int(slot)] = peer
                continue
            start, _, end = item.partition("-")
            slots.append((int(start), int(end or start)))
        nodes.append(
            ClusterNode(
                node_id=fields[0],
                host=host,
                port=int(port),
                flags=frozenset(fields[2].split(",")),
                master_id=None if fields[3] == "-" else fields[3],
                link_state=fields[7],
                slots=tuple(sorted(slots)),
                migrating=migrating,
                importing=importing,
            )
        )
    return nodes


def roles_in_view(
    nodes: list[NodeInfo], view: list[ClusterNode]
) -> dict[str, tuple[str, str | None]]:
    """Each node's role now, as ``view`` shows it, by name: ("replica", its master's name),
    ("master", None) while it serves slots, ("standby", None) for an empty master, or
    ("failed", None); nodes the view lacks are left out."""
    seen = {n.node_id: n for n in view}
    names = {n.node_id: n.name for n in nodes}
    roles = {}
    for node in nodes:
        entry = seen.get(node.node_id)
        if entry is None:
            continue
        if entry.failed:
            roles[node.name] = ("failed", None)
        elif not entry.is_master:
            roles[node.name] = ("replica", names.get(entry.master_id or ""))
        else:
            roles[node.name] = ("master" if entry.slot_count else "standby", None)
    return roles


def _topology(view: list[ClusterNode]) -> frozenset:
    """What every node must agree on: who serves which slots and who replicates whom."""
    return frozenset((n.node_id, n.is_master, n.master_id, n.slots) for n in view if not n.failed)


def _node_ports(own_bus_port: bool) -> tuple[int, int]:
    """A free client port and the cluster bus port: a free one when the template sets
    ``{bus_port}``, else Redis's port + 10000 (so the client port must be below 55536)."""
    if own_bus_port:
        port, bus_port = free_ports(2)
        return port, bus_port
    for _ in range(100):
        (port,) = free_ports(1)
        if port + 10000 <= 65535:
            return port, port + 10000
    raise TestbedError("no free port below 55536 for a node whose bus port is port + 10000")


def _group_name(state_dir: Path, node: str) -> str:
    """A cgroup name unique to this testbed's folder and node (parallel testbeds differ)."""
    digest = sha1(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return f"rediscluster-{digest}-{node}"


def _admin(
    port: int, timeout_s: float = 5.0, host: str = HOST, credentials: dict | None = None
) -> redis.Redis:
    return redis.Redis(
        host, port, socket_timeout=timeout_s, decode_responses=True, **(credentials or {})
    )


def _call(port: int, *args, host: str = HOST, credentials: dict | None = None) -> str:
    """One command to the node on ``port``; a refusal becomes a TestbedError naming it."""
    with _admin(port, host=host, credentials=credentials) as connection:
        try:
            return connection.execute_command(*args)
        except redis.exceptions.ResponseError as error:
            command = " ".join(str(a) for a in args[:2])
            raise TestbedError(f"the node on port {port} refused {command}: {error}") from None


def cluster_view(port: int) -> list[ClusterNode]:
    """The cluster as the node on ``port`` sees it."""
    return parse_cluster_nodes(_call(port, "CLUSTER", "NODES"))


@dataclass
class RedisClusterTestbed:
    """A running (or recorded) Redis Cluster on loopback: its spec, nodes and processes."""

    __test__ = False

    spec: ClusterSpec
    state_dir: Path
    template: str
    records: list[dict] = field(default_factory=list)  # NodeInfo fields, one per node
    cpu_limit: str = "none"  # what the nodes' CPU limit is, or why there is none
    host: str = HOST  # where new nodes start ({host} of the template) and are reached
    retire_template: str | None = None  # stops a node instead of its PID ({host}, {port}, {dir})
    credentials: dict = field(default_factory=dict)  # redis-py's AUTH/TLS keyword arguments

    # --- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def up(
        cls,
        spec: ClusterSpec,
        state_dir: Path,
        progress: Callable[[str], None] = print,
    ) -> RedisClusterTestbed:
        """Start every node, create the cluster and block until it converges."""
        state_dir = Path(state_dir)
        existing = cls.load(state_dir)
        if existing is not None and existing.running():
            raise TestbedError(
                f"a Redis Cluster already runs from {state_dir}; `geoslo testbed down` first"
            )
        redis_path = find_program("redis-server", "redis-server")
        state_dir.mkdir(parents=True, exist_ok=True)
        testbed = cls(spec, state_dir, spec.template(redis_path))
        try:
            testbed._create(progress)
        except BaseException:
            testbed.down()
            raise
        return testbed

    def _create(self, progress: Callable[[str], None]) -> None:
        spec = self.spec
        roles = (
            ["master"] * spec.masters
            + ["replica"] * (spec.masters * spec.replicas)
            + ["standby"] * spec.standbys
        )
        for index, role in enumerate(roles):
            master = None
            if role == "replica":
                master = f"node-{(index - spec.masters) % spec.masters}"
            self.launch_node(f"node-{index}", role, master)
        progress(f"redis-cluster: {len(roles)} nodes up ({self.cpu_limit})")
        for epoch, record in enumerate(self.records, start=1):
            _call(record["port"], "CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for record, (start, end) in zip(self.records, slot_ranges(spec.masters), strict=False):
            _call(record["port"], "CLUSTER", "ADDSLOTSRANGE", start, end)
        first = self.records[0]
        for record in self.records[1:]:
            _call(first["port"], "CLUSTER", "MEET", HOST, record["port"], record["bus_port"])
        self._wait_known(self.records)
        for record in self.records:
            if record["role"] == "replica":
                master_id = self._record(record["master"])["node_id"]
                _call(record["port"], "CLUSTER", "REPLICATE", master_id)
        self._wait_converged()
        self.save()
        progress(
            f"redis-cluster: {spec.masters} masters x {spec.replicas} replicas"
            f" + {spec.standbys} standbys, cluster_state:ok"
        )

    def launch_node(self, name: str, role: str = "standby", master: str | None = None) -> dict:
        """Start one node on fresh ports in ``<state_dir>/<name>`` and record it (not yet
        met: ``start_node`` also introduces it; the environment meets its own nodes)."""
        directory = self.state_dir / name
        shutil.rmtree(directory, ignore_errors=True)  # a new node: no old AOF or nodes.conf
        directory.mkdir(parents=True)
        port, bus_port = _node_ports(uses_bus_port(self.template))
        record = {
            "name": name, "host": self.host, "port": port, "node_id": "", "role": role,
            "pid": None, "bus_port": bus_port, "dir": str(directory), "master": master,
            "cgroup": None,
        }  # fmt: skip
        self.records.append(record)
        self._start_process(record)
        record["node_id"] = self._call(record, "CLUSTER", "MYID")
        self.save()
        return record

    def _call(self, record: dict, *args) -> str:
        """One command to a recorded node, at its host, with the cluster's credentials."""
        host = record.get("host", HOST)
        return _call(record["port"], *args, host=host, credentials=self.credentials)

    def _start_process(self, record: dict) -> None:
        """Run the node's command, limit its CPU, wait until it answers PING (AOF loaded)."""
        command = render_command(
            self.template, record["port"], Path(record["dir"]), record["bus_port"], record["host"]
        )
        log_path = Path(record["dir"]) / "redis.log"
        process = ManagedProcess(
            record["name"], command, log_path, record["port"], host=record["host"]
        )
        record["pid"] = process.start(detached=True).pid
        self.save()
        self._limit_cpu(record)
        self._wait_answers(record)

    def _limit_cpu(self, record: dict) -> None:
        fraction = self.spec.cpu_quota_fraction
        if fraction is None:
            self.cpu_limit = "no CPU limit"
            return
        group = limit_cpu(record["pid"], fraction, _group_name(self.state_dir, record["name"]))
        record["cgroup"] = None if group is None else str(group)
        if group is None:
            self.cpu_limit = "no CPU limit (needs root and a cgroup CPU controller)"
        else:
            self.cpu_limit = f"each node limited to {fraction:.0%} of a CPU (cgroup CFS quota)"

    def _wait_answers(self, record: dict, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._call(record, "PING"):
                    return
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.exceptions.ConnectionError:
                if not process_alive(record["pid"]):
                    raise TestbedError(
                        f"{record['name']} exited; see {record['dir']}/redis.log"
                    ) from None
            if time.monotonic() > deadline:
                raise TestbedError(f"{record['name']} does not answer PING after {timeout_s} s")
            time.sleep(0.05)

    def _wait_known(self, records: list[dict]) -> None:
        """Until each node in ``records`` sees every live node, none in handshake."""
        wanted = {r["node_id"] for r in self._live()}

        def missing(record: dict) -> set[str]:
            view = cluster_view(record["port"])
            known = {n.node_id for n in view if not n.flags & {"handshake", "noaddr"}}
            return wanted - known

        self._wait("does not know every node", records, lambda r: not missing(r))

    def _wait_converged(self) -> None:
        """Until every live node says cluster_state:ok and they all agree on the map."""
        live = self._live()

        def ok(record: dict) -> bool:
            info = _call(record["port"], "CLUSTER", "INFO")
            return "cluster_state:ok" in info

        self._wait("has not reached cluster_state:ok", live, ok)
        reference = _topology(cluster_view(live[0]["port"]))
        expected = len(live)

        def agrees(record: dict) -> bool:
            nonlocal reference
            view = _topology(cluster_view(record["port"]))
            if view != reference:
                reference = _topology(cluster_view(live[0]["port"]))
                return False
            return len(view) == expected

        self._wait(f"disagrees with {live[0]['name']} on the slot map", live, agrees)
        self._wait("has no replication link up", live, self._replica_synced)

    def _replica_synced(self, record: dict) -> bool:
        if record["role"] != "replica":
            return True
        with _admin(record["port"]) as connection:
            return connection.info("replication").get("master_link_status") == "up"

    def _wait(self, problem: str, records: list[dict], ready: Callable[[dict], bool]) -> None:
        """Poll ``ready`` on every record until all hold or the spec's deadline passes;
        then a TestbedError names the first node that did not converge."""
        deadline = time.monotonic() + self.spec.converge_timeout_s
        pending = list(records)
        while pending:
            try:
                pending = [r for r in pending if not ready(r)]
            except redis.exceptions.RedisError:
                pass
            if not pending:
                return
            if time.monotonic() > deadline:
                record = pending[0]
                raise TestbedError(
                    f"{record['name']} (port {record['port']}) {problem} after "
                    f"{self.spec.converge_timeout_s:.0f} s; see {record['dir']}/redis.log"
                )
            time.sleep(0.05)

    # --- nodes -------------------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        """Every node started (including stopped ones), in start order."""
        return [NodeInfo(**r) for r in self.records]

    def node(self, name: str) -> NodeInfo:
        return NodeInfo(**self._record(name))

    def seed_nodes(self) -> list[tuple[str, int]]:
        """Host and port of every node whose process runs (what a client starts from)."""
        return [(r["host"], r["port"]) for r in self._live()]

    def start_node(self) -> NodeInfo:
        """A new empty master from the command template, MEET and known to every node
        (the Director's add-server, §5.6; giving it slots is a migration's work)."""
        live = self._live()
        if not live:
            raise TestbedError("no node runs to introduce a new one to")
        record = self.launch_node(f"node-{len(self.records)}", "standby", None)
        self._call(live[0], "CLUSTER", "MEET", record["host"], record["port"], record["bus_port"])
        self._wait_known(self._live())
        return NodeInfo(**record)

    def stop_node(self, name: str, kill: bool = False) -> None:
        """SIGTERM (or SIGKILL) the node's recorded PID and wait until it exited; with a
        ``retire_template``, run it instead (a node on another host), then wait for the
        recorded PID (the command that started it) to end."""
        record = self._record(name)
        pid = record["pid"]
        if self.retire_template and not kill:
            command = render_command(
                self.retire_template, record["port"], Path(record["dir"]),
                record["bus_port"], record["host"],
            )  # fmt: skip
            with open(Path(record["dir"]) / "retire.log", "ab") as log:
                done = subprocess.run(
                    command, stdout=log, stderr=subprocess.STDOUT, timeout=60.0, check=False
                )
            if done.returncode != 0:
                raise TestbedError(
                    f"the retire command of {name} exited {done.returncode}; see "
                    f"{record['dir']}/retire.log"
                )
        if pid is None or not process_alive(pid):
            return
        if kill:
            os.kill(pid, 9)
            while process_alive(pid):
                time.sleep(0.01)
        else:
            stop_pid(pid, timeout_s=30.0)

    def restart_node(self, name: str) -> NodeInfo:
        """Start a stopped node again: same port, folder, AOF and nodes.conf (so the same
        node ID); returns once it answers (its AOF loaded)."""
        record = self._record(name)
        if record["pid"] is not None and process_alive(record["pid"]):
            raise TestbedError(f"{name} still runs (pid {record['pid']})")
        self._start_process(record)
        return NodeInfo(**record)

    def refresh(self) -> list[NodeInfo]:
        """Record every node's role as the cluster sees it now (after a failover, or a
        standby given slots) and return the nodes."""
        for name, (role, master) in roles_in_view(self.nodes(), self.cluster_view()).items():
            if role in ROLES:
                record = self._record(name)
                record["role"], record["master"] = role, master
        self.save()
        return self.nodes()

    def set_role(self, name: str, role: str, master: str | None = None) -> None:
        """Record a node's new role (a standby given slots becomes a master)."""
        if role not in ROLES:
            raise ConfigError("role", f"must be one of {', '.join(ROLES)}")
        record = self._record(name)
        record["role"], record["master"] = role, master
        self.save()

    def cluster_view(self) -> list[ClusterNode]:
        """The cluster as the first live node sees it (slots, flags, migrations)."""
        live = self._live()
        if not live:
            raise TestbedError("no node of the cluster runs")
        return cluster_view(live[0]["port"])

    def live_view(self) -> dict[str, tuple[str, int]]:
        """Each node's role and slot count as the cluster sees it now, by node name
        ({} if no node answers); for the status table."""
        try:
            view = self.cluster_view()
        except (TestbedError, redis.exceptions.RedisError):
            return {}
        slots = {n.node_id: n.slot_count for n in view}
        roles = roles_in_view(self.nodes(), view)
        return {
            name: (role, slots[self._record(name)["node_id"]]) for name, (role, _) in roles.items()
        }

    def _record(self, name: str) -> dict:
        for record in self.records:
            if record["name"] == name:
                return record
        raise TestbedError(f"no node named {name} in {self.state_dir}")

    def _live(self) -> list[dict]:
        return [r for r in self.records if r["pid"] is not None and process_alive(r["pid"])]

    # --- status and teardown -----------------------------------------------------------------
    def running(self) -> bool:
        return bool(self._live())

    def status(self) -> list[dict]:
        """Each recorded process: name, role, pid, port, alive, cgroup."""
        return [
            {
                "name": r["name"], "role": r["role"], "pid": r["pid"], "port": r["port"],
                "alive": r["pid"] is not None and process_alive(r["pid"]),
                "cgroup": r["cgroup"],
            }
            for r in self.records
        ]  # fmt: skip

    def down(self) -> int:
        """Stop every node this testbed started (by PID), then remove their cgroups;
        returns how many were running, once every one has exited."""
        stopped = 0
        for record in self.records:
            pid = record["pid"]
            if pid is not None and process_alive(pid):
                stop_pid(pid, timeout_s=30.0)
                stopped += 1
        for record in self.records:
            remove_group(record["cgroup"])
        self.records = []
        if self.state_dir.exists():
            self.save()
        return stopped

    def __enter__(self) -> RedisClusterTestbed:
        return self

    def __exit__(self, *exc_info) -> None:
        self.down()

    # --- the state file ----------------------------------------------------------------------
    def save(self) -> None:
        data = {
            "engine": "redis-cluster",
            "spec": asdict(self.spec),
            "template": self.template,
            "cpu_limit": self.cpu_limit,
            "nodes": self.records,
            "host": self.host,
            "retire_template": self.retire_template,
        }
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_dir / STATE_FILE)

    @classmethod
    def load(cls, state_dir: Path) -> RedisClusterTestbed | None:
        """The testbed recorded in ``<state_dir>/redis-cluster.json``, or None."""
        path = Path(state_dir) / STATE_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        spec = ClusterSpec(**data["spec"])
        return cls(
            spec, Path(state_dir), data["template"], list(data["nodes"]), data["cpu_limit"],
            host=data.get("host", HOST), retire_template=data.get("retire_template"),
        )  # fmt: skip
