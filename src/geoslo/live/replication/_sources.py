"""Each stream's backlog, read from the system that holds it (Dürango et al., CDC 2016,
§III: the application's, the replication service's and the VM images' data waiting at
the sending site), with what arrived and what the link delivered:

* **application** (a Redis server answering reads from the other site): waiting are the
  replies in the server's output buffers (``CLIENT LIST``: ``omem`` + ``obl`` of the
  clients across the link) and in its sockets (Send-Q); arrived is what the server
  produced (``INFO stats``: ``total_net_output_bytes``, plus the change in its buffers);
* **replication** (a Redis master and its replica at the other site): waiting is the
  master's ``master_repl_offset`` minus what the replica has read
  (``slave_read_repl_offset``); arrived is the master's offset's growth;
* **VM images**: files in a spool folder copied one at a time by rsync (``ImageCopier``);
  waiting are the bytes of the images not yet acknowledged by the other site.

What a stream sent is what the receiver acknowledged on its sockets (``_sockets.py``), so
a backlog's change and ``arrived - sent`` come from different counters (the buffer
dynamics, eq. (3), can be checked against them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from geoslo.errors import TestbedError
from geoslo.live._netns import socket_in
from geoslo.live._processes import find_program
from geoslo.live.replication._sockets import address_ip, crosses

__all__ = ["RedisAddress", "ApplicationStore", "ReplicatedStore", "ImageCopier", "CopiedImage"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RedisAddress:
    """A Redis server as reached from the controller (from inside ``namespace`` if given)."""

    host: str
    port: int
    password: str | None = None
    namespace: str | None = None

    def client(self) -> redis.Redis:
        pool = redis.ConnectionPool(
            connection_class=_NamespaceConnection,
            namespace=self.namespace,
            host=self.host,
            port=self.port,
            password=self.password,
            socket_timeout=5.0,
            socket_connect_timeout=5.0,
        )
        return redis.Redis.from_pool(pool)  # its close() closes the pool's sockets too


class _NamespaceConnection(redis.connection.Connection):
    """redis-py's connection, its socket made inside a network namespace when one is named."""

    def __init__(self, *args, namespace: str | None = None, **kwargs) -> None:
        self.namespace = namespace
        super().__init__(*args, **kwargs)

    def _connect(self):
        if self.namespace is None:
            return super()._connect()
        sock = socket_in(self.namespace)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.socket_connect_timeout)
        try:
            sock.connect((self.host, self.port))
        except OSError:
            sock.close()
            raise
        sock.settimeout(self.socket_timeout)
        return sock


def _client_crosses(client: dict) -> bool:
    """A client of ``CLIENT LIST`` at another host (``addr`` and ``laddr`` are ip:port)."""
    peer, local = (address_ip(client.get(k, "").rsplit(":", 1)[0]) for k in ("addr", "laddr"))
    return crosses(local, peer)


class ApplicationStore:
    """The application's server: replies waiting in its buffers, and what it produced."""

    def __init__(self, address: RedisAddress) -> None:
        self.address = address
        self._redis = address.client()

    def read(self) -> tuple[float, float]:
        """(bytes waiting in the server's output buffers for clients across the link, bytes
        produced so far: written to sockets plus waiting in those buffers)."""
        try:
            clients = self._redis.client_list(_type="normal")
            written = float(self._redis.info("stats")["total_net_output_bytes"])
        except redis.RedisError as error:
            raise TestbedError(
                f"application store {self.address.host}:{self.address.port}: {error}"
            ) from None
        buffered = sum(int(c["omem"]) + int(c["obl"]) for c in clients if _client_crosses(c))
        return float(buffered), written + buffered

    def close(self) -> None:
        self._redis.close()


class ReplicatedStore:
    """The replication service: a master here and its replica at the other site."""

    def __init__(self, master: RedisAddress, replica: RedisAddress) -> None:
        self.master, self.replica = master, replica
        self._master, self._replica = master.client(), replica.client()

    def read(self) -> tuple[float, float]:
        """(bytes of the stream the replica has not yet read, the master's offset)."""
        try:
            replica = self._replica.info("replication")
            offset = float(self._master.info("replication")["master_repl_offset"])
        except redis.RedisError as error:
            raise TestbedError(f"replicated store: {error}") from None
        if replica.get("master_link_status") != "up":
            raise TestbedError(
                f"the replica at {self.replica.host}:{self.replica.port} is not in sync"
            )
        read = float(replica.get("slave_read_repl_offset", replica["slave_repl_offset"]))
        return max(offset - read, 0.0), offset

    def close(self) -> None:
        self._master.close()
        self._replica.close()


@dataclass
class CopiedImage:
    """One VM image: its file, size, when it arrived in the spool and when its copy ended
    (epoch seconds), and the most of it the backup has acknowledged so far."""

    name: str
    size_bytes: int
    created_s: float  # the file's modification time (epoch seconds)
    done_s: float | None = None  # epoch seconds; None while waiting or copying
    acknowledged_bytes: int = 0


@dataclass
class ImageCopier:
    """Copies each file that appears in ``spool_dir`` to ``destination`` (an rsync URL or
    ``host:path``), one at a time, oldest first, and then moves it into the spool's
    ``.copied`` folder (so a restart does not copy it again); a file must be renamed into
    the spool when complete (files starting with '.' are skipped). Runs rsync in
    ``namespace`` when given; ``password_file`` holds an rsync daemon's password.

    ``lock`` orders the copier's bookkeeping (on the event loop) against a reading (in a
    worker thread, ``account``): hold it across reading the sockets and ``account``."""

    spool_dir: Path
    destination: str
    namespace: str | None = None
    password_file: Path | None = None
    timeout_s: float = 300.0
    images: list[CopiedImage] = field(default_factory=list)
    failures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _task: asyncio.Task | None = None
    _rsync: str | None = None

    def scan(self) -> None:
        """Take in the files that arrived since the last scan (call with ``lock`` held)."""
        known = {image.name for image in self.images}
        new = []
        for entry in os.scandir(self.spool_dir):
            if entry.is_file() and not entry.name.startswith(".") and entry.name not in known:
                stat = entry.stat()
                new.append(CopiedImage(entry.name, stat.st_size, stat.st_mtime))
        self.images += sorted(new, key=lambda image: (image.created_s, image.name))

    def account(self, acknowledged_now: int) -> tuple[int, int]:
        """(bytes of every image that arrived, bytes copied: the finished images plus the
        copy in progress as acknowledged, never less than acknowledged before: a closing
        connection leaves the sockets before its copy is marked done). With ``lock`` held,
        ``acknowledged_now`` read under it."""
        self.scan()
        arrived = sum(image.size_bytes for image in self.images)
        copied = sum(image.size_bytes for image in self.images if image.done_s is not None)
        waiting = self.waiting
        if waiting:
            current = waiting[0]
            seen = max(current.acknowledged_bytes, acknowledged_now)
            current.acknowledged_bytes = min(seen, current.size_bytes)
            copied += current.acknowledged_bytes
        return arrived, copied

    @property
    def waiting(self) -> list[CopiedImage]:
        return [image for image in self.images if image.done_s is None]

    def start(self) -> None:
        """Find rsync (a TestbedError now if it cannot be had) and start copying."""
        self._rsync = find_program("rsync", "rsync")
        (self.spool_dir / ".copied").mkdir(exist_ok=True)
        self._task = asyncio.get_running_loop().create_task(self._copy_forever())

    def check(self) -> None:
        """Raise if the copying task ended by itself (its error, as a TestbedError)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            error = self._task.exception()
            raise TestbedError(f"the image copier stopped: {error!r}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _copy_forever(self) -> None:
        while True:
            with self.lock:
                self.scan()
                waiting = self.waiting
            if not waiting:
                await asyncio.sleep(0.05)
                continue
            image = waiting[0]
            if await self._copy(image):
                with self.lock:
                    image.done_s = time.time()
                    image.acknowledged_bytes = image.size_bytes
                done = self.spool_dir / ".copied" / image.name
                os.replace(self.spool_dir / image.name, done)
            else:
                self.failures += 1
                await asyncio.sleep(1.0)  # then the same image again

    async def _copy(self, image: CopiedImage) -> bool:
        rsync = self._rsync or find_program("rsync", "rsync")
        target = self.destination.rstrip("/") + "/" + image.name
        source = str(self.spool_dir / image.name)
        command = [rsync, "--whole-file", f"--timeout={int(self.timeout_s)}", source, target]
        if self.namespace:
            command = [find_program("ip", "iproute2"), "netns", "exec", self.namespace, *command]
        env = dict(os.environ)
        if self.password_file is not None:
            env["RSYNC_PASSWORD"] = Path(self.password_file).read_text().strip()
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            _, stderr = await process.communicate()
        except asyncio.CancelledError:
            process.kill()
            await process.wait()
            raise
        if process.returncode != 0:
            _log.warning("rsync of %s failed (%d): %s", image.name, process.returncode,
                         stderr.decode(errors="replace").strip()[-300:])  # fmt: skip
        return process.returncode == 0
