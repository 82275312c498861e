"""The SCADS Director's control loop (FAST 2011, §5, Fig. 5): smooth the workload every
period, decide when no copy is in flight, and hand the actions to the scheduler.

Environments (``geoslo.sim.director``, ``geoslo.live.director``) drive it:

* once per period, ``observe(raw_get_rps, raw_put_rps)`` with the period's per-bin
  histogram (§5.5);
* every tick (each simulated second, or every second on the live cluster),
  ``tick(now_s, servers, running)`` returns the actions to start and those to cancel.

What an environment does with an action: ``add-server`` creates the server not ready and
runs until it has booted; ``copy`` runs until the target holds the bins; ``move`` is a copy
whose source drops its replicas when it ends; ``delete-replica`` and ``remove-server``
end at once. A cancelled or failed copy leaves nothing on the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geoslo.control.director.decide import decide
from geoslo.control.director.scheduler import overdue, runnable, scheduled_actions
from geoslo.control.director.smoothing import Smoother
from geoslo.control.director.types import (
    Action,
    ClusterState,
    DirectorConfig,
    Plan,
    RunningAction,
    ServerState,
    Step,
)
from geoslo.models import CopyDurationModel, SteadyStateModel

__all__ = ["DirectorLoop", "Decision", "RunningAction", "Step"]


@dataclass(frozen=True)
class Decision:
    """One controller iteration, kept for reports."""

    time_s: float
    plan: Plan
    actions: int  # after splitting


class DirectorLoop:
    """Observe every period, decide when no copy is in flight (§5.3: "the controller waits
    until previously scheduled copy actions complete"), schedule (§5.6)."""

    def __init__(
        self,
        model: SteadyStateModel,
        copy_model: CopyDurationModel,
        config: DirectorConfig,
        bin_bytes: np.ndarray,
    ) -> None:
        self.model = model
        self.copy_model = copy_model
        self.config = config
        self.bin_bytes = np.asarray(bin_bytes, dtype=float)
        self.smoother = Smoother(config.alpha_up, config.alpha_down)
        self.pending: list[Action] = []
        self.decisions: list[Decision] = []
        self.cancelled: list[tuple[float, Action]] = []
        self._next_decision_s = 0.0
        self._predicted_s: dict[Action, float] = {}  # the pending actions' durations
        self._leased_at_s: dict[str, float] = {}

    def observe(self, raw_get_rps: np.ndarray, raw_put_rps: np.ndarray) -> None:
        """The period's per-bin histogram (§5.5)."""
        self.smoother.update(raw_get_rps, raw_put_rps)

    def tick(
        self, now_s: float, servers: Sequence[ServerState], running: Sequence[RunningAction]
    ) -> Step:
        late = overdue(running, now_s, self.config)
        if late:
            self.cancelled.extend((now_s, action) for action in late)
            self.pending = []  # reassess the state at the next decision (§5.3)
        still_running = [r for r in running if r.action not in late]
        copying = any(r.action.copies_data for r in still_running)
        for server in servers:
            self._leased_at_s.setdefault(server.name, now_s)
        if not self.pending and not copying and self._due(now_s):
            self._decide(now_s, servers)
        self.pending = [a for a in self.pending if self._may_happen(a, now_s)]
        start = runnable(self.pending, still_running, servers)
        for action in start:
            self.pending.remove(action)
            if action.kind == "add-server":
                self._leased_at_s[action.server or ""] = now_s
            elif action.kind == "remove-server":
                self._leased_at_s.pop(action.server or "", None)
        if not start and not still_running and self.pending:
            self.pending = []  # nothing can ever start: drop and decide afresh
        return Step(tuple(self._running(action, now_s) for action in start), tuple(late))

    def _may_happen(self, action: Action, now_s: float) -> bool:
        """A server is released only in the last period of an interval it has paid for
        (§6.1's "server release time"); until then it stays as an extra empty server,
        which the next decision may reuse, and the removal is dropped."""
        interval = self.config.charge_interval_s
        if action.kind != "remove-server" or interval is None:
            return True
        leased_for = now_s - self._leased_at_s.get(action.server or "", now_s)
        return leased_for % interval >= interval - self.config.period_s

    def _due(self, now_s: float) -> bool:
        return self.smoother.ready and now_s >= self._next_decision_s

    def _decide(self, now_s: float, servers: Sequence[ServerState]) -> None:
        assert self.smoother.get_rps is not None and self.smoother.put_rps is not None
        state = ClusterState(
            tuple(servers), self.smoother.get_rps, self.smoother.put_rps, self.bin_bytes
        )
        plan = decide(state, self.model, self.config)
        self._predicted_s = dict(
            scheduled_actions(plan, self.bin_bytes, self.copy_model, self.config)
        )
        self.pending = list(self._predicted_s)
        self.decisions.append(Decision(now_s, plan, len(self.pending)))
        self._next_decision_s = now_s + self.config.period_s

    def _running(self, action: Action, now_s: float) -> RunningAction:
        return RunningAction(action, now_s, self._predicted_s[action])
