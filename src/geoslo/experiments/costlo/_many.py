"""ConfSelector for many prefixes at once (§6.5: prefixes are independent, so selection
parallelises across a cluster): sequentially, or on Ray, local by default.

``ray_address``: None runs in this process; ``"local"`` starts a local Ray instance (one
worker per core); anything else is a cluster address given to ``ray.init``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from geoslo.control.costlo import Selection
from geoslo.control.costlo.decide import CostloProblem, decide
from geoslo.errors import DependencyError

__all__ = ["select_many"]


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


def _on_ray(problems, ray_address: str, on_done) -> list[Selection]:
    try:
        import ray
    except ImportError:
        raise DependencyError(
            "--ray needs the ray package: pip install 'ray>=2.40' (or ./dev, which installs it)"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        address = None if ray_address == "local" else ray_address
        ray.init(
            address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
        )
    try:
        remote_decide = ray.remote(decide)
        pending = {remote_decide.remote(p): k for k, p in enumerate(problems)}
        results: dict[int, Selection] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            k = pending.pop(done[0])
            results[k] = ray.get(done[0])
            if on_done:
                on_done(k)
        return [results[k] for k in range(len(problems))]
    finally:
        if started_here:
            ray.shutdown()
