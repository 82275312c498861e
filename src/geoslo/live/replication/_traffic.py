"""The two sites of Dürango et al.'s setting (CDC 2016, §III) as real systems on one
machine: the primary site's namespace (``tx``, whose egress HTB shapes) and the backup
site's (``rx``), joined by a veth pair (``NamespacePair``).

In ``tx``: the application's Redis server (port 6379, values of ``value_bytes``), and the
Redis master (port 6380) that the application's writer fills. In ``rx``: the master's
replica (6380, ``replicaof`` across the link), an rsync daemon (873) that receives the
VM images, and the application's reader. Every server asks for a password (a random one,
kept in files readable by root only). The HTB classes tell the streams apart by port, as
what they are: replies from the application's server (source port 6379), the master's
stream to its replica (source port 6380), and images to the rsync daemon (destination
port 873).

``TrafficSites.up(state_dir)`` starts the servers; ``start_load`` the reader and the
writer on a rate schedule; ``down()`` stops every process it started (by PID) and deletes
the namespaces.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from geoslo.errors import TestbedError
from geoslo.live._netns import RX_IP, TX_IP, NamespacePair, command_in, wait_listening_in
from geoslo.live._processes import ManagedProcess, find_program, python_module_command
from geoslo.live.replication._htb import PortMatch
from geoslo.live.replication._load import LoadConfig
from geoslo.live.replication._sources import RedisAddress

__all__ = ["TrafficSites", "STREAM_MATCHES", "APPLICATION_PORT", "REPLICATION_PORT", "RSYNC_PORT"]

APPLICATION_PORT, REPLICATION_PORT, RSYNC_PORT = 6379, 6380, 873
STREAM_MATCHES = (
    PortMatch("sport", APPLICATION_PORT),
    PortMatch("sport", REPLICATION_PORT),
    PortMatch("dport", RSYNC_PORT),
)
RSYNC_USER, RSYNC_MODULE = "geoslo", "images"
_KEYS = 16


@dataclass
class TrafficSites:
    """The namespaces, the servers and the load processes this process started."""

    pair: NamespacePair
    state_dir: Path
    password: str
    value_bytes: int
    processes: list[ManagedProcess]

    @classmethod
    def up(cls, state_dir: Path, prefix: str = "geoslo", value_bytes: int = 65_536) -> TrafficSites:
        """Namespaces, the three Redis servers (replica in sync) and the rsync daemon."""
        state_dir = Path(state_dir)
        pair = NamespacePair.create(state_dir, prefix)
        sites = cls(pair, state_dir, secrets.token_hex(16), value_bytes, [])
        try:
            sites._start_servers()
        except BaseException:
            sites.down()
            raise
        return sites

    # --- addresses as the controller reaches them --------------------------------------
    @property
    def application(self) -> RedisAddress:
        return RedisAddress(TX_IP, APPLICATION_PORT, self.password, self.pair.tx)

    @property
    def master(self) -> RedisAddress:
        return RedisAddress("127.0.0.1", REPLICATION_PORT, self.password, self.pair.tx)

    @property
    def replica(self) -> RedisAddress:
        return RedisAddress("127.0.0.1", REPLICATION_PORT, self.password, self.pair.rx)

    @property
    def image_destination(self) -> str:
        return f"rsync://{RSYNC_USER}@{RX_IP}:{RSYNC_PORT}/{RSYNC_MODULE}"

    @property
    def rsync_password_file(self) -> Path:
        return self.state_dir / "rsync.password"

    @property
    def spool_dir(self) -> Path:
        return self.state_dir / "spool"

    @property
    def backup_dir(self) -> Path:
        return self.state_dir / "backup-images"

    # --- starting ------------------------------------------------------------------------
    def _secret_file(self, name: str, text: str) -> Path:
        """A file readable by its owner only, from its first byte."""
        path = self.state_dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        with os.fdopen(fd, "w") as out:
            out.write(text)
        return path

    def _start_servers(self) -> None:
        config = self._secret_file(
            "redis-auth.conf", f"requirepass {self.password}\nmasterauth {self.password}\n"
        )
        redis_server = find_program("redis-server", "redis-server")
        common = ["--save", "", "--appendonly", "no", "--dir", str(self.state_dir)]
        self._start(self.pair.tx, TX_IP, APPLICATION_PORT, "application", [
            redis_server, str(config), "--port", str(APPLICATION_PORT),
            "--bind", f"{TX_IP} 127.0.0.1", "--dbfilename", "application.rdb", *common,
        ])  # fmt: skip
        # the master keeps whatever its replica lags (no output buffer limit), and syncs
        # a new replica from memory
        self._start(self.pair.tx, TX_IP, REPLICATION_PORT, "master", [
            redis_server, str(config), "--port", str(REPLICATION_PORT),
            "--bind", f"{TX_IP} 127.0.0.1", "--dbfilename", "master.rdb",
            "--client-output-buffer-limit", "replica 0 0 0", "--repl-diskless-sync", "yes",
            "--repl-diskless-sync-delay", "0", *common,
        ])  # fmt: skip
        self._start(self.pair.rx, RX_IP, REPLICATION_PORT, "replica", [
            redis_server, str(config), "--port", str(REPLICATION_PORT),
            "--bind", f"{RX_IP} 127.0.0.1", "--dbfilename", "replica.rdb",
            "--replicaof", TX_IP, str(REPLICATION_PORT), *common,
        ])  # fmt: skip
        self._start_rsync_daemon()
        self._fill_application()
        self._wait_in_sync()

    def _start(self, namespace: str, host: str, port: int, name: str, argv: list[str]) -> None:
        process = ManagedProcess(name, command_in(namespace, argv), self.state_dir / f"{name}.log")
        self.processes.append(process.start())
        try:
            wait_listening_in(namespace, host, port, 15.0, process.pid)
        except TestbedError as error:
            raise TestbedError(f"{name}: {error}; see {process.log_path}") from None

    def _start_rsync_daemon(self) -> None:
        self.backup_dir.mkdir(parents=True, exist_ok=True)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        secrets_file = self._secret_file("rsyncd.secrets", f"{RSYNC_USER}:{self.password}\n")
        self._secret_file("rsync.password", self.password + "\n")
        conf = self.state_dir / "rsyncd.conf"
        conf.write_text(
            "use chroot = no\n"
            f"[{RSYNC_MODULE}]\n"
            f"path = {self.backup_dir}\n"
            "read only = no\nuid = root\ngid = root\n"
            f"auth users = {RSYNC_USER}\nsecrets file = {secrets_file}\n"
        )
        rsync = find_program("rsync", "rsync")
        self._start(self.pair.rx, RX_IP, RSYNC_PORT, "rsyncd", [
            rsync, "--daemon", "--no-detach", f"--config={conf}", f"--address={RX_IP}",
            f"--port={RSYNC_PORT}", f"--log-file={self.state_dir / 'rsyncd.log'}",
        ])  # fmt: skip

    def _fill_application(self) -> None:
        value = bytes(range(256)) * (self.value_bytes // 256) + b"x" * (self.value_bytes % 256)
        client = self.application.client()
        try:
            for i in range(_KEYS):
                client.set(f"value:{i}", value)
        finally:
            client.close()

    def _wait_in_sync(self, timeout_s: float = 20.0) -> None:
        client = self.replica.client()
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if client.info("replication").get("master_link_status") == "up":
                    return
                time.sleep(0.1)
        except redis.RedisError as error:
            raise TestbedError(f"replica: {error}") from None
        finally:
            client.close()
        raise TestbedError(f"the replica did not sync with its master in {timeout_s:.0f} s")

    def start_load(
        self, application_mbps, replication_mbps, level_period_s: float, start_epoch_s: float
    ) -> None:
        """The application's reader (in rx) and writer (in tx), from ``start_epoch_s``."""
        for role, namespace, host, port, levels in (
            ("reader", self.pair.rx, TX_IP, APPLICATION_PORT, application_mbps),
            ("writer", self.pair.tx, "127.0.0.1", REPLICATION_PORT, replication_mbps),
        ):
            config = LoadConfig(
                role, host, port, self.password, tuple(levels), level_period_s, start_epoch_s,
                self.value_bytes, _KEYS, str(self.state_dir / f"{role}-requests.json"),
            )  # fmt: skip
            path = self.state_dir / f"{role}.json"
            config.write(path)
            argv = python_module_command("geoslo.live", "replication-load", str(path))
            process = ManagedProcess(
                role, command_in(namespace, argv), self.state_dir / f"{role}.log"
            )
            self.processes.append(process.start())

    def stop_load(self) -> dict[str, list]:
        """Stop the reader and the writer (SIGTERM, they write their logs); their logs."""
        logs = {}
        for process in [p for p in self.processes if p.name in ("reader", "writer")]:
            process.stop()
            self.processes.remove(process)
            path = self.state_dir / f"{process.name}-requests.json"
            try:
                logs[process.name] = json.loads(path.read_text())
            except (OSError, ValueError):  # killed before it wrote its log
                logs[process.name] = []
        return logs

    def down(self) -> None:
        """Stop every process started here (the load first), delete the namespaces and the
        images (random bytes, made here); the logs stay. Each step runs whatever the one
        before it did."""
        try:
            self.stop_load()
        finally:
            try:
                for process in reversed(self.processes):
                    process.stop()
                self.processes.clear()
            finally:
                self.pair.delete()
                for folder in (self.spool_dir, self.backup_dir):
                    shutil.rmtree(folder, ignore_errors=True)
