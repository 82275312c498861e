"""What a running service exposes (DESIGN: "The runtime"; the metrics row of "Real
components"): Prometheus metrics in a registry of its own and the health of its loop,
served at ``/metrics`` and ``/healthz`` by ``geoslo.live._metrics.serve_metrics``."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from geoslo.live._metrics import in_base_units

__all__ = ["DECISION_BUCKETS_S", "ERROR_KINDS", "Health", "Metrics", "Reading", "named"]

# 1 ms (an OSQP solve) to 10 s (a large MILP or a Monte Carlo search)
DECISION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ERROR_KINDS = ("observe", "decide", "apply")


@dataclass(frozen=True)
class Reading:
    """One number a service exposes: ``quantity`` as the code names it, with its unit
    (``"redirect_fraction"``, ``"get_timeout_ms"``), and its labels (``("src", "Toronto")``,
    ``("dst", "Montreal")``; ``site``, ``stream``, ``prefix``). Exposed as
    ``geoslo_plan_<quantity in base units>{system, labels}`` (and, deprecated for one
    release, as the old ``geoslo_plan{name="quantity:label->label"}``)."""

    quantity: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, quantity: str, value: float, **labels: str) -> Reading:
        return cls(quantity, float(value), tuple(labels.items()))

    @property
    def legacy_name(self) -> str:
        """The name this reading had in ``geoslo_plan``/``geoslo_observation`` (0.x)."""
        if not self.labels:
            return self.quantity
        return f"{self.quantity}:{'->'.join(value for _, value in self.labels)}"


def named(readings: Iterable[Reading]) -> dict[str, float]:
    """The readings by name (``"rate_rps:a->b"``: :attr:`Reading.legacy_name`)."""
    return {r.legacy_name: r.value for r in readings}


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
        self.legacy = {  # deprecated (0.x names): removed in the release after this one
            which: Gauge(
                f"geoslo_{which}",
                f"Deprecated: geoslo_{which}_<quantity> with labels instead.",
                [*labels, "name"],
                registry=self.registry,
            )
            for which in ("plan", "observation")
        }
        self._families: dict[str, tuple[Gauge, tuple[str, ...]]] = {}
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
        self._shown: dict[str, set[tuple]] = {"plan": set(), "observation": set()}

    def count_error(self, kind: str) -> None:
        self.errors.labels(self.system, kind).inc()

    def set_plan(self, readings: Iterable[Reading]) -> None:
        self._set("plan", readings)

    def set_observation(self, readings: Iterable[Reading]) -> None:
        self._set("observation", readings)

    def _set(self, which: str, readings: Iterable[Reading]) -> None:
        """Set each reading; drop the series of those that are gone (no stale series)."""
        now = {(r.quantity, r.labels): r for r in readings}
        for quantity, labels in self._shown[which] - now.keys():
            gone = Reading(quantity, 0.0, labels)
            self._family(which, gone).remove(self.system, *(v for _, v in labels))
            self.legacy[which].remove(self.system, gone.legacy_name)
        for reading in now.values():
            _, value = in_base_units(reading.quantity, reading.value)
            labels = (v for _, v in reading.labels)
            self._family(which, reading).labels(self.system, *labels).set(value)
            self.legacy[which].labels(self.system, reading.legacy_name).set(reading.value)
        self._shown[which] = set(now)

    def _family(self, which: str, reading: Reading) -> Gauge:
        """``geoslo_<which>_<quantity in base units>``, made on its first reading."""
        name = f"geoslo_{which}_{in_base_units(reading.quantity, 0.0)[0]}"
        label_names = ("system", *(label for label, _ in reading.labels))
        if name not in self._families:
            doc = {"plan": "The plan in force", "observation": "The last observation"}[which]
            gauge = Gauge(name, f"{doc}: {reading.quantity}.", label_names, registry=self.registry)
            self._families[name] = (gauge, label_names)
        gauge, first = self._families[name]
        if first != label_names:
            raise ValueError(f"{name}: labels {label_names}, first {first}")
        return gauge

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
