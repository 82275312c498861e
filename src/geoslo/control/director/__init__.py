"""SCADS Director (FAST 2011): model-predictive elastic scaling of a binned key-value
store under a 99th-percentile latency SLO.

``types`` (cluster state, configuration, actions); ``smoothing`` (hysteresis, §5.5);
``decide`` (the pure decision, §5.3); ``scheduler`` (splitting, concurrency and cancelling,
§5.6); ``loop`` (smoothing, deciding and scheduling every period: ``step(observation)``).
"""

from geoslo.control.director.decide import decide, plan_outcome, work_capacity
from geoslo.control.director.loop import Decision, DirectorLoop
from geoslo.control.director.smoothing import Smoother, smooth
from geoslo.control.director.types import (
    ACTION_KINDS,
    Action,
    ClusterState,
    DirectorConfig,
    Histogram,
    Observation,
    Plan,
    RunningAction,
    ServerState,
    Step,
    replica_loads,
)

__all__ = [
    "ACTION_KINDS",
    "Action",
    "ClusterState",
    "DirectorConfig",
    "Decision",
    "DirectorLoop",
    "Histogram",
    "Observation",
    "Plan",
    "RunningAction",
    "ServerState",
    "Step",
    "Smoother",
    "decide",
    "plan_outcome",
    "replica_loads",
    "smooth",
    "work_capacity",
]
