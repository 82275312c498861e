"""Workload statistics the Director sees (FAST 2011 §5.5).

The client samples a fraction of gets (2%) and of puts (40%) with a seeded generator;
every ``period_s`` (20 s) the samples of each bin become rates, the raw workload
histogram: ``sampled count / sample fraction / period``. Alongside, for reports, each
period keeps every get's latency (p99, fraction over the SLO threshold), every timed
put's latency (p99) and how many requests each server was sent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PeriodStats", "WorkloadStats", "rates_from_samples"]


def rates_from_samples(counts: np.ndarray, sample_fraction: float, period_s: float) -> np.ndarray:
    """Estimated req/s from sampled counts (§5.5)."""
    return np.asarray(counts, dtype=float) / sample_fraction / period_s


@dataclass(frozen=True)
class PeriodStats:
    """One period: the per-bin histogram as rates and the gets' latency summary."""

    start_s: float
    end_s: float
    get_rps: np.ndarray  # per bin, estimated from the samples
    put_rps: np.ndarray
    gets: int  # gets that ended in the period (all of them, not sampled)
    failed_gets: int
    get_p99_ms: float  # nan without gets; a failed get counts as failed_get_ms
    over_threshold_fraction: float  # of gets (failed ones count as over)
    server_requests: dict[str, int] = field(default_factory=dict)
    puts: int = 0  # timed puts that ended in the period (record_put with a latency)
    failed_puts: int = 0
    put_p99_ms: float = float("nan")  # nan without timed puts; a failed one as failed_get_ms


class WorkloadStats:
    """Sampling and per-period summaries; ``now_s`` is any clock the caller keeps."""

    def __init__(
        self,
        bins: int,
        period_s: float,
        get_sample_fraction: float,
        put_sample_fraction: float,
        threshold_ms: float,
        seed: int,
        start_s: float = 0.0,
        failed_get_ms: float = float("inf"),
    ) -> None:
        self.bins = bins
        self.period_s = period_s
        self.get_sample_fraction = get_sample_fraction
        self.put_sample_fraction = put_sample_fraction
        self.threshold_ms = threshold_ms
        self.failed_get_ms = failed_get_ms  # at least the client's timeout
        self._rng = np.random.default_rng(seed)
        self._done: list[PeriodStats] = []
        self._reset(start_s)

    def _reset(self, start_s: float) -> None:
        self._start_s = start_s
        self._get_counts = np.zeros(self.bins, dtype=np.int64)
        self._put_counts = np.zeros(self.bins, dtype=np.int64)
        self._latencies_ms: list[float] = []
        self._failed = 0
        self._put_latencies_ms: list[float] = []
        self._failed_puts = 0
        self._servers: Counter[str] = Counter()

    def restart(self, start_s: float) -> None:
        """Drop everything and begin a period at ``start_s``."""
        self._done = []
        self._reset(start_s)

    def _roll(self, now_s: float) -> None:
        while now_s >= self._start_s + self.period_s:
            self._done.append(self._summary(self._start_s + self.period_s))
            self._reset(self._start_s + self.period_s)

    def record_get(self, b: int, latency_ms: float, ok: bool, now_s: float) -> None:
        self._roll(now_s)
        if self._rng.random() < self.get_sample_fraction:
            self._get_counts[b] += 1
        if ok:
            self._latencies_ms.append(latency_ms)
        else:
            self._failed += 1

    def record_put(
        self, b: int, now_s: float, latency_ms: float | None = None, ok: bool = True
    ) -> None:
        """A put to bin ``b``; with ``latency_ms`` it also counts in the puts' p99."""
        self._roll(now_s)
        if self._rng.random() < self.put_sample_fraction:
            self._put_counts[b] += 1
        if latency_ms is None:
            return
        if ok:
            self._put_latencies_ms.append(latency_ms)
        else:
            self._failed_puts += 1

    def record_server(self, server: str, now_s: float) -> None:
        self._roll(now_s)
        self._servers[server] += 1

    def collect(self, now_s: float) -> list[PeriodStats]:
        """The periods that ended by ``now_s`` and were not collected yet."""
        self._roll(now_s)
        done, self._done = self._done, []
        return done

    def _p99_ms(self, latencies_ms: list[float], failed: int) -> float:
        """p99 of the latencies with each failure counted as ``failed_get_ms``."""
        every = np.concatenate([latencies_ms, np.full(failed, self.failed_get_ms)])
        return float(np.percentile(every, 99, method="higher")) if every.size else float("nan")

    def _summary(self, end_s: float) -> PeriodStats:
        latencies = np.asarray(self._latencies_ms, dtype=float)
        gets = latencies.size + self._failed
        p99 = self._p99_ms(self._latencies_ms, self._failed)
        over = (np.count_nonzero(latencies > self.threshold_ms) + self._failed) / max(gets, 1)
        return PeriodStats(
            start_s=self._start_s,
            end_s=end_s,
            get_rps=rates_from_samples(self._get_counts, self.get_sample_fraction, self.period_s),
            put_rps=rates_from_samples(self._put_counts, self.put_sample_fraction, self.period_s),
            gets=int(gets),
            failed_gets=self._failed,
            get_p99_ms=p99,
            over_threshold_fraction=float(over),
            server_requests=dict(self._servers),
            puts=len(self._put_latencies_ms) + self._failed_puts,
            failed_puts=self._failed_puts,
            put_p99_ms=self._p99_ms(self._put_latencies_ms, self._failed_puts),
        )
