"""What the Supercloud scheduler reads and answers (Shen et al., SoCC 2016, §3).

A placement puts each node of an application on a site; the scheduler scores placements
with an evaluation function f(P, S, L) of the placement P, the workload report S and the
RTT matrix L, and moves to a better one only when it beats the current by a threshold T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control import Outcome

__all__ = [
    "EVALUATIONS",
    "FrontEnd",
    "Node",
    "Placement",
    "PlacementState",
    "PlacementObservation",
    "Migration",
    "Plan",
]

# §3.1: one VM behind front-ends; §3.2: a ZooKeeper-like replicated ensemble.
EVALUATIONS = ("single_vm", "zookeeper")


@dataclass(frozen=True)
class FrontEnd:
    """One front-end of the workload report S (§3.1, §3.2): where it is and what it got.

    ``reads`` and ``writes`` count requests over the report period; the single-VM
    function (§3.1) weighs a front-end by all its requests.
    """

    site: str
    reads: float
    writes: float = 0.0


@dataclass(frozen=True)
class Node:
    name: str
    site: str


@dataclass(frozen=True)
class Placement:
    """Every node's site; ``leader`` names the node that leads (§3.2's p_l)."""

    nodes: tuple[Node, ...]
    leader: str

    def site_of(self, name: str) -> str:
        return next(node.site for node in self.nodes if node.name == name)

    def follower_sites(self) -> list[str]:
        return [node.site for node in self.nodes if node.name != self.leader]


@dataclass(frozen=True)
class PlacementState:
    """One scheduling round's input (§3): sites, L, S, the current placement, f and T.

    ``threshold`` T is in the score's unit (ms x requests); ``read_weight`` and
    ``write_weight`` are §3.2's alpha and beta.
    """

    sites: tuple[str, ...]
    rtt_ms: np.ndarray
    front_ends: tuple[FrontEnd, ...]
    current: Placement
    evaluation: str = "zookeeper"
    read_weight: float = 1.0
    write_weight: float = 1.0
    threshold: float = 0.0

    def site_index(self, site: str) -> int:
        return self.sites.index(site)


@dataclass(frozen=True)
class PlacementObservation:
    """One interval as the loop sees it (§5.1): the time, the workload report S of the
    last interval (one entry per front-end), the placement in force, and whether a
    migration (or reconfiguration) is still running, when the scheduler must wait;
    ``rtt_ms``, the RTTs between the sites as measured in the interval (None: the
    template's L stands)."""

    now_s: float
    front_ends: tuple[FrontEnd, ...]
    current: Placement
    busy: bool = False
    rtt_ms: np.ndarray | None = None


@dataclass(frozen=True)
class Migration:
    node: str
    from_site: str
    to_site: str


@dataclass(frozen=True)
class Plan:
    """The scheduler's answer: the placement to run, both scores and the moves to get there.

    ``placement`` is the current one (and ``migrations`` empty) when nothing beats it by T.
    ``outcome``: the search is exhaustive, so ``optimal``; its objective is ``score`` (f,
    the negated weighted network latency in ms x requests: higher is better).
    """

    placement: Placement
    score: float
    current_score: float
    migrations: tuple[Migration, ...]
    candidates_evaluated: int
    best_placements: int
    outcome: Outcome
