"""``geoslo run``: every controller as a long-running service (DESIGN: "The runtime").

A :class:`Service` is one controller and one environment, as a system's module
(``geoslo.runtime.<system>``) builds them from a validated configuration file. The loop
observes, steps the controller off the event loop, applies the plan, and serves
Prometheus metrics and ``/healthz``.
"""

from geoslo.runtime._service import Service, System

__all__ = ["Service", "System"]
