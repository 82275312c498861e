"""The Supercloud's image storage (SoCC 2016, §4.1) on real processes with 75 ms between
sites: close-to-open consistency across sites, and what proactive propagation buys."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from geoslo.live.imagestore import ImageService
from geoslo.live.imagestore._dbench import DbenchSettings, run_storage_benchmark

pytestmark = pytest.mark.integration

SITES = ("virginia", "california")


def _block(block: int, round_: int) -> bytes:
    return bytes([block % 251, round_]) * 2048


async def _write_close_open_read(service: ImageService) -> list[bool]:
    """Two rounds of writes at alternating sites; after each close, an open at every
    site must read the latest version of every block."""
    results = []
    for round_, writer_site in enumerate(SITES * 2):
        writer = service.client(writer_site)
        await writer.open()
        for block in range(round_, 40, 2 + round_):  # overlapping sets of blocks per round
            await writer.write(block, _block(block, round_))
        await writer.close()
        for reader_site in SITES:
            reader = service.client(reader_site)
            await reader.open()
            for block in range(40):
                rounds = [r for r in range(round_ + 1) if block in range(r, 40, 2 + r)]
                expected = _block(block, rounds[-1]) if rounds else bytes(4096)
                results.append(await reader.read(block) == expected)
            await reader.close()
    return results


@pytest.mark.parametrize("policy", ["on_demand", "proactive"])
def test_after_a_close_an_open_anywhere_reads_the_latest_blocks(policy, tmp_path) -> None:
    with ImageService.up(SITES, policy, 75.0, tmp_path) as service:
        results = asyncio.run(_write_close_open_read(service))
    assert len(results) == 4 * 2 * 40
    assert all(results)


def test_proactive_propagation_is_faster_after_migration_and_on_demand_moves_less(
    tmp_path,
) -> None:
    settings = DbenchSettings.quick()
    runs = {p: run_storage_benchmark(p, settings, tmp_path) for p in ("on_demand", "proactive")}
    soon_after = {
        p: r.mean_mb_per_s(settings.block_bytes, r.migration_end_s, r.migration_end_s + 5)
        for p, r in runs.items()
    }
    remote_reads = {p: r.server_stats["store-california"]["remote_reads"] for p, r in runs.items()}
    assert soon_after["proactive"] > soon_after["on_demand"]
    assert remote_reads["proactive"] < remote_reads["on_demand"]
    assert runs["on_demand"].storage_wan_bytes < runs["proactive"].storage_wan_bytes
    for run in runs.values():
        assert 0 < run.migration_end_s < run.op_end_s.max() < settings.max_run_s
        assert np.all(np.diff(run.op_end_s) >= 0)
        assert run.server_stats["store-california"]["local_reads"] > 0
