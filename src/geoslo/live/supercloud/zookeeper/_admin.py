"""The operator's ZooKeeper session, opened from inside a site's namespace: it creates the
znodes of the workload and issues §5.2.2's ``reconfig`` calls. Imports kazoo, so it is
imported only when a run starts."""

from __future__ import annotations

import logging
import socket
import time

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import SequentialThreadingHandler

from geoslo.errors import TestbedError
from geoslo.live._netns import socket_in
from geoslo.live.supercloud.zookeeper._ensemble import ZkServer
from geoslo.live.supercloud.zookeeper._settings import ZkLiveSettings

# kazoo logs every dropped connection as a warning; reconfiguration drops them on purpose.
logging.getLogger("kazoo").setLevel(logging.ERROR)

__all__ = [
    "NamespaceHandler",
    "ReconfigRefusedError",
    "admin_client",
    "create_znodes",
    "reconfig",
]


class NamespaceHandler(SequentialThreadingHandler):
    """kazoo's threading handler whose sockets are made inside one namespace."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace

    def create_connection(self, address, hostname=None, timeout=None, **_options):
        sock = socket_in(self.namespace)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def admin_client(
    namespace: str | None,
    servers: list[ZkServer],
    settings: ZkLiveSettings,
    timeout_s: float = 15.0,
    digest: str | None = None,
) -> KazooClient:
    """A started kazoo session from ``namespace`` (None: this process's network) to the
    first of ``servers`` that answers, authenticated as ``digest`` (``user:password``)
    if given."""
    hosts = ",".join(f"{s.address}:{s.client_port}" for s in servers)
    handler = NamespaceHandler(namespace) if namespace else SequentialThreadingHandler()
    client = KazooClient(
        hosts=hosts,
        timeout=settings.session_timeout_s,
        handler=handler,
        auth_data=[("digest", digest)] if digest else None,
        randomize_hosts=False,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.start(timeout=max(1.0, deadline - time.monotonic()))
            return client
        except Exception as error:  # kazoo raises its own timeout type
            client.stop()
            if time.monotonic() >= deadline:
                raise TestbedError(f"no ZooKeeper session to {hosts}: {error}") from None
            time.sleep(0.2)


def create_znodes(
    namespace: str | None, servers: list[ZkServer], settings: ZkLiveSettings, paths: list[str]
) -> None:
    """Create each of ``paths`` holding ``settings.value_bytes`` bytes."""
    client = admin_client(namespace, servers, settings)
    try:
        for path in paths:
            client.create(path, b"x" * settings.value_bytes, makepath=True)
    finally:
        client.stop()
        client.close()


class ReconfigRefusedError(TestbedError):
    """The ensemble refused a reconfig for want of permission: certainly not applied."""


def reconfig(
    namespace: str | None,
    servers: list[ZkServer],
    settings: ZkLiveSettings,
    joining: list[ZkServer],
    leaving: tuple[int, ...],
    digest: str | None = None,
) -> None:
    """One incremental ``reconfig`` call, retried while ZooKeeper refuses it (for example
    while a previous reconfiguration is still in progress) until ``step_timeout_s``; a
    refusal for want of permission is final."""
    join = ",".join(s.config_line() for s in joining) or None
    leave = ",".join(str(i) for i in leaving) or None
    deadline = time.monotonic() + settings.step_timeout_s
    while True:
        client = admin_client(namespace, servers, settings, digest=digest)
        try:
            client.reconfig(joining=join, leaving=leave, new_members=None)
            return
        except NoAuthError:
            raise ReconfigRefusedError(
                f"reconfig join={join} leave={leave}: the ensemble refused it (no "
                "permission: authenticate as its super user, or run it with skipACL=yes)"
            ) from None
        except KazooException as error:
            if time.monotonic() >= deadline:
                raise TestbedError(f"reconfig join={join} leave={leave}: {error!r}") from None
        finally:
            client.stop()
            client.close()
        time.sleep(0.2)
