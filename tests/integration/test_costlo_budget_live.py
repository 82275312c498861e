"""The hedge budget in CosTLO's live client and VM libraries, against real Redis servers,
relays and lock services: redundant sets the window cannot afford are not issued, and the
records say so."""

from __future__ import annotations

import asyncio

import pytest

from _engines import skip_without_engine
from geoslo.control.costlo.types import Configuration, GetTuple, HedgeBudget, PutTuple
from geoslo.live.costlo import CostloClient, CostloCluster, VmLibrary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# Every operation wants its redundant set (zero timeout, probability 1): 2 extra storage
# requests per GET (serving (2, 1) + second (1, 1)) and 2 per PUT ((1, 3)); the budget
# allows half a request per primary and no reserve, so about a quarter of the sets.
BUDGET = HedgeBudget(extra_fraction=0.5, window_s=10.0, min_extra_per_s=0.0)
CONFIGURATION = Configuration(
    GetTuple(2, 1),
    GetTuple(1, 1),
    PutTuple(1, 3),
    get_timeout_ms=0.0,
    put_timeout_ms=0.0,
    hedge_budget=BUDGET,
)
OPERATIONS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    skip_without_engine("redis")
    running = CostloCluster.up(tmp_path_factory.mktemp("costlo-budget"), second_rtt_ms=5.0)
    yield running
    running.down()


def test_the_budget_bounds_redundant_gets_and_puts(cluster, tmp_path):
    keys = [f"budget:k{i}" for i in range(4)]

    async def scenario():
        async with VmLibrary(
            CONFIGURATION, cluster.regions(), cluster.lock_port(), tmp_path / "vm.log", "b"
        ) as vm:
            written = {}
            for i in range(OPERATIONS):
                key = keys[i % len(keys)]
                written[key] = (await vm.put(key, f"{key}|{i}".encode()), f"{key}|{i}".encode())
            await vm.drain()
        async with CostloClient(CONFIGURATION, cluster.regions()) as client:
            results = [await client.get(keys[i % len(keys)]) for i in range(OPERATIONS)]
        return written, results, vm.records, client.records

    written, results, puts, gets = asyncio.run(scenario())
    assert results == [written[keys[i % len(keys)]] for i in range(OPERATIONS)]
    get_extra = sum(r.storage_requests - 1 for r in gets)
    put_extra = sum(r.sync_requests - 1 for r in puts)
    # Within the budget over the run (shorter than the window), and it binds both ways.
    assert get_extra <= BUDGET.extra_fraction * OPERATIONS
    assert put_extra <= BUDGET.extra_fraction * OPERATIONS
    for records in (gets, puts):
        refused = [r for r in records if r.budget_refused]
        assert len(refused) >= OPERATIONS // 2
        assert any(r.redundant for r in records)
        assert not any(r.redundant for r in refused)
    assert all(r.storage_requests == 1 for r in gets if r.budget_refused)
    assert all(r.storage_requests == 3 for r in gets if r.redundant)
    assert all(r.sync_requests == 1 for r in puts if r.budget_refused)


def test_without_a_budget_every_set_is_issued(cluster, tmp_path):
    plain = Configuration(GetTuple(2, 1), GetTuple(1, 1), get_timeout_ms=0.0)

    async def scenario():
        async with VmLibrary(
            plain, cluster.regions(), cluster.lock_port(), tmp_path / "vm.log", "nb"
        ) as vm:
            await vm.put("nobudget:k", b"value")
            await vm.drain()
        async with CostloClient(plain, cluster.regions()) as client:
            for _ in range(10):
                await client.get("nobudget:k")
        return client.records

    records = asyncio.run(scenario())
    assert all(r.redundant and not r.budget_refused for r in records)
    assert sum(r.storage_requests - 1 for r in records) == 20  # 200% extra


def test_clients_sharing_a_pool_stay_within_one_budget(cluster):
    """Three end-hosts' clients, each wanting every redundant set: with one pool in the
    lock service their extra requests together stay within one budget's reserve; each on
    its own window, they take three reserves (issue 38, item 7)."""
    budget = HedgeBudget(extra_fraction=0.0, window_s=10.0, min_extra_per_s=0.6)  # 6 extra
    configuration = Configuration(GetTuple(2, 1), get_timeout_ms=0.0, hedge_budget=budget)
    key, clients, gets = "fleet:k", 3, 8

    async def extra(pool: str | None) -> int:
        shared = {"budget_pool": pool, "budget_service": cluster.lock_port()} if pool else {}
        hosts = [CostloClient(configuration, cluster.regions(), **shared) for _ in range(clients)]
        for host in hosts:
            await host.start()
        try:
            for _ in range(gets):
                for host in hosts:
                    await host.get(key)
        finally:
            for host in hosts:
                await host.close()
        return sum(r.storage_requests - 1 for h in hosts for r in h.records)

    async def scenario():
        async with VmLibrary(
            Configuration(GetTuple(2, 1)), cluster.regions(), cluster.lock_port(),
            cluster.state_dir / "fleet.log", "fleet",
        ) as vm:  # fmt: skip
            await vm.put(key, b"value")
            await vm.drain()
        return await extra("fleet-photos"), await extra(None)

    shared, separate = asyncio.run(scenario())
    assert shared <= budget.allowed_extra(0) < separate
    assert separate == clients * budget.allowed_extra(0)
