"""The cluster's Redis processes: started, booted, stopped and killed only by their PIDs."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._processes import (
    ManagedProcess,
    free_ports,
    process_alive,
    redis_server_command,
    stop_pid,
)

__all__ = ["ServerPool", "ServerProcess"]


@dataclass
class ServerProcess:
    """One storage server: a Redis process on its own port."""

    name: str
    port: int
    pid: int | None = None
    ready: bool = False  # booted (§6: a new server serves only after the boot delay)
    dead: bool = False  # its process died (killed) and the router dropped it
    removed: bool = False  # stopped by remove-server
    started_s: float = field(default_factory=time.monotonic)

    @property
    def in_use(self) -> bool:
        return not (self.dead or self.removed)


class ServerPool:
    """Every server this cluster started, by name (a removed name may be started again)."""

    def __init__(self, state_dir: Path, redis_path: str) -> None:
        self.state_dir = Path(state_dir)
        self.redis_path = redis_path
        self.servers: dict[str, ServerProcess] = {}
        self.records: list[dict] = []  # every process started: name, pid, port

    def get(self, name: str | None) -> ServerProcess | None:
        server = self.servers.get(name or "")
        return server if server is not None and server.in_use else None

    def in_use(self) -> list[ServerProcess]:
        return [s for s in self.servers.values() if s.in_use]

    def reserve(self, name: str) -> ServerProcess:
        """Register a server that is about to start (visible, not ready)."""
        if self.get(name) is not None:
            raise TestbedError(f"a server named {name} already runs")
        server = ServerProcess(name, free_ports(1)[0])
        self.servers[name] = server
        return server

    async def launch(self, server: ServerProcess) -> None:
        """Start its Redis process and wait until it accepts connections."""
        command = redis_server_command(self.redis_path, server.name, server.port, self.state_dir)
        process = ManagedProcess(
            server.name, command, self.state_dir / f"{server.name}.log", port=server.port
        )
        await asyncio.to_thread(process.start)
        server.pid = process.pid
        self.records.append({"name": server.name, "pid": process.pid, "port": server.port})

    async def stop(self, name: str) -> None:
        """SIGTERM (then SIGKILL) the server's own PID."""
        server = self.servers[name]
        server.removed = True
        server.ready = False
        if server.pid is not None:
            await asyncio.to_thread(stop_pid, server.pid)

    def kill(self, name: str) -> int:
        """SIGKILL the server's PID (failure injection); the router learns of it only when
        a request or a copy to it fails."""
        server = self.servers[name]
        if server.pid is None or not process_alive(server.pid):
            raise TestbedError(f"{name} does not run")
        os.kill(server.pid, signal.SIGKILL)
        return server.pid

    def mark_dead(self, name: str) -> None:
        server = self.servers.get(name)
        if server is not None:
            server.dead = True
            server.ready = False
