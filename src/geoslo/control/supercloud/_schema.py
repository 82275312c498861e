"""The state.json and plan.json contract of ``geoslo supercloud decide`` as pydantic models:
the one source of the structure, types and ranges that ``parse_state`` checks and
``geoslo supercloud schema`` publishes (docs/supercloud.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from geoslo._schema import Contract, List, Number, Output, Text, absent
from geoslo.control._schema import OutcomeFields

__all__ = [
    "StateInput",
    "PlanOutput",
    "INPUT",
    "OUTPUT",
    "MAX_SITES",
    "MAX_NODES",
    "MAX_FRONT_ENDS",
    "MAX_RTT_MS",
    "MAX_REQUESTS",
    "MAX_WEIGHT",
    "MAX_THRESHOLD",
]

# Ranges (docs/supercloud.md).
MAX_SITES = 100  # §5.1 uses 9 IBM Cloud sites
MAX_NODES = 9  # ZooKeeper ensembles have 3, 5 or 7 servers
# Scoring holds (candidates in a chunk) x (front-ends) x (nodes) RTTs at once: at these
# bounds about 0.4 GB per 50,000 candidates.
MAX_FRONT_ENDS = 100
MAX_RTT_MS = 1_000.0  # antipodes over fibre are ~400 ms, a geostationary hop ~600 ms
MAX_REQUESTS = 1e15  # per report period: 1e9 req/s for 11 days
MAX_WEIGHT = 1e6  # alpha, beta: relative weights of reads and writes
# T is in the score's unit; every score the bounds allow is under 1e29 ms x requests.
MAX_THRESHOLD = 1e30

Requests = Number(0.0, MAX_REQUESTS)
Weight = Number(0.0, MAX_WEIGHT)


class FrontEnd(Contract):
    """A front-end's site and the reads and writes it sent in the last report period."""

    site: Text
    reads: Requests
    writes: Requests = 0.0


class Node(Contract):
    name: Text
    site: Text


class Placement(Contract):
    """The ensemble now: its nodes and the leader (default the first node)."""

    nodes: List(Node, 1, MAX_NODES)
    leader: Text = absent()


class Evaluation(Contract):
    """The evaluation function (§3.1) and the weights of reads (alpha) and writes (beta)."""

    function: Literal["single_vm", "zookeeper"]  # types.EVALUATIONS
    read_weight: Weight = 1.0
    write_weight: Weight = 1.0


class StateInput(Contract):
    """state.json: the sites and their RTT matrix, the workload, the placement now, the
    evaluation function and the migration threshold T."""

    sites: List(Text, 1, MAX_SITES)
    rtt_ms: List(List(Number(0.0, MAX_RTT_MS), 1, MAX_SITES), 1, MAX_SITES)
    workload: List(FrontEnd, 0, MAX_FRONT_ENDS)
    placement: Placement
    evaluation: Evaluation
    threshold: Number(0.0, MAX_THRESHOLD) = 0.0


# ---------------------------------------------------------------------------- output


class NodeOutput(Output):
    name: str
    site: str


class PlacementOutput(Output):
    nodes: list[NodeOutput]
    leader: str


class MigrationOutput(Output):
    """One node's move, ``from`` a site ``to`` another."""

    node: str
    from_: str = Field(alias="from")
    to: str


class PlanOutput(OutcomeFields):
    """plan.json: how the decision ended (objective: the chosen placement's score), the
    placement, both scores, the migrations and how many placements were scored."""

    placement: PlacementOutput
    score: float
    current_score: float
    improvement: float
    migrations: list[MigrationOutput]
    candidates_evaluated: int = Field(ge=0)
    best_placements: int = Field(ge=0)


INPUT, OUTPUT = StateInput, PlanOutput
