"""Residual WAN latency from probe RTTs, with the base delay removed (Kurma §4.2, §6)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError

__all__ = ["probe_residuals_ms", "residual_from_probes"]


def probe_residuals_ms(
    probe_rtt_ms: Sequence[np.ndarray], probes_per_block: int, skip_lowest: int = 0
) -> np.ndarray:
    """Every link's probes (in time order) minus the base of their block, pooled.

    The base of a block short enough that routes rarely change within it is its minimum
    (§6 uses the minimum over recent probes), or with ``skip_lowest = s`` its (s+1)-th
    smallest probe: a probe faster than the path can carry is an injector's artifact
    (docs/live.md: toxiproxy releases a held chunk when a route changes), and one such
    probe would make every other probe of its block look late. Incomplete trailing blocks
    are dropped.
    """
    if probes_per_block < 2 or not 0 <= skip_lowest < probes_per_block - 1:
        raise InputError(
            "probes_per_block", "needs at least two probes per block, more than skip_lowest + 1"
        )
    residuals = []
    for rtt in probe_rtt_ms:
        rtt = np.asarray(rtt, dtype=float)
        blocks = rtt[: rtt.size // probes_per_block * probes_per_block].reshape(
            -1, probes_per_block
        )
        base = np.sort(blocks, axis=1)[:, skip_lowest : skip_lowest + 1]
        residuals.append(np.maximum(blocks - base, 0.0).ravel())
    pooled = np.concatenate(residuals) if residuals else np.array([])
    if pooled.size == 0:
        raise InputError("probe_rtt_ms", f"no link has a full block of {probes_per_block} probes")
    return pooled


def residual_from_probes(
    probe_rtt_ms: Sequence[np.ndarray],
    probes_per_block: int,
    step_ms: float = 0.1,
    skip_lowest: int = 0,
) -> LatencyDistribution:
    """The residual WAN latency distribution of :func:`probe_residuals_ms`."""
    samples = probe_residuals_ms(probe_rtt_ms, probes_per_block, skip_lowest)
    return LatencyDistribution.from_samples(samples, step_ms=step_ms)
