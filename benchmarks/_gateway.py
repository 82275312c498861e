"""What the S3 benchmarks share: one versitygw gateway on loopback for the run, and the
median of each figure over the rounds."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import numpy as np

from geoslo.errors import DependencyError
from geoslo.live.costlo import CostloCluster


def on_one_gateway(prefix: str, run) -> dict[str, list[dict]] | None:
    """``asyncio.run(run(cluster))`` on a one-gateway S3 cluster; None (said) when the s3
    engine is not available."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        try:
            cluster = CostloCluster.up(
                Path(folder), servers_per_region=1, engine="s3", network="loopback"
            )
        except DependencyError as error:
            print(f"skipped: the s3 engine is not available: {error}")
            return None
        try:
            return asyncio.run(run(cluster))
        finally:
            cluster.down()


def medians(results: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Per name, each figure's median over the rounds."""
    return {
        name: {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
        for name, rows in results.items()
    }
