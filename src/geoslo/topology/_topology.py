"""A topology: sites, the WAN links between them and the prices (Kurma §7, §7.2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from geoslo.errors import InputError
from geoslo.topology._links import BaseRttSchedule, WanLink, routing_changes
from geoslo.topology._sites import Prices, Site

__all__ = ["Topology", "kurma_topology", "KURMA_RTT_RANGES_MS"]

# Kurma Table 2: observed base propagation RTT ranges (ms) between its datacenters.
KURMA_RTT_RANGES_MS = {
    ("London", "Ireland"): (9.0, 10.0),
    ("London", "Frankfurt"): (11.0, 14.0),
    ("Ireland", "Frankfurt"): (22.0, 27.0),
}


@dataclass(frozen=True)
class Topology:
    """Sites, directed WAN links and prices. A link given in one direction only
    serves both directions; give both to make a pair asymmetric."""

    sites: tuple[Site, ...]
    links: tuple[WanLink, ...] = ()
    prices: Prices = field(default_factory=Prices)

    def __post_init__(self) -> None:
        sites = tuple(self.sites)
        links = tuple(self.links)
        if not sites:
            raise InputError("sites", "need at least one site")
        for i, site in enumerate(sites):
            if not isinstance(site, Site):
                raise InputError(f"sites[{i}]", f"must be a Site, got {type(site).__name__}")
        names = [site.name for site in sites]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise InputError("sites", f"site names must be unique, repeated: {duplicated}")
        seen: set[tuple[str, str]] = set()
        for i, link in enumerate(links):
            if not isinstance(link, WanLink):
                raise InputError(f"links[{i}]", f"must be a WanLink, got {type(link).__name__}")
            for end in ("src", "dst"):
                if getattr(link, end) not in names:
                    raise InputError(
                        f"links[{i}].{end}", f"unknown site {getattr(link, end)!r}; sites: {names}"
                    )
            if (link.src, link.dst) in seen:
                raise InputError(f"links[{i}]", f"link {link.src} -> {link.dst} given twice")
            seen.add((link.src, link.dst))
        if not isinstance(self.prices, Prices):
            raise InputError("prices", f"must be Prices, got {type(self.prices).__name__}")
        object.__setattr__(self, "sites", sites)
        object.__setattr__(self, "links", links)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(site.name for site in self.sites)

    def index(self, name: str) -> int:
        """Position of site ``name`` in :attr:`sites`."""
        try:
            return self.names.index(name)
        except ValueError:
            raise InputError("name", f"unknown site {name!r}; sites: {list(self.names)}") from None

    def site(self, name: str) -> Site:
        return self.sites[self.index(name)]

    def link(self, src: str, dst: str) -> WanLink:
        """The link ``src -> dst``, or the reverse of ``dst -> src`` if only that was given."""
        self.index(src), self.index(dst)
        for link in self.links:
            if (link.src, link.dst) == (src, dst):
                return link
        for link in self.links:
            if (link.src, link.dst) == (dst, src):
                return link.reversed()
        raise InputError("dst", f"no link between {src!r} and {dst!r}")

    def base_rtt_matrix_ms(self, t_s: float | np.ndarray = 0.0) -> np.ndarray:
        """Base RTTs at time ``t_s``: ``[i, j]`` is site i -> site j, 0 on the diagonal,
        ``inf`` where no link exists. An array of times gives shape ``(len(t_s), n, n)``."""
        times = np.asarray(t_s, dtype=np.float64)
        n = len(self.sites)
        matrix = np.full((*times.shape, n, n), np.inf)
        diagonal = np.arange(n)
        matrix[..., diagonal, diagonal] = 0.0
        names = self.names
        given = {(link.src, link.dst) for link in self.links}
        for link in self.links:
            i, j = names.index(link.src), names.index(link.dst)
            rtt = link.base_rtt.at(times)
            matrix[..., i, j] = rtt
            if (link.dst, link.src) not in given:
                matrix[..., j, i] = rtt
        return matrix


def kurma_topology(
    capacity_rps: float | Sequence[float],
    *,
    servers: int = 5,
    prices: Prices | None = None,
    routing_mean_interval_s: float | None = None,
    duration_s: float = 86400.0,
    seed: int = 0,
) -> Topology:
    """Kurma's three EC2 datacenters (§7: London, Ireland, Frankfurt). Without
    ``routing_mean_interval_s`` each base RTT is the middle of its Table 2 range
    (static, as in §7.2); with it, routes change within the range (§7, Table 2).
    ``capacity_rps`` is one value for all sites or one per site in that order."""
    names = ("London", "Ireland", "Frankfurt")
    capacities = (
        [capacity_rps] * 3 if np.ndim(capacity_rps) == 0 else list(capacity_rps)  # type: ignore[arg-type]
    )
    if len(capacities) != len(names):
        raise InputError("capacity_rps", f"need one value or {len(names)}, got {len(capacities)}")
    prices = prices or Prices()
    sites = tuple(
        Site(name, capacity, servers=servers, vm_price_usd_per_hour=prices.vm_usd_per_hour)
        for name, capacity in zip(names, capacities, strict=True)
    )
    links = []
    for k, ((src, dst), (low, high)) in enumerate(KURMA_RTT_RANGES_MS.items()):
        if routing_mean_interval_s is None:
            base = BaseRttSchedule.constant((low + high) / 2)
        else:
            base = routing_changes(low, high, routing_mean_interval_s, duration_s, seed + k)
        links.append(WanLink(src, dst, base))
    return Topology(sites, tuple(links), prices)
