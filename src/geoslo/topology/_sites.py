"""Sites (datacenters) and the prices of running them and of moving bytes between
them (Kurma §7, §7.2)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from geoslo._checks import non_negative
from geoslo.errors import InputError

__all__ = ["Site", "Prices"]

_BYTES_PER_GB = 1e9


def _check_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Site:
    """One datacenter: the request rate its servers sustain inside the SLO, how many
    servers that is, and what one server costs."""

    name: str
    capacity_rps: float
    # Kurma §7: up to 5 r4.large instances per datacenter.
    servers: int = 5
    # Kurma §7.2: 1 VM costs $0.133/hour.
    vm_price_usd_per_hour: float = 0.133

    def __post_init__(self) -> None:
        _check_name(self.name, "name")
        object.__setattr__(self, "capacity_rps", non_negative(self.capacity_rps, "capacity_rps"))
        servers = self.servers
        if isinstance(servers, bool) or not isinstance(servers, numbers.Integral) or servers < 0:
            raise InputError("servers", f"must be an integer >= 0, got {servers!r}")
        object.__setattr__(self, "servers", int(servers))
        price = non_negative(self.vm_price_usd_per_hour, "vm_price_usd_per_hour")
        object.__setattr__(self, "vm_price_usd_per_hour", price)

    @property
    def capacity_per_server_rps(self) -> float:
        """Capacity of one server (0 for a site without servers)."""
        return self.capacity_rps / self.servers if self.servers else 0.0


@dataclass(frozen=True)
class Prices:
    """Unit prices of Kurma's cost model (§7.2): VMs per hour, inter-datacenter WAN
    traffic per GB, and the measured mean request+response size of a redirect."""

    vm_usd_per_hour: float = 0.133  # §7.2, one r4.large on demand
    wan_usd_per_gb: float = 0.01  # §7.2, inter-datacenter traffic
    bytes_per_request: float = 375  # §7.2, mean request/response size measured

    def __post_init__(self) -> None:
        for field in ("vm_usd_per_hour", "wan_usd_per_gb", "bytes_per_request"):
            object.__setattr__(self, field, non_negative(getattr(self, field), field))

    @property
    def wan_usd_per_request(self) -> float:
        """WAN cost of redirecting one request (GB = 10^9 bytes)."""
        return self.bytes_per_request * self.wan_usd_per_gb / _BYTES_PER_GB

    def wan_usd(self, redirected_requests: float) -> float:
        """WAN cost of ``redirected_requests`` redirected requests (§7.2)."""
        return non_negative(redirected_requests, "redirected_requests") * self.wan_usd_per_request

    def vm_usd(self, vm_hours: float) -> float:
        """Cost of ``vm_hours`` VM-hours."""
        return non_negative(vm_hours, "vm_hours") * self.vm_usd_per_hour
