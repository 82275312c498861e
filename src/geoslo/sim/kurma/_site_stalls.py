"""Site-wide stall timelines: the GC-like pauses of the "site_stalls" tail (issue 37).

Each site with ``BackendParams.tail == "site_stalls"`` has its own random stream of
pauses: the gap before a pause is exponential over the site's running time (the clock
stops during a pause, so pauses never overlap) with mean ``1000 /
site_stall_rate_per_s`` ms, and a pause lasts a gamma of mean ``site_stall_mean_ms`` and
shape ``site_stall_length_shape``. The
timeline is drawn ahead of the simulated time into the kernel's arrays (``stall_ms``,
``bq``) and served exactly by the kernel's Lindley recursion (`_kernels._stall_finish`):
a pause freezes every server of the site, its requests in service and queued included.

Every pause is a standard exponential and a standard gamma drawn in a fixed order and then
scaled, so the timelines of two rates or means on one seed are common random numbers
(calibration).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoslo.sim.kurma import _kernels as K
from geoslo.sim.kurma._params import BackendParams

__all__ = ["SiteStallTimeline", "LOOKAHEAD_MS"]

# How far past the simulated time (or the latest free server, whichever is later) the
# timeline is drawn: a site's queues would have to grow by more than this within one
# simulated second (over 60x its capacity) to reach the end, which the kernel reports.
LOOKAHEAD_MS = 60_000.0

_STREAM = 0x57A11  # the stall streams' key, apart from the simulator's own stream


class SiteStallTimeline:
    """The pauses of every site with site-wide stalls, in the kernel's layout."""

    def __init__(self, backends: Sequence[BackendParams], seed: int) -> None:
        n = len(backends)
        self.active = [b.tail == "site_stalls" for b in backends]
        self._gap_mean_ms = [
            1000.0 / b.site_stall_rate_per_s if on else 0.0
            for b, on in zip(backends, self.active, strict=True)
        ]
        self._length_mean_ms = [b.site_stall_mean_ms for b in backends]
        self._length_shape = [b.site_stall_length_shape for b in backends]
        self._rngs = [np.random.default_rng([seed, _STREAM, j]) for j in range(n)]
        self._next = np.full((n, 2), np.inf)  # the next pause not yet in the array
        for j in range(n):
            if self.active[j]:
                self._next[j] = self._draw(j, 0.0)
        self.stall_ms = np.zeros((n, 64 if any(self.active) else 1, 2))

    def _draw(self, site: int, after_ms: float) -> tuple[float, float]:
        rng = self._rngs[site]
        gap = rng.standard_exponential()
        shape = self._length_shape[site]
        length = rng.standard_gamma(shape) / shape
        start = after_ms + gap * self._gap_mean_ms[site]
        return start, start + length * self._length_mean_ms[site]

    def extend(self, bq: np.ndarray, horizon_ms: np.ndarray) -> None:
        """Keep the pauses from row ``bq[j, BQ_LO]`` on, add those starting before
        ``horizon_ms[j]``, and end each active site's rows with the sentinel."""
        for j, on in enumerate(self.active):
            if not on:
                continue
            lo, hi = int(bq[j, K.BQ_LO]), int(bq[j, K.BQ_HI])
            rows = [self.stall_ms[j, lo : max(hi - 1, lo)]]  # without the old sentinel
            new = []
            while self._next[j, 0] < horizon_ms[j]:
                new.append(self._next[j].copy())
                self._next[j] = self._draw(j, self._next[j, 1])
            last_end = new[-1][1] if new else (rows[0][-1, 1] if rows[0].size else 0.0)
            sentinel = np.array([[max(horizon_ms[j], last_end), np.inf]])
            rows += [np.asarray(new).reshape(-1, 2), sentinel]
            block = np.concatenate(rows)
            if block.shape[0] > self.stall_ms.shape[1]:
                grown = np.zeros((self.stall_ms.shape[0], 2 * block.shape[0], 2))
                grown[:, : self.stall_ms.shape[1]] = self.stall_ms
                self.stall_ms = grown
            self.stall_ms[j, : block.shape[0]] = block
            bq[j, K.BQ_LO] = 0
            bq[j, K.BQ_HI] = block.shape[0]
