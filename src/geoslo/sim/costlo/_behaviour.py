"""Hidden ground truth of the simulated clouds: latency components and how each
provider's storage treats concurrent requests (CosTLO §2, §4, §5.3, §7).

Nothing here is visible to the decision engine: it learns only from what the
measurement agents (``_agents.py``) observe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SpikyLatency", "StorageBehaviour", "InternetPath", "DnsResolver", "provider_behaviour"]


@dataclass(frozen=True)
class SpikyLatency:
    """A lognormal body plus isolated spikes (§2: the tail is dominated by isolated
    spikes, not clustered in time): each draw independently spikes with
    ``spike_probability`` and then adds a lognormal spike."""

    body_median_ms: float
    body_sigma: float
    spike_probability: float
    spike_median_ms: float
    spike_sigma: float = 0.7

    def sample(self, rng: np.random.Generator, shape) -> np.ndarray:
        body = self.body_median_ms * np.exp(self.body_sigma * rng.standard_normal(shape))
        return body + self.spikes(rng, shape)

    def spikes(
        self, rng: np.random.Generator, shape, probability: float | None = None
    ) -> np.ndarray:
        p = self.spike_probability if probability is None else probability
        hit = rng.random(shape) < p
        size = self.spike_median_ms * np.exp(self.spike_sigma * rng.standard_normal(shape))
        return np.where(hit, size, 0.0)

    def scaled(self, spike_factor: float, body_factor: float = 1.0) -> SpikyLatency:
        return SpikyLatency(
            self.body_median_ms * body_factor,
            self.body_sigma,
            min(1.0, self.spike_probability * spike_factor),
            self.spike_median_ms,
            self.spike_sigma,
        )


@dataclass(frozen=True)
class StorageBehaviour:
    """How one region's storage service answers a VM (§4.2-§4.3, §5.3, §7).

    ``get_replicas``: replicas one object's GETs are spread over (S3 2, Azure 1);
    ``put_replicas`` likewise for PUTs (0 = every request on its own server);
    ``shared_network``: concurrent requests from one VM share one network latency (S3);
    ``put_serialised``: one tenant's PUTs are served one after another (Azure [20]).
    """

    provider: str
    get_replicas: int
    put_replicas: int
    shared_network: bool
    put_serialised: bool
    network: SpikyLatency  # data-centre network round trip, VM <-> front-end
    get_service: SpikyLatency
    put_service: SpikyLatency
    block_service_ms: float  # §7: service latency steps up per extra 64 KB block
    network_mbps: float  # §7: network latency grows with object size
    relay_rps: float  # GETs/PUTs one small VM relays without queueing (§5.2)
    relay_overhead_mean_ms: float  # §4.2: relaying through VMs adds some overhead


@dataclass(frozen=True)
class InternetPath:
    """Latency between a client prefix (or a region) and a region over the Internet:
    base RTT, exponential jitter, isolated spikes. Concurrent requests on one path
    share a spike with probability ``shared_spike_fraction`` (path diversity helps only
    partly, §4.1 "2x S3[1]")."""

    base_rtt_ms: float
    jitter_mean_ms: float
    spike: SpikyLatency  # body unused; spikes only
    shared_spike_fraction: float = 0.9
    mbps: float = 20.0  # transfer rate of a larger object (§7)

    def sample(
        self, rng: np.random.Generator, n: int, k: int = 1, object_bytes: float = 0.0
    ) -> np.ndarray:
        """(n, k) latencies of k concurrent requests, n independent times."""
        p = self.spike.spike_probability
        shared = self.spike.spikes(rng, (n, 1), p * self.shared_spike_fraction)
        own = self.spike.spikes(rng, (n, k), p * (1.0 - self.shared_spike_fraction))
        jitter = rng.exponential(self.jitter_mean_ms, (n, k))
        transfer_ms = object_bytes * 8.0 / (self.mbps * 1000.0)
        return self.base_rtt_ms + transfer_ms + jitter + np.maximum(shared, own)


@dataclass(frozen=True)
class DnsResolver:
    """A prefix's resolver: most lookups hit a cache; a miss costs a resolution (§2, Fig. 3)."""

    miss_probability: float
    resolution: SpikyLatency

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        miss = rng.random(n) < self.miss_probability
        return np.where(miss, self.resolution.sample(rng, n), 0.0)


# The structure each provider showed (§4.3, §5.3, Fig. 11) and its unloaded latency
# levels (ours, chosen so the median client's inflation lands near Fig. 1a's).
_PROVIDERS = {
    "s3": {
        "get_replicas": 2,
        "put_replicas": 0,
        "shared_network": True,
        "put_serialised": False,
        "network": SpikyLatency(1.2, 0.35, 0.004, 40.0),
        "get_service": SpikyLatency(12.0, 0.35, 0.012, 60.0, 0.6),
        "put_service": SpikyLatency(25.0, 0.4, 0.025, 220.0, 0.6),
        "block_service_ms": 6.0,
    },
    "azure": {
        "get_replicas": 1,
        "put_replicas": 1,
        "shared_network": False,
        "put_serialised": True,
        "network": SpikyLatency(1.0, 0.35, 0.005, 35.0),
        "get_service": SpikyLatency(8.0, 0.4, 0.01, 50.0, 0.6),
        "put_service": SpikyLatency(15.0, 0.4, 0.025, 200.0, 0.6),
        "block_service_ms": 4.0,
    },
}


def provider_behaviour(
    provider: str, load_factor: float, rng: np.random.Generator
) -> StorageBehaviour:
    """A region's behaviour: the provider's structure (§5.3, Fig. 11) with latency
    levels scaled by how loaded the region is (S3's Virginia is the busiest, §6.2):
    spikes more often, and service bodies slower by the load's square root."""
    if provider not in _PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}")
    p = _PROVIDERS[provider]
    service_body = load_factor**0.5
    return StorageBehaviour(
        provider=provider,
        get_replicas=p["get_replicas"],
        put_replicas=p["put_replicas"],
        shared_network=p["shared_network"],
        put_serialised=p["put_serialised"],
        network=p["network"].scaled(load_factor),
        get_service=p["get_service"].scaled(load_factor, service_body),
        put_service=p["put_service"].scaled(load_factor, service_body),
        block_service_ms=p["block_service_ms"],
        network_mbps=800.0,
        relay_rps=float(rng.uniform(600, 1000)),
        relay_overhead_mean_ms=0.6,
    )
