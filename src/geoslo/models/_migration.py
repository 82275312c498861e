"""Pre-copy live migration of a VM over the WAN (Clark et al., NSDI 2005, the Supercloud's
[22]; Supercloud, SoCC 2016, §2, §5.2): what moving a node costs.

Round 0 sends all memory; each later round sends the pages dirtied while the previous one
was sent (at most the writable working set). Xen stops iterating when a round would leave
fewer than 50 pages, after 29 rounds, or once 3x the memory has been sent; the VM then
pauses for the last round (the downtime) and resumes at the destination.
"""

from __future__ import annotations

from dataclasses import dataclass

from geoslo.errors import InputError

__all__ = ["MigrationCost", "MigrationModel"]

PAGE_BYTES = 4096


@dataclass(frozen=True)
class MigrationCost:
    total_s: float
    downtime_s: float
    wan_bytes: float
    rounds: int


@dataclass(frozen=True)
class MigrationModel:
    """Defaults: §5.1's 1 GB ZooKeeper VMs; ~80 Mbit/s of WAN throughput makes 1 GB take
    about the 100 s §2 quotes; a write-light server dirties 2 MB/s of a 64 MB working set."""

    memory_bytes: float = 1e9
    bandwidth_bytes_per_s: float = 10e6
    dirty_bytes_per_s: float = 2e6
    writable_working_set_bytes: float = 64e6
    rtt_s: float = 0.15
    resume_s: float = 0.1  # device reattach and the ARP announcement (§4.2.2)
    stop_pages: int = 50  # Xen's thresholds (Clark et al. §5)
    max_rounds: int = 29
    max_sent_fraction: float = 3.0

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "bandwidth_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise InputError(name, f"must be > 0, not {getattr(self, name)}")
        for name in ("dirty_bytes_per_s", "writable_working_set_bytes", "rtt_s", "resume_s"):
            if getattr(self, name) < 0:
                raise InputError(name, f"must be >= 0, not {getattr(self, name)}")

    def cost(self) -> MigrationCost:
        """Rounds, total time, downtime and bytes of one migration."""
        to_send = self.memory_bytes
        sent = elapsed = 0.0
        rounds = 0
        while True:
            duration_s = to_send / self.bandwidth_bytes_per_s
            sent += to_send
            elapsed += duration_s
            rounds += 1
            dirtied = min(self.dirty_bytes_per_s * duration_s, self.writable_working_set_bytes)
            converged = dirtied <= self.stop_pages * PAGE_BYTES
            if (
                converged
                or rounds >= self.max_rounds
                or sent >= self.max_sent_fraction * self.memory_bytes
            ):
                break
            to_send = dirtied
        downtime_s = dirtied / self.bandwidth_bytes_per_s + self.rtt_s + self.resume_s
        return MigrationCost(elapsed + downtime_s, downtime_s, sent + dirtied, rounds + 1)
