"""ZooKeeper servers in site namespaces and their four-letter words.

Each server is a ``QuorumPeerMain`` under ``ip netns exec <site>`` with reconfiguration
enabled and a dynamic config file listing the members it starts with (ZooKeeper 3.5+
dynamic reconfiguration, as used by §5.2.2's 2-step and 3-step procedures).
"""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import DependencyError
from geoslo.live._netns import socket_in
from geoslo.live._processes import ManagedProcess, find_program
from geoslo.live.supercloud.zookeeper._settings import (
    CLIENT_PORT,
    ELECTION_PORT,
    QUORUM_PORT,
    ZkLiveSettings,
    server_address,
)

__all__ = [
    "ZOOKEEPER_JAR",
    "ZkServer",
    "four_letter",
    "java_path",
    "server_mode",
    "server_command",
    "start_server",
    "write_server_files",
]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's `zookeeper` package
# zookeeper.jar's manifest names its dependencies; slf4j-simple gives the servers a log.
_LOG_BINDING = Path("/usr/share/java/slf4j-simple.jar")
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


@dataclass(frozen=True)
class ZkServer:
    """One ZooKeeper server: its id, its site and where it listens (by default the
    testbed's address of its id and ZooKeeper's usual ports)."""

    server_id: int
    site: str
    host: str | None = None
    client_port: int = CLIENT_PORT
    quorum_port: int = QUORUM_PORT
    election_port: int = ELECTION_PORT

    @property
    def address(self) -> str:
        return self.host or server_address(self.server_id)

    def config_line(self) -> str:
        """Its line in a dynamic config, also the ``joining`` string of a reconfig."""
        a = self.address
        quorum = f"{a}:{self.quorum_port}:{self.election_port}:participant"
        return f"server.{self.server_id}={quorum};{a}:{self.client_port}"


def java_path() -> str:
    found = shutil.which("java")
    if not found:
        raise DependencyError("java not found; install it with `apt-get install default-jre`")
    return found


def _static_config(data_dir: Path, settings: ZkLiveSettings) -> str:
    return "\n".join(
        [
            f"tickTime={settings.tick_time_ms}",
            f"initLimit={settings.init_limit_ticks}",
            f"syncLimit={settings.sync_limit_ticks}",
            f"dataDir={data_dir}",
            f"dynamicConfigFile={data_dir / 'zoo.cfg.dynamic'}",
            "reconfigEnabled=true",
            "standaloneEnabled=false",
            "skipACL=yes",
            "4lw.commands.whitelist=*",
            "admin.enableServer=false",
            "maxClientCnxns=0",
            "forceSync=no",  # the disk is not under study; the WAN is
            "",
        ]
    )


def write_server_files(
    server_id: int, dynamic_lines: list[str], settings: ZkLiveSettings, state_dir: Path
) -> Path:
    """Data dir, ``myid``, static config and dynamic config (``dynamic_lines``, one
    ``server.N=...`` per member) of server ``server_id``; the static config's path."""
    data_dir = Path(state_dir) / f"zk{server_id}"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "myid").write_text(f"{server_id}\n")
    (data_dir / "zoo.cfg.dynamic").write_text("\n".join(dynamic_lines) + "\n")
    cfg = data_dir / "zoo.cfg"
    cfg.write_text(_static_config(data_dir, settings))
    return cfg


def server_command(namespace: str | None, cfg: Path, settings: ZkLiveSettings) -> list[str]:
    """The server's command line, inside ``namespace`` if one is named."""
    classpath = ":".join(str(p) for p in (ZOOKEEPER_JAR, _LOG_BINDING) if p.exists())
    inside = [find_program("ip", "iproute2"), "netns", "exec", namespace] if namespace else []
    return [
        *inside, java_path(),
        f"-Xmx{settings.server_heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-Djava.net.preferIPv4Stack=true", "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-cp", classpath, _MAIN, str(cfg),
    ]  # fmt: skip


def start_server(
    server: ZkServer,
    namespace: str,
    members: list[ZkServer],
    settings: ZkLiveSettings,
    state_dir: Path,
) -> ManagedProcess:
    """Start ``server`` with a dynamic config of ``members`` (itself included)."""
    lines = [m.config_line() for m in sorted(members, key=lambda m: m.server_id)]
    cfg = write_server_files(server.server_id, lines, settings, state_dir)
    command = server_command(namespace, cfg, settings)
    log = Path(state_dir) / f"zk{server.server_id}.log"
    return ManagedProcess(f"zookeeper-{server.server_id}", command, log).start()


def four_letter(
    namespace: str | None,
    address: str,
    word: str,
    timeout_s: float = 1.0,
    port: int = CLIENT_PORT,
) -> str:
    """The answer of a four-letter word, asked from inside ``namespace`` (None: this
    process's own network); "" if none."""
    sock = socket_in(namespace) if namespace else socket.socket()
    sock.settimeout(timeout_s)
    chunks = []
    try:
        sock.connect((address, port))
        sock.sendall(word.encode())
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError:
        return ""
    finally:
        sock.close()
    return b"".join(chunks).decode(errors="replace")


def server_mode(server: ZkServer, namespace: str | None) -> str | None:
    """ "leader", "follower", ... as ``srvr`` says (asked in-site), or None if not serving."""
    answer = four_letter(namespace, server.address, "srvr", port=server.client_port)
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None
