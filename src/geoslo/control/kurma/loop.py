"""Kurma's control loop: measure, exchange, solve, enforce, every interval (§6).

The loop keeps what must persist between intervals (the 5 s rate window, the last base RTT
estimates, recent violation points for curve substitution, the last plan) and calls the pure
:func:`~geoslo.control.kurma.decide.decide`. In one process it stands for all instances at
once: after the synchronised exchange every instance holds the same state and solves the same
problem, so one solve yields every instance's row.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from geoslo.control.kurma.decide import decide, propagated_writes_rps
from geoslo.control.kurma.problem import KurmaPlan
from geoslo.control.kurma.types import (
    IntervalMeasurements,
    KurmaConfig,
    KurmaModel,
    KurmaObservation,
    Routing,
)
from geoslo.models import SloSurface, best_fitting_curve

__all__ = ["KurmaController", "CurveFit", "plan_fractions"]


def plan_fractions(plan: KurmaPlan, demand_rps: np.ndarray) -> np.ndarray:
    """Row-stochastic routing fractions from a plan's rates (all local where demand is 0)."""
    rates = np.asarray(plan.rates_rps, dtype=float)
    fractions = np.eye(len(demand_rps))
    for i, total in enumerate(rates.sum(axis=1)):
        if total > 0:
            fractions[i] = rates[i] / total
    return fractions


def limit_change(previous: np.ndarray, target: np.ndarray, max_step: float) -> np.ndarray:
    """Move redirected fractions toward ``target`` by at most ``max_step`` (DNS, §7.1.2)."""
    moved = previous + np.clip(target - previous, -max_step, max_step)
    np.fill_diagonal(moved, 0.0)
    moved = np.clip(moved, 0.0, 1.0)
    scale = np.maximum(moved.sum(axis=1), 1.0)
    moved /= scale[:, None]
    np.fill_diagonal(moved, 1.0 - moved.sum(axis=1))
    return moved


@dataclass(frozen=True)
class _Point:
    load_rps: float
    violation_fraction: float
    write_fraction: float


class CurveFit(NamedTuple):
    """One interference fit (§7.1.4): the recent points and each curve's squared error."""

    load_rps: np.ndarray
    violation_fraction: np.ndarray
    squared_error: np.ndarray


class KurmaController:
    """One logical Kurma deployment: all instances of §6 sharing one exchanged state."""

    def __init__(
        self,
        model: KurmaModel,
        config: KurmaConfig | None = None,
        curve_families: dict[int, list[SloSurface]] | None = None,
    ) -> None:
        self.model = model
        self.config = config or KurmaConfig()
        self.curve_families = curve_families or {}
        n = len(model.sites)
        self.fractions = np.eye(n)
        self.plan: KurmaPlan | None = None
        self.observation: KurmaObservation | None = None  # what the last plan was solved for
        self.model_in_force = model  # the last plan's model (reduced capacities, §9)
        self.base_rtt_ms = np.zeros((n, n))
        self.chosen_curve = {site: 0 for site in self.curve_families}
        self.last_fit: dict[int, CurveFit] = {}  # per site: what the last curve fit saw
        self._window: deque[tuple[float, np.ndarray, np.ndarray]] = deque()
        self._points: list[deque[_Point]] = [deque() for _ in range(n)]
        self._pending_signals: set[int] = set()
        self._demand_ewma: np.ndarray | None = None
        self._slow_span_s = 0.0  # the slow variant's accumulation since its last solve
        self._slow_arrivals = np.zeros(n)
        self._slow_writes = np.zeros(n)

    # --- measuring ---------------------------------------------------------------------------
    def _observe(self, m: IntervalMeasurements) -> KurmaObservation:
        self._window.append(
            (m.duration_s, np.asarray(m.arrivals, float), np.asarray(m.writes, float))
        )
        while sum(d for d, _, _ in self._window) - self._window[0][0] >= self.config.rate_window_s:
            self._window.popleft()
        span_s = sum(d for d, _, _ in self._window)
        arrivals = sum(a for _, a, _ in self._window)
        writes = sum(w for _, _, w in self._window)
        demand = arrivals / span_s
        write_fraction = np.divide(writes, arrivals, out=np.zeros_like(writes), where=arrivals > 0)
        self._update_base_rtt(m)
        return KurmaObservation(demand, write_fraction, self.base_rtt_ms.copy(), m.available)

    def _update_base_rtt(self, m: IntervalMeasurements) -> None:
        """Min response over the window minus the min profiled service time, to the ms (§6)."""
        from_requests = np.asarray(m.min_response_ms, float) - self.model.min_service_ms
        estimate = from_requests
        if m.probe_rtt_ms is not None:
            estimate = np.where(np.isfinite(from_requests), from_requests, m.probe_rtt_ms)
        known = np.isfinite(estimate)
        self.base_rtt_ms[known] = np.maximum(np.round(estimate[known]), 0.0)
        np.fill_diagonal(self.base_rtt_ms, 0.0)

    def _record_points(self, m: IntervalMeasurements, observation: KurmaObservation) -> None:
        """Keep each site's recent (load, local violation fraction) points (§7.1.4)."""
        served_rps = np.asarray(m.requests, float).sum(axis=0) / m.duration_s
        served_rps = served_rps + propagated_writes_rps(observation)
        keep = max(1, int(round(self.config.interference_window_s / m.duration_s)))
        for j, points in enumerate(self._points):
            local = float(m.requests[j][j])
            if local > 0:
                fraction = float(m.violations[j][j]) / local
                points.append(
                    _Point(float(served_rps[j]), fraction, float(observation.write_fraction[j]))
                )
            while len(points) > keep:
                points.popleft()

    # --- interference ------------------------------------------------------------------------
    def signal_interference(self, site: int) -> None:
        """An external detector reports interference at ``site``: refit its curve next round."""
        self._pending_signals.add(site)

    def _substitute_curves(self) -> None:
        for site in sorted(self._pending_signals):
            family = self.curve_families.get(site)
            points = self._points[site]
            if not family or not points:
                continue
            loads = np.array([p.load_rps for p in points])
            observed = np.array([p.violation_fraction for p in points])
            mix = float(np.mean([p.write_fraction for p in points]))
            best, errors = best_fitting_curve([s.curve(0, mix) for s in family], loads, observed)
            self.chosen_curve[site] = best
            self.last_fit[site] = CurveFit(loads, observed, errors)
            self.model = self.model.with_site_surface(site, family[best])
        self._pending_signals.clear()

    # --- the loop ----------------------------------------------------------------------------
    def step(self, m: IntervalMeasurements) -> Routing | None:
        """Take one interval's measurements; return the routing for the next one (None: the
        slow EWMA baseline skips this interval and the routing in force stays)."""
        observation = self._observe(m)
        self._record_points(m, observation)
        observation = self._slow_demand(m, observation)
        if observation is None:
            return None
        self._substitute_curves()
        self.observation = observation
        self.model_in_force = self._model_for(m)
        self.plan = decide(observation, self.model_in_force, self.config)
        target = plan_fractions(self.plan, observation.demand_rps)
        if self.config.max_fraction_change_per_s is None:
            self.fractions = target
        else:
            step = self.config.max_fraction_change_per_s * m.duration_s
            self.fractions = limit_change(self.fractions, target, step)
        return Routing(self.fractions, self.plan)

    def _model_for(self, m: IntervalMeasurements) -> KurmaModel:
        """The model this interval plans with: sites with failed servers on their
        reduced-capacity curves (§9)."""
        if m.capacity_share is None:
            return self.model
        return self.model.with_capacity_share(m.capacity_share)

    def _slow_demand(
        self, m: IntervalMeasurements, observation: KurmaObservation
    ) -> KurmaObservation | None:
        """For the slow EWMA baseline: recompute only every ``recompute_every_s`` (§7.1.2)."""
        every = self.config.recompute_every_s
        if every is None:
            return observation
        self._slow_span_s += m.duration_s
        self._slow_arrivals = self._slow_arrivals + np.asarray(m.arrivals, float)
        self._slow_writes = self._slow_writes + np.asarray(m.writes, float)
        if self.plan is not None and self._slow_span_s < every:
            return None
        arrivals, writes = self._slow_arrivals, self._slow_writes
        mean = arrivals / self._slow_span_s
        alpha = self.config.demand_ewma_alpha
        if self._demand_ewma is None or alpha is None:
            self._demand_ewma = mean
        else:
            self._demand_ewma = alpha * mean + (1 - alpha) * self._demand_ewma
        write_fraction = np.divide(writes, arrivals, out=np.zeros_like(writes), where=arrivals > 0)
        self._slow_span_s = 0.0
        self._slow_arrivals = np.zeros_like(arrivals)
        self._slow_writes = np.zeros_like(writes)
        return replace(observation, demand_rps=self._demand_ewma, write_fraction=write_fraction)
