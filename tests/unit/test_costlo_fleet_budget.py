"""A hedge budget shared by a fleet (issue 38, item 7): clients naming one pool stay
within one budget kept by the lock service, where as many local windows each allow their
own reserve."""

from __future__ import annotations

import asyncio

import pytest

from geoslo.control.costlo.types import HedgeBudget
from geoslo.errors import TestbedError
from geoslo.live._processes import free_ports
from geoslo.live.costlo import LockClient, LockService
from geoslo.live.costlo._budget import LocalBudget, SharedBudget
from geoslo.live.costlo._jsonlines import serve_json_lines

# no share of the primaries, a reserve of 4 extra requests per 10-s window
BUDGET = HedgeBudget(extra_fraction=0.0, window_s=10.0, min_extra_per_s=0.4)
CLIENTS, ASKS = 3, 4


async def _admitted(budgets) -> int:
    """Every client records a primary and asks for one extra request, ASKS times."""
    admitted = 0
    for _ in range(ASKS):
        for budget in budgets:
            budget.record_primary(0.0)
            admitted += await budget.try_extra(0.0, 1)
    return admitted


def test_clients_of_one_pool_share_one_budget_and_local_windows_do_not(tmp_path):
    async def scenario():
        (port,) = free_ports(1)
        service = LockService(tmp_path / "locks.jsonl")
        server = await serve_json_lines(service.handle, port)
        clients = [await LockClient.open(port) for _ in range(CLIENTS)]
        try:
            shared = await _admitted([SharedBudget(c, "photos", BUDGET) for c in clients])
            local = await _admitted([LocalBudget(BUDGET) for _ in range(CLIENTS)])
            with pytest.raises(TestbedError, match="pool 'photos' has"):
                await clients[0].hedge("photos", HedgeBudget(), 0, 1)  # another budget
            return shared, local
        finally:
            for client in clients:
                await client.close()
            server.close()
            await server.wait_closed()
            service.close()

    shared, local = asyncio.run(scenario())
    reserve = int(BUDGET.allowed_extra(0))
    assert shared == reserve  # the fleet's one reserve
    assert local == min(ASKS, reserve) * CLIENTS  # each window its own


def test_a_shared_budget_whose_service_does_not_answer_refuses_the_hedge():
    class Mute:
        async def hedge(self, *args):
            await asyncio.sleep(10)

    async def scenario():
        budget = SharedBudget(Mute(), "photos", BUDGET)
        budget.record_primary(0.0, 5)
        return await budget.try_extra(0.0, 1), budget.unanswered, budget._pending

    assert asyncio.run(scenario()) == (False, 1, 5)  # the primaries wait for the next ask
