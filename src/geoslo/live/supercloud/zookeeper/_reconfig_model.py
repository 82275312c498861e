"""Reconfiguration steps replayed on a model of ZooKeeper's dynamic reconfiguration, to
check a sequence before running it (Supercloud, SoCC 2016 §5.2.2: "maintaining the same
level of fault tolerance").

A step starts its ``joining`` servers, then one ``reconfig`` adds them and removes
``leaving``; the servers leaving stay up until it commits. It commits once a majority of
the old voting membership and a majority of the new one are up. A step is safe when it
commits even if ``tolerated_failures`` servers fail meanwhile (by default as many as the
ensemble tolerated at the start: (n - 1) // 2 of n). When a reconfig removes the leader,
``elect`` picks the new one from the new membership (by default the highest id, which
ZooKeeper's election prefers among equally up-to-date servers). ZooKeeper 3.5+'s reconfig
may instead hand the leadership to another up-to-date voter of the new membership: pass
``elect=min`` to check a sequence against that (§5.2.2: why the 3-step removes every
Virginia server with the leader).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from geoslo.errors import TestbedError
from geoslo.live.supercloud.zookeeper._plan_steps import ReconfigStep

__all__ = ["UnsafeStepsError", "check_steps", "highest_id", "tolerated_failures"]

Election = Callable[[Mapping[int, str]], int]


class UnsafeStepsError(TestbedError):
    """A sequence of reconfigurations that could lose its quorum or does not apply to the
    membership; the message names the step."""


def highest_id(members: Mapping[int, str]) -> int:
    """The new leader when the old one leaves: the highest id (all equally up to date)."""
    return max(members)


def tolerated_failures(size: int) -> int:
    """How many of ``size`` voting servers may fail with a majority still up."""
    return (size - 1) // 2


def _commits_despite(old_size: int, new_size: int, failures: int) -> bool:
    """Whether a majority of the old and of the new membership stay up when ``failures``
    servers fail: the worst case puts them all in one membership, either one."""
    return all(size - failures > size // 2 for size in (old_size, new_size))


def _check_applies(members: Mapping[int, str], step: ReconfigStep, where: str) -> None:
    if not step.joining and not step.leaving:
        raise UnsafeStepsError(f"{where} changes nothing; drop it")
    if len(set(step.joining)) < len(step.joining) or len(set(step.leaving)) < len(step.leaving):
        raise UnsafeStepsError(f"{where} names a server twice")
    already = sorted(set(step.joining) & set(members))
    if already:
        raise UnsafeStepsError(f"{where} adds {already}, already members; use fresh ids")
    absent = sorted(set(step.leaving) - set(members))
    if absent:
        raise UnsafeStepsError(f"{where} removes {absent}, not members of {sorted(members)}")


def _apply(
    members: Mapping[int, str], step: ReconfigStep, site_of: Callable[[int], str]
) -> dict[int, str]:
    grown = {**members, **{i: site_of(i) for i in step.joining}}
    return {i: site for i, site in grown.items() if i not in step.leaving}


def check_steps(
    members: Mapping[int, str],
    leader_id: int,
    steps: Iterable[ReconfigStep],
    site_of: Callable[[int], str],
    failures: int | None = None,
    elect: Election = highest_id,
) -> tuple[dict[int, str], int]:
    """Replay ``steps`` from ``members`` (server id -> site) led by ``leader_id``;
    ``site_of(i)`` is a joining server's site. Returns the final membership and leader;
    raises :class:`UnsafeStepsError` at the first step that does not apply to the
    membership or could lose its quorum with ``failures`` servers down (default: the
    failures the starting membership tolerates)."""
    if leader_id not in members:
        raise UnsafeStepsError(f"the leader {leader_id} is not a member of {sorted(members)}")
    budget = tolerated_failures(len(members)) if failures is None else failures
    current, leader = dict(members), leader_id
    for k, step in enumerate(steps, start=1):
        where = f"step {k} ({step.name!r})"
        _check_applies(current, step, where)
        after = _apply(current, step, site_of)
        if not _commits_despite(len(current), len(after), budget):
            raise UnsafeStepsError(
                f"{where} goes from {len(current)} to {len(after)} voting servers: with "
                f"{budget} down it cannot commit; add servers before removing them"
            )
        if leader in step.leaving:
            leader = elect(after)
        current = after
    return current, leader
