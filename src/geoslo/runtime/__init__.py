"""``geoslo run``: every controller as a long-running service (DESIGN: "The runtime").

A :class:`Service` is one controller and one environment, as a system's module
(``geoslo.runtime.<system>``) builds them from a validated configuration file. The loop
observes, steps the controller off the event loop, applies the plan, and serves
Prometheus metrics, ``/healthz`` and the plan in force (``/plan``).
"""

from geoslo.runtime._config import (
    SYSTEM_NAMES,
    RunConfig,
    ServiceSettings,
    config_schema,
    load_config,
    load_system,
    parse_config,
)
from geoslo.runtime._dryrun import DryRunEnvironment
from geoslo.runtime._log import ServiceLog
from geoslo.runtime._loop import ONCE_FAILED_EXIT, IntervalReport, ServiceLoop, serve
from geoslo.runtime._metrics import Metrics, Reading
from geoslo.runtime._service import Service, System

__all__ = [
    "ONCE_FAILED_EXIT",
    "SYSTEM_NAMES",
    "DryRunEnvironment",
    "IntervalReport",
    "Metrics",
    "Reading",
    "RunConfig",
    "Service",
    "ServiceLog",
    "ServiceLoop",
    "ServiceSettings",
    "System",
    "config_schema",
    "load_config",
    "load_system",
    "parse_config",
    "serve",
]
