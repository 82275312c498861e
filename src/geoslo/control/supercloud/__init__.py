"""The Supercloud scheduler (Shen et al., SoCC 2016, §3): where an application's nodes
should run for the lowest client-perceived network latency.

``types`` (state, placement, plan); ``evaluation`` (f for one VM behind front-ends, §3.1,
and a ZooKeeper-like ensemble, §3.2); ``decide`` (every placement scored, the
best that beats the current by T with the fewest migrations; an ``optimal`` outcome);
``loop`` (``step(observation)``: evaluate every minute, never while migrations run);
``validation`` (the JSON contract); ``example``.
"""

from geoslo.control.supercloud.decide import MAX_CANDIDATES, candidate_count, decide
from geoslo.control.supercloud.evaluation import score_candidates, score_placement
from geoslo.control.supercloud.types import (
    EVALUATIONS,
    FrontEnd,
    Migration,
    Node,
    Placement,
    PlacementObservation,
    PlacementState,
    Plan,
)

__all__ = [
    "EVALUATIONS",
    "MAX_CANDIDATES",
    "FrontEnd",
    "Migration",
    "Node",
    "Placement",
    "PlacementObservation",
    "PlacementState",
    "Plan",
    "candidate_count",
    "decide",
    "score_candidates",
    "score_placement",
]
