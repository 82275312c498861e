"""A state.json for ``geoslo supercloud decide``: §5.1's ZooKeeper ensemble (two nodes in
Washington DC, one in Tokyo, leader in Washington) at an hour when Tokyo's clients are
the busier, on the measured IBM Cloud RTTs; or ``sites`` of those regions and ``nodes``
nodes (the benchmark's 10 x 5)."""

from __future__ import annotations

import numpy as np

from geoslo.control.supercloud.types import FrontEnd, Node, Placement, PlacementState
from geoslo.errors import InputError
from geoslo.topology import load_ibm_latency

__all__ = ["example_state", "FOLLOW_THE_SUN_SITES"]

FOLLOW_THE_SUN_SITES = ("Washington DC", "Tokyo")
READ_FRACTION = 0.9  # §5.1: reads to writes 9:1


def example_state(sites: int = 2, nodes: int = 3, seed: int = 0) -> PlacementState:
    names, rtt_ms = load_ibm_latency()
    if not 1 <= sites <= len(names):
        raise InputError("sites", f"must be between 1 and {len(names)}, not {sites}")
    if nodes < 1:
        raise InputError("nodes", f"must be >= 1, not {nodes}")
    chosen = list(FOLLOW_THE_SUN_SITES[:sites])
    chosen += [n for n in names if n not in chosen][: sites - len(chosen)]
    index = [names.index(n) for n in chosen]
    matrix = np.asarray(rtt_ms)[np.ix_(index, index)]
    if sites == 2:
        requests = np.array([300.0, 1200.0])  # Tokyo's daytime: 4x Washington's load
    else:
        requests = np.random.default_rng(seed).uniform(100, 1000, sites).round()
    requests = [float(n) for n in requests]
    front_ends = tuple(
        FrontEnd(site, round(READ_FRACTION * n, 6), round((1 - READ_FRACTION) * n, 6))
        for site, n in zip(chosen, requests, strict=True)
    )
    node_sites = [chosen[min(k // 2, sites - 1) if sites > 1 else 0] for k in range(nodes)]
    current = Placement(tuple(Node(f"zk{k + 1}", site) for k, site in enumerate(node_sites)), "zk1")
    return PlacementState(tuple(chosen), matrix, front_ends, current)
