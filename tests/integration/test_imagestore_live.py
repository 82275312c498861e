"""The Supercloud's image storage (SoCC 2016, §4.1) on real processes with 75 ms between
sites: close-to-open consistency across sites, a second writer's stale close refused, and
what proactive propagation buys."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from geoslo.live.supercloud.imagestore import ImageService, StaleCloseError
from geoslo.live.supercloud.imagestore._dbench import DbenchSettings, run_storage_benchmark

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


# a migration with each propagation mode end to end (the writers' tests cover the store)
@pytest.mark.slow
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


def _content(writer: int, block: int) -> bytes:
    return bytes([writer, block % 251]) * 2048


async def _two_writers(service: ImageService, writer_sites: tuple[str, str], blocks: int):
    """Two writers open the image, both write every block (reading each back, so that
    proactive propagation pushes them), then close at once. Returns the close outcomes
    and, per site, what a later open reads."""
    writers = [service.client(site) for site in writer_sites]
    for writer in writers:
        await writer.open()
    for round_ in range(2):  # each block twice: a session's newer write supersedes its own
        for k, writer in enumerate(writers):
            for block in range(blocks):
                await writer.write(block, _content(k + 1 + 2 * round_, block))
                assert await writer.read(block) == _content(k + 1 + 2 * round_, block)
    await asyncio.sleep(0.5)  # proactive pushes of both writers' blocks reach the other site
    outcomes = await asyncio.gather(*(w.close() for w in writers), return_exceptions=True)
    return outcomes, await _read_everywhere(service, blocks)


async def _read_everywhere(service: ImageService, blocks: int) -> dict[str, list[bytes]]:
    seen = {}
    for site in SITES:
        reader = service.client(site)
        await reader.open()
        seen[site] = [await reader.read(block) for block in range(blocks)]
        await reader.close()
    return seen


@pytest.mark.parametrize(
    "policy, writer_sites",
    [
        ("on_demand", SITES),
        ("proactive", SITES),
        ("sync_on_write", SITES),
        ("on_demand", (SITES[0], SITES[0])),
    ],
)
def test_of_two_concurrent_writers_one_close_wins_and_the_stale_one_is_refused(
    policy, writer_sites, tmp_path
) -> None:
    """§4.1.2 assumes one writer at a time; a second one must not lose an update silently:
    its close is refused with StaleCloseError, and every site then reads the winner's."""
    blocks = 12
    with ImageService.up(SITES, policy, 20.0, tmp_path) as service:
        outcomes, seen = asyncio.run(_two_writers(service, writer_sites, blocks))
        refused = [k for k, o in enumerate(outcomes) if isinstance(o, StaleCloseError)]
        assert len(refused) == 1, outcomes
        winner = 1 - refused[0]
        assert outcomes[winner] is None
        assert "reopen" in str(outcomes[refused[0]])
        final = [_content(winner + 3, block) for block in range(blocks)]
        for site in SITES:
            assert seen[site] == final, f"{site} does not read the winning writer's image"

        async def retry() -> dict[str, list[bytes]]:  # the refused writer reopens: it wins
            writer = service.client(writer_sites[refused[0]])
            await writer.open()
            for block in range(0, blocks, 2):
                await writer.write(block, _content(9, block))
            await writer.close()
            return await _read_everywhere(service, blocks)

        seen = asyncio.run(retry())
    for block in range(0, blocks, 2):
        final[block] = _content(9, block)
    assert all(seen[site] == final for site in SITES)
