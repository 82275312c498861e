"""The evaluation functions f(P, S, L) of the Supercloud scheduler (SoCC 2016, §3.1-§3.2),
vectorised over many candidate placements at once.

A candidate is a leader site and the sites of the other nodes: ``leader`` is an int array
(C,) and ``followers`` an int array (C, m-1) of site indices. Scores are negated weighted
network latencies (ms x requests): higher is better.
"""

from __future__ import annotations

import numpy as np

__all__ = ["score_candidates", "score_placement"]


def _front_end_arrays(state) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sites = np.array([state.site_index(f.site) for f in state.front_ends], dtype=np.int64)
    reads = np.array([f.reads for f in state.front_ends], dtype=float)
    writes = np.array([f.writes for f in state.front_ends], dtype=float)
    return sites, reads, writes


def single_vm_scores(state, leader: np.ndarray) -> np.ndarray:
    """§3.1: f = -sum_i s_i L(d_i, p), s_i = the front-end's requests."""
    sites, reads, writes = _front_end_arrays(state)
    latency_ms = state.rtt_ms[sites[None, :], leader[:, None]]  # (C, n)
    return -(latency_ms * (reads + writes)[None, :]).sum(axis=1)


def zookeeper_scores(state, leader: np.ndarray, followers: np.ndarray) -> np.ndarray:
    """§3.2: f = -sum_i (alpha R_i r_i + beta W_i w_i).

    R_i = W_i^(1) = mean RTT from the front-end to the m nodes (clients connect at random);
    W_i^(2) = mean RTT from a node to the leader (the forward); W_i^(3) = 2 x the median
    RTT from the leader to the other nodes (two broadcast rounds, each waiting for half).
    """
    sites, reads, writes = _front_end_arrays(state)
    rtt = state.rtt_ms
    nodes = np.concatenate([leader[:, None], followers], axis=1)  # (C, m)
    to_nodes_ms = rtt[sites[None, :, None], nodes[:, None, :]].mean(axis=2)  # (C, n)
    forward_ms = rtt[nodes, leader[:, None]].mean(axis=1)  # (C,)
    if followers.shape[1]:
        broadcast_ms = 2 * np.median(rtt[leader[:, None], followers], axis=1)
    else:
        broadcast_ms = np.zeros(len(leader))
    write_ms = to_nodes_ms + (forward_ms + broadcast_ms)[:, None]
    weighted = state.read_weight * to_nodes_ms * reads + state.write_weight * write_ms * writes
    return -weighted.sum(axis=1)


def score_candidates(state, leader: np.ndarray, followers: np.ndarray) -> np.ndarray:
    """f for every candidate under ``state.evaluation``."""
    if state.evaluation == "single_vm":
        return single_vm_scores(state, leader)
    return zookeeper_scores(state, leader, followers)


def score_placement(state, placement) -> float:
    """f of one placement."""
    leader = np.array([state.site_index(placement.site_of(placement.leader))])
    followers = np.array([[state.site_index(s) for s in placement.follower_sites()]], dtype=int)
    return float(score_candidates(state, leader, followers.reshape(1, -1))[0])
