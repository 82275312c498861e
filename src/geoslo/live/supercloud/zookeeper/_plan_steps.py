"""Which reconfigurations carry out a scheduler's plan on the live ensemble (Supercloud,
SoCC 2016 §5.2.2): only the moves that §5.2.2's 2-step and 3-step procedures make.

A node ``zk<N>`` is ZooKeeper server N; "moving" it to another site starts a new server
there (a fresh id) and removes N. The supported plans, all of whose migrations go from
one site X to one site Y:

* the leader alone moves: §5.2.2's 2-step (add a server in Y; then remove the leader);
* every node in X moves: the 3-step's first two steps (add the k servers in Y; then
  remove every server in X);
* one follower moves: the 3-step's last step (one reconfig adds a server in Y and
  removes the follower).

Anything else (nodes moving both ways, some but not all of X's nodes with the leader
among them, ...) is refused: the general plan-to-reconfiguration procedure is issue 22.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from geoslo.control.supercloud import Migration
from geoslo.errors import TestbedError

__all__ = ["PlanRefusedError", "ReconfigStep", "node_name", "server_id_of", "plan_steps"]


class PlanRefusedError(TestbedError):
    """A plan this testbed cannot carry out; nothing was changed."""


@dataclass(frozen=True)
class ReconfigStep:
    """Start the servers ``joining``, then one ``reconfig`` adds them and removes
    ``leaving``."""

    name: str
    joining: tuple[int, ...] = ()
    leaving: tuple[int, ...] = ()


def node_name(server_id: int) -> str:
    return f"zk{server_id}"


def server_id_of(node: str) -> int | None:
    """N of ``zk<N>``; None for any other name."""
    digits = node.removeprefix("zk")
    return int(digits) if node.startswith("zk") and digits.isdigit() else None


def _refuse(why: str) -> PlanRefusedError:
    return PlanRefusedError(
        f"plan refused, nothing changed: {why}; this testbed carries out only §5.2.2's "
        "moves (the leader alone, every node of one site, or one follower, all to one "
        "site); other plans need the general reconfiguration procedure (issue 22)"
    )


def _moved_ids(members: Mapping[int, str], migrations: tuple[Migration, ...]) -> list[int]:
    ids = []
    for m in migrations:
        server_id = server_id_of(m.node)
        if server_id not in members:
            raise _refuse(f"{m.node} is not a member of the ensemble {sorted(members)}")
        if members[server_id] != m.from_site:
            raise _refuse(f"{m.node} is in {members[server_id]}, not {m.from_site}")
        ids.append(server_id)
    return ids


def plan_steps(
    members: Mapping[int, str],
    leader_id: int,
    migrations: tuple[Migration, ...],
    fresh_id: Callable[[str], int],
) -> tuple[ReconfigStep, ...]:
    """The reconfigurations for ``migrations`` from ``members`` (server id -> site) led by
    ``leader_id``; ``fresh_id(site)`` gives a new server's id in a site. Raises
    :class:`PlanRefusedError` for the plans §5.2.2's procedures do not make."""
    if not migrations:
        return ()
    routes = {(m.from_site, m.to_site) for m in migrations}
    if len(routes) != 1:
        raise _refuse(f"nodes move along {len(routes)} routes {sorted(routes)}, not one")
    ((source, target),) = routes
    moved = _moved_ids(members, migrations)
    in_source = sorted(i for i, site in members.items() if site == source)
    if moved == [leader_id]:
        new = fresh_id(target)
        return (
            ReconfigStep(f"add a server in {target}", joining=(new,)),
            ReconfigStep("remove the original leader", leaving=(leader_id,)),
        )
    if sorted(moved) == in_source:
        new = tuple(fresh_id(target) for _ in moved)
        return (
            ReconfigStep(f"add {len(new)} servers in {target}", joining=new),
            ReconfigStep(f"remove every server in {source}", leaving=tuple(in_source)),
        )
    if len(moved) == 1:
        new = fresh_id(target)
        name = f"add a server in {target}, remove a follower in {source}"
        return (ReconfigStep(name, joining=(new,), leaving=(moved[0],)),)
    raise _refuse(f"{len(moved)} of the {len(in_source)} nodes in {source} move")
