"""Simulation of the shared egress link of Dürango et al. (CDC 2016): three streams'
buffers, a work-conserving link split by a policy every interval (``_link``), and the
metrics of §V-B (``_metrics``); the same link one interval at a time as an environment
handle for ``geoslo run`` (``LinkStepper``, ``_environment``)."""

from geoslo.sim.replication._environment import ReplicationSimEnvironment, as_allocation
from geoslo.sim.replication._link import (
    LinkRun,
    LinkSettings,
    LinkStepper,
    LinkWorkload,
    allocate,
    pareto_sums_mb,
    simulate_link,
    split_among_images,
)
from geoslo.sim.replication._metrics import (
    LinkMetrics,
    application_wait_s,
    dro_mb,
    image_age_s,
    link_metrics,
    realized_cost,
)

__all__ = [
    "ReplicationSimEnvironment",
    "LinkStepper",
    "as_allocation",
    "LinkMetrics",
    "application_wait_s",
    "dro_mb",
    "image_age_s",
    "link_metrics",
    "realized_cost",
    "LinkRun",
    "LinkSettings",
    "LinkWorkload",
    "allocate",
    "pareto_sums_mb",
    "simulate_link",
    "split_among_images",
]
