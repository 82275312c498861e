"""Per-pair WAN on the live testbed: its spec, workloads, and curves per site pair (§4.2)."""

import numpy as np
import pytest

from geoslo.control.kurma import KurmaConfig, KurmaModel, KurmaObservation, build_problem
from geoslo.errors import ConfigError
from geoslo.live._backend import QueryWork, SleepWork, reply_bytes
from geoslo.live._resp import PythonReader, encode_command
from geoslo.live.kurma import TestbedSpec, canonical_sites
from geoslo.models import SloSurface

GRID = np.array([0.0, 500.0, 1000.0])


def flat_surface(violation: float) -> SloSurface:
    bases = np.arange(0, 31)
    values = np.full((bases.size, 1, GRID.size), violation)
    values[0] = 0.0  # local requests: no WAN
    return SloSurface(bases, np.array([0.0]), GRID, values)


def three_sites(pairs=None) -> KurmaModel:
    shared = flat_surface(0.1)
    return KurmaModel(("a", "b", "c"), np.full(3, 1000.0), (shared,) * 3, 0.0, pairs)


def observation() -> KurmaObservation:
    rtt = np.full((3, 3), 10.0) - 10.0 * np.eye(3)
    return KurmaObservation(np.full(3, 300.0), np.zeros(3), rtt)


def test_each_origin_reads_its_own_pairs_curve():
    pairs = ((None, flat_surface(0.2), None), (None, None, flat_surface(0.7)), (None,) * 3)
    problem = build_problem(observation(), three_sites(pairs), KurmaConfig())
    assert problem.violation[0, 1, 1] == pytest.approx(0.2)  # a -> b: the pair's own
    assert problem.violation[1, 2, 1] == pytest.approx(0.7)  # b -> c
    assert problem.violation[2, 0, 1] == pytest.approx(0.1)  # no pair curve: the site's
    assert problem.violation[1, 1, 1] == 0.0  # local


def test_a_refit_site_curve_replaces_the_pairs_into_that_site_only():
    pairs = ((None, flat_surface(0.2), flat_surface(0.3)),) + ((None,) * 3,) * 2
    model = three_sites(pairs).with_site_surface(1, flat_surface(0.5))
    assert model.surface(0, 1).violation[5, 0, 1] == pytest.approx(0.5)
    assert model.surface(0, 2).violation[5, 0, 1] == pytest.approx(0.3)


def test_each_pair_has_its_own_residual_mean_the_same_both_ways():
    spec = TestbedSpec(sites=("London", "Frankfurt", "Madrid"), seed=3)
    means = {
        (a, b): spec.residual_rtt_mean_ms(a, b) for a in spec.sites for b in spec.sites if a != b
    }
    assert all(means[(a, b)] == means[(b, a)] for a, b in means)
    assert all(0.5 <= m <= 2.0 and (2 * m).is_integer() for m in means.values())
    draws = [TestbedSpec(seed=s).residual_rtt_mean_ms("Toronto", "Montreal") for s in range(20)]
    assert len(set(draws)) > 1  # seeds give pairs different residuals


def test_sites_are_ibm_regions_or_kurmas_three_not_both():
    assert canonical_sites(["london", "MADRID"]) == ("London", "Madrid")
    assert canonical_sites(["ireland", "frankfurt"]) == ("Ireland", "Frankfurt")
    with pytest.raises(ConfigError, match="not both"):
        canonical_sites(["ireland", "madrid"])
    with pytest.raises(ConfigError, match="unknown site"):
        canonical_sites(["atlantis", "london"])
    with pytest.raises(ConfigError, match="network"):
        TestbedSpec(network="wifi")


def test_ibm_sites_take_their_base_rtts_from_the_matrices():
    spec = TestbedSpec(sites=("London", "Madrid"), seed=1)
    schedule = spec.base_rtt_schedules()[("London", "Madrid")]
    assert 24.0 <= schedule.min_ms and schedule.max_ms <= 30.0  # IBM: 25-29 ms
    topology = spec.topology(1000.0)
    assert topology.names == ("London", "Madrid")


def parse(payload: bytes) -> list:
    reader = PythonReader()
    reader.feed(payload)
    replies = []
    while (reply := reader.gets()) is not False:
        replies.append(reply)
    return replies


def test_query_work_reads_the_top_ten_and_writes_the_head():
    work = QueryWork()
    read, replies = work.read_payload(b"k:3", None)
    assert read == encode_command(b"SORT_RO", b"k:3", b"LIMIT", b"0", b"10") and replies == 1
    write, replies = work.write_payload(b"k:3", b"7", None, loaded=False)
    assert write == encode_command(b"LSET", b"k:3", b"0", b"7") and replies == 1
    assert work.capacity_per_server_rps == 0.0  # nothing measured yet
    assert QueryWork(cost_us=200.0).capacity_per_server_rps == pytest.approx(500.0)
    with pytest.raises(ConfigError, match="cpu_fraction"):
        QueryWork(cpu_fraction=0.0)


def test_fill_commands_count_their_replies():
    for work in (QueryWork(list_length=50), SleepWork()):
        for payload, replies in work.fill_commands(1234, seed=1):
            assert payload.count(b"\r\n*") + 1 == replies  # one array per command


def test_reply_bytes_count_bulk_strings_in_lists():
    assert reply_bytes([b"OK", b"12345"]) == 7
    assert reply_bytes([[b"1", b"22"], 5, None]) == 3
    assert reply_bytes(b"") == 0


def test_a_probe_faster_than_the_path_does_not_shift_its_block():
    from geoslo.models import probe_residuals_ms

    block = np.array([20.0, 20.5, 21.0, 20.2, 8.0, 20.1])  # one probe released early
    plain = probe_residuals_ms([block], 6)
    robust = probe_residuals_ms([block], 6, skip_lowest=1)
    assert plain.max() == pytest.approx(13.0)  # every probe looks 12 ms late
    assert robust.max() == pytest.approx(1.0) and robust.min() == 0.0
