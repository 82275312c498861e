"""The one contract every controller and environment follows (DESIGN: "The one loop every
controller follows"; CONVENTIONS: "Solvers behind one result type").

* A decision ends with an :class:`Outcome`: one status word from :data:`STATUSES` for every
  system, the solver's own word beside it, the objective and the decision time.
* A controller's loop is a :class:`Controller`: ``step(observation)`` folds one interval's
  observation into the state it keeps and returns the plan to apply (None: nothing to do).
* An environment is an :class:`Environment`: ``observe()`` and ``apply(plan)``; the
  simulator, the local testbed, a user's engine and a dry run are four of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from geoslo.errors import ConfigError

__all__ = ["STATUSES", "APPLICABLE_STATUSES", "Outcome", "Controller", "Environment"]

STATUSES = ("optimal", "feasible", "time_limit", "infeasible", "failed")
"""``optimal``: proven best (exact or exhaustive). ``feasible``: meets every constraint,
optimality not proven (a heuristic search). ``time_limit``: a work limit stopped the search;
the best plan found is returned. ``infeasible``: no plan found meets the constraints (the
SLO); the best effort is returned. ``failed``: no usable plan; the plan in force stays."""

APPLICABLE_STATUSES = frozenset(STATUSES) - {"failed"}


@dataclass(frozen=True)
class Outcome:
    """How one decision ended (the same words for every controller)."""

    status: str  # one of STATUSES
    solver_status: str  # the solver's or search's own word, e.g. OSQP's "solved"
    objective: float | None = None  # in the system's own unit (its docs say which)
    decide_ms: float = 0.0  # wall time of the decision

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            known = ", ".join(STATUSES)
            raise ConfigError("status", f"must be one of {known}, not {self.status!r}")

    @property
    def applicable(self) -> bool:
        """Whether the plan may be applied (every status but ``failed``)."""
        return self.status in APPLICABLE_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "solver_status": self.solver_status,
            "objective": self.objective,
            "decide_ms": self.decide_ms,
        }


ObservationT = TypeVar("ObservationT", contravariant=True)
ObservedT = TypeVar("ObservedT", covariant=True)
PlanT = TypeVar("PlanT")


class Controller(Protocol[ObservationT, PlanT]):
    """A system's loop: the state kept between intervals around its pure ``decide``."""

    def step(self, observation: ObservationT) -> PlanT | None:
        """Fold in one interval's observation; the plan to apply now, or None."""
        ...


class Environment(Protocol[ObservedT, PlanT]):
    """A handle on what a controller observes and acts on.

    ``start()`` brings up what it needs (processes, connections); ``close()`` returns when
    everything it started has exited. ``simulated`` environments advance their own clock
    in ``observe()`` (the loop does not wait between intervals); the others are observed in
    real time. One may also be ``self_paced`` (optional, False if absent): its ``observe()``
    waits for its own interval point (a Kurma agent waits for §6's synchronised round), so
    the loop does not wait between intervals either. ``observe()`` reports one interval;
    ``apply(plan)`` puts a plan in force."""

    simulated: bool

    async def start(self) -> None: ...

    async def observe(self) -> ObservedT: ...

    async def apply(self, plan: PlanT) -> None: ...

    async def close(self) -> None: ...
