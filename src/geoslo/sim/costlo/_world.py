"""The simulated world of CosTLO's evaluation (§2, §6): S3-like and Azure-like regions at
their real locations, client prefixes spread over the world, the Internet between them.

Everything is drawn from one seed; ``CloudWorld`` holds the hidden truth.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from geoslo.sim.costlo._behaviour import (
    DnsResolver,
    GroundTruth,
    InternetPath,
    SpikyLatency,
    StorageBehaviour,
    provider_behaviour,
)
from geoslo.topology import (
    ClientPrefix,
    CloudRegion,
    client_prefixes,
    cloud_regions,
    great_circle_km,
    propagation_rtt_ms,
)

__all__ = ["CloudWorld", "build_world", "BUSIEST_REGION"]

BUSIEST_REGION = "s3:us-east-1"  # §6.2: S3's most widely used data centre


@dataclass(frozen=True, eq=False)
class CloudWorld:
    """Regions, prefixes, each region's storage behaviour, Internet paths
    ``internet[prefix][region]`` and ``between_regions[a][b]``, and DNS per prefix;
    ``truth``: what it does beyond the estimator's assumptions (None: nothing)."""

    regions: tuple[CloudRegion, ...]
    prefixes: tuple[ClientPrefix, ...]
    behaviours: tuple[StorageBehaviour, ...]
    internet: tuple[tuple[InternetPath, ...], ...]
    between_regions: tuple[tuple[InternetPath | None, ...], ...]
    dns: tuple[DnsResolver, ...]
    truth: GroundTruth | None = None

    @cached_property
    def base_rtt_ms(self) -> np.ndarray:
        """[prefix, region] base RTT."""
        return np.array([[p.base_rtt_ms for p in row] for row in self.internet])

    def region_index(self, name: str) -> int:
        return [r.name for r in self.regions].index(name)

    def closest(
        self,
        prefix: int,
        providers: tuple[str, ...] = ("s3", "azure"),
        exclude: tuple[int, ...] = (),
    ) -> int:
        """The region of ``providers`` with the lowest base RTT from ``prefix``."""
        candidates = [
            j for j, r in enumerate(self.regions) if r.provider in providers and j not in exclude
        ]
        return min(candidates, key=lambda j: self.base_rtt_ms[prefix, j])

    def serving_and_second(
        self, prefix: int, serving_providers: tuple[str, ...] = ("s3",)
    ) -> tuple[int, int]:
        """The application's serving region (closest of its provider, §6) and the closest
        other region across both providers (§4.1, §5.2)."""
        serving = self.closest(prefix, serving_providers)
        return serving, self.closest(prefix, ("s3", "azure"), exclude=(serving,))


def build_world(
    seed: int = 0, n_prefixes: int | None = None, truth: GroundTruth | None = None
) -> CloudWorld:
    """The world of one seed: region load levels, per-path Internet behaviour, DNS; with
    ``truth``, the same world doing what the estimator does not assume (issue 23)."""
    rng = np.random.default_rng(seed)
    regions = cloud_regions()
    prefixes = client_prefixes(n_prefixes)
    behaviours = tuple(provider_behaviour(r.provider, _load_factor(r, rng), rng) for r in regions)
    internet = tuple(tuple(_client_path(p, r, rng) for r in regions) for p in prefixes)
    between = tuple(
        tuple(None if a is b else _region_path(a, b, rng) for b in regions) for a in regions
    )
    dns = tuple(DnsResolver(0.002, SpikyLatency(15.0, 0.6, 0.05, 100.0)) for _ in prefixes)
    world = CloudWorld(regions, prefixes, behaviours, internet, between, dns)
    return world if truth is None else _with_truth(world, truth)


def _with_truth(world: CloudWorld, truth: GroundTruth) -> CloudWorld:
    """The same draws, with part of the client paths' and storage servers' isolated
    spikes made into slow episodes, a transfer rate that varies, PUTs' own network."""
    internet = tuple(tuple(_path_with_truth(p, truth) for p in row) for row in world.internet)
    behaviours = tuple(_behaviour_with_truth(b, truth) for b in world.behaviours)
    return replace(world, behaviours=behaviours, internet=internet, truth=truth)


def _path_with_truth(path: InternetPath, truth: GroundTruth) -> InternetPath:
    isolated, episodes = truth.episodes(path.spike)
    return replace(path, spike=isolated, episodes=episodes, throughput_sigma=truth.throughput_sigma)


def _behaviour_with_truth(behaviour: StorageBehaviour, truth: GroundTruth) -> StorageBehaviour:
    get_service, get_episodes = truth.episodes(behaviour.get_service)
    put_service, put_episodes = truth.episodes(behaviour.put_service)
    put_network = behaviour.network.scaled(
        truth.put_network_spike_factor, truth.put_network_body_factor
    )
    return replace(
        behaviour,
        get_service=get_service,
        put_service=put_service,
        get_episodes=get_episodes,
        put_episodes=put_episodes,
        put_network=put_network,
    )


def _load_factor(region: CloudRegion, rng: np.random.Generator) -> float:
    factor = float(np.exp(0.25 * rng.standard_normal()))
    return factor * (1.6 if region.name == BUSIEST_REGION else 1.0)


def _client_path(
    prefix: ClientPrefix, region: CloudRegion, rng: np.random.Generator
) -> InternetPath:
    km = great_circle_km(prefix.latitude, prefix.longitude, region.latitude, region.longitude)
    base_ms = float(propagation_rtt_ms(km, rng.uniform(1.4, 2.4))) + 2.0 * prefix.access_ms
    spike_probability = rng.uniform(0.008, 0.02) * rng.uniform(0.7, 1.3)
    return InternetPath(
        base_rtt_ms=base_ms,
        jitter_mean_ms=0.5 + 0.03 * base_ms,
        spike=SpikyLatency(0.0, 0.0, spike_probability, 40.0 + 0.3 * base_ms, 0.6),
        mbps=float(rng.uniform(10, 50)),
    )


def _region_path(a: CloudRegion, b: CloudRegion, rng: np.random.Generator) -> InternetPath:
    km = great_circle_km(a.latitude, a.longitude, b.latitude, b.longitude)
    base_ms = float(propagation_rtt_ms(km, rng.uniform(1.2, 1.6))) + 1.0
    return InternetPath(
        base_rtt_ms=base_ms,
        jitter_mean_ms=0.2 + 0.01 * base_ms,
        spike=SpikyLatency(0.0, 0.0, 0.002, 30.0 + 0.3 * base_ms),
        mbps=200.0,
    )
