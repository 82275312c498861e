"""The Supercloud paper's §5.2.2 ZooKeeper migration, live: a real ensemble over two
emulated sites (network namespaces, 100 ms RTT), moved by dynamic reconfiguration while a
client in each site keeps a 9:1 read/write load. Needs root, Java and Debian's zookeeper."""

from __future__ import annotations

import json
import math

import pytest

from geoslo.errors import InputError
from geoslo.live.supercloud.zookeeper import (
    SITE_A,
    SITE_B,
    ZkLiveSettings,
    cannot_run_reason,
    run_reconfiguration,
)


@pytest.fixture
def can_run() -> None:
    reason = cannot_run_reason()
    if reason:
        pytest.skip(reason)


def test_an_unknown_procedure_is_an_input_error(tmp_path) -> None:
    with pytest.raises(InputError, match="procedure.*3-step") as raised:
        run_reconfiguration("4-step", ZkLiveSettings(), tmp_path)
    assert raised.value.field == "procedure"


def _served_in_both_sites(run, start_s: float, end_s: float) -> bool:
    window = slice(int(math.ceil(start_s)), int(end_s))
    return all(sum(run.throughput_ops_per_s[site][window]) > 0 for site in (SITE_A, SITE_B))


# three reconfigurations across the emulated WAN (the own-ensemble and run tests move
# ensembles briefly)
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(150)
def test_3_step_moves_the_leader_to_tokyo(can_run, tmp_path) -> None:
    run = run_reconfiguration("3-step", ZkLiveSettings(), tmp_path)
    print(json.dumps(run.to_dict(), default=str))
    assert run.leader_site_before == SITE_A
    assert run.leader_site_after == SITE_B
    assert [len(s["members"]) for s in run.steps] == [5, 3, 3]
    assert 6 in run.steps[-1]["members"]  # the new Virginia server
    assert _served_in_both_sites(run, 0, run.first_step_s)
    assert _served_in_both_sites(run, run.after_start_s, run.duration_s)
    assert run.median_before_ops_per_s["total"] > 0
    assert run.median_after_ops_per_s["total"] > 0
    assert 0 <= run.lowest_total_fraction < 2
    assert isinstance(run.seconds_below_half, int)
    for site in (SITE_A, SITE_B):
        for op in ("read", "write"):
            assert run.latency_ms[site][op]["before"]["count"] > 0
            assert run.latency_ms[site][op]["before"]["p50_ms"] > 0
