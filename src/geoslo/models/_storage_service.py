"""What a cloud storage service does with concurrent requests, learnt from measurements
only (CosTLO §5.2-§5.3).

A region's measurement agent issues pairs of concurrent GETs and PUTs from a VM to the
local storage service, to one object and to two objects, and splits each request's
latency with the service's logs into data-centre network latency and service latency.
From those pairs :func:`infer_storage_model` decides

* how many replicas the service spreads one object's GETs over (the distribution of the
  service-latency difference within a pair has an atom at 0 of mass 1/n),
* whether concurrent requests share one network latency (the minimum over a pair then
  looks like one request's network latency, not like the minimum of two draws),
* whether the service serialises one tenant's PUTs (served intervals never overlap),

and :meth:`StorageServiceModel.concurrent` gives the exact distribution of the fastest
of k concurrent requests under that structure (§5.3, "Estimating VM-to-service
latency"): an enumeration of how requests fall on replicas, then lattice algebra.
``concurrent_monte_carlo`` is the paper's sampling procedure, kept as the reference.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from geoslo.dist import LatencyDistribution, minimum, mixture
from geoslo.errors import InputError

__all__ = [
    "PairSamples",
    "StorageMeasurements",
    "StorageServiceModel",
    "infer_storage_model",
    "concurrent_monte_carlo",
    "DEFAULT_STEP_MS",
    "ks_distance",
    "server_loads",
    "REPLICA_CANDIDATES",
]

DEFAULT_STEP_MS = 0.5  # lattice step of CosTLO's distributions (our choice)
REPLICA_CANDIDATES = (1, 2, 3, 4, 0)  # 0 = every request on its own server
_INFERENCE_DRAWS = 20_000


@dataclass(frozen=True)
class PairSamples:
    """Pairs of concurrent requests from a VM (§5.2): per pair and request, the network
    latency (round trip inside the data centre), the service latency from the logs
    (receipt at the front-end to response), and the arrival at the front-end, all ms."""

    network_ms: np.ndarray  # shape (n, 2)
    service_ms: np.ndarray  # shape (n, 2)
    arrival_ms: np.ndarray  # shape (n, 2)

    def __post_init__(self) -> None:
        for name in ("network_ms", "service_ms", "arrival_ms"):
            values = np.asarray(getattr(self, name), dtype=float)
            if values.ndim != 2 or values.shape[1] != 2 or values.shape[0] < 10:
                raise InputError(name, "must be at least 10 pairs, shape (n, 2)")
            if not np.all(np.isfinite(values)) or np.any(values < 0):
                raise InputError(name, "must be finite and >= 0")
            object.__setattr__(self, name, values)
        for name in ("service_ms", "arrival_ms"):
            if getattr(self, name).shape != self.network_ms.shape:
                raise InputError(name, "must have as many pairs as network_ms")

    @property
    def total_ms(self) -> np.ndarray:
        """End-to-end latency seen at the VM per request."""
        return self.network_ms + self.service_ms

    @property
    def first_arrival_service_ms(self) -> np.ndarray:
        """Service latency of the request that reached the service first: its own
        service time even if the service serialises the pair."""
        first = np.argmin(self.arrival_ms, axis=1)
        return self.service_ms[np.arange(len(first)), first]


@dataclass(frozen=True)
class StorageMeasurements:
    """One region agent's concurrent-pair measurements (§5.2; 10K pairs by default)."""

    get_same_object: PairSamples
    get_distinct_objects: PairSamples
    put_same_object: PairSamples
    put_distinct_objects: PairSamples


@dataclass(frozen=True, eq=False)
class StorageServiceModel:
    """The inferred structure of one region's storage service and its component
    distributions (§5.3). ``get_replicas``/``put_replicas``: replicas one object's
    requests spread over (0 = every request on its own server)."""

    get_replicas: int
    put_replicas: int
    shared_network: bool
    put_serialised: bool
    network: LatencyDistribution
    get_service: LatencyDistribution
    put_service: LatencyDistribution
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def single(self, operation: str) -> LatencyDistribution:
        """One request from a VM to the service."""
        return self.concurrent(operation, 1, 1)

    def concurrent(
        self, operation: str, copies: int, requests_per_copy: int
    ) -> LatencyDistribution:
        """Fastest of ``copies x requests_per_copy`` concurrent requests from a VM (§5.3)."""
        return self.concurrent_counts(operation, (requests_per_copy,) * copies)

    def concurrent_counts(self, operation: str, counts: tuple[int, ...]) -> LatencyDistribution:
        """Fastest of concurrent requests, ``counts[c]`` of them to copy c (§5.3)."""
        counts = tuple(int(c) for c in counts if c > 0)
        key = (operation, counts)
        if key not in self._cache:
            self._cache[key] = self._concurrent(operation, counts)
        return self._cache[key]

    def naive(self, operation: str, requests: int) -> LatencyDistribution:
        """The minimum of independent single-request draws: what ignoring correlation
        predicts (Fig. 15's "independent" line)."""
        return self.single(operation).minimum_of(requests)

    def _concurrent(self, operation: str, counts: tuple[int, ...]) -> LatencyDistribution:
        if operation not in ("get", "put"):
            raise InputError("operation", f"must be 'get' or 'put', not {operation!r}")
        if not counts:
            raise InputError("counts", "needs at least one request")
        service = self.get_service if operation == "get" else self.put_service
        if operation == "put" and self.put_serialised:
            loads = {(sum(counts),): 1.0}  # one queue for the tenant
        else:
            replicas = self.get_replicas if operation == "get" else self.put_replicas
            loads = server_loads(counts, replicas)
        parts, weights = [], []
        for server_counts, probability in loads.items():
            parts.append(self._fastest_over_servers(service, server_counts))
            weights.append(probability)
        out = parts[0] if len(parts) == 1 else mixture(parts, weights)
        return out.trimmed()

    def _fastest_over_servers(
        self, service: LatencyDistribution, counts: tuple[int, ...]
    ) -> LatencyDistribution:
        """Fastest request when server s gets ``counts[s]`` of them: one service draw per
        server; one network draw in all (shared) or per request (independent)."""
        if self.shared_network:
            return self.network + service.minimum_of(len(counts))
        per_server = [service + self.network.minimum_of(j) for j in counts]
        return per_server[0] if len(per_server) == 1 else minimum(per_server)


@lru_cache(maxsize=256)
def _occupancy(requests: int, replicas: int) -> dict[tuple[int, ...], float]:
    """Distribution of the request counts on the replicas one object's requests hit,
    each request on a replica chosen uniformly (sorted counts of used replicas)."""
    if replicas == 0 or requests == 1:
        return {(1,) * requests: 1.0}
    out: Counter = Counter()
    weight = 1.0 / replicas**requests
    for assignment in itertools.product(range(replicas), repeat=requests):
        counts = tuple(sorted(Counter(assignment).values(), reverse=True))
        out[counts] += weight
    return dict(out)


def server_loads(counts: tuple[int, ...], replicas: int) -> dict[tuple[int, ...], float]:
    """Distribution of per-server request counts: each copy is a different object on
    different servers (§5.3), its ``counts[c]`` requests spread over ``replicas``."""
    out: dict[tuple[int, ...], float] = {(): 1.0}
    for requests in counts:
        per_copy = _occupancy(requests, replicas)
        merged: Counter = Counter()
        for counts, p in out.items():
            for more, q in per_copy.items():
                merged[tuple(sorted(counts + more, reverse=True))] += p * q
        out = dict(merged)
    return out


# ------------------------------------------------------------------------ inference


def infer_storage_model(
    measurements: StorageMeasurements, step_ms: float = DEFAULT_STEP_MS, seed: int = 0
) -> StorageServiceModel:
    """The service's structure and component distributions from the agent's pairs only
    (§5.3, "Modeling replication" and "Modeling load balancing")."""
    rng = np.random.default_rng(seed)
    get_pairs = measurements.get_distinct_objects
    network_samples = np.concatenate(
        [p.network_ms.ravel() for p in (measurements.get_same_object, get_pairs)]
    )
    get_service_samples = get_pairs.service_ms.ravel()
    serialised = infer_serialised(measurements.put_distinct_objects, rng)
    put_service_samples = (
        measurements.put_distinct_objects.first_arrival_service_ms
        if serialised
        else measurements.put_distinct_objects.service_ms.ravel()
    )
    return StorageServiceModel(
        get_replicas=infer_replicas(measurements.get_same_object, get_service_samples, rng),
        put_replicas=1
        if serialised  # one queue: the replica structure does not matter
        else infer_replicas(measurements.put_same_object, put_service_samples, rng),
        shared_network=infer_shared_network(measurements.get_distinct_objects, rng),
        put_serialised=serialised,
        network=LatencyDistribution.from_samples(network_samples, step_ms),
        get_service=LatencyDistribution.from_samples(get_service_samples, step_ms),
        put_service=LatencyDistribution.from_samples(put_service_samples, step_ms),
    )


def infer_replicas(
    same_object: PairSamples,
    service_samples_ms: np.ndarray,
    rng: np.random.Generator,
    resolution_ms: float = DEFAULT_STEP_MS,
) -> int:
    """Replicas n whose predicted |service difference| distribution (an atom of 1/n at 0,
    else the difference of two independent draws) is closest to the measured one.
    Differences under ``resolution_ms`` count as 0: two requests that one server answers
    back to back differ by its per-request time, not by a service-latency draw."""
    measured = _resolved(
        np.abs(same_object.service_ms[:, 0] - same_object.service_ms[:, 1]), resolution_ms
    )
    a = rng.choice(service_samples_ms, _INFERENCE_DRAWS)
    b = rng.choice(service_samples_ms, _INFERENCE_DRAWS)
    independent = _resolved(np.abs(a - b), resolution_ms)
    same = rng.random(_INFERENCE_DRAWS)
    distances = {}
    for n in REPLICA_CANDIDATES:
        predicted = independent if n == 0 else np.where(same < 1.0 / n, 0.0, independent)
        distances[n] = ks_distance(measured, predicted)
    return min(distances, key=distances.get)


def _resolved(differences_ms: np.ndarray, resolution_ms: float) -> np.ndarray:
    return np.where(differences_ms < resolution_ms, 0.0, differences_ms)


def infer_shared_network(pairs: PairSamples, rng: np.random.Generator) -> bool:
    """True when the pair's minimum network latency looks like one request's network
    latency rather than the minimum of two independent draws (§5.3, Fig. 11c-d)."""
    measured = pairs.network_ms.min(axis=1)
    single = pairs.network_ms.ravel()
    shared = rng.choice(single, _INFERENCE_DRAWS)
    independent = np.minimum(
        rng.choice(single, _INFERENCE_DRAWS), rng.choice(single, _INFERENCE_DRAWS)
    )
    return ks_distance(measured, shared) < ks_distance(measured, independent)


def infer_serialised(pairs: PairSamples, rng: np.random.Generator) -> bool:
    """True when the service serialises a tenant's concurrent requests.

    Pairs that reach the service at distinct times: the later one then never responds
    first, while independent service lets it overtake often (resampling the pairs' own
    service times says how often). Pairs that arrive together (a shared network): the
    gap between their responses is then one request's own service time, not the
    difference of two."""
    tied = np.isclose(pairs.arrival_ms[:, 0], pairs.arrival_ms[:, 1])
    if np.mean(tied) >= 0.5:
        return _gap_looks_serialised(pairs, rng)
    apart = PairSamples(pairs.network_ms[~tied], pairs.service_ms[~tied], pairs.arrival_ms[~tied])
    measured = _overtaking_fraction(apart.arrival_ms, apart.service_ms)
    index = rng.integers(0, len(apart.service_ms), size=(_INFERENCE_DRAWS, 2))
    own_service = apart.first_arrival_service_ms[index]
    parallel = _overtaking_fraction(apart.arrival_ms[index[:, 0]], own_service)
    return measured < 0.5 * parallel


def _gap_looks_serialised(pairs: PairSamples, rng: np.random.Generator) -> bool:
    """For pairs arriving together: is the response gap one service time (serialised)
    rather than the difference of two (parallel)? The shorter logged service of a pair
    is one request's own service under either hypothesis."""
    measured = np.abs(pairs.service_ms[:, 0] - pairs.service_ms[:, 1])
    own = pairs.service_ms.min(axis=1)
    serialised = rng.choice(own, _INFERENCE_DRAWS)
    parallel = np.abs(rng.choice(own, _INFERENCE_DRAWS) - rng.choice(own, _INFERENCE_DRAWS))
    return ks_distance(measured, serialised) < ks_distance(measured, parallel)


def _overtaking_fraction(arrival_ms: np.ndarray, service_ms: np.ndarray) -> float:
    """Share of pairs whose later arrival responds first."""
    departure = arrival_ms + service_ms
    later = np.argmax(arrival_ms, axis=1)
    rows = np.arange(len(later))
    return float(np.mean(departure[rows, later] < departure[rows, 1 - later]))


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance between two samples' empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / a.size
    cdf_b = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


# ------------------------------------------------------------------------ reference


def concurrent_monte_carlo(
    model: StorageServiceModel,
    operation: str,
    copies: int,
    requests_per_copy: int,
    n_draws: int,
    seed: int,
) -> np.ndarray:
    """The paper's sampling procedure, one draw at a time in plain Python (§5.3): the
    reference the exact enumeration of :meth:`StorageServiceModel.concurrent` is tested
    against."""
    rng = np.random.default_rng(seed)
    service = model.get_service if operation == "get" else model.put_service
    replicas = model.get_replicas if operation == "get" else model.put_replicas
    k = copies * requests_per_copy
    out = np.empty(n_draws)
    for d in range(n_draws):
        shared_net = float(model.network.sample(1, rng)[0])
        servers = []
        for copy in range(copies):
            for r in range(requests_per_copy):
                if operation == "put" and model.put_serialised:
                    servers.append("tenant")
                elif replicas == 0:
                    servers.append((copy, r))
                else:
                    servers.append((copy, int(rng.integers(replicas))))
        server_time = {s: float(service.sample(1, rng)[0]) for s in dict.fromkeys(servers)}
        best = np.inf
        for i in range(k):
            net = shared_net if model.shared_network else float(model.network.sample(1, rng)[0])
            best = min(best, net + server_time[servers[i]])
        out[d] = best
    return out
