"""SCADS Director (FAST 2011): model-predictive elastic scaling of a binned key-value
store under a 99th-percentile latency SLO.

``types`` (cluster state, configuration, actions); ``loop`` (smoothing, deciding and
scheduling every period).
"""

from geoslo.control.director.loop import RunningAction, Step
from geoslo.control.director.types import (
    ACTION_KINDS,
    Action,
    ClusterState,
    DirectorConfig,
    Plan,
    ServerState,
    replica_loads,
)

__all__ = [
    "ACTION_KINDS",
    "Action",
    "ClusterState",
    "DirectorConfig",
    "Plan",
    "RunningAction",
    "ServerState",
    "Step",
    "replica_loads",
]
