"""The Supercloud scheduler's search (SoCC 2016, §3): score every placement, keep those that
maximise f and beat the current one by at least T, pick the one needing fewest migrations.

f depends on where the leader is and on the multiset of the other nodes' sites, so the
search enumerates (leader site, follower multiset) pairs: N x C(N+m-2, m-1) candidates
instead of N^m labelled placements (7,150 instead of 100,000 for 10 sites and 5 nodes),
and scores them in vectorised chunks.
"""

from __future__ import annotations

import time
from functools import lru_cache
from itertools import combinations_with_replacement
from math import comb

import numpy as np

from geoslo.control import Outcome
from geoslo.control.supercloud.evaluation import score_candidates, score_placement
from geoslo.control.supercloud.types import Migration, Node, Placement, PlacementState, Plan
from geoslo.errors import InputError

__all__ = ["decide", "candidate_count", "MAX_CANDIDATES"]

MAX_CANDIDATES = 2_000_000
_CHUNK = 50_000


def candidate_count(sites: int, nodes: int) -> int:
    """How many (leader site, follower multiset) candidates the search scores."""
    return sites * comb(sites + nodes - 2, nodes - 1)


@lru_cache(maxsize=16)
def _candidates(sites: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    # Shaped by count, not -1: one node has one empty follower multiset, shape (1, 0).
    count = comb(sites + nodes - 2, nodes - 1)
    multisets = np.array(list(combinations_with_replacement(range(sites), nodes - 1)), dtype=int)
    multisets = multisets.reshape(count, nodes - 1)
    leader = np.repeat(np.arange(sites), len(multisets))
    followers = np.tile(multisets, (sites, 1))
    return leader, followers


def _site_counts(followers: np.ndarray, sites: int) -> np.ndarray:
    counts = np.zeros((len(followers), sites), dtype=int)
    rows = np.repeat(np.arange(len(followers)), followers.shape[1])
    np.add.at(counts, (rows, followers.ravel()), 1)
    return counts


def _migration_counts(state: PlacementState, leader: np.ndarray, followers: np.ndarray):
    """Nodes that must move from the current placement to each candidate."""
    current = state.current
    current_leader = state.site_index(current.site_of(current.leader))
    follower_sites = [state.site_index(s) for s in current.follower_sites()]
    current_counts = np.bincount(np.array(follower_sites, dtype=int), minlength=len(state.sites))
    staying = np.minimum(_site_counts(followers, len(state.sites)), current_counts).sum(axis=1)
    return (leader != current_leader).astype(int) + followers.shape[1] - staying


def _placement(state: PlacementState, leader_site: int, follower_sites: np.ndarray) -> Placement:
    """The candidate with the current nodes assigned to it so that fewest of them move."""
    current = state.current
    slots = [state.sites[s] for s in follower_sites]
    staying, moving = [], []
    for node in current.nodes:
        if node.name == current.leader:
            continue
        (staying if node.site in slots else moving).append(node)
        if node.site in slots:
            slots.remove(node.site)
    sites = {node.name: node.site for node in staying}
    sites.update({node.name: site for node, site in zip(moving, slots, strict=True)})
    sites[current.leader] = state.sites[leader_site]
    nodes = tuple(Node(node.name, sites[node.name]) for node in current.nodes)
    return Placement(nodes, current.leader)


SOLVER_STATUS = "exhaustive"  # every candidate scored: the answer is proven best


def _outcome(objective: float, started_s: float) -> Outcome:
    decide_ms = (time.perf_counter() - started_s) * 1e3
    return Outcome("optimal", SOLVER_STATUS, objective, decide_ms)


def decide(state: PlacementState) -> Plan:
    """One scheduling round (§3): the best placement that beats the current one by T.

    The outcome is always ``optimal`` (the search is exhaustive) with the plan's score as
    objective; more than ``MAX_CANDIDATES`` candidates is refused as input."""
    started_s = time.perf_counter()  # only to report decide_ms; the decision ignores it
    m = len(state.current.nodes)
    total = candidate_count(len(state.sites), m)
    if total > MAX_CANDIDATES:
        raise InputError(
            "sites",
            f"{len(state.sites)} sites x {m} nodes give {total} candidate placements; "
            f"the exhaustive search takes at most {MAX_CANDIDATES}",
        )
    leader, followers = _candidates(len(state.sites), m)
    scores = np.concatenate(
        [
            score_candidates(state, leader[k : k + _CHUNK], followers[k : k + _CHUNK])
            for k in range(0, total, _CHUNK)
        ]
    )
    current_score = score_placement(state, state.current)
    best = float(scores.max())
    tolerance = 1e-9 * max(1.0, abs(best))
    if best < current_score + state.threshold - tolerance:
        outcome = _outcome(current_score, started_s)
        return Plan(state.current, current_score, current_score, (), total, 0, outcome)
    ties = np.flatnonzero(scores >= best - tolerance)
    moves = _migration_counts(state, leader[ties], followers[ties])
    chosen = ties[int(np.argmin(moves))]  # first of the fewest, in enumeration order
    target = _placement(state, int(leader[chosen]), followers[chosen])
    migrations = tuple(
        Migration(old.name, old.site, new.site)
        for old, new in zip(state.current.nodes, target.nodes, strict=True)
        if old.site != new.site
    )
    outcome = _outcome(best, started_s)
    return Plan(target, best, current_score, migrations, total, len(ties), outcome)
