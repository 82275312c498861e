"""Hidden ground truth of the simulated clouds: latency components and how each
provider's storage treats concurrent requests (CosTLO §2, §4, §5.3, §7).

Nothing here is visible to the decision engine: it learns only from what the
measurement agents (``_agents.py``) observe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "SpikyLatency",
    "SlowEpisodes",
    "EpisodeDraw",
    "GroundTruth",
    "StorageBehaviour",
    "InternetPath",
    "DnsResolver",
    "provider_behaviour",
]


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
class EpisodeDraw:
    """Per operation, whether a path or copy is in a slow episode and the episode's delay."""

    slow: np.ndarray  # bool
    delay_ms: np.ndarray

    @property
    def added_ms(self) -> np.ndarray:
        return np.where(self.slow, self.delay_ms, 0.0)


@dataclass(frozen=True)
class SlowEpisodes:
    """Slow episodes of one Internet path or one object's servers (issue 23, ours): a
    two-state Markov process, slow for ``slow_fraction`` of the time in episodes of
    ``mean_episode_ms`` on average; an episode adds one lognormal delay to every request
    that meets it. Requests ``interval_ms`` apart meet the same episode with probability
    close to 1 when the interval is short beside the episode; §2 found S3's and Azure's
    spikes isolated in time, which is what the estimator relies on."""

    slow_fraction: float
    mean_episode_ms: float
    delay_median_ms: float
    delay_sigma: float

    def stationary(self, rng: np.random.Generator, shape) -> EpisodeDraw:
        """The state met at a random time, independently per entry."""
        slow = rng.random(shape) < self.slow_fraction
        return EpisodeDraw(slow, self._delays(rng, shape))

    def later(self, rng: np.random.Generator, now: EpisodeDraw, interval_ms: float) -> EpisodeDraw:
        """The state ``interval_ms`` after ``now``: the Markov chain's transition; a request
        that meets the episode it met before meets its delay (an episode ending and another
        starting within the interval is neglected)."""
        if interval_ms == 0.0:
            return now
        pi = self.slow_fraction
        rate_per_ms = 1.0 / self.mean_episode_ms + pi / ((1.0 - pi) * self.mean_episode_ms)
        keep = np.exp(-rate_per_ms * interval_ms)
        p_slow = np.where(now.slow, pi + (1.0 - pi) * keep, pi * (1.0 - keep))
        slow = rng.random(now.slow.shape) < p_slow
        fresh = self._delays(rng, now.slow.shape)
        return EpisodeDraw(slow, np.where(now.slow & slow, now.delay_ms, fresh))

    def _delays(self, rng: np.random.Generator, shape) -> np.ndarray:
        return self.delay_median_ms * np.exp(self.delay_sigma * rng.standard_normal(shape))


def stationary_ms(episodes: SlowEpisodes | None, rng: np.random.Generator, shape) -> np.ndarray:
    """Delays met at random times; zeros, and no draw, without episodes."""
    if episodes is None:
        return np.zeros(shape)
    return episodes.stationary(rng, shape).added_ms


@dataclass(frozen=True)
class GroundTruth:
    """What the simulated clouds may do beyond what CosTLO's estimator assumes (issue 23;
    every value ours, not the paper's). ``None`` in a world (the default) leaves it as
    the estimator models it.

    * ``persistent_fraction`` of the isolated spikes of Internet paths and of storage
      servers become slow episodes of ``mean_episode_ms`` (same rate and size, so the
      marginal latency is kept): a request re-sent after a timeout to the same copy over
      the same path meets the first's episode, concurrent requests to one object's
      replicas meet it together;
    * a relayed message pays ``relay_overhead`` (the VM's processing, with CPU stalls) and
      stores and forwards the object at ``relay_mbps`` (the estimator adds nothing, §4.2);
    * a path's transfer rate varies per operation (lognormal, ``throughput_sigma``), so an
      object's size spreads its latency; the agents' 1 KB objects and pings see almost
      none of it (§7);
    * a PUT's data-centre network latency is its own: body x ``put_network_body_factor``,
      spikes x ``put_network_spike_factor`` (the estimator takes it from GET pairs).
    """

    persistent_fraction: float = 0.5
    mean_episode_ms: float = 2_000.0
    relay_overhead: SpikyLatency | None = SpikyLatency(1.5, 0.5, 0.01, 20.0, 0.6)
    relay_mbps: float | None = 400.0
    throughput_sigma: float = 0.5
    put_network_body_factor: float = 2.0
    put_network_spike_factor: float = 3.0

    def episodes(self, spikes: SpikyLatency) -> tuple[SpikyLatency, SlowEpisodes | None]:
        """``spikes`` split into the isolated ones left and the slow episodes."""
        f = self.persistent_fraction
        if f == 0.0 or spikes.spike_probability == 0.0:
            return spikes, None
        isolated = replace(spikes, spike_probability=spikes.spike_probability * (1.0 - f))
        slow = SlowEpisodes(
            spikes.spike_probability * f,
            self.mean_episode_ms,
            spikes.spike_median_ms,
            spikes.spike_sigma,
        )
        return isolated, slow

    def relay_ms(self, rng: np.random.Generator, n: int, object_bytes: float) -> np.ndarray:
        """A relayed message's own cost: processing, then store and forward."""
        overhead = (
            np.zeros(n) if self.relay_overhead is None else self.relay_overhead.sample(rng, n)
        )
        if self.relay_mbps is not None:
            overhead = overhead + object_bytes * 8.0 / (self.relay_mbps * 1000.0)
        return overhead


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
    put_network: SpikyLatency | None = None  # a ground truth's own PUT network (None: GETs')
    get_episodes: SlowEpisodes | None = None  # a ground truth's slow episodes per object
    put_episodes: SlowEpisodes | None = None

    def network_of(self, operation: str) -> SpikyLatency:
        if operation == "put" and self.put_network is not None:
            return self.put_network
        return self.network

    def episodes_of(self, operation: str) -> SlowEpisodes | None:
        return self.get_episodes if operation == "get" else self.put_episodes


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
    throughput_sigma: float = 0.0  # a ground truth's spread of the rate per operation
    episodes: SlowEpisodes | None = None  # a ground truth's slow episodes of the path

    def sample(
        self, rng: np.random.Generator, n: int, k: int = 1, object_bytes: float = 0.0
    ) -> np.ndarray:
        """(n, k) latencies of k concurrent requests, n independent times."""
        p = self.spike.spike_probability
        shared = self.spike.spikes(rng, (n, 1), p * self.shared_spike_fraction)
        own = self.spike.spikes(rng, (n, k), p * (1.0 - self.shared_spike_fraction))
        jitter = rng.exponential(self.jitter_mean_ms, (n, k))
        transfer_ms = object_bytes * 8.0 / (self.mbps * 1000.0)
        if transfer_ms > 0.0 and self.throughput_sigma > 0.0:
            transfer_ms = transfer_ms * np.exp(self.throughput_sigma * rng.standard_normal((n, 1)))
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
