"""An illustrative prefix for ``geoslo costlo example`` and ``decide``, the tests and the docs.

Pure and seeded: the same arguments give the same problem. The regions are the S3-like
and Azure-like regions of :mod:`geoslo.topology` at their real locations, with their list
prices; the prefix is one of its client sites. The serving region is the prefix's closest
S3-like region; the candidates are the closest other region (§5.2's second region) and the
next two closest. Each region's agent (§5.2) gives pairs of concurrent requests and pings
to the prefix, drawn here from an illustrative service with its provider's structure
(§4.3, §5.3): S3-like GETs of one object spread over two replicas and concurrent requests
share one network latency; Azure-like objects have one replica and requests their own
network latency. Latencies are a lognormal body plus isolated spikes (§2). The levels are
our choices, not measurements; the simulated clouds (``geoslo.sim.costlo``) are the
ground truth of the experiments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control.costlo.decide import CostloProblem, RegionInput
from geoslo.control.costlo.types import PrefixWorkload, Slo
from geoslo.control.costlo.validation import problem_to_compact_dict, problem_to_dict
from geoslo.errors import InputError
from geoslo.models import PairSamples, StorageMeasurements
from geoslo.topology import (
    ClientPrefix,
    CloudRegion,
    client_prefixes,
    cloud_regions,
    great_circle_km,
    propagation_rtt_ms,
)

__all__ = ["EXAMPLE_WORKLOAD", "DEFAULT_SAMPLES", "example_problem", "example_dict"]

DEFAULT_SAMPLES = 10_000  # §6.5: 10K samples estimate a p99 within a few percent
# Illustrative read-heavy workload of 1 KB objects (§2), not the Wikipedia trace of §6.
EXAMPLE_WORKLOAD = PrefixWorkload(
    gets_per_month=10_000_000.0,
    puts_per_month=100_000.0,
    object_bytes=1024.0,
    stored_gb=1.0,
    peak_get_rps=10.0,
    peak_put_rps=0.1,
)
EXTRA_CANDIDATES = 2  # regions offered beyond the second one
_RELAY_RPS = 800.0  # requests one small VM relays without queueing (illustrative)
_ROUTE_INFLATION = 1.9  # Internet route length over the great circle (illustrative)


@dataclass(frozen=True)
class _Spiky:
    """A lognormal body plus isolated spikes, each draw spiking independently (§2)."""

    median_ms: float
    sigma: float
    spike_probability: float
    spike_median_ms: float

    def sample(self, rng: np.random.Generator, shape) -> np.ndarray:
        body = self.median_ms * np.exp(self.sigma * rng.standard_normal(shape))
        spike = self.spike_median_ms * np.exp(0.6 * rng.standard_normal(shape))
        return body + np.where(rng.random(shape) < self.spike_probability, spike, 0.0)


@dataclass(frozen=True)
class _Service:
    """A provider's structure (§4.3, §5.3) and illustrative latency levels."""

    get_replicas: int  # one object's GETs spread over these servers
    shared_network: bool  # concurrent requests from one VM share one network latency
    network: _Spiky
    get_service: _Spiky
    put_service: _Spiky


_PROVIDERS = {
    "s3": _Service(
        2, True, _Spiky(1.2, 0.35, 0.004, 40.0), _Spiky(12.0, 0.35, 0.012, 60.0),
        _Spiky(25.0, 0.4, 0.025, 220.0),
    ),
    "azure": _Service(
        1, False, _Spiky(1.0, 0.35, 0.005, 35.0), _Spiky(8.0, 0.4, 0.01, 50.0),
        _Spiky(15.0, 0.4, 0.025, 200.0),
    ),
}  # fmt: skip


def _pairs(
    service: _Service, operation: str, same_object: bool, n: int, rng: np.random.Generator
) -> PairSamples:
    """n pairs of concurrent requests: two requests to one object share a server's
    service draw when they land on the same replica (PUTs: each on its own server)."""
    shape = (n, 1) if service.shared_network else (n, 2)
    network = np.broadcast_to(service.network.sample(rng, shape), (n, 2)).copy()
    spec = service.get_service if operation == "get" else service.put_service
    replicas = service.get_replicas if operation == "get" and same_object else 0
    if replicas:
        per_server = spec.sample(rng, (n, replicas))
        chosen = rng.integers(0, replicas, size=(n, 2))
        service_ms = np.take_along_axis(per_server, chosen, axis=1)
    else:
        service_ms = spec.sample(rng, (n, 2))
    return PairSamples(network, service_ms, network / 2.0)


def _measurements(region: CloudRegion, n: int, rng: np.random.Generator) -> StorageMeasurements:
    service = _PROVIDERS[region.provider]
    return StorageMeasurements(
        get_same_object=_pairs(service, "get", True, n, rng),
        get_distinct_objects=_pairs(service, "get", False, n, rng),
        put_same_object=_pairs(service, "put", True, n, rng),
        put_distinct_objects=_pairs(service, "put", False, n, rng),
    )


def _base_rtt_ms(prefix: ClientPrefix, region: CloudRegion) -> float:
    km = great_circle_km(prefix.latitude, prefix.longitude, region.latitude, region.longitude)
    return float(propagation_rtt_ms(km, _ROUTE_INFLATION)) + 2.0 * prefix.access_ms


def _pings(base_ms: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """RTTs over the Internet: base, exponential jitter, isolated spikes (§2)."""
    jitter = rng.exponential(0.5 + 0.03 * base_ms, n)
    spikes = _Spiky(0.0, 0.0, 0.012, 40.0 + 0.3 * base_ms).sample(rng, n)
    return base_ms + jitter + spikes


def _check(prefixes: tuple[ClientPrefix, ...], prefix: int, samples: int) -> None:
    if isinstance(prefix, bool) or not isinstance(prefix, int):
        raise InputError("--prefix", f"must be an integer, not {prefix!r}")
    if not 0 <= prefix < len(prefixes):
        raise InputError("--prefix", f"must be in [0, {len(prefixes) - 1}], not {prefix}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 10:
        raise InputError("--samples", f"must be an integer >= 10, not {samples!r}")


def example_problem(
    seed: int = 0,
    prefix: int = 0,
    samples: int = DEFAULT_SAMPLES,
    workload: PrefixWorkload = EXAMPLE_WORKLOAD,
    slo: Slo | None = None,
) -> CostloProblem:
    """ConfSelector's input for client site ``prefix`` (``samples`` pairs of each kind
    and pings per region)."""
    prefixes = client_prefixes()
    _check(prefixes, prefix, samples)
    site, regions = prefixes[prefix], cloud_regions()
    rtt_ms = [_base_rtt_ms(site, r) for r in regions]
    s3 = [j for j, r in enumerate(regions) if r.provider == "s3"]
    serving = min(s3, key=lambda j: rtt_ms[j])
    order = [j for j in np.argsort(rtt_ms, kind="stable") if j != serving]
    rng = np.random.default_rng([seed, prefix])

    def measured(j: int) -> RegionInput:
        storage = _measurements(regions[j], samples, rng)
        pings = _pings(rtt_ms[j], samples, rng)
        return RegionInput(regions[j].name, regions[j].prices, storage, pings, _RELAY_RPS)

    return CostloProblem(
        workload=workload,
        serving=measured(serving),
        candidates=tuple(measured(int(j)) for j in order[: 1 + EXTRA_CANDIDATES]),
        slo=slo if slo is not None else Slo(),
    )


def example_dict(
    seed: int = 0, prefix: int = 0, samples: int = DEFAULT_SAMPLES, compact: bool = False
) -> dict:
    """The problem.json of :func:`example_problem`, named after the client site: the raw
    samples, or (``compact``) the same samples on the estimator's lattice with counts."""
    problem = example_problem(seed, prefix, samples)
    write = problem_to_compact_dict if compact else problem_to_dict
    return write(problem, prefix=client_prefixes()[prefix].name)
