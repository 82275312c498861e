"""The SCADS Director's control loop (FAST 2011, §5, Fig. 5): smooth the workload every
period, decide when no copy is in flight, and hand the actions to the scheduler.

Environments (``geoslo.sim.director``, ``geoslo.live.director``) drive it every tick (each
simulated second, or every second on the live cluster) with ``step(observation)``: the
time, the servers, the running actions and the per-bin histogram of any period that ended
(§5.5). It returns the actions to start and those to cancel, or None when there is
nothing to do and no decision was made.

What an environment does with an action: ``add-server`` creates the server not ready and
runs until it has booted; ``copy`` runs until the target holds the bins; ``move`` is a copy
whose source drops its replicas when it ends; ``delete-replica`` and ``remove-server``
end at once. A cancelled or failed copy leaves nothing on the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geoslo.control import Outcome
from geoslo.control.director.decide import decide
from geoslo.control.director.scheduler import overdue, runnable, scheduled_actions
from geoslo.control.director.smoothing import Smoother
from geoslo.control.director.types import (
    Action,
    ClusterState,
    DirectorConfig,
    Histogram,
    Observation,
    Plan,
    RunningAction,
    ServerState,
    Step,
)
from geoslo.models import CopyDurationModel, SteadyStateModel

__all__ = ["DirectorLoop", "Decision", "Observation", "RunningAction", "Step"]

# A step before any decision can only cancel overdue actions (none started yet, in
# practice); it may be applied, and no search ran.
_NO_DECISION = Outcome("feasible", "no-decision")


@dataclass(frozen=True)
class Decision:
    """One controller iteration, kept for reports."""

    time_s: float
    plan: Plan
    actions: int  # after splitting


class DirectorLoop:
    """Observe every period, decide when no copy is in flight (§5.3: "the controller waits
    until previously scheduled copy actions complete"), schedule (§5.6).

    ``decisions`` and ``cancelled`` keep the last ``history`` entries for reports (all of
    them when None); ``decision_count`` and ``cancel_count`` count every one."""

    def __init__(
        self,
        model: SteadyStateModel,
        copy_model: CopyDurationModel,
        config: DirectorConfig,
        bin_bytes: np.ndarray,
        history: int | None = None,
    ) -> None:
        self.model = model
        self.copy_model = copy_model
        self.config = config
        self.bin_bytes = np.asarray(bin_bytes, dtype=float)
        self.smoother = Smoother(config.alpha_up, config.alpha_down)
        self.pending: list[Action] = []
        self.history = history
        self.decisions: list[Decision] = []
        self.cancelled: list[tuple[float, Action]] = []
        self.decision_count = 0
        self.cancel_count = 0
        self._next_decision_s = 0.0
        self._predicted_s: dict[Action, float] = {}  # the pending actions' durations
        self._leased_at_s: dict[str, float] = {}
        self._last_plan: Plan | None = None  # the decision the pending actions come from

    def step(self, observation: Observation) -> Step | None:
        """Fold in the ended periods' histograms (§5.5), then one tick: cancel overdue
        actions, decide when due, start what may run (§5.6). None: nothing to do."""
        for histogram in observation.histograms:
            self._observe(histogram)
        return self._tick(observation.now_s, observation.servers, observation.running)

    def _observe(self, histogram: Histogram) -> None:
        """The period's per-bin histogram (§5.5)."""
        self.smoother.update(histogram.get_rps, histogram.put_rps)

    def _tick(
        self, now_s: float, servers: Sequence[ServerState], running: Sequence[RunningAction]
    ) -> Step | None:
        late = overdue(running, now_s, self.config)
        decisions_before = self.decision_count
        if late:
            self.cancelled.extend((now_s, action) for action in late)
            self.cancel_count += len(late)
            self._trim(self.cancelled)
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
        decided = self.decision_count > decisions_before
        if not (start or late or decided):
            return None
        outcome = self._last_plan.outcome if self._last_plan else _NO_DECISION
        started = tuple(self._running(action, now_s) for action in start)
        return Step(started, tuple(late), outcome, decided)

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
        self.decision_count += 1
        self._last_plan = plan
        self._trim(self.decisions)
        self._next_decision_s = now_s + self.config.period_s

    def _trim(self, entries: list) -> None:
        """Keep the last ``history`` entries (a service runs for months)."""
        if self.history is not None and len(entries) > self.history:
            del entries[: len(entries) - self.history]

    def _running(self, action: Action, now_s: float) -> RunningAction:
        return RunningAction(action, now_s, self._predicted_s[action])
