"""The SCADS Director's control loop (FAST 2011, §5, Fig. 5): smooth the workload every
period, decide when no copy is in flight, and hand the actions to the scheduler.

Environments (``geoslo.sim.kvcluster``, ``geoslo.live.director``) drive it:

* once per period, ``observe(raw_get_rps, raw_put_rps)`` with the period's per-bin
  histogram (§5.5);
* every tick (each simulated second, or whenever an action ends on the live cluster),
  ``tick(now_s, servers, running)`` returns the actions to start and those to cancel.

What an environment does with an action: ``add-server`` creates the server not ready and
runs until it has booted; ``copy`` runs until the target holds the bins; ``move`` is a copy
whose source drops its replicas when it ends; ``delete-replica`` and ``remove-server``
end at once. A cancelled or failed copy leaves nothing on the target.
"""

from __future__ import annotations

from dataclasses import dataclass

from geoslo.control.director.types import Action

__all__ = ["RunningAction", "Step"]


@dataclass(frozen=True)
class RunningAction:
    """An action in progress: when it started and how long the copy model said it takes."""

    action: Action
    started_s: float
    predicted_s: float


@dataclass(frozen=True)
class Step:
    """What the loop asks of the environment at one tick."""

    start: tuple[RunningAction, ...] = ()
    cancel: tuple[Action, ...] = ()
