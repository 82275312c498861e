"""Settings and server layout of the live ZooKeeper migration (Supercloud paper, §5.2.2).

§5.2.2's two sites, "virginia" (A) and "tokyo" (B), or any sites with an RTT between
each pair; server id N belongs to site ``sites[(N - 1) % len(sites)]`` and has one global
address 10.78.0.N that every peer and client uses, so dynamic reconfiguration sees one
address. Each site also has a probe address 10.78.1.K (an echo server: §5.1's RTTs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import ConfigError

__all__ = [
    "CLIENT_PORT",
    "ELECTION_PORT",
    "PROXIED_PORTS",
    "QUORUM_PORT",
    "SITE_A",
    "SITE_B",
    "SITES",
    "ZkLiveSettings",
    "server_address",
    "parse_members",
    "probe_address",
    "PROBE_PORT",
]

SITE_A, SITE_B = "virginia", "tokyo"  # §5.2.2: EC2 Virginia and Tokyo
SITES = (SITE_A, SITE_B)
CLIENT_PORT, QUORUM_PORT, ELECTION_PORT = 2181, 2888, 3888
PROXIED_PORTS = (CLIENT_PORT, QUORUM_PORT, ELECTION_PORT)
PROBE_PORT = 7007  # each site's echo server, at its probe address


def server_address(server_id: int) -> str:
    """The one address of server ``server_id``, the same in every site."""
    return f"10.78.0.{server_id}"


def probe_address(site_index: int) -> str:
    """The address of site ``site_index``'s echo server (the target of RTT probes)."""
    return f"10.78.1.{site_index + 1}"


@dataclass(frozen=True)
class ZkLiveSettings:
    """Knobs of one live run. Workload as §5.2.2: one closed-loop client per site, reads
    get a 1 KB znode, writes overwrite a 1 KB znode, read:write 9:1. The paper does not
    give the RTT; 100 ms is a round figure below Virginia–Tokyo's ~150 ms. Times are kept
    short so that a run fits an integration test. ``sites`` with ``site_rtt_ms`` (one
    row per site) set any number of sites; without it, two sites ``rtt_ms`` apart."""

    rtt_ms: float = 100.0
    sites: tuple[str, ...] = SITES
    site_rtt_ms: tuple[tuple[float, ...], ...] | None = None
    read_fraction: float = 0.9
    value_bytes: int = 1024
    threads_per_site: int = 4  # closed-loop workers (one ZooKeeper session each) per site
    # each session connects to a random server, as §5.1's clients did and §3.2's read term
    # assumes; else to its own site's servers first (§5.2: one client per region)
    clients_connect_randomly: bool = False
    tick_time_ms: int = 200
    init_limit_ticks: int = 50
    sync_limit_ticks: int = 20
    session_timeout_s: float = 4.0
    op_timeout_s: float = 2.0
    warmup_s: float = 8.0  # load before the measured window (the servers' JIT warms up)
    baseline_s: float = 6.0  # measured load before the first step
    step_gap_s: float = 5.0  # after a step has a serving leader, before the next
    after_s: float = 10.0  # after the last step
    step_timeout_s: float = 30.0  # a step not done by then fails the run
    server_heap_mb: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rtt_ms < 0:
            raise ConfigError("rtt_ms", f"must be >= 0, got {self.rtt_ms}")
        if not 0.0 <= self.read_fraction <= 1.0:
            raise ConfigError("read_fraction", f"must be in 0..1, got {self.read_fraction}")
        for name in ("value_bytes", "threads_per_site", "tick_time_ms", "server_heap_mb"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("baseline_s", "step_gap_s", "after_s", "op_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, f"must be > 0 seconds, got {getattr(self, name)}")
        if len(self.sites) < 2 or len(set(self.sites)) != len(self.sites):
            raise ConfigError("sites", f"need two or more distinct sites, got {self.sites}")
        rtt = np.asarray(self.site_rtt_ms if self.site_rtt_ms is not None else 0.0, dtype=float)
        n = len(self.sites)
        if self.site_rtt_ms is None and n != 2:
            raise ConfigError("site_rtt_ms", f"give an RTT row for each of the {n} sites")
        if self.site_rtt_ms is not None and (rtt.shape != (n, n) or np.any(rtt < 0)):
            raise ConfigError("site_rtt_ms", f"must be {n} rows of {n} RTTs >= 0 ms")
        if self.sync_limit_ticks * self.tick_time_ms < 4 * float(self.rtt_matrix_ms().max()):
            raise ConfigError(
                "sync_limit_ticks", "sync_limit_ticks * tick_time_ms must be >= 4 RTTs"
            )

    def rtt_matrix_ms(self) -> np.ndarray:
        """The RTT between every pair of sites (ms; 0 within a site)."""
        if self.site_rtt_ms is None:
            return np.array([[0.0, self.rtt_ms], [self.rtt_ms, 0.0]])
        return np.asarray(self.site_rtt_ms, dtype=float)

    def site_of(self, server_id: int) -> str:
        """The site of server ``server_id`` (ids take turns over the sites)."""
        return self.sites[(server_id - 1) % len(self.sites)]


def parse_members(conf: str) -> tuple[int, ...]:
    """The server ids of the ``server.N=...`` lines of a ``conf`` answer (the dynamic
    configuration in force)."""
    ids = []
    for line in conf.splitlines():
        key, _, _value = line.partition("=")
        if key.startswith("server.") and key[len("server.") :].isdigit():
            ids.append(int(key[len("server.") :]))
    return tuple(sorted(ids))
