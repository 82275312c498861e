"""What a live migration run measured, and the numbers Figure 7 of §5.2.2 shows: per-second
throughput per client site, latencies, when each step happened, where the leader was, and
how deep and how long the throughput dip was."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = ["OpRecords", "ReconfigRun", "dip_metrics", "latency_summary", "per_second_counts"]

OPS = {"r": "read", "w": "write"}


@dataclass(frozen=True)
class OpRecords:
    """One site's operations: end times (s since the measured window began), kinds,
    latencies, success flags."""

    end_s: np.ndarray
    kind: np.ndarray
    latency_ms: np.ndarray
    ok: np.ndarray

    @classmethod
    def read(cls, path: Path, t0_unix_s: float) -> OpRecords:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
        if not rows:
            empty = np.array([])
            return cls(empty, empty.astype(str), empty, empty.astype(bool))
        end, kind, latency, ok = zip(*rows, strict=True)
        return cls(
            np.asarray(end) - t0_unix_s,
            np.asarray(kind),
            np.asarray(latency, dtype=float),
            np.asarray(ok, dtype=bool),
        )


def per_second_counts(records: OpRecords, n_bins: int, ok: bool = True) -> list[int]:
    """Operations (succeeded if ``ok``, else failed) ending in each second 0..n_bins-1."""
    chosen = records.end_s[(records.ok == ok) & (records.end_s >= 0)]
    counts = np.bincount(chosen.astype(int), minlength=n_bins)[:n_bins]
    return [int(c) for c in counts]


def latency_summary(records: OpRecords, windows: dict[str, tuple[float, float]]) -> dict:
    """``{op: {window: {"count", "p50_ms", "p99_ms"}}}`` over succeeded operations."""
    summary: dict = {}
    for code, op in OPS.items():
        summary[op] = {}
        for name, (start_s, end_s) in windows.items():
            mask = (records.kind == code) & records.ok
            mask &= (records.end_s >= start_s) & (records.end_s < end_s)
            values = records.latency_ms[mask]
            summary[op][name] = {
                "count": int(values.size),
                "p50_ms": float(np.percentile(values, 50)) if values.size else math.nan,
                "p99_ms": float(np.percentile(values, 99)) if values.size else math.nan,
            }
    return summary


def dip_metrics(total_per_s: list[int], first_step_s: float, after_start_s: float) -> dict:
    """Median total throughput before the first step and after the procedure, the lowest
    1-s total from the first step on (and as a fraction of the median before), and how
    many seconds it stayed below half of that median."""
    totals = np.asarray(total_per_s, dtype=float)
    before = totals[: int(first_step_s)]
    during = totals[int(first_step_s) :]
    after = totals[int(math.ceil(after_start_s)) :]
    median_before = float(np.median(before)) if before.size else math.nan
    lowest = float(during.min()) if during.size else math.nan
    return {
        "median_before_ops_per_s": median_before,
        "median_after_ops_per_s": float(np.median(after)) if after.size else math.nan,
        "lowest_ops_per_s": lowest,
        "lowest_fraction": lowest / median_before if median_before > 0 else math.nan,
        "seconds_below_half": int(np.sum(during < 0.5 * median_before)),
    }


@dataclass(frozen=True)
class ReconfigRun:
    """One run of a §5.2.2 procedure. Times are seconds since the measured window began;
    ``throughput_ops_per_s[site][i]`` counts that site's client's successful operations
    ending in second i."""

    procedure: str
    settings: dict
    duration_s: float
    throughput_ops_per_s: dict[str, list[int]]
    failed_ops_per_s: dict[str, list[int]]
    latency_ms: dict[str, dict]  # site -> op -> window -> count/p50_ms/p99_ms
    steps: list[dict]
    procedure_s: float  # first step's start to the last step's serving leader
    leader_id_before: int
    leader_site_before: str
    leader_id_after: int
    leader_site_after: str
    median_before_ops_per_s: dict[str, float]  # per site and "total"
    median_after_ops_per_s: dict[str, float]
    lowest_total_ops_per_s: float
    lowest_total_fraction: float  # of the median total before the first step
    seconds_below_half: int  # 1-s bins from the first step on below half that median

    @property
    def first_step_s(self) -> float:
        return self.steps[0]["start_s"]

    @property
    def after_start_s(self) -> float:
        """When the last step had a serving leader: the "after" window starts here."""
        return self.steps[-1]["leader_ready_s"]

    def to_dict(self) -> dict:
        return asdict(self)
