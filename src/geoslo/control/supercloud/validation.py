"""The state.json and plan.json contract of ``geoslo supercloud decide`` (Supercloud, SoCC
2016, §3). Every bad input raises :class:`~geoslo.errors.InputError` naming the field by
its JSON path. The structure, types and ranges are the pydantic models of ``_schema.py``
(every number has a range and every list a length bound, so that whatever is accepted is
decided in bounded time and memory); the checks across fields are here. Schema:
``geoslo supercloud schema``, docs/supercloud.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from geoslo._schema import validate
from geoslo.control.supercloud import _schema as schema
from geoslo.control.supercloud._schema import MAX_FRONT_ENDS, MAX_NODES, MAX_SITES
from geoslo.control.supercloud.decide import MAX_CANDIDATES, candidate_count
from geoslo.control.supercloud.types import (
    FrontEnd,
    Node,
    Placement,
    PlacementState,
    Plan,
)
from geoslo.errors import InputError

__all__ = [
    "parse_state",
    "state_to_dict",
    "plan_to_dict",
    "placement_to_dict",
    "MAX_SITES",
    "MAX_NODES",
    "MAX_FRONT_ENDS",
]


def _sites(names: list[str]) -> tuple[str, ...]:
    if len(set(names)) != len(names):
        raise InputError("sites", "must not repeat a site")
    return tuple(names)


def _rtt(rows: list[list[float]], n: int) -> np.ndarray:
    """An n x n matrix, one row and one column per site."""
    if len(rows) != n:
        raise InputError("rtt_ms", f"must have {n} entries (one per site), has {len(rows)}")
    for i, row in enumerate(rows):
        if len(row) != n:
            raise InputError(f"rtt_ms[{i}]", f"must be a list of {n} numbers")
    return np.array(rows, dtype=float).reshape(n, n)


def _known(site: str, name: str, sites: tuple[str, ...]) -> str:
    if site not in sites:
        raise InputError(name, f"unknown site {site!r}; sites are {list(sites)}")
    return site


def _workload(value: list[schema.FrontEnd], sites: tuple[str, ...]) -> tuple[FrontEnd, ...]:
    return tuple(
        FrontEnd(_known(f.site, f"workload[{k}].site", sites), f.reads, f.writes)
        for k, f in enumerate(value)
    )


def _placement(value: schema.Placement, sites: tuple[str, ...], single: bool) -> Placement:
    """Nodes with unique names on known sites, within the exhaustive search's bound; the
    leader one of them (given unless single_vm)."""
    count = len(value.nodes)
    if candidate_count(len(sites), count) > MAX_CANDIDATES:
        raise InputError(
            "placement.nodes",
            f"{len(sites)} sites x {count} nodes give {candidate_count(len(sites), count)} "
            f"candidate placements; the exhaustive search takes at most {MAX_CANDIDATES}",
        )
    nodes = [
        Node(n.name, _known(n.site, f"placement.nodes[{k}].site", sites))
        for k, n in enumerate(value.nodes)
    ]
    names = [node.name for node in nodes]
    if len(set(names)) != len(names):
        raise InputError("placement.nodes", "must not repeat a node name")
    if single and len(nodes) != 1:
        raise InputError("placement.nodes", f"single_vm places exactly one node, not {len(nodes)}")
    if value.leader is None and not single:
        raise InputError("placement.leader", "missing required field")
    leader = names[0] if value.leader is None else value.leader
    if leader not in names:
        raise InputError("placement.leader", f"{leader!r} is not one of the nodes {names}")
    return Placement(tuple(nodes), leader)


def parse_state(data: Any) -> PlacementState:
    """A checked :class:`PlacementState` from decoded JSON: the model's checks
    (``_schema.StateInput``), then the sites, the matrix's shape and the names."""
    state = validate(schema.StateInput, data, root="state")
    sites = _sites(state.sites)
    evaluation = state.evaluation
    return PlacementState(
        sites,
        _rtt(state.rtt_ms, len(sites)),
        _workload(state.workload, sites),
        _placement(state.placement, sites, single=evaluation.function == "single_vm"),
        evaluation.function,
        evaluation.read_weight,
        evaluation.write_weight,
        state.threshold,
    )


def placement_to_dict(placement: Placement) -> dict:
    return {
        "nodes": [{"name": n.name, "site": n.site} for n in placement.nodes],
        "leader": placement.leader,
    }


def state_to_dict(state: PlacementState) -> dict:
    return {
        "sites": list(state.sites),
        "rtt_ms": state.rtt_ms.tolist(),
        "workload": [
            {"site": f.site, "reads": f.reads, "writes": f.writes} for f in state.front_ends
        ],
        "placement": placement_to_dict(state.current),
        "evaluation": {
            "function": state.evaluation,
            "read_weight": state.read_weight,
            "write_weight": state.write_weight,
        },
        "threshold": state.threshold,
    }


def plan_to_dict(plan: Plan) -> dict:
    """plan.json: the outcome (status, solver_status, objective = score, decide_ms), then
    the placement, both scores and the migrations (docs/supercloud.md)."""
    return {
        **plan.outcome.to_dict(),
        "placement": placement_to_dict(plan.placement),
        "score": plan.score,
        "current_score": plan.current_score,
        "improvement": plan.score - plan.current_score,
        "migrations": [
            {"node": m.node, "from": m.from_site, "to": m.to_site} for m in plan.migrations
        ],
        "candidates_evaluated": plan.candidates_evaluated,
        "best_placements": plan.best_placements,
    }
