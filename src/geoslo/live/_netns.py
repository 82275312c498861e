"""Two network namespaces joined by a veth pair: the sending site and the backup site of
Dürango et al.'s link (CDC 2016, §III), on one machine.

``NamespacePair.create(state_dir)`` makes ``geoslo-tx-<pid>`` and ``geoslo-rx-<pid>``,
records them in ``<state_dir>/egress-netns.json`` and ``delete()`` removes exactly those
(the veth goes with them). ``socket_in(namespace, ...)`` creates a socket inside a
namespace from this process: a short-lived thread enters it (``setns``), makes the
socket and leaves; the socket stays in that namespace wherever it is used.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from geoslo.errors import DependencyError, TestbedError
from geoslo.live._processes import find_program, process_alive

__all__ = [
    "NamespacePair",
    "STATE_FILE",
    "cannot_run_reason",
    "command_in",
    "run_in",
    "socket_in",
    "wait_listening_in",
]

STATE_FILE = "egress-netns.json"
_CLONE_NEWNET = 0x40000000
TX_IP, RX_IP = "10.77.0.1", "10.77.0.2"


def _ip() -> str:
    return find_program("ip", "iproute2")


def run_in(namespace: str | None, args: list[str], stdin: str | None = None) -> str:
    """Run a command (in ``namespace`` if given); its output, or TestbedError."""
    command = ([_ip(), "netns", "exec", namespace] if namespace else []) + args
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TestbedError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class NamespacePair:
    """The sender's and the receiver's namespaces and the veth ends inside them."""

    tx: str
    rx: str
    tx_dev: str
    rx_dev: str
    state_dir: str

    @classmethod
    def create(cls, state_dir: Path, prefix: str = "geoslo") -> NamespacePair:
        """``<prefix>-tx-<pid>`` and ``<prefix>-rx-<pid>``, joined and recorded."""
        pid = os.getpid()
        tx, rx = f"{prefix}-tx-{pid}", f"{prefix}-rx-{pid}"
        pair = cls(tx, rx, f"gtx{pid}", f"grx{pid}", str(state_dir))
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        pair._record()
        try:
            pair._build()
        except BaseException:
            pair.delete()
            raise
        return pair

    def _build(self) -> None:
        ip = _ip()
        for ns in (self.tx, self.rx):
            run_in(None, [ip, "netns", "add", ns])
            run_in(ns, [ip, "link", "set", "lo", "up"])
        run_in(
            None,
            [
                ip,
                "link",
                "add",
                self.tx_dev,
                "netns",
                self.tx,
                "type",
                "veth",
                "peer",
                "name",
                self.rx_dev,
                "netns",
                self.rx,
            ],
        )
        for ns, dev, address in ((self.tx, self.tx_dev, TX_IP), (self.rx, self.rx_dev, RX_IP)):
            run_in(ns, [ip, "addr", "add", f"{address}/30", "dev", dev])
            run_in(ns, [ip, "link", "set", dev, "up"])

    def _record(self) -> None:
        (Path(self.state_dir) / STATE_FILE).write_text(json.dumps(asdict(self), indent=1))

    def delete(self) -> None:
        """Remove the namespaces this pair created (idempotent)."""
        delete_namespaces((self.tx, self.rx))
        path = Path(self.state_dir) / STATE_FILE
        if path.exists():
            path.unlink()

    @classmethod
    def recorded_in(cls, state_dir: Path) -> NamespacePair | None:
        """The pair a state folder records (to delete it after a crash)."""
        path = Path(state_dir) / STATE_FILE
        return cls(**json.loads(path.read_text())) if path.exists() else None


def namespaces() -> set[str]:
    """The names of the network namespaces that exist now (``ip netns list``)."""
    out = run_in(None, [_ip(), "netns", "list"])
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def delete_namespaces(names) -> None:
    """Delete those of ``names`` that exist (idempotent)."""
    existing = namespaces()
    for ns in names:
        if ns in existing:
            run_in(None, [_ip(), "netns", "delete", ns])


def socket_in(namespace: str, family=socket.AF_INET, kind=socket.SOCK_STREAM) -> socket.socket:
    """A socket created inside ``namespace`` (needs CAP_SYS_ADMIN)."""
    made: dict = {}

    def enter_and_make() -> None:
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {namespace} failed")
            finally:
                os.close(fd)
            made["socket"] = socket.socket(family, kind)
        except BaseException as error:  # carried to the caller's thread
            made["error"] = error

    thread = threading.Thread(target=enter_and_make)
    thread.start()
    thread.join()
    if "error" in made:
        raise TestbedError(f"cannot open a socket in {namespace}: {made['error']}")
    return made["socket"]


def command_in(namespace: str, argv: list[str]) -> list[str]:
    """``argv`` run inside ``namespace`` (``ip netns exec`` execs it: the started process's
    PID is the command's own)."""
    return [_ip(), "netns", "exec", namespace, *argv]


def wait_listening_in(
    namespace: str, host: str, port: int, timeout_s: float = 10.0, pid: int | None = None
) -> None:
    """Block until something accepts on ``host:port`` as seen from inside ``namespace``
    (or the process ``pid`` exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock = socket_in(namespace)
        sock.settimeout(0.2)
        try:
            sock.connect((host, port))
            return
        except OSError:
            if pid is not None and not process_alive(pid):
                raise TestbedError(f"process {pid} exited before listening on {port}") from None
            time.sleep(0.05)
        finally:
            sock.close()
    raise TestbedError(f"nothing listens on {host}:{port} in {namespace} after {timeout_s:.0f} s")


def cannot_run_reason() -> str | None:
    """Why this machine cannot run the live link (None if it can): root, iproute2, network
    namespaces and the HTB qdisc are needed."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    try:
        ip, tc = (
            find_program("ip", "iproute2", install=False),
            find_program("tc", "iproute2", install=False),
        )
    except DependencyError as error:
        return str(error)
    probe = f"geoslo-probe-{os.getpid()}-{threading.get_native_id()}"  # threads probe at once
    try:
        run_in(None, [ip, "netns", "add", probe])
        try:
            run_in(probe, [tc, "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"])
        finally:
            run_in(None, [ip, "netns", "delete", probe])
    except TestbedError as error:
        return f"network namespaces or HTB unavailable: {error}"
    return None
