"""Which reconfigurations carry out a scheduler's plan on the live ensemble (Supercloud,
SoCC 2016 §3's plans, §5.2.2's reconfigurations), for any well-formed plan.

A node ``zk<N>`` is ZooKeeper server N; "moving" it to another site starts a new server
there (a fresh id: one not in the ensemble) and removes N. Each step starts its
``joining`` servers, then one ``reconfig`` adds them and removes ``leaving``. The steps
never let the membership fall below its size at the start, so every reconfig commits with
as many failures as the ensemble tolerated before (``_reconfig_model.check_steps``).

The rule the steps rely on to place the leader (§5.2.2): a leader that stays in a member
is never moved; when a reconfig removes the leader, the member with the highest id leads
(ZooKeeper's election prefers it among equally up-to-date servers), and the new servers of
L take ids above every member that stays. Only they need high ids: every other new server
takes its site's lowest free id, so ids are recycled and never run out (issue 39, item 5).
So when the leadership must move to site L, in the general form of §5.2.2's procedures:

1. add every new server of L (the 2-step's and the 3-step's first step);
2. remove the leader with as many other leaving servers as step 1 added, those outside L
   first (the 2-step's "remove the original leader", the 3-step's "remove both Virginia
   servers"): the newest server of L now has the highest id and leads;
3. one reconfig adds the other new servers and removes the rest (the 3-step's last step).

When the leader stays in its site, one reconfig adds every new server and removes every
moved one. A leader that does not migrate but must lead elsewhere is replaced in its own
site, and if no new server lands in L, one follower of L is replaced in place (so that L
gets the newest server).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from geoslo.control.supercloud import Migration
from geoslo.errors import TestbedError

__all__ = [
    "FreshId", "PlanRefusedError", "ReconfigStep", "node_name", "server_id_of", "plan_steps",
]  # fmt: skip


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


# --- checking the plan ------------------------------------------------------------------


def _refuse(why: str) -> PlanRefusedError:
    return PlanRefusedError(f"plan refused, nothing changed: {why}")


def _moves(members: Mapping[int, str], migrations: tuple[Migration, ...]) -> dict[int, str]:
    """Each migrated server's id -> its destination; refuses a node that is not a member,
    is not where the plan says, or moves twice."""
    moves: dict[int, str] = {}
    for m in migrations:
        server_id = server_id_of(m.node)
        if server_id not in members:
            raise _refuse(f"{m.node} is not a member of the ensemble {sorted(members)}")
        if members[server_id] != m.from_site:
            raise _refuse(f"{m.node} is in {members[server_id]}, not {m.from_site}")
        if server_id in moves:
            raise _refuse(f"{m.node} moves twice; give each node one migration")
        moves[server_id] = m.to_site
    return moves


def _target_site(
    members: Mapping[int, str], leader_id: int, moves: Mapping[int, str], leader_site: str | None
) -> str:
    """Where the leader must end: ``leader_site``, by default the leader node's site after
    the plan; refused if no member would be there."""
    target = moves.get(leader_id, members[leader_id]) if leader_site is None else leader_site
    final_sites = {moves.get(i, site) for i, site in members.items()}
    if target not in final_sites:
        choices = sorted(final_sites)
        raise _refuse(f"leader site {target!r} would hold no member; choose one of {choices}")
    return target


def _replacements(
    members: Mapping[int, str], leader_id: int, moves: Mapping[int, str], target: str
) -> dict[int, str]:
    """Each server to replace -> the site of its new server: the migrated ones; when the
    leadership must move, also the leader (in place if it does not migrate) and, if no new
    server would be in ``target``, the highest follower there (in place)."""
    replace = dict(moves)
    if leader_id not in replace and members[leader_id] == target:
        return replace
    replace.setdefault(leader_id, members[leader_id])
    if target not in replace.values():
        staying = [i for i, site in members.items() if site == target and i not in replace]
        replace[max(staying)] = target
    return replace


# --- naming the steps -------------------------------------------------------------------


def _servers_in(sites: list[str], noun: str) -> str:
    """``a server in tokyo``, ``2 servers in tokyo and a server in virginia``."""
    parts = [
        f"a {noun} in {site}" if count == 1 else f"{count} {noun}s in {site}"
        for site, count in Counter(sites).items()
    ]
    return " and ".join(parts)


def _leader_leaving_name(members: Mapping[int, str], leader_id: int, leaving: list[int]) -> str:
    if leaving == [leader_id]:
        return "remove the original leader"
    sites = {members[i] for i in leaving}
    if len(sites) == 1 and all(i in leaving for i, s in members.items() if s in sites):
        return f"remove every server in {sites.pop()}"
    others = [members[i] for i in sorted(leaving) if i != leader_id]
    return f"remove the original leader and {_servers_in(others, 'follower')}"


# --- the steps --------------------------------------------------------------------------


# fresh_id(site, above): a new server's id in ``site``, above ``above``, not in the ensemble
# and not given before in this plan
FreshId = Callable[[str, int], int]


def _replace_step(
    members: Mapping[int, str], replace: Mapping[int, str], fresh_id: FreshId
) -> ReconfigStep:
    """One reconfig that adds a new server for each replaced follower and removes them
    (the leader stays: the new ids need not be high)."""
    leaving = sorted(replace)
    sites = [replace[i] for i in leaving]
    joining = tuple(fresh_id(site, 0) for site in sites)
    name = f"add {_servers_in(sites, 'server')}, "
    name += f"remove {_servers_in([members[i] for i in leaving], 'follower')}"
    return ReconfigStep(name, joining, tuple(leaving))


def _hand_off_leaving(
    members: Mapping[int, str], leader_id: int, replace: Mapping[int, str], count: int, target: str
) -> list[int]:
    """The leader and ``count - 1`` other replaced servers, those outside ``target`` (and
    then the lowest ids) first."""
    others = sorted((i for i in replace if i != leader_id), key=lambda i: (members[i] == target, i))
    return sorted([leader_id, *others[: count - 1]])


def _moving_the_leader(
    members: Mapping[int, str],
    leader_id: int,
    replace: Mapping[int, str],
    target: str,
    fresh_id: FreshId,
) -> tuple[ReconfigStep, ...]:
    """§5.2.2's procedures in general: add the new servers of ``target``, their ids above
    every member the hand-off leaves; remove the leader (the newest server, in ``target``,
    leads); replace the rest in one reconfig."""
    count = sum(site == target for site in replace.values())
    leaving = _hand_off_leaving(members, leader_id, replace, count, target)
    staying = max((i for i in members if i not in leaving), default=0)
    joining = tuple(fresh_id(target, staying) for _ in range(count))
    grown = {**members, **dict.fromkeys(joining, target)}
    steps = [
        ReconfigStep(f"add {_servers_in([target] * len(joining), 'server')}", joining),
        ReconfigStep(_leader_leaving_name(grown, leader_id, leaving), (), tuple(leaving)),
    ]
    behind = sorted(i for i in replace if i not in leaving)
    if behind:  # the target's new servers all joined in the first step
        elsewhere = [replace[i] for i in sorted(replace) if replace[i] != target]
        steps.append(_replace_step(members, dict(zip(behind, elsewhere, strict=True)), fresh_id))
    return tuple(steps)


def plan_steps(
    members: Mapping[int, str],
    leader_id: int,
    migrations: tuple[Migration, ...],
    fresh_id: FreshId,
    leader_site: str | None = None,
) -> tuple[ReconfigStep, ...]:
    """The reconfigurations for ``migrations`` from ``members`` (server id -> site) led by
    ``leader_id``, ending with the leader in ``leader_site`` (default: where the leader node
    is after the plan). ``fresh_id(site, above)`` gives a new server's id in a site above
    ``above``, not a member and not given before in this plan. Raises
    :class:`PlanRefusedError` only for a malformed plan (see the module docstring for the
    procedure and the election rule it relies on)."""
    if leader_id not in members:
        raise _refuse(f"the leader {leader_id} is not a member of {sorted(members)}")
    moves = _moves(members, migrations)
    target = _target_site(members, leader_id, moves, leader_site)
    replace = _replacements(members, leader_id, moves, target)
    if not replace:
        return ()
    if leader_id in replace:
        return _moving_the_leader(members, leader_id, replace, target, fresh_id)
    return (_replace_step(members, replace, fresh_id),)
