"""One network namespace per site, each joined to the root namespace by its own veth pair.

A client site, or a storage region, is a namespace of its own (CosTLO, NSDI 2015, §5:
clients in one region reach storage in others over the WAN). Servers run inside a site
(``command_in``); the WAN delay between sites comes from a user-space injector in the root
namespace (toxiproxy, ``_toxiproxy.py``) that forwards to ``address(site)``.

``SiteNamespaces.create(state_dir, sites)`` gives each site a /30 of 10.80.0.0/16 (no
other geoslo code uses it), the i-th one: a namespace ``<prefix>-<pid>-<i>`` and a veth
pair, ``g80r<i>`` in the root namespace (first address) and ``g80s<i>`` in the site
(second address). They are recorded in ``<state_dir>/sites-netns.json`` before they are
built, so ``recorded_in(state_dir).delete()`` removes exactly those after a crash. The
/30s are chosen under a machine-wide lock among those no root interface holds, so
processes creating sites at the same time never share a subnet or a device name. Sites
have no default route: a site reaches the root namespace's end of its own link only (no
site-to-site traffic).
"""

from __future__ import annotations

import fcntl
import ipaddress
import itertools
import json
import os
import re
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._netns import _ip, cannot_run_reason, delete_namespaces, run_in

__all__ = [
    "Site",
    "SiteNamespaces",
    "STATE_FILE",
    "SITES_NETWORK",
    "cannot_run_reason",
    "choose_network",
    "echo_server_command",
    "echo_rtts_ms",
    "echo_connection",
    "rtts_on",
]

STATE_FILE = "sites-netns.json"
SITES_NETWORK = ipaddress.ip_network("10.80.0.0/16")
_LOCK_FILE = Path(tempfile.gettempdir()) / "geoslo-sites-netns.lock"
_SITE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Site:
    """A site's namespace, its veth ends and their addresses."""

    name: str
    namespace: str
    root_dev: str
    site_dev: str
    root_ip: str
    site_ip: str


def free_subnets(used: set[ipaddress.IPv4Address], count: int) -> list[ipaddress.IPv4Network]:
    """The first ``count`` /30s of SITES_NETWORK holding none of the ``used`` addresses."""
    base = int(SITES_NETWORK.network_address)
    taken = {(int(a) - base) // 4 for a in used if a in SITES_NETWORK}
    free = (i for i in range(SITES_NETWORK.num_addresses // 4) if i not in taken)
    chosen = [
        ipaddress.ip_network(f"{ipaddress.ip_address(base + 4 * i)}/30")
        for i in itertools.islice(free, count)
    ]
    if len(chosen) < count:
        raise TestbedError(f"no {count} free /30 subnets left in {SITES_NETWORK}")
    return chosen


def _root_addresses() -> set[ipaddress.IPv4Address]:
    """Every IPv4 address an interface of the root namespace holds."""
    out = run_in(None, [_ip(), "-o", "-4", "addr", "show"])
    found = re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", out)
    return {ipaddress.ip_address(a) for a in found}


@dataclass(frozen=True)
class SiteNamespaces:
    """The sites' namespaces this process created, and where they are recorded."""

    sites: tuple[Site, ...]
    state_dir: str

    @classmethod
    def create(
        cls, state_dir: Path, site_names: list[str], prefix: str = "geoslo-site"
    ) -> SiteNamespaces:
        """One namespace per site, joined to the root namespace and recorded."""
        if len(set(site_names)) != len(site_names) or not site_names:
            raise ValueError(f"site names must be distinct and non-empty: {site_names}")
        for name in site_names:
            if not _SITE_NAME.match(name):
                raise ValueError(f"site name {name!r}: letters, digits, '_', '.', '-' only")
        pid = os.getpid()
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        with open(_LOCK_FILE, "a") as lock:  # subnets are chosen and taken atomically
            fcntl.flock(lock, fcntl.LOCK_EX)
            subnets = free_subnets(_root_addresses(), len(site_names))
            sites = tuple(
                _site(name, subnet, prefix, pid)
                for name, subnet in zip(site_names, subnets, strict=True)
            )
            made = cls(sites, str(state_dir))
            made._record()
            try:
                for site in sites:
                    _build(site)
            except BaseException:
                made.delete()
                raise
        return made

    def site(self, name: str) -> Site:
        for site in self.sites:
            if site.name == name:
                return site
        raise KeyError(f"no site {name!r}; sites: {[s.name for s in self.sites]}")

    def address(self, name: str) -> str:
        """The site's own address (its servers listen there; reachable from the root)."""
        return self.site(name).site_ip

    def namespace(self, name: str) -> str:
        return self.site(name).namespace

    def command_in(self, name: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the site's namespace (``ip netns exec`` execs it: the
        started process's PID is the command's own)."""
        return [_ip(), "netns", "exec", self.namespace(name), *argv]

    def wait_listening(self, name: str, port: int, timeout_s: float = 10.0) -> None:
        """Block until something inside the site accepts on ``address(name):port``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.address(name), port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise TestbedError(f"nothing listens on {self.address(name)}:{port} in site {name}")

    def _record(self) -> None:
        data = {"state_dir": self.state_dir, "sites": [asdict(s) for s in self.sites]}
        (Path(self.state_dir) / STATE_FILE).write_text(json.dumps(data, indent=1))

    def delete(self, timeout_s: float = 5.0) -> None:
        """Remove the namespaces recorded here and wait until their veth pairs are gone
        (the kernel destroys them asynchronously); idempotent."""
        delete_namespaces(site.namespace for site in self.sites)
        deadline = time.monotonic() + timeout_s
        while (left := self._root_devs_left()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for dev in left:  # a crash between `link add` and the namespace, or a slow kernel
            try:
                run_in(None, [_ip(), "link", "delete", dev])
            except TestbedError:
                if dev in self._root_devs_left():
                    raise
        path = Path(self.state_dir) / STATE_FILE
        if path.exists():
            path.unlink()

    def _root_devs_left(self) -> list[str]:
        links = run_in(None, [_ip(), "-o", "link", "show"])
        present = set(re.findall(r"^\d+: ([^:@\s]+)", links, re.MULTILINE))
        return [s.root_dev for s in self.sites if s.root_dev in present]

    @classmethod
    def recorded_in(cls, state_dir: Path) -> SiteNamespaces | None:
        """The sites a state folder records (to delete them after a crash)."""
        path = Path(state_dir) / STATE_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(tuple(Site(**s) for s in data["sites"]), str(state_dir))


def choose_network(network: str, also_needs=None) -> tuple[str, str]:
    """("namespaces" or "loopback", why): namespaces where asked for or possible ("auto"),
    loopback otherwise. ``also_needs()``, asked only when namespaces can be made, says what
    else the namespaces form lacks here (None when nothing)."""
    if network not in ("auto", "namespaces", "loopback"):
        raise TestbedError(f"network {network!r}: use auto, namespaces or loopback")
    if network == "loopback":
        return network, "asked for"
    reason = cannot_run_reason() or (also_needs() if also_needs else None)
    if reason is None:
        return "namespaces", "root: sites in network namespaces"
    if network == "namespaces":
        raise TestbedError(f"cannot make network namespaces here: {reason}")
    return "loopback", reason


def _site(name: str, subnet: ipaddress.IPv4Network, prefix: str, pid: int) -> Site:
    """A site on the ``index``-th /30: names from the pid and the index, which no other
    interface holds while the lock is held (so two sets in one process differ too)."""
    index = (int(subnet.network_address) - int(SITES_NETWORK.network_address)) // 4
    first = subnet.network_address
    return Site(
        name, f"{prefix}-{pid}-{index}", f"g80r{index}", f"g80s{index}",
        str(first + 1), str(first + 2),
    )  # fmt: skip


def _build(site: Site) -> None:
    ip = _ip()
    run_in(None, [ip, "netns", "add", site.namespace])
    run_in(site.namespace, [ip, "link", "set", "lo", "up"])
    run_in(
        None,
        [ip, "link", "add", site.root_dev, "type", "veth",
         "peer", "name", site.site_dev, "netns", site.namespace],
    )  # fmt: skip
    run_in(None, [ip, "addr", "add", f"{site.root_ip}/30", "dev", site.root_dev])
    run_in(None, [ip, "link", "set", site.root_dev, "up"])
    run_in(site.namespace, [ip, "addr", "add", f"{site.site_ip}/30", "dev", site.site_dev])
    run_in(site.namespace, [ip, "link", "set", site.site_dev, "up"])


_ECHO_SOURCE = """
import socket, sys, threading
def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
listener = socket.create_server((sys.argv[2], int(sys.argv[1])), backlog=64)
while True:
    threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()
"""


def echo_server_command(port: int, host: str = "0.0.0.0") -> list[str]:
    """A TCP echo server on ``host:port`` (every address of a site by default): the probe
    that measures a path's RTT. Start it in a site with ``command_in``."""
    return [sys.executable, "-c", _ECHO_SOURCE, str(port), host]


def echo_rtts_ms(
    port: int, count: int, payload_bytes: int = 64, host: str = "127.0.0.1"
) -> list[float]:
    """``count`` request/response RTTs (ms) of ``payload_bytes`` messages, one at a time on
    one new connection (Nagle off), to an echo server at ``host:port``."""
    with echo_connection(host, port) as conn:
        return rtts_on(conn, count, payload_bytes)


def echo_connection(host: str, port: int) -> socket.socket:
    conn = socket.create_connection((host, port), timeout=30.0)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def rtts_on(conn: socket.socket, count: int, payload_bytes: int = 64) -> list[float]:
    """``count`` RTTs (ms) of ``payload_bytes`` messages on an open echo connection."""
    message = bytes(payload_bytes)
    rtts_ms = []
    for _ in range(count):
        started = time.perf_counter()
        conn.sendall(message)
        got = 0
        while got < payload_bytes:
            chunk = conn.recv(payload_bytes - got)
            if not chunk:
                raise TestbedError("the echo path closed")
            got += len(chunk)
        rtts_ms.append((time.perf_counter() - started) * 1e3)
    return rtts_ms
