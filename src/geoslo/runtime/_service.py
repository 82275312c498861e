"""What a system hands the runtime: its controller, its environment, and how to describe
observations and plans as metrics and log records."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from geoslo.control import Controller, Environment

__all__ = ["Service"]


@dataclass
class Service:
    """One controller driving one environment every ``interval_s``.

    ``plan_gauges`` and ``observation_gauges`` name numbers worth a Prometheus gauge
    (names carry units: ``"rate_rps{from=a,to=b}"`` style keys are the system's choice);
    ``plan_record`` is the JSON-able plan for the structured log and the dry run."""

    system: str
    controller: Controller
    environment: Environment
    interval_s: float
    plan_gauges: Callable[[Any], Mapping[str, float]]
    observation_gauges: Callable[[Any], Mapping[str, float]]
    plan_record: Callable[[Any], Mapping[str, Any]]
