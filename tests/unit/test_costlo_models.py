"""CosTLO's storage-service model (§5.2-§5.3): server loads, the exact enumeration of
concurrent requests against the paper's sampling procedure, inference of the hidden
structure from the agents' pairs, and the estimator's accuracy against ground truth."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError
from geoslo.models import PairSamples, StorageServiceModel, infer_storage_model
from geoslo.models._storage_service import (
    concurrent_monte_carlo,
    ks_distance,
    server_loads,
)
from geoslo.sim.costlo import build_world, completion_ms, measure_storage, storage_requests

STEP_MS = 0.5
AGENT_PAIRS = 10_000
TRUTH_DRAWS = 50_000
REFERENCE_DRAWS = 10_000


# ---------------------------------------------------------------------- server_loads


@pytest.mark.parametrize(
    ("counts", "replicas", "expected"),
    [
        ((1,), 2, {(1,): 1.0}),
        ((2,), 2, {(2,): 0.5, (1, 1): 0.5}),
        ((2,), 1, {(2,): 1.0}),
        ((3,), 1, {(3,): 1.0}),
        ((3,), 0, {(1, 1, 1): 1.0}),
        ((2, 2), 0, {(1, 1, 1, 1): 1.0}),
        # 3 requests over 2 replicas: all on one with 2/8, else split 2+1.
        ((3,), 2, {(3,): 0.25, (2, 1): 0.75}),
        # 3 over 3 replicas: 3 same (3/27), all different (6/27), else 2+1 (18/27).
        ((3,), 3, {(3,): 3 / 27, (1, 1, 1): 6 / 27, (2, 1): 18 / 27}),
        # Each copy is its own object on its own servers.
        ((2, 1), 2, {(2, 1): 0.5, (1, 1, 1): 0.5}),
        ((1, 1), 2, {(1, 1): 1.0}),
        ((2, 2), 2, {(2, 2): 0.25, (2, 1, 1): 0.5, (1, 1, 1, 1): 0.25}),
    ],
)
def test_server_loads_match_hand_counts(counts, replicas, expected):
    loads = server_loads(counts, replicas)
    assert set(loads) == set(expected)
    for key, probability in expected.items():
        assert loads[key] == pytest.approx(probability)


@pytest.mark.parametrize(
    ("counts", "replicas"),
    [((4,), 2), ((4,), 3), ((3, 2), 2), ((2, 2, 2), 4), ((1, 3), 0), ((5,), 1)],
)
def test_server_loads_are_distributions_over_every_request(counts, replicas):
    loads = server_loads(counts, replicas)
    assert sum(loads.values()) == pytest.approx(1.0)
    assert all(p > 0 for p in loads.values())
    assert all(sum(servers) == sum(counts) for servers in loads)
    assert all(list(servers) == sorted(servers, reverse=True) for servers in loads)


# ----------------------------------------------- exact enumeration vs the reference


def spiky_samples(
    rng, n, body_median_ms, spike_probability, spike_median_ms, body_sigma=0.35
) -> np.ndarray:
    """Lognormal body plus isolated lognormal spikes (§2's latency shape)."""
    body = body_median_ms * np.exp(body_sigma * rng.standard_normal(n))
    spikes = spike_median_ms * np.exp(0.6 * rng.standard_normal(n))
    return body + np.where(rng.random(n) < spike_probability, spikes, 0.0)


@pytest.fixture(scope="module")
def components():
    """Network, GET-service and PUT-service distributions of a hand-made service."""
    rng = np.random.default_rng(0)
    return (
        LatencyDistribution.from_samples(spiky_samples(rng, 20_000, 1.5, 0.002, 30.0), STEP_MS),
        LatencyDistribution.from_samples(spiky_samples(rng, 20_000, 12.0, 0.05, 60.0), STEP_MS),
        LatencyDistribution.from_samples(spiky_samples(rng, 20_000, 20.0, 0.05, 100.0), STEP_MS),
    )


def hand_model(components, replicas, shared_network, put_serialised=False):
    network, get_service, put_service = components
    return StorageServiceModel(
        get_replicas=replicas,
        put_replicas=replicas,
        shared_network=shared_network,
        put_serialised=put_serialised,
        network=network,
        get_service=get_service,
        put_service=put_service,
    )


def ks_to_exact(samples_ms: np.ndarray, exact: LatencyDistribution) -> float:
    """One-sample KS distance between draws and an exact lattice distribution."""
    values = np.unique(samples_ms)
    empirical = np.searchsorted(np.sort(samples_ms), values, side="right") / samples_ms.size
    return float(np.max(np.abs(empirical - np.asarray(exact.cdf(values)))))


EXACT_CASES = [
    # (shared network, replicas, serialised PUTs, operation, copies, requests per copy)
    *[
        (shared, replicas, False, "get", copies, rpc)
        for shared in (True, False)
        for replicas in (1, 2, 0)
        for copies, rpc in ((1, 3), (2, 2))
    ],
    (True, 2, False, "put", 1, 3),
    (False, 2, False, "put", 1, 3),
    (True, 1, True, "put", 2, 2),
    (False, 1, True, "put", 2, 2),
]


@pytest.mark.parametrize(("shared", "replicas", "serialised", "op", "copies", "rpc"), EXACT_CASES)
def test_exact_concurrent_matches_the_papers_sampling_procedure(
    components, shared, replicas, serialised, op, copies, rpc
):
    model = hand_model(components, replicas, shared, serialised)
    exact = model.concurrent(op, copies, rpc)
    reference = concurrent_monte_carlo(model, op, copies, rpc, REFERENCE_DRAWS, seed=7)
    # 99.9% one-sample KS bound for 10K draws is 1.95/sqrt(10K) = 0.0195.
    assert ks_to_exact(reference, exact) < 0.02
    # p99: the exact one lies in the reference's distribution-free ~3-sigma band of the
    # 99th-percentile order statistic (10K draws leave ~100 above it; the spike region is
    # too sparse for a fixed relative tolerance).
    low_ms, high_ms = np.percentile(reference, [98.7, 99.3])
    assert low_ms <= exact.quantile_ms(0.99) <= high_ms


@pytest.mark.parametrize(("shared", "replicas"), [(True, 1), (True, 2), (False, 1)])
def test_ignoring_correlation_is_far_from_the_reference(components, shared, replicas):
    """The KS check above discriminates: the independent-draws model fails it."""
    model = hand_model(components, replicas, shared)
    reference = concurrent_monte_carlo(model, "get", 1, 4, REFERENCE_DRAWS, seed=3)
    assert ks_to_exact(reference, model.naive("get", 4)) > 0.1


def test_serialised_puts_get_no_benefit_from_more_requests(components):
    model = hand_model(components, 1, shared_network=True, put_serialised=True)
    one, four = model.single("put"), model.concurrent("put", 1, 4)
    assert four == one  # one queue, shared network: the first request decides
    independent = hand_model(components, 0, shared_network=True)
    assert independent.concurrent("put", 1, 4).quantile_ms(0.99) < 0.5 * one.quantile_ms(0.99)


def test_concurrent_is_cached_and_counts_ignore_zero_copies(components):
    model = hand_model(components, 2, shared_network=True)
    assert model.concurrent("get", 2, 2) is model.concurrent_counts("get", (2, 2))
    assert model.concurrent_counts("get", (2, 0, 1)) is model.concurrent_counts("get", (2, 1))


@pytest.mark.parametrize(("operation", "counts"), [("delete", (1,)), ("get", ()), ("get", (0,))])
def test_concurrent_rejects_unknown_operations_and_empty_counts(components, operation, counts):
    model = hand_model(components, 2, shared_network=True)
    with pytest.raises(InputError):
        model.concurrent_counts(operation, counts)


def test_ks_distance_of_simple_samples():
    assert ks_distance(np.arange(10.0), np.arange(10.0)) == 0.0
    assert ks_distance(np.zeros(5), np.ones(5)) == 1.0
    assert ks_distance(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == pytest.approx(0.5)


# ------------------------------------------------ inference on the simulated world


@pytest.fixture(scope="module")
def world():
    return build_world(0)


@pytest.fixture(scope="module")
def inferred(world):
    """Every region's model, learnt from its agent's 10K pairs only."""
    return [
        infer_storage_model(measure_storage(world, j, AGENT_PAIRS, seed=j))
        for j in range(len(world.regions))
    ]


def test_world_has_both_providers(world):
    providers = [r.provider for r in world.regions]
    assert len(providers) == 21
    assert set(providers) == {"s3", "azure"}


def test_inference_recovers_every_regions_hidden_structure(world, inferred):
    for region, truth, model in zip(world.regions, world.behaviours, inferred, strict=True):
        expected = {"s3": (2, True, False), "azure": (1, False, True)}[region.provider]
        assert (truth.get_replicas, truth.shared_network, truth.put_serialised) == expected
        found = (model.get_replicas, model.shared_network, model.put_serialised)
        assert found == expected, region.name
        if not truth.put_serialised:
            assert model.put_replicas == truth.put_replicas, region.name


def infer_hand_made(world, get_replicas, put_replicas, shared_network, put_serialised):
    """The model inferred from a region whose hidden structure is set by hand."""
    truth = replace(
        world.behaviours[0],
        get_replicas=get_replicas,
        put_replicas=put_replicas,
        shared_network=shared_network,
        put_serialised=put_serialised,
    )
    fake_world = SimpleNamespace(behaviours=(truth,))
    return infer_storage_model(measure_storage(fake_world, 0, AGENT_PAIRS, seed=11))


@pytest.mark.parametrize(
    ("get_replicas", "put_replicas", "shared_network", "put_serialised"),
    [(3, 2, False, False), (4, 1, True, False), (0, 1, False, True), (1, 3, False, False)],
)
def test_inference_follows_the_truth_not_the_provider(
    world, get_replicas, put_replicas, shared_network, put_serialised
):
    model = infer_hand_made(world, get_replicas, put_replicas, shared_network, put_serialised)
    assert model.get_replicas == get_replicas
    assert model.shared_network == shared_network
    assert model.put_serialised == put_serialised
    if not put_serialised:
        assert model.put_replicas == put_replicas


def test_inference_finds_serialised_puts_behind_a_shared_network(world):
    model = infer_hand_made(world, 2, 0, shared_network=True, put_serialised=True)
    assert model.put_serialised


# ------------------------------------------------------ estimator vs ground truth


def test_eight_concurrent_gets_estimate_is_close_and_naive_is_not(world, inferred):
    """§6.2 / Fig. 15: 8 concurrent GETs to one object from a VM in every S3-like region."""
    errors, naive_ratios = [], []
    for j, region in enumerate(world.regions):
        if region.provider != "s3":
            continue
        behaviour = world.behaviours[j]
        rng = np.random.default_rng(500 + j)
        draws = storage_requests(behaviour, "get", (8,), TRUTH_DRAWS, rng)
        truth_p99_ms = float(np.percentile(completion_ms(draws, behaviour, "get").min(axis=1), 99))
        estimate_p99_ms = float(inferred[j].concurrent_counts("get", (8,)).quantile_ms(0.99))
        naive_p99_ms = float(inferred[j].naive("get", 8).quantile_ms(0.99))
        errors.append(abs(estimate_p99_ms - truth_p99_ms) / truth_p99_ms)
        naive_ratios.append(naive_p99_ms / truth_p99_ms)
    assert len(errors) == 8
    assert float(np.median(errors)) <= 0.05
    assert max(naive_ratios) <= 0.8


# ------------------------------------------------------------ PairSamples inputs


def pairs(n=20, value_ms=1.0) -> np.ndarray:
    return np.full((n, 2), value_ms)


@pytest.mark.parametrize(
    ("network_ms", "service_ms", "arrival_ms", "field"),
    [
        (np.ones((20, 3)), pairs(), pairs(), "network_ms"),
        (np.ones(40), pairs(), pairs(), "network_ms"),
        (pairs(9), pairs(9), pairs(9), "network_ms"),
        (pairs(), pairs(value_ms=-1.0), pairs(), "service_ms"),
        (pairs(), pairs(), pairs(value_ms=np.nan), "arrival_ms"),
        (pairs(), pairs(), pairs(value_ms=np.inf), "arrival_ms"),
        (pairs(20), pairs(30), pairs(40), "service_ms"),
        (pairs(20), pairs(30), pairs(20), "service_ms"),
    ],
)
def test_pair_samples_reject_bad_arrays(network_ms, service_ms, arrival_ms, field):
    with pytest.raises(InputError) as raised:
        PairSamples(network_ms, service_ms, arrival_ms)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("n_network", "n_service", "n_arrival"), [(10, 12, 12), (10, 10, 12), (12, 10, 10)]
)
def test_pair_samples_reject_any_mismatched_pair_count(n_network, n_service, n_arrival):
    with pytest.raises(InputError):
        PairSamples(pairs(n_network), pairs(n_service), pairs(n_arrival))


def test_pair_samples_first_arrival_service_and_totals():
    network = np.tile([2.0, 4.0], (10, 1))
    service = np.tile([10.0, 20.0], (10, 1))
    arrival = np.tile([3.0, 1.0], (10, 1))  # the second request arrives first
    samples = PairSamples(network, service, arrival)
    assert np.array_equal(samples.first_arrival_service_ms, np.full(10, 20.0))
    assert np.array_equal(samples.total_ms, np.tile([12.0, 24.0], (10, 1)))
