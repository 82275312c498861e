"""The state.json and plan.json contract of ``geoslo supercloud decide`` (Supercloud, SoCC
2016, §3). Every bad input raises :class:`~geoslo.errors.InputError` naming the field by
its JSON path. Schema: docs/supercloud.md. Every number has a range and every list a length
bound (the constants below, also in the docs), so that whatever is accepted is decided in
bounded time and memory.
"""

from __future__ import annotations

from typing import Any

from geoslo._json import as_list, check_keys, number, number_rows, string
from geoslo.control.supercloud.decide import MAX_CANDIDATES, candidate_count
from geoslo.control.supercloud.types import (
    EVALUATIONS,
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

_TOP = {"sites", "rtt_ms", "workload", "placement", "evaluation", "threshold"}
_EVALUATION = {"function", "read_weight", "write_weight"}


def _sites(value: Any) -> tuple[str, ...]:
    items = as_list(value, "sites")
    if not 1 <= len(items) <= MAX_SITES:
        raise InputError("sites", f"must name 1 to {MAX_SITES} sites, not {len(items)}")
    names = [string(s, f"sites[{k}]") for k, s in enumerate(items)]
    if len(set(names)) != len(names):
        raise InputError("sites", "must not repeat a site")
    return tuple(names)


def _known(site: Any, name: str, sites: tuple[str, ...]) -> str:
    site = string(site, name)
    if site not in sites:
        raise InputError(name, f"unknown site {site!r}; sites are {list(sites)}")
    return site


def _workload(value: Any, sites: tuple[str, ...]) -> tuple[FrontEnd, ...]:
    items = as_list(value, "workload")
    if len(items) > MAX_FRONT_ENDS:
        raise InputError("workload", f"must hold at most {MAX_FRONT_ENDS} front-ends")
    front_ends = []
    for k, item in enumerate(items):
        where = f"workload[{k}]"
        check_keys(item, {"site", "reads", "writes"}, {"site", "reads"}, where)
        reads = number(item["reads"], f"{where}.reads", 0.0, MAX_REQUESTS)
        writes = number(item.get("writes", 0.0), f"{where}.writes", 0.0, MAX_REQUESTS)
        front_ends.append(FrontEnd(_known(item["site"], f"{where}.site", sites), reads, writes))
    return tuple(front_ends)


def _placement(value: Any, sites: tuple[str, ...], single: bool) -> Placement:
    check_keys(
        value, {"nodes", "leader"}, {"nodes"} if single else {"nodes", "leader"}, "placement"
    )
    items = as_list(value["nodes"], "placement.nodes")
    if not 1 <= len(items) <= MAX_NODES:
        raise InputError("placement.nodes", f"must hold 1 to {MAX_NODES} nodes, not {len(items)}")
    if candidate_count(len(sites), len(items)) > MAX_CANDIDATES:
        raise InputError(
            "placement.nodes",
            f"{len(sites)} sites x {len(items)} nodes give "
            f"{candidate_count(len(sites), len(items))} candidate placements; the exhaustive "
            f"search takes at most {MAX_CANDIDATES}",
        )
    nodes = []
    for k, item in enumerate(items):
        where = f"placement.nodes[{k}]"
        check_keys(item, {"name", "site"}, {"name", "site"}, where)
        nodes.append(
            Node(
                string(item["name"], f"{where}.name"), _known(item["site"], f"{where}.site", sites)
            )
        )
    names = [node.name for node in nodes]
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
        weights.append(number(value.get(field, 1.0), f"evaluation.{field}", 0.0, MAX_WEIGHT))
    return function, weights[0], weights[1]


def parse_state(data: Any) -> PlacementState:
    """A checked :class:`PlacementState` from decoded JSON."""
    check_keys(data, _TOP, {"sites", "rtt_ms", "workload", "placement", "evaluation"}, "")
    sites = _sites(data["sites"])
    as_list(data["rtt_ms"], "rtt_ms", len(sites), "site")
    rtt_ms = number_rows(data["rtt_ms"], "rtt_ms", len(sites), 0.0, MAX_RTT_MS)
    function, read_weight, write_weight = _evaluation(data["evaluation"])
    threshold = number(data.get("threshold", 0.0), "threshold", 0.0, MAX_THRESHOLD)
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
