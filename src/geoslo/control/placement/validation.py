"""The state.json and plan.json contract of ``geoslo placement decide`` (Supercloud, SoCC
2016, §3). Every bad input raises :class:`~geoslo.errors.InputError` naming the field by
its JSON path. Schema: docs/placement.md.
"""

from __future__ import annotations

from typing import Any

from geoslo._json import as_list, check_keys, check_non_negative, number, number_rows, string
from geoslo.control.placement.types import (
    EVALUATIONS,
    FrontEnd,
    Node,
    Placement,
    PlacementState,
    Plan,
)
from geoslo.errors import InputError

__all__ = ["parse_state", "state_to_dict", "plan_to_dict", "placement_to_dict"]

_TOP = {"sites", "rtt_ms", "workload", "placement", "evaluation", "threshold"}
_EVALUATION = {"function", "read_weight", "write_weight"}


def _sites(value: Any) -> tuple[str, ...]:
    names = [string(s, f"sites[{k}]") for k, s in enumerate(as_list(value, "sites"))]
    if not names:
        raise InputError("sites", "must name at least one site")
    if len(set(names)) != len(names):
        raise InputError("sites", "must not repeat a site")
    return tuple(names)


def _known(site: Any, name: str, sites: tuple[str, ...]) -> str:
    site = string(site, name)
    if site not in sites:
        raise InputError(name, f"unknown site {site!r}; sites are {list(sites)}")
    return site


def _workload(value: Any, sites: tuple[str, ...]) -> tuple[FrontEnd, ...]:
    front_ends = []
    for k, item in enumerate(as_list(value, "workload")):
        where = f"workload[{k}]"
        check_keys(item, {"site", "reads", "writes"}, {"site", "reads"}, where)
        reads = number(item["reads"], f"{where}.reads")
        writes = number(item.get("writes", 0.0), f"{where}.writes")
        for field, x in (("reads", reads), ("writes", writes)):
            if x < 0:
                raise InputError(f"{where}.{field}", f"must be >= 0, not {x}")
        front_ends.append(FrontEnd(_known(item["site"], f"{where}.site", sites), reads, writes))
    return tuple(front_ends)


def _placement(value: Any, sites: tuple[str, ...], single: bool) -> Placement:
    check_keys(
        value, {"nodes", "leader"}, {"nodes"} if single else {"nodes", "leader"}, "placement"
    )
    nodes = []
    for k, item in enumerate(as_list(value["nodes"], "placement.nodes")):
        where = f"placement.nodes[{k}]"
        check_keys(item, {"name", "site"}, {"name", "site"}, where)
        nodes.append(
            Node(
                string(item["name"], f"{where}.name"), _known(item["site"], f"{where}.site", sites)
            )
        )
    names = [node.name for node in nodes]
    if not nodes:
        raise InputError("placement.nodes", "must hold at least one node")
    if len(set(names)) != len(names):
        raise InputError("placement.nodes", "must not repeat a node name")
    if single and len(nodes) != 1:
        raise InputError("placement.nodes", f"single_vm places exactly one node, not {len(nodes)}")
    leader = string(value.get("leader", names[0]), "placement.leader")
    if leader not in names:
        raise InputError("placement.leader", f"{leader!r} is not one of the nodes {names}")
    return Placement(tuple(nodes), leader)


def _evaluation(value: Any) -> tuple[str, float, float]:
    check_keys(value, _EVALUATION, {"function"}, "evaluation")
    function = string(value["function"], "evaluation.function")
    if function not in EVALUATIONS:
        raise InputError("evaluation.function", f"must be one of {list(EVALUATIONS)}")
    weights = []
    for field in ("read_weight", "write_weight"):
        weight = number(value.get(field, 1.0), f"evaluation.{field}")
        if weight < 0:
            raise InputError(f"evaluation.{field}", f"must be >= 0, not {weight}")
        weights.append(weight)
    return function, weights[0], weights[1]


def parse_state(data: Any) -> PlacementState:
    """A checked :class:`PlacementState` from decoded JSON."""
    check_keys(data, _TOP, {"sites", "rtt_ms", "workload", "placement", "evaluation"}, "")
    sites = _sites(data["sites"])
    rtt_ms = number_rows(data["rtt_ms"], "rtt_ms", len(sites))
    if rtt_ms.shape[0] != len(sites):
        raise InputError(
            "rtt_ms", f"must have {len(sites)} rows (one per site), has {rtt_ms.shape[0]}"
        )
    check_non_negative(rtt_ms, "rtt_ms")
    function, read_weight, write_weight = _evaluation(data["evaluation"])
    threshold = number(data.get("threshold", 0.0), "threshold")
    if threshold < 0:
        raise InputError("threshold", f"must be >= 0, not {threshold}")
    return PlacementState(
        sites,
        rtt_ms,
        _workload(data["workload"], sites),
        _placement(data["placement"], sites, single=function == "single_vm"),
        function,
        read_weight,
        write_weight,
        threshold,
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
    return {
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
