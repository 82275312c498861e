"""Ground truth of CosTLO's simulated clouds (§2, §4, §5.3, §7): how concurrent requests
share network and service draws, the FIFO queue of a serialising service, and the client
and VM libraries' GET/PUT operations under timeouts and probabilities."""

import numpy as np
import pytest

from geoslo.control.costlo import Configuration, GetTuple, PutTuple
from geoslo.models._storage_service import ks_distance
from geoslo.sim.costlo import (
    build_world,
    completion_ms,
    get_operations,
    measure_storage,
    put_operations,
    storage_requests,
)
from geoslo.sim.costlo._requests import fifo_service_ms

OPERATIONS = 20_000
KB = 1024


@pytest.fixture(scope="module")
def world():
    return build_world(0, 5)


def region_of(world, provider: str, nth: int = 0) -> int:
    return [j for j, r in enumerate(world.regions) if r.provider == provider][nth]


@pytest.fixture(scope="module")
def prefix_regions(world):
    """Prefix 0, its serving (S3-like) region and the closest other region."""
    serving, second = world.serving_and_second(0)
    return 0, serving, second


def redundant_configuration(timeout_ms: float, probability: float) -> Configuration:
    return Configuration(
        serving=GetTuple(1, 2),
        second=GetTuple(1, 1),
        get_timeout_ms=timeout_ms,
        get_probability=probability,
    )


# --------------------------------------------------------- concurrent structure


@pytest.mark.parametrize(("provider", "shared"), [("s3", True), ("azure", False)])
def test_concurrent_requests_share_the_network_draw_only_on_s3(world, provider, shared):
    j = region_of(world, provider)
    draws = storage_requests(world.behaviours[j], "get", (4,), 1_000, np.random.default_rng(1))
    identical = np.all(draws.network_ms == draws.network_ms[:, :1], axis=1)
    assert draws.network_ms.shape == (1_000, 4)
    if shared:
        assert identical.all()
    else:
        assert not identical.any()


def test_requests_to_one_s3_object_land_on_two_replicas(world):
    """Two requests to one object share the service draw half of the time (2 replicas);
    requests to distinct objects never do."""
    behaviour = world.behaviours[region_of(world, "s3")]
    rng = np.random.default_rng(2)
    same = storage_requests(behaviour, "get", (2,), OPERATIONS, rng).service_ms
    distinct = storage_requests(behaviour, "get", (1, 1), OPERATIONS, rng).service_ms
    assert np.mean(same[:, 0] == same[:, 1]) == pytest.approx(0.5, abs=0.02)
    assert np.mean(distinct[:, 0] == distinct[:, 1]) == 0.0


@pytest.mark.parametrize(
    ("arrival_ms", "own_service_ms", "logged_ms"),
    [
        # In order: each waits for the one before.
        ([0.0, 1.0, 5.0], [3.0, 1.0, 2.0], [3.0, 3.0, 2.0]),
        # Out of order: column 1 arrives first and is served first.
        ([2.0, 0.0], [1.0, 4.0], [3.0, 4.0]),
        # Gaps: nobody waits.
        ([0.0, 10.0, 20.0], [5.0, 5.0, 5.0], [5.0, 5.0, 5.0]),
        # Same instant: served one after another.
        ([1.0, 1.0], [2.0, 2.0], [2.0, 4.0]),
    ],
)
def test_fifo_service_matches_a_hand_computed_queue(arrival_ms, own_service_ms, logged_ms):
    out = fifo_service_ms(np.array([arrival_ms]), np.array([own_service_ms]))
    assert out[0] == pytest.approx(logged_ms)


def test_serialised_puts_queue_behind_each_other(world):
    behaviour = world.behaviours[region_of(world, "azure")]
    draws = storage_requests(behaviour, "put", (1, 1, 1), 2_000, np.random.default_rng(3))
    done = completion_ms(draws, behaviour, "put")
    own = draws.network_ms + draws.service_ms
    # Nobody finishes sooner than alone, and the last one to arrive waits for the others'
    # work: its completion is at least the whole queue's work after the first arrival.
    assert np.all(done >= own - 1e-9)
    last = np.argmax(draws.arrival_ms, axis=1)
    rows = np.arange(len(last))
    departure = draws.arrival_ms + (done - draws.network_ms)
    assert np.all(
        departure[rows, last] >= draws.arrival_ms.min(axis=1) + draws.service_ms.sum(axis=1) - 1e-9
    )


# ------------------------------------------------------------- GET operations


def test_baseline_issues_exactly_one_request_per_operation(world, prefix_regions):
    prefix, serving, second = prefix_regions
    out = get_operations(world, prefix, serving, second, Configuration(), OPERATIONS, seed=4)
    assert np.all(out.storage_requests == 1)
    assert not out.redundant.any()
    assert out.latency_ms.shape == (OPERATIONS,)
    assert np.all(out.latency_ms > world.base_rtt_ms[prefix, serving])


@pytest.mark.parametrize("timeout_ms", [0.0, 40.0])
def test_probability_zero_never_issues_the_redundant_set(world, prefix_regions, timeout_ms):
    prefix, serving, second = prefix_regions
    baseline = get_operations(world, prefix, serving, second, Configuration(), OPERATIONS, seed=5)
    out = get_operations(
        world,
        prefix,
        serving,
        second,
        redundant_configuration(timeout_ms, 0.0),
        OPERATIONS,
        seed=5,
    )
    assert not out.redundant.any()
    assert np.all(out.storage_requests == 1)
    assert np.array_equal(out.latency_ms, baseline.latency_ms)  # the same first request


def test_zero_timeout_and_probability_one_always_issues_the_redundant_set(world, prefix_regions):
    prefix, serving, second = prefix_regions
    c = redundant_configuration(0.0, 1.0)
    baseline = get_operations(world, prefix, serving, second, Configuration(), OPERATIONS, seed=6)
    out = get_operations(world, prefix, serving, second, c, OPERATIONS, seed=6)
    assert out.redundant.all()
    assert np.all(out.storage_requests == c.get_requests) and c.get_requests == 3
    assert np.percentile(out.latency_ms, 99) < 0.8 * np.percentile(baseline.latency_ms, 99)


@pytest.mark.parametrize(("timeout_percentile", "probability"), [(50, 1.0), (50, 0.5), (90, 0.7)])
def test_redundant_fraction_is_late_first_requests_times_probability(
    world, prefix_regions, timeout_percentile, probability
):
    prefix, serving, second = prefix_regions
    baseline = get_operations(world, prefix, serving, second, Configuration(), OPERATIONS, seed=7)
    timeout_ms = float(np.ceil(np.percentile(baseline.latency_ms, timeout_percentile)))
    late = float(np.mean(baseline.latency_ms > timeout_ms))  # DNS misses are 0.2%
    out = get_operations(
        world,
        prefix,
        serving,
        second,
        redundant_configuration(timeout_ms, probability),
        OPERATIONS,
        seed=7,
    )
    assert out.redundant_fraction == pytest.approx(late * probability, abs=0.01)
    assert np.all(out.storage_requests[out.redundant] == 3)
    assert np.all(out.storage_requests[~out.redundant] == 1)
    # A later redundant set never makes an operation slower than its first request.
    assert np.all(out.latency_ms <= baseline.latency_ms + 1e-9)


@pytest.mark.parametrize("timeout_ms", [0.0, 30.0])
def test_relayed_tuple_issues_its_requests_once(world, prefix_regions, timeout_ms):
    """The first request is relayed too; the redundant set adds the tuple's other 3
    (as docs/costlo-live.md's client library does)."""
    prefix, serving, second = prefix_regions
    c = Configuration(serving=GetTuple(2, 2, relay_vm=True), get_timeout_ms=timeout_ms)
    out = get_operations(world, prefix, serving, second, c, 2_000, seed=8)
    assert np.all(out.storage_requests == np.where(out.redundant, 4, 1))


# ------------------------------------------------------------- object size (§7)


def test_service_latency_steps_up_per_64_kb_block(world):
    behaviour = world.behaviours[region_of(world, "s3")]

    def service_ms(object_bytes):
        rng = np.random.default_rng(9)
        return storage_requests(behaviour, "get", (1,), 1_000, rng, object_bytes).service_ms

    block_ms = behaviour.block_service_ms
    assert np.array_equal(service_ms(1 * KB), service_ms(64 * KB))
    assert service_ms(64 * KB + 1) - service_ms(64 * KB) == pytest.approx(block_ms)
    assert service_ms(3 * 64 * KB) - service_ms(1 * KB) == pytest.approx(2 * block_ms)
    assert service_ms(3 * 64 * KB + 1) - service_ms(1 * KB) == pytest.approx(3 * block_ms)


def test_larger_objects_take_longer_end_to_end(world, prefix_regions):
    prefix, serving, second = prefix_regions

    def median_ms(object_bytes):
        out = get_operations(
            world, prefix, serving, second, Configuration(), 5_000, 10, object_bytes
        )
        return float(np.median(out.latency_ms))

    medians = [median_ms(b) for b in (1 * KB, 64 * KB, 256 * KB, 1024 * KB)]
    assert medians == sorted(medians)
    assert medians[-1] > medians[0] + 100.0  # 1 MB over a 10-50 Mbps path


# ------------------------------------------------------------- PUT operations


def put_p99_gain(world, region: int, put: PutTuple) -> float:
    """Relative drop of the p99 PUT latency from the baseline to ``put`` (always issued)."""
    base = put_operations(world, 0, region, Configuration(), OPERATIONS, seed=12).latency_ms
    more = put_operations(world, 0, region, Configuration(put=put), OPERATIONS, seed=12)
    assert np.all(more.storage_requests == put.requests)
    return 1.0 - np.percentile(more.latency_ms, 99) / np.percentile(base, 99)


@pytest.mark.parametrize("put", [PutTuple(1, 4), PutTuple(4, 1)])
def test_serialised_puts_gain_little_from_redundancy(world, put):
    """Four PUTs always issued: S3-like regions serve them in parallel, Azure-like ones
    queue them behind the first (only the fastest arrival helps a little)."""
    gains = {"s3": [], "azure": []}
    for j, region in enumerate(world.regions):
        gains[region.provider].append(put_p99_gain(world, j, put))
    assert min(gains["s3"]) > 1.5 * max(gains["azure"])
    assert max(gains["azure"]) < 0.15
    assert np.median(gains["s3"]) > 0.25
    assert np.median(gains["azure"]) < 0.1


def test_put_redundancy_with_probability_zero_issues_one_request(world):
    j = region_of(world, "s3")
    c = Configuration(put=PutTuple(1, 4), put_timeout_ms=0.0, put_probability=0.0)
    out = put_operations(world, 0, j, c, OPERATIONS, seed=13)
    base = put_operations(world, 0, j, Configuration(), OPERATIONS, seed=14)
    assert not out.redundant.any()
    assert np.all(out.storage_requests == 1)
    # The unused requests are still drawn, so the arrays differ: compare distributions.
    assert ks_distance(out.latency_ms, base.latency_ms) < 0.03


# ---------------------------------------------------------------- determinism


def test_same_seed_gives_the_same_world_and_operations():
    a, b = build_world(3, 4), build_world(3, 4)
    prefix = 1
    serving, second = a.serving_and_second(prefix)
    assert a.behaviours == b.behaviours
    assert np.array_equal(a.base_rtt_ms, b.base_rtt_ms)
    c = redundant_configuration(30.0, 0.5)
    runs = [get_operations(w, prefix, serving, second, c, 3_000, seed=14) for w in (a, b)]
    assert np.array_equal(runs[0].latency_ms, runs[1].latency_ms)
    assert np.array_equal(runs[0].storage_requests, runs[1].storage_requests)
    other = get_operations(a, prefix, serving, second, c, 3_000, seed=15)
    assert not np.array_equal(runs[0].latency_ms, other.latency_ms)
    puts = [
        put_operations(w, prefix, serving, Configuration(put=PutTuple(2, 1)), 500, 3)
        for w in (a, b)
    ]
    assert np.array_equal(puts[0].latency_ms, puts[1].latency_ms)
    assert build_world(4, 4).behaviours != a.behaviours


def test_same_seed_gives_the_same_agent_measurements(world):
    first, again = (measure_storage(world, 2, 200, seed=5) for _ in range(2))
    other = measure_storage(world, 2, 200, seed=6)
    assert np.array_equal(first.get_same_object.service_ms, again.get_same_object.service_ms)
    assert np.array_equal(
        first.put_distinct_objects.arrival_ms, again.put_distinct_objects.arrival_ms
    )
    assert not np.array_equal(first.get_same_object.service_ms, other.get_same_object.service_ms)
