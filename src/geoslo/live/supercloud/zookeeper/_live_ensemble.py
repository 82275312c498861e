"""What every live ZooKeeper environment of the placement loop does, whoever runs the
servers (Supercloud, SoCC 2016 §5.1's loop, §5.2.2's reconfiguration): read the
membership and the leader from the servers, report busy while a reconfiguration runs,
and carry out a plan as ZooKeeper ``reconfig`` steps that keep a quorum (``plan_steps``,
checked by ``check_steps``) in a background thread.

A subclass says where its servers are and how a server is started and stopped: the
testbed (``SupercloudTestbedEnvironment``: namespaces this process made) or one's own
ensemble (``SupercloudEnsembleEnvironment``: commands the operator gives).
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from geoslo.control.supercloud import FrontEnd, Node, Placement, PlacementObservation, Plan
from geoslo.errors import TestbedError
from geoslo.live.supercloud.zookeeper._ensemble import ZkServer, four_letter, server_mode
from geoslo.live.supercloud.zookeeper._plan_steps import (
    PlanRefusedError,
    ReconfigStep,
    node_name,
    plan_steps,
)
from geoslo.live.supercloud.zookeeper._reconfig_model import UnsafeStepsError, check_steps
from geoslo.live.supercloud.zookeeper._settings import ZkLiveSettings, parse_members

__all__ = ["LiveEnsemble"]

_POLL_S = 0.1


class LiveEnsemble:
    """The placement loop's contract on a live ensemble. Subclasses set ``sites``,
    ``rtt_ms``, ``members``, ``interval_s`` and ``settings`` and give the hooks below."""

    simulated = False
    images = None  # NodeImages, when each node's image follows it
    digest: str | None = None  # the operator session's user:password, if the ensemble asks

    def __init__(self, settings: ZkLiveSettings, interval_s: float) -> None:
        self.settings = settings
        self.interval_s = float(interval_s)
        self.members: tuple[int, ...] = ()
        self._drawn: set[int] = set()  # ids given to new servers by the plan being made
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._worker: threading.Thread | None = None
        self._failure: str | None = None
        self._current: Placement | None = None
        self._ended_unseen = False
        self.intervals = 0
        self.applied: list[tuple[str, ...]] = []  # the step names of each applied plan
        self.reconfigurations: list[dict] = []  # each applied plan: start, end (unix s), ok

    # --- hooks -----------------------------------------------------------------------
    def site_of(self, server_id: int) -> str:
        raise NotImplementedError

    def server(self, server_id: int) -> ZkServer:
        """Where server ``server_id`` listens."""
        raise NotImplementedError

    def namespace_of(self, server_id: int) -> str | None:
        """The namespace to reach ``server_id`` from (None: this process's network)."""
        return None

    def ids_of(self, site: str) -> list[int]:
        """The ids a server of ``site`` may take, ascending."""
        raise NotImplementedError

    def start_servers(self, ids: tuple[int, ...], members: tuple[int, ...]) -> None:
        """Start servers ``ids`` with ``members`` (them included) as their configuration;
        return once each serves."""
        raise NotImplementedError

    def stop_server(self, server_id: int) -> None:
        """Stop a server that left the ensemble."""
        raise NotImplementedError

    def workload(self) -> tuple[FrontEnd, ...]:
        """Each site's reads and writes since the last call."""
        raise NotImplementedError

    def measure_rtt_ms(self) -> np.ndarray:
        """The RTT between every pair of sites (ms)."""
        raise NotImplementedError

    # --- observe ---------------------------------------------------------------------
    async def observe(self) -> PlacementObservation:
        """One interval: the membership and leader as the servers report them, each
        site's reads and writes since the last observation, and whether a reconfiguration
        runs. ``now_s`` counts intervals (the loop's clock, not the wall's)."""
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise TestbedError(f"the last plan's reconfiguration failed: {failure}")
        running = self._worker is not None and self._worker.is_alive()
        # The interval in which a reconfiguration ended counts as busy too: its counts
        # mix two placements and sessions that were moving (§5.1 waits for a migration).
        busy = running or self._ended_unseen
        self._ended_unseen = running and self._ended_unseen
        members, leader = await asyncio.to_thread(self.membership)
        if self.images is not None and leader is not None:
            await self.images.follow({i: self.site_of(i) for i in members})
        front_ends = await asyncio.to_thread(self.workload)
        rtt_ms = await asyncio.to_thread(self.measure_rtt_ms)
        self.intervals += 1
        if leader is not None:
            nodes = tuple(Node(node_name(i), self.site_of(i)) for i in members)
            self._current = Placement(nodes, node_name(leader))
        elif not busy or self._current is None:
            raise TestbedError(f"no leader among the members {list(members)}: none serves")
        # While a reconfiguration elects a new leader, the placement is the last one seen.
        now_s = self.intervals * self.interval_s
        return PlacementObservation(now_s, front_ends, self._current, busy, rtt_ms)

    def mode(self, server_id: int) -> str | None:
        """``srvr``'s mode of a server ("leader", "follower"), or None if it does not serve."""
        return server_mode(self.server(server_id), self.namespace_of(server_id))

    def membership(self) -> tuple[tuple[int, ...], int | None]:
        """The ids in the dynamic configuration (``conf`` of the first member serving
        as leader or follower) and the member whose ``srvr`` says leader (None while
        none serves, as during an election)."""
        with self._lock:
            known = self.members
        for m in known:  # a server in the ensemble: one that left may hold an old view
            if self.mode(m) not in ("leader", "follower"):
                continue
            server = self.server(m)
            conf = four_letter(
                self.namespace_of(m), server.address, "conf", port=server.client_port
            )
            if "not in the whitelist" in conf:
                raise TestbedError(
                    f"server {m} does not answer conf: add it to 4lw.commands.whitelist"
                )
            members = parse_members(conf)
            if members:
                break
        else:  # none serves: an election runs (or the ensemble is down)
            return known, None
        for m in members:
            if self.mode(m) == "leader":
                return members, m
        return members, None

    def leader(self) -> int | None:
        return next((m for m in self.members if self.mode(m) == "leader"), None)

    # --- apply -----------------------------------------------------------------------
    async def apply(self, plan: Plan) -> None:
        """Start the plan's reconfigurations in the background (``plan_steps``: any
        well-formed plan, checked by ``check_steps`` to keep a quorum at every step, the
        leader ending in the plan's leader site); refuse (nothing changed) a malformed
        plan, or one arriving while another runs."""
        if self._worker is not None and self._worker.is_alive():
            raise PlanRefusedError("plan refused: a reconfiguration is still running")
        members, leader = await asyncio.to_thread(self.membership)
        if leader is None:
            raise PlanRefusedError("plan refused: the ensemble has no leader right now")
        with self._lock:
            self.members = members
        layout = {i: self.site_of(i) for i in members}
        leader_site = plan.placement.site_of(plan.placement.leader)
        self._drawn = set()
        try:
            steps = plan_steps(layout, leader, plan.migrations, self._fresh_id, leader_site)
            if steps:
                check_steps(layout, leader, steps, self.site_of)
        except UnsafeStepsError as error:
            raise PlanRefusedError(f"plan refused, nothing changed: {error}") from None
        if not steps:
            return
        self.applied.append(tuple(step.name for step in steps))
        self._worker = threading.Thread(
            target=self._carry_out, args=(steps,), name="zk-reconfig", daemon=True
        )
        self._worker.start()

    def _fresh_id(self, site: str, above: int) -> int:
        """The lowest id of ``site`` above ``above`` that is free: not a member and not
        given to another new server of this plan. An id whose server left the ensemble
        is free again (issue 39, item 5): the reconfig that removed it committed and its
        server was stopped before this plan, so no quorum since counts on it, and it
        rejoins as a new server does, from an empty data directory, synchronised by the
        leader before the reconfig that adds it commits (ZooKeeper's reconfig, after
        Shraer et al., USENIX ATC 2012). Refused when none is left."""
        taken = set(self.members) | self._drawn
        free = [i for i in self.ids_of(site) if i > above and i not in taken]
        if not free:
            raise PlanRefusedError(f"plan refused: no free server id above {above} in {site}")
        self._drawn.add(free[0])
        return free[0]

    def _carry_out(self, steps: tuple[ReconfigStep, ...]) -> None:
        record = {"start_unix_s": time.time(), "steps": len(steps), "ok": False}
        try:
            for step in steps:
                self._run_step(step)
            record["ok"] = True
        except Exception as error:  # reported by the next observe()
            self._failure = f"{type(error).__name__}: {error}"
        finally:
            record["end_unix_s"] = time.time()
            self.reconfigurations.append(record)
            self._ended_unseen = True

    def _run_step(self, step: ReconfigStep) -> None:
        from geoslo.live.supercloud.zookeeper import _admin  # imports kazoo

        timeout_s = self.settings.step_timeout_s
        leader = self.wait("a leader", self.leader, timeout_s)
        self.start_servers(step.joining, self.members + step.joining)
        joining = [self.server(i) for i in step.joining]
        try:
            _admin.reconfig(
                *self.operator(leader), self.settings, joining, step.leaving, self.digest
            )
        except _admin.ReconfigRefusedError:
            for i in step.joining:  # certainly not applied: they never joined
                self.stop_server(i)
            raise
        with self._lock:
            self.members = tuple(m for m in self.members + step.joining if m not in step.leaving)
        self.wait("a leader in the new ensemble", self.leader, timeout_s)
        for i in step.leaving:  # decommissioned
            self.stop_server(i)

    def operator(self, leader_id: int) -> tuple[str | None, list[ZkServer]]:
        """Where the operator's session runs from, and the servers it tries, leader first."""
        order = [leader_id, *(m for m in self.members if m != leader_id)]
        return self.namespace_of(leader_id), [self.server(m) for m in order]

    def wait(self, what: str, probe, timeout_s: float):
        """``probe()``'s first true answer, polled until ``timeout_s`` or closing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._cancel.is_set():
            found = probe()
            if found:
                return found
            time.sleep(_POLL_S)
        why = "closing" if self._cancel.is_set() else f"timed out after {timeout_s:.0f} s"
        raise TestbedError(f"{why} waiting for {what}")
