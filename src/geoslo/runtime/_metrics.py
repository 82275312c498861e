"""What a running service exposes (DESIGN: "The runtime"; the metrics row of "Real
components"): Prometheus metrics in a registry of its own and the health of its loop,
served at ``/metrics`` and ``/healthz`` by ``geoslo.live._metrics.serve_metrics``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

__all__ = ["DECISION_BUCKETS_S", "ERROR_KINDS", "Health", "Metrics"]

# 1 ms (an OSQP solve) to 10 s (a large MILP or a Monte Carlo search)
DECISION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ERROR_KINDS = ("observe", "decide", "apply")


class Metrics:
    """One service's metrics, labelled with its system (a fresh registry per service)."""

    def __init__(self, system: str) -> None:
        self.system = system
        self.registry = CollectorRegistry()
        labels = ["system"]
        self.decision_seconds = Histogram(
            "geoslo_decision_seconds",
            "Wall time of one controller step (the solver included).",
            labels,
            buckets=DECISION_BUCKETS_S,
            registry=self.registry,
        )
        self.plan = Gauge(
            "geoslo_plan",
            "The plan in force (name: quantity and unit).",
            [*labels, "name"],
            registry=self.registry,
        )
        self.observation = Gauge(
            "geoslo_observation",
            "The last observation (name: quantity and unit).",
            [*labels, "name"],
            registry=self.registry,
        )
        self.errors = Counter(
            "geoslo_errors",
            "Failed observations, decisions and applications.",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.intervals = Counter(
            "geoslo_intervals", "Intervals the loop completed.", labels, registry=self.registry
        )
        self.plans = Counter(
            "geoslo_plans",
            "Plans decided, by outcome status.",
            [*labels, "status"],
            registry=self.registry,
        )
        self.objective = Gauge(
            "geoslo_objective",
            "The last outcome's objective (the system's own unit).",
            labels,
            registry=self.registry,
        )
        for kind in ERROR_KINDS:  # present at 0 from the start, so rate() works
            self.errors.labels(system, kind)
        self.decision_seconds.labels(system)
        self.intervals.labels(system)
        self._names: dict[str, set[str]] = {"plan": set(), "observation": set()}

    def count_error(self, kind: str) -> None:
        self.errors.labels(self.system, kind).inc()

    def set_plan(self, values: Mapping[str, float]) -> None:
        self._set(self.plan, "plan", values)

    def set_observation(self, values: Mapping[str, float]) -> None:
        self._set(self.observation, "observation", values)

    def _set(self, gauge: Gauge, which: str, values: Mapping[str, float]) -> None:
        """Set each named value; drop names that are gone (no stale series, bounded)."""
        for name in self._names[which] - set(values):
            gauge.remove(self.system, name)
        for name, value in values.items():
            gauge.labels(self.system, name).set(float(value))
        self._names[which] = set(values)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class Health:
    """Whether the loop is alive: it completed an interval within ``stale_after_s``."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self.intervals = 0
        self.last_status = "starting"
        self.degraded: list[str] = []
        self._last_s = time.monotonic()  # the start counts as the first mark

    def completed(self, status: str, degraded: list[str] | None = None) -> None:
        """An interval completed with ``status``; ``degraded``: what its environment found
        wrong (empty or None: nothing)."""
        self.intervals += 1
        self.last_status = status
        self.degraded = list(degraded or ())
        self._last_s = time.monotonic()

    def report(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and the JSON body of ``/healthz``: 503 when stale, or when the
        last interval was degraded (the reasons in ``degraded``)."""
        age_s = time.monotonic() - self._last_s
        fresh = age_s <= self.stale_after_s
        status = "ok" if fresh and not self.degraded else ("degraded" if fresh else "stale")
        body = {
            "status": status,
            "intervals": self.intervals,
            "last_interval_age_s": round(age_s, 3),
            "last_status": self.last_status,
            "stale_after_s": self.stale_after_s,
        }
        if self.degraded:
            body["degraded"] = list(self.degraded)
        return (200 if status == "ok" else 503), body
