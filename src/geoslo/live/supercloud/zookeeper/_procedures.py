"""The two reconfiguration procedures of §5.2.2, as data.

Initially the leader and one follower are in Virginia, one follower in Tokyo. Server 3 is
a Virginia server and has the highest id, so ZooKeeper's fast leader election (which
prefers the highest id among equally up-to-date servers) makes it the first leader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from geoslo.errors import InputError
from geoslo.live.supercloud.zookeeper._ensemble import ZkServer
from geoslo.live.supercloud.zookeeper._settings import SITE_A, SITE_B

__all__ = ["INITIAL_IDS", "PROCEDURES", "SERVERS", "Step", "server_ids_of", "steps_of"]

SERVERS = {
    i: ZkServer(i, site)
    for i, site in {1: SITE_A, 2: SITE_B, 3: SITE_A, 4: SITE_B, 5: SITE_B, 6: SITE_A}.items()
}
INITIAL_IDS = (1, 2, 3)

# Which members leave, given the current member ids and the leader's id.
Leaving = Callable[[tuple[int, ...], int], tuple[int, ...]]


def _none(members: tuple[int, ...], leader_id: int) -> tuple[int, ...]:
    return ()


def _the_leader(members: tuple[int, ...], leader_id: int) -> tuple[int, ...]:
    return (leader_id,)


def _all_of(site: str) -> Leaving:
    return lambda members, leader_id: tuple(m for m in members if SERVERS[m].site == site)


def _one_follower_of(site: str) -> Leaving:
    def leaving(members: tuple[int, ...], leader_id: int) -> tuple[int, ...]:
        followers = [m for m in members if SERVERS[m].site == site and m != leader_id]
        return (max(followers),)

    return leaving


@dataclass(frozen=True)
class Step:
    """One reconfiguration: start the servers ``start_ids``, then one ``reconfig`` call
    adds them and removes ``leaving(members, leader_id)``."""

    name: str
    start_ids: tuple[int, ...] = ()
    leaving: Leaving = _none


PROCEDURES: dict[str, tuple[Step, ...]] = {
    "2-step": (
        Step("add a Tokyo server", start_ids=(4,)),
        Step("remove the original leader", leaving=_the_leader),
    ),
    "3-step": (
        Step("add two Tokyo servers", start_ids=(4, 5)),
        Step("remove both Virginia servers", leaving=_all_of(SITE_A)),
        Step(
            "add a Virginia server, remove a Tokyo follower",
            start_ids=(6,),
            leaving=_one_follower_of(SITE_B),
        ),
    ),
}


def steps_of(procedure: str) -> tuple[Step, ...]:
    """The steps of a procedure; InputError naming the choices if it is unknown."""
    if procedure not in PROCEDURES:
        choices = ", ".join(repr(p) for p in PROCEDURES)
        raise InputError("procedure", f"unknown procedure {procedure!r}; choose one of {choices}")
    return PROCEDURES[procedure]


def server_ids_of(procedure: str) -> list[int]:
    """Every server id a procedure uses (their addresses are set up before the run)."""
    started = {i for step in steps_of(procedure) for i in step.start_ids}
    return sorted(set(INITIAL_IDS) | started)
