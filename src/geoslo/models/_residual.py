"""Residual WAN latency from probe RTTs, with the base delay removed (Kurma §4.2, §6)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError

__all__ = ["residual_from_probes"]


def residual_from_probes(
    probe_rtt_ms: Sequence[np.ndarray], probes_per_block: int, step_ms: float = 0.1
) -> LatencyDistribution:
    """Pool every link's probes (in time order) minus the minimum of their block.

    The minimum over a block short enough that routes rarely change within it (§6 uses
    the minimum over recent probes) estimates the base RTT; what remains is the residual.
    Incomplete trailing blocks are dropped.
    """
    if probes_per_block < 2:
        raise InputError("probes_per_block", "needs at least two probes per block")
    residuals = []
    for rtt in probe_rtt_ms:
        rtt = np.asarray(rtt, dtype=float)
        blocks = rtt[: rtt.size // probes_per_block * probes_per_block].reshape(
            -1, probes_per_block
        )
        residuals.append((blocks - blocks.min(axis=1, keepdims=True)).ravel())
    pooled = np.concatenate(residuals) if residuals else np.array([])
    if pooled.size == 0:
        raise InputError("probe_rtt_ms", f"no link has a full block of {probes_per_block} probes")
    return LatencyDistribution.from_samples(pooled, step_ms=step_ms)
