"""What a system hands the runtime: how to read its configuration tables, and how to build
its controller and environment from them (``geoslo.runtime.<system>.SYSTEM``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from geoslo.control import Controller, Environment
from geoslo.runtime._metrics import Reading

__all__ = ["Service", "System"]


@dataclass
class Service:
    """One controller driving one environment every ``interval_s``.

    ``plan_gauges`` and ``observation_gauges`` give the numbers worth a Prometheus gauge
    (:class:`~geoslo.runtime._metrics.Reading`: ``Reading.of("rate_rps", r, src=a, dst=b)``
    is exposed as ``geoslo_plan_rate_requests_per_second{src="a",dst="b"}``);
    ``plan_record`` is the JSON-able plan for the structured log and the dry run;
    ``collectors`` are Prometheus collectors (a registry of the environment's own metrics)
    served beside the runtime's at ``/metrics``."""

    system: str
    controller: Controller
    environment: Environment
    interval_s: float
    plan_gauges: Callable[[Any], Iterable[Reading]]
    observation_gauges: Callable[[Any], Iterable[Reading]]
    plan_record: Callable[[Any], Mapping[str, Any]]
    collectors: tuple[Any, ...] = ()
    # an observe's and an apply's wall-time limits when [service] sets none; None: an interval
    observe_timeout_s: float | None = None
    apply_timeout_s: float | None = None


@dataclass(frozen=True)
class System:
    """One system as ``geoslo run`` knows it.

    ``controller_settings`` validates the ``[controller]`` table and ``environments`` the
    ``[environment]`` table, one model per ``kind`` ("simulator", "testbed", an engine);
    both forbid unknown keys. ``build(controller, environment, interval_s)`` returns the
    service (nothing started yet). ``example_config`` is a commented TOML file that runs;
    ``example_configs`` holds one per environment kind that has its own (``geoslo <system>
    example-config --kind KIND``; empty: only the one)."""

    name: str
    default_interval_s: float  # the paper's control interval
    controller_settings: type[BaseModel]
    environments: Mapping[str, type[BaseModel]]
    build: Callable[[BaseModel, BaseModel, float], Service]
    example_config: str
    example_configs: Mapping[str, str] = field(default_factory=dict)
