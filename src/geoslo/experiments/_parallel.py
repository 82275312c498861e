"""Run independent experiment jobs on a few processes, with a progress line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from geoslo.report import progress

__all__ = ["run_jobs"]


def run_jobs(function: Callable, jobs: Sequence[tuple], workers: int, label: str) -> list:
    """``[function(*job) for job in jobs]``, on ``workers`` processes when more than one."""
    results = [None] * len(jobs)
    with progress(total=len(jobs), label=label) as bar:
        if workers <= 1 or len(jobs) <= 1:
            for k, job in enumerate(jobs):
                results[k] = function(*job)
                bar.update()
            return results
        with ProcessPoolExecutor(min(workers, len(jobs))) as pool:
            futures = [pool.submit(function, *job) for job in jobs]
            for k, future in enumerate(futures):
                results[k] = future.result()
                bar.update()
    return results
