"""Run independent experiment jobs on a few processes, or on Ray, with a progress line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from geoslo.experiments._ray import ray_active
from geoslo.report import progress

__all__ = ["run_jobs"]


def run_jobs(
    function: Callable,
    jobs: Sequence[tuple],
    workers: int,
    label: str,
    ray_options: dict | None = None,
) -> list:
    """``[function(*job) for job in jobs]``: as Ray tasks inside a Ray session (the
    cluster's CPUs, not ``workers``, bound them; ``ray_options`` for ``.options()``, one CPU
    per task by default), else on ``workers`` processes."""
    with progress(total=len(jobs), label=label) as bar:
        if ray_active() and len(jobs) > 1:
            return _on_ray(function, jobs, bar.update, ray_options or {})
        if workers <= 1 or len(jobs) <= 1:
            results = []
            for job in jobs:
                results.append(function(*job))
                bar.update()
            return results
        with ProcessPoolExecutor(min(workers, len(jobs))) as pool:
            futures = [pool.submit(function, *job) for job in jobs]
            results = []
            for future in futures:
                results.append(future.result())
                bar.update()
            return results


def _on_ray(
    function: Callable, jobs: Sequence[tuple], on_done: Callable[[], None], options: dict
) -> list:
    import ray

    remote = ray.remote(**{"num_cpus": 1, **options})(function)
    refs = [remote.remote(*job) for job in jobs]
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for _ in done:
            on_done()
    return ray.get(refs)
