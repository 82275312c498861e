"""Executes the Director's actions on the live cluster (FAST 2011 §5.3, §5.6).

Semantics follow ``geoslo.control.director.loop``: ``add-server`` runs until the new
server has booted; ``copy`` until the target holds the bins (then it joins their read
sets); ``move`` is a copy after which the source drops the bins (router first, then its
keys); ``delete-replica`` and ``remove-server`` end at once. A cancelled or failed copy
leaves nothing on the target. Copies are throttled to a rate in bytes/s, in batches,
and from their first moment puts to their bins also go to the target.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from geoslo.control.director.types import Action, RunningAction
from geoslo.errors import TestbedError
from geoslo.live._backend import key_name
from geoslo.live._resp import RedisConnection, RedisReplyError
from geoslo.live.director._client import ClusterClient
from geoslo.live.director._config import ClusterConfig
from geoslo.live.director._layout import BinLayout
from geoslo.live.director._router import Router
from geoslo.live.director._servers import ServerPool
from geoslo.live.director._throttle import batch_key_count, pace_delay_s

__all__ = ["ActionExecutor", "ActionFailed", "ActionRefused", "FinishedAction"]

_VERSION_PREFIX_BYTES = 2  # "0:" of the initial values; bin sizes count it


class ActionFailed(TestbedError):
    """An action could not complete; the message says why."""


class ActionRefused(ActionFailed):
    """An action's preconditions do not hold; nothing was changed."""


@dataclass(frozen=True)
class FinishedAction:
    """How an action ended: ``observed_bytes_per_s`` is the copy's real rate (§5.4)."""

    action: Action
    ok: bool
    duration_s: float
    copied_bytes: int = 0
    observed_bytes_per_s: float = 0.0
    detail: str = ""


class _Copy:
    """Progress of one copy."""

    def __init__(self) -> None:
        self.copied_bytes = 0
        self.started_s: float | None = None
        self.ended_s: float | None = None

    @property
    def rate_bytes_per_s(self) -> float:
        if self.started_s is None or self.ended_s is None or self.ended_s <= self.started_s:
            return 0.0
        return self.copied_bytes / (self.ended_s - self.started_s)


class ActionExecutor:
    """Starts actions as asyncio tasks, cancels them, and reports how they ended."""

    def __init__(
        self,
        config: ClusterConfig,
        router: Router,
        client: ClusterClient,
        pool: ServerPool,
        on_change=lambda: None,
    ) -> None:
        self.config = config
        self.layout = BinLayout(config.keys, config.bins)
        self.router = router
        self.client = client
        self.pool = pool
        self.on_change = on_change
        self.clients = [client]  # every client of the cluster: each reaches new servers
        self._running: dict[Action, tuple[RunningAction, asyncio.Task]] = {}
        self._finished: list[FinishedAction] = []

    # --- the environment handle ---------------------------------------------------------
    def start(self, item: RunningAction, rate_bytes_per_s: float | None = None) -> None:
        """Start ``item.action`` now (the caller's event loop runs it)."""
        action = item.action
        if action in self._running:
            self._finished.append(FinishedAction(action, False, 0.0, detail="already running"))
            return
        if action.kind == "add-server" and action.server and self.pool.get(action.server) is None:
            self.pool.reserve(action.server)  # visible, not ready, from the start
        rate = rate_bytes_per_s or self.config.copy_rate_bytes_per_s
        task = asyncio.get_running_loop().create_task(self._run(action, rate))
        self._running[action] = (item, task)

    async def cancel(self, action: Action) -> bool:
        """Stop a running action and undo a copy; False if it was not running."""
        entry = self._running.get(action)
        if entry is None:
            return False
        entry[1].cancel()
        await asyncio.wait([entry[1]])
        return True

    def running(self) -> tuple[RunningAction, ...]:
        return tuple(item for item, _ in self._running.values())

    def finished(self) -> list[FinishedAction]:
        """Actions that ended since the last call (drained)."""
        done, self._finished = self._finished, []
        return done

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no action runs; False on timeout."""
        tasks = [task for _, task in self._running.values()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    async def close(self) -> None:
        for action in list(self._running):
            await self.cancel(action)

    # --- running one action -------------------------------------------------------------
    async def _run(self, action: Action, rate_bytes_per_s: float) -> None:
        started = time.monotonic()
        copy = _Copy()
        ok, detail = False, ""
        try:
            await self._execute(action, rate_bytes_per_s, copy)
            ok = True
        except ActionRefused as error:
            detail = str(error)
        except ActionFailed as error:
            detail = str(error)
            await self._undo(action)
        except asyncio.CancelledError:
            detail = "cancelled"
            await self._undo(action)
            raise
        finally:
            self._running.pop(action, None)
            duration_s = time.monotonic() - started
            self._finished.append(
                FinishedAction(
                    action, ok, duration_s, copy.copied_bytes, copy.rate_bytes_per_s, detail
                )
            )
            self.on_change()

    async def _execute(self, action: Action, rate_bytes_per_s: float, copy: _Copy) -> None:
        if action.kind == "add-server":
            await self._add_server(action)
        elif action.kind == "remove-server":
            await self._remove_server(action)
        elif action.kind == "delete-replica":
            await self._delete_replica(action)
        else:
            await self._copy(action, rate_bytes_per_s, copy)

    async def _undo(self, action: Action) -> None:
        """A failed or cancelled copy leaves nothing on its target; a server that never
        finished booting is stopped."""
        if action.copies_data and action.target:
            await self._abandon_copy(action)
        elif action.kind == "add-server" and action.server:
            server = self.pool.get(action.server)
            if server is not None and not server.ready:
                self._detach(action.server)
                await self.pool.stop(action.server)

    # --- add and remove servers ---------------------------------------------------------
    async def _add_server(self, action: Action) -> None:
        server = self.pool.get(action.server)
        if server is None or server.pid is not None:
            raise ActionRefused(f"add-server: {action.server} already runs")
        try:
            await self.pool.launch(server)
            self.on_change()
            for client in self.clients:
                await client.attach(server.name, server.port)
        except TestbedError as error:
            self.pool.mark_dead(server.name)
            raise ActionFailed(f"add-server {server.name}: {error}") from None
        await asyncio.sleep(self.config.boot_delay_s)
        server.ready = True

    async def _remove_server(self, action: Action) -> None:
        name = action.server or ""
        if self.pool.get(name) is None:
            raise ActionRefused(f"remove-server: no server {name!r} in use")
        if self.router.holds_anything(name):
            raise ActionRefused(f"remove-server: {name} still holds bins; move them first")
        self._refuse_if_involved(action, name)
        self._detach(name)
        await self.pool.stop(name)

    def _detach(self, name: str) -> None:
        for client in self.clients:
            client.detach(name)

    def _refuse_if_involved(self, action: Action, name: str) -> None:
        for other in self._running:
            if other != action and other.copies_data and name in other.servers:
                raise ActionRefused(f"{action.kind}: {name} takes part in a running copy")

    # --- delete a replica ---------------------------------------------------------------
    async def _delete_replica(self, action: Action) -> None:
        name = action.server or ""
        if self.pool.get(name) is None:
            raise ActionRefused(f"delete-replica: no server {name!r} in use")
        self._refuse_if_involved(action, name)
        held = set(self.router.bins_of(name))
        for b in action.bins:
            if b not in held:
                raise ActionRefused(f"delete-replica: {name} holds no replica of bin {b}")
            if len(self.router.replicas(b)) < 2:
                raise ActionRefused(f"delete-replica: bin {b} has no other replica than {name}")
        await self._drop_bins(name, action.bins)

    async def _drop_bins(self, name: str, bins: tuple[int, ...]) -> None:
        """Router first (no new request reaches ``name`` for ``bins``), wait for the puts
        already sent, then delete the keys."""
        for b in bins:
            self.router.drop_replica(b, name)
            self.router.drop_copy_target(b, name)
        await self._drain_puts(bins)
        await self._delete_keys(name, bins)

    async def _delete_keys(self, name: str, bins: tuple[int, ...]) -> None:
        server = self.pool.get(name)
        if server is None:
            return  # dead or gone: nothing to clean
        try:
            connection = await self.client.open_connection(name, server.port)
            try:
                for b in bins:
                    indices = self.layout.indices(b)
                    for start in range(indices.start, indices.stop, 1000):
                        stop = min(start + 1000, indices.stop)
                        keys = [key_name(i) for i in range(start, stop)]
                        await self.client.delete_keys(name, connection, keys)
            finally:
                await connection.close()
        except RedisReplyError:
            raise
        except TestbedError:
            self.client.server_failed(name)

    async def _drain_puts(self, bins: tuple[int, ...]) -> None:
        """Wait until the puts to ``bins`` in flight now have ended. ``asyncio.wait``, not
        ``gather``: cancelling this wait (a cancelled copy) must leave the puts running."""
        tokens = self.router.puts_in_flight(bins)
        if tokens:
            await asyncio.wait(tokens)

    # --- copy and move ------------------------------------------------------------------
    def _check_copy(self, action: Action) -> None:
        source, target = self.pool.get(action.source), self.pool.get(action.target)
        if target is None or not target.ready:
            raise ActionRefused(f"{action.kind}: target {action.target!r} is not a ready server")
        if source is None:
            raise ActionRefused(f"{action.kind}: source {action.source!r} is not in use")
        held_by_source = set(self.router.bins_of(source.name))
        held_by_target = set(self.router.bins_of(target.name))
        for b in action.bins:
            if b not in held_by_source:
                raise ActionRefused(f"{action.kind}: {source.name} holds no replica of bin {b}")
            if b in held_by_target or target.name in self.router.copy_targets(b):
                raise ActionRefused(f"{action.kind}: {target.name} already holds bin {b}")

    async def _copy(self, action: Action, rate_bytes_per_s: float, copy: _Copy) -> None:
        self._check_copy(action)
        target = self.pool.get(action.target)
        assert target is not None
        for b in action.bins:
            self.router.add_copy_target(b, target.name)  # dual writes from now on
        await self._drain_puts(action.bins)  # puts sent before the target joined
        connection = await self._open_target(target.name, target.port)
        sources: dict[str, RedisConnection] = {}
        copy.started_s = time.monotonic()
        try:
            for b in action.bins:
                await self._copy_bin(action, b, connection, sources, rate_bytes_per_s, copy)
        finally:
            copy.ended_s = time.monotonic()
            for opened in (connection, *sources.values()):
                await opened.close()
        if self.pool.get(target.name) is None or target.name not in self.router.write_set(
            action.bins[0]
        ):
            raise ActionFailed(f"{action.kind}: target {target.name} died")
        for b in action.bins:
            self.router.add_replica(b, target.name)  # joins the read set
        if action.kind == "move" and action.source:
            await self._drop_bins(action.source, action.bins)

    async def _open_target(self, name: str, port: int) -> RedisConnection:
        try:
            return await self.client.open_connection(name, port)
        except TestbedError:
            self.client.server_failed(name)
            raise ActionFailed(f"copy: target {name} died") from None

    async def _copy_bin(
        self,
        action: Action,
        b: int,
        connection: RedisConnection,
        sources: dict[str, RedisConnection],
        rate_bytes_per_s: float,
        copy: _Copy,
    ) -> None:
        stored_bytes = self.config.value_bytes + _VERSION_PREFIX_BYTES
        per_batch = batch_key_count(self.config.copy_batch_bytes, stored_bytes)
        indices = self.layout.indices(b)
        for start in range(indices.start, indices.stop, per_batch):
            keys = [key_name(i) for i in range(start, min(start + per_batch, indices.stop))]
            values = await self._read_batch(action, b, keys, sources)
            present = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
            size = sum(len(v) for _, v in present)
            work_s = size / 1e6 * self.config.copy_work_ms_per_mb / 1e3
            try:
                if present:
                    await self.client.write_copied(
                        action.target or "",
                        connection,
                        [k for k, _ in present],
                        [v for _, v in present],
                        work_s,
                    )
            except RedisReplyError:
                raise
            except TestbedError:
                self.client.server_failed(action.target or "")
                raise ActionFailed(f"{action.kind}: target {action.target} died") from None
            copy.copied_bytes += size
            elapsed_s = time.monotonic() - (copy.started_s or 0.0)
            await asyncio.sleep(pace_delay_s(copy.copied_bytes, elapsed_s, rate_bytes_per_s))

    async def _read_batch(
        self, action: Action, b: int, keys: list[bytes], sources: dict[str, RedisConnection]
    ) -> list[bytes | None]:
        """Read from the action's source; if it died, from another live replica of ``b``."""
        while True:
            candidates = [n for n in self.router.replicas(b) if n != action.target]
            if not candidates:
                raise ActionFailed(f"{action.kind}: no live replica of bin {b} to copy from")
            name = action.source if action.source in candidates else candidates[0]
            server = self.pool.get(name)
            try:
                if server is None:
                    raise TestbedError(f"{name} is gone")
                if name not in sources:
                    sources[name] = await self.client.open_connection(name, server.port)
                return await self.client.read_keys(name, sources[name], keys)
            except RedisReplyError:
                raise
            except TestbedError:
                self.client.server_failed(name)

    async def _abandon_copy(self, action: Action) -> None:
        """Take the target out of the write sets, wait for the puts sent to it, and delete
        whatever the copy or those puts stored there."""
        target = action.target or ""
        if any(target in self.router.replicas(b) for b in action.bins):
            return  # the copy had completed: the move's clean-up failed, keep the replica
        for b in action.bins:
            self.router.drop_copy_target(b, target)
        await self._drain_puts(action.bins)
        await self._delete_keys(target, action.bins)
