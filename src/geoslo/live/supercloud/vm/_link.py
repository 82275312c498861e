"""The WAN a migration crosses: two site namespaces and the ZooKeeper testbed's delay proxy
between them (Supercloud, SoCC 2016, §5.2: Virginia and Tokyo; geoslo's emulation in
``geoslo.live.supercloud.zookeeper``), with an HTB cap on the source's side.

The destination's QEMU listens on ``ADDRESS:PORT`` in its own namespace; the proxy listens
on the same address in the source's namespace and forwards every chunk half the RTT later
each way. The kernel has no netem (DESIGN.md), so the delay is the proxy's; the proxy reads
whatever arrives, so the bandwidth cap must sit before it: an HTB class on the source
namespace's loopback, where the migration stream enters the proxy. The proxy buffers
without limit, so the RTT delays the stream but never limits its window (a real WAN's
TCP would need a window of bandwidth x RTT).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._netns import run_in
from geoslo.live._processes import ManagedProcess, find_program, python_module_command
from geoslo.live.supercloud.zookeeper._proxy import ProxyRoute, write_routes
from geoslo.live.supercloud.zookeeper._settings import server_address
from geoslo.live.supercloud.zookeeper._sites import SiteNamespaces

__all__ = ["ADDRESS", "PORT", "SiteWan", "WanLink", "htb_lines", "incoming_address"]

_VM_ID = 200  # the VM's address among the testbed's 10.78.0.N (ZooKeeper's ids stay low)
ADDRESS = server_address(_VM_ID)
PORT = 7100  # the destination's incoming migration
_MIN_BURST_BYTES = 200_000  # above loopback's 64 KB GSO packets, or HTB stalls them


def htb_lines(dev: str, rate_bytes_per_s: float) -> list[str]:
    """``tc -batch`` lines capping everything ``dev`` sends at ``rate_bytes_per_s`` (one
    HTB class, the default; a burst of 5 ms of the rate, at least ``_MIN_BURST_BYTES``)."""
    if not rate_bytes_per_s > 0:
        raise ValueError(f"rate_bytes_per_s must be > 0, not {rate_bytes_per_s}")
    rate_bps = int(rate_bytes_per_s * 8)
    burst = max(int(rate_bytes_per_s * 0.005), _MIN_BURST_BYTES)
    return [
        f"qdisc add dev {dev} root handle 1: htb default 10",
        f"class add dev {dev} parent 1: classid 1:10 htb rate {rate_bps}bit ceil {rate_bps}bit "
        f"burst {burst} cburst {burst}",
    ]


@dataclass
class WanLink:
    """Two sites, ``rtt_ms`` apart through the proxy, the source's side capped at
    ``bandwidth_bytes_per_s`` (0: no cap)."""

    state_dir: Path
    rtt_ms: float
    bandwidth_bytes_per_s: float = 0.0
    sites: tuple[str, str] = ("source", "destination")
    namespaces: SiteNamespaces | None = None
    proxy: ManagedProcess | None = field(default=None, repr=False)

    def open(self) -> WanLink:
        """Create the namespaces, start the proxy, set the cap; undone on failure."""
        try:
            self.namespaces = SiteNamespaces.create(self.state_dir, [_VM_ID], self.sites)
            self._start_proxy()
            if self.bandwidth_bytes_per_s > 0:
                lines = htb_lines("lo", self.bandwidth_bytes_per_s)
                tc = find_program("tc", "iproute2")
                run_in(self.source_ns, [tc, "-batch", "-"], stdin="\n".join(lines) + "\n")
        except BaseException:
            self.close()
            raise
        return self

    @property
    def source_ns(self) -> str:
        return self._ns(self.sites[0])

    @property
    def destination_ns(self) -> str:
        return self._ns(self.sites[1])

    def _ns(self, site: str) -> str:
        if self.namespaces is None:
            raise TestbedError("the WAN link is not open")
        return self.namespaces.of(site)

    def _start_proxy(self) -> None:
        route = ProxyRoute(self.source_ns, self.destination_ns, ADDRESS, PORT)
        config = self.state_dir / "vm-proxy.json"
        write_routes(config, [route], self.rtt_ms)
        self.proxy = start_delay_proxy(config, self.state_dir / "vm-proxy.log")

    def close(self) -> None:
        close_wan(self)


def incoming_address(site_index: int) -> str:
    """Where site ``site_index``'s incoming migrations arrive (10.78.0.200 + index)."""
    return server_address(_VM_ID + site_index)


@dataclass
class SiteWan:
    """Any number of sites for VMs that move between them: site k receives migrations on
    ``incoming_address(k)``, port ``PORT + slot`` (one slot per VM, so that VMs move at
    once), and every other site reaches that address through the delay proxy, each pair
    ``rtt_ms[i][j]`` apart. With ``bandwidth_bytes_per_s`` every site's loopback is
    capped by HTB: what a site sends into the proxy and what the proxy delivers there
    share one cap, the site's link (the proxy buffers without limit, so the cap sits
    where the stream enters it, as in ``WanLink``)."""

    state_dir: Path
    sites: tuple[str, ...]
    rtt_ms: tuple[tuple[float, ...], ...]
    slots: int = 1
    bandwidth_bytes_per_s: float = 0.0
    namespaces: SiteNamespaces | None = None
    proxy: ManagedProcess | None = field(default=None, repr=False)

    def open(self) -> SiteWan:
        """Create the namespaces, start the proxy, set the caps; undone on failure."""
        ids = [_VM_ID + k for k in range(len(self.sites))]
        try:
            self.namespaces = SiteNamespaces.create(self.state_dir, ids, self.sites)
            self._start_proxy()
            if self.bandwidth_bytes_per_s > 0:
                tc = find_program("tc", "iproute2")
                batch = "\n".join(htb_lines("lo", self.bandwidth_bytes_per_s)) + "\n"
                for site in self.sites:
                    run_in(self.namespace(site), [tc, "-batch", "-"], stdin=batch)
        except BaseException:
            self.close()
            raise
        return self

    def namespace(self, site: str) -> str:
        if self.namespaces is None:
            raise TestbedError("the WAN between the sites is not open")
        return self.namespaces.of(site)

    def incoming_uri(self, site: str, slot: int) -> str:
        """QEMU's ``-incoming`` (and the source's ``migrate``) URI for a VM's slot."""
        return f"tcp:{incoming_address(self.sites.index(site))}:{PORT + slot}"

    def _start_proxy(self) -> None:
        routes = [
            ProxyRoute(self.namespace(src), self.namespace(dst), incoming_address(j),
                       PORT + slot, float(self.rtt_ms[i][j]))
            for j, dst in enumerate(self.sites)
            for i, src in enumerate(self.sites)
            if src != dst
            for slot in range(self.slots)
        ]  # fmt: skip
        config = self.state_dir / "vm-wan-proxy.json"
        write_routes(config, routes)
        self.proxy = start_delay_proxy(config, self.state_dir / "vm-wan-proxy.log")

    def close(self) -> None:
        close_wan(self)


def start_delay_proxy(config: Path, log_path: Path) -> ManagedProcess:
    """The delay proxy (``zk-proxy``) on the routes of ``config``, once it says it is ready."""
    ready = config.with_suffix(".ready")
    ready.unlink(missing_ok=True)
    command = python_module_command("geoslo.live", "zk-proxy", str(config))
    proxy = ManagedProcess("vm-wan-proxy", command, log_path)
    proxy.start()
    deadline = time.monotonic() + 30.0
    while not ready.exists():
        if not proxy.alive or time.monotonic() > deadline:
            proxy.stop()
            raise TestbedError(f"the delay proxy did not start; see {log_path}")
        time.sleep(0.05)
    return proxy


def close_wan(wan: WanLink | SiteWan) -> None:
    """Stop ``wan``'s proxy and delete its namespaces (their qdiscs go with them);
    idempotent."""
    if wan.proxy is not None:
        wan.proxy.stop()
        wan.proxy = None
    if wan.namespaces is not None:
        wan.namespaces.delete()
        wan.namespaces = None
