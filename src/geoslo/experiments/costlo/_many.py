"""ConfSelector for many prefixes at once (§6.5: prefixes are independent, so selection
parallelises across a cluster): sequentially, or on Ray, local by default.

``ray_address``: None runs in this process; ``"local"`` or a cluster's address runs on Ray
(``geoslo.experiments._ray``). Prefixes go to Ray in batches (one task's
overhead is a few ms, a prefix's selection ~30 ms on the example) and at most
``IN_FLIGHT_PER_CPU`` batches per CPU are submitted at a time, so that the problems' samples
in Ray's object store stay bounded (benchmarks/bench_costlo_ray.py measures when Ray pays).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from geoslo.control.costlo import Selection
from geoslo.control.costlo.decide import CostloProblem, decide
from geoslo.experiments._ray import ray_session

__all__ = ["select_many", "batch_size", "BATCHES_PER_CPU", "IN_FLIGHT_PER_CPU", "MAX_BATCH"]

BATCHES_PER_CPU = 4  # enough batches to even out prefixes of unequal cost
IN_FLIGHT_PER_CPU = 2  # batches submitted ahead per CPU (keeps every worker busy)
MAX_BATCH = 16  # prefixes per task: ~0.5 s of work, 16 x 8 MB of samples


def select_many(
    problems: Sequence[CostloProblem],
    ray_address: str | None = None,
    on_done: Callable[[int], None] | None = None,
) -> list[Selection]:
    """One selection per problem, in order; ``on_done(k)`` after each one finishes."""
    if ray_address is None:
        out = []
        for k, problem in enumerate(problems):
            out.append(decide(problem))
            if on_done:
                on_done(k)
        return out
    return _on_ray(problems, ray_address, on_done)


def batch_size(problems: int, cpus: int) -> int:
    """Prefixes per Ray task: about BATCHES_PER_CPU batches per CPU, at most MAX_BATCH."""
    return max(1, min(MAX_BATCH, math.ceil(problems / (BATCHES_PER_CPU * max(1, cpus)))))


def _decide_batch(problems: list[CostloProblem]) -> list[Selection]:
    return [decide(p) for p in problems]


def _on_ray(problems, ray_address: str, on_done) -> list[Selection]:
    with ray_session(ray_address) as ray:
        return _run_batches(ray, problems, on_done)


def _run_batches(ray, problems, on_done) -> list[Selection]:
    """Batches of consecutive prefixes, at most IN_FLIGHT_PER_CPU per CPU at a time."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    size = batch_size(len(problems), cpus)
    starts = list(range(0, len(problems), size))
    remote = ray.remote(_decide_batch)
    results: list[Selection | None] = [None] * len(problems)
    pending: dict = {}
    next_batch = 0
    while next_batch < len(starts) or pending:
        while next_batch < len(starts) and len(pending) < IN_FLIGHT_PER_CPU * cpus:
            start = starts[next_batch]
            pending[remote.remote(list(problems[start : start + size]))] = start
            next_batch += 1
        done, _ = ray.wait(list(pending), num_returns=1)
        start = pending.pop(done[0])
        for offset, selection in enumerate(ray.get(done[0])):
            results[start + offset] = selection
            if on_done:
                on_done(start + offset)
    return results  # type: ignore[return-value]
