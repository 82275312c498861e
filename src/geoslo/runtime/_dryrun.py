"""The dry run (DESIGN: "The runtime"): an environment that observes for real and logs the
plan it would apply, instead of applying it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from geoslo.control import Environment
from geoslo.runtime._log import ServiceLog

__all__ = ["DryRunEnvironment", "is_self_paced"]


def is_self_paced(environment: Environment) -> bool:
    """Whether ``environment.observe()`` waits for its own interval point (the contract)."""
    return bool(getattr(environment, "self_paced", False))


class DryRunEnvironment:
    """``inner`` observed as it is; ``apply(plan)`` writes ``plan_record(plan)`` to the log."""

    def __init__(
        self,
        inner: Environment,
        plan_record: Callable[[Any], Mapping[str, Any]],
        log: ServiceLog,
    ) -> None:
        self.inner = inner
        self.simulated = inner.simulated
        self.self_paced = is_self_paced(inner)
        self._plan_record = plan_record
        self._log = log
        self.plans_logged = 0

    async def start(self) -> None:
        await self.inner.start()

    async def observe(self) -> Any:
        return await self.inner.observe()

    async def apply(self, plan: Any) -> None:
        self.plans_logged += 1
        self._log.emit("dry_run", plan=dict(self._plan_record(plan)))

    async def close(self) -> None:
        await self.inner.close()
