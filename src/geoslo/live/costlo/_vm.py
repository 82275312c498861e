"""CosTLO's VM library: PUT operations with a lock, a version and a log (§5.4; §7).

``put`` (eventual consistency, as S3, §5.1):

1. log ``begin``; acquire L_S from the region's lock service and learn the version v;
2. log the update (version v+1, value) and every synchronous PUT request: copy 0 first,
   then, if it has not completed within ``put_timeout_ms``, the rest of the PUT tuple with
   probability ``put_probability`` (the ones left out are logged as skipped);
3. log each request's completion; return v+1 as soon as any one request completes;
4. in the background, once every synchronous request ended, release L_S with v+1;
5. then acquire L_A; if the version is still v+1, write every copy no synchronous request
   wrote (the serving region's others and all of the second region's, through the WAN);
   release L_A. If the version moved on, a newer PUT's propagation covers those copies.

A request completes only if its copy took the version (or already held exactly it): a
copy that refuses it (it holds a newer version, or this version with another value) makes
the PUT fail with :class:`WriteRefusedError`, never acknowledged. Locks are leased and
renewed while held; acquiring gives up after ``lock_timeout_s`` (LockTimeoutError); a
failed PUT still releases L_S, with the highest version it wrote or saw, and propagates
what it wrote.

A configuration's hedge budget (``BudgetWindow``, over this library's PUTs) is asked in
step 2 when the draw says yes: a redundant set it cannot afford is skipped like one the
draw left out, and the PUT's record says so.

``strong=True`` (§7): one request to every copy goes out at once, all complete before
L_S is released, ``put`` returns when a majority of the copies hold v+1
(``quorum_puts_done``) and ``all_puts_done`` is called when every copy does.
``recover`` finishes what a killed library left in its log; see docs/costlo-live.md.
While the library runs, an operation that failed with its log entry unfinished (a copy's
server down past ``write_deadline_s``) is finished the same way in the background, with
backoff, so its copies do not stay stale until the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from geoslo.control.costlo.types import Configuration
from geoslo.errors import TestbedError, WriteRefusedError
from geoslo.live.costlo._budget import LocalBudget, SharedBudget
from geoslo.live.costlo._locks import DEFAULT_LEASE_S, LockClient, LockEndpoint, LockGrant
from geoslo.live.costlo._log import LoggedOp, VmLog, replay_log
from geoslo.live.costlo._objects import SECOND, SERVING, CopyRef, Regions, object_copies
from geoslo.live.costlo._objects import quorum_size as majority
from geoslo.live.costlo._plan import PutPlan, StorageRequest, propagation_targets, put_plan
from geoslo.live.costlo._storage import Store, StoreUnavailable, region_store

__all__ = ["VmLibrary", "PutRecord"]

Callback = Callable[[int], object]

REPAIR_FIRST_S = 0.5  # the background repair's first wait after a failed operation
REPAIR_MAX_S = 5.0  # its wait doubles up to this while repairs keep failing


@dataclass(frozen=True)
class PutRecord:
    """One PUT operation: time to its acknowledgement, synchronous requests issued;
    ``budget_refused``: the draw chose the redundant set and the hedge budget refused it."""

    key: str
    version: int
    ack_ms: float
    sync_requests: int
    redundant: bool
    budget_refused: bool = False


@dataclass
class _Put:
    """A PUT in progress: which copies hold its version, and whom to tell."""

    op: str
    key: str
    version: int
    value: bytes
    copies: int  # of the object, in both regions
    quorum: int  # copies that acknowledge the operation
    acked: asyncio.Future
    quorum_puts_done: Callback | None = None
    all_puts_done: Callback | None = None
    written: set[CopyRef] = field(default_factory=set)
    started: float = field(default_factory=time.perf_counter)
    ack_ms: float | None = None
    told_quorum: bool = False
    told_all: bool = False
    refused_version: int = 0  # the newest version a copy refusing this one held
    renewal: asyncio.Task | None = None  # keeps the L_S lease while the PUT holds it
    budget_refused: bool = False  # the hedge budget refused the redundant set

    def on_written(self, copy: CopyRef) -> None:
        self.written.add(copy)
        if len(self.written) >= self.quorum and not self.acked.done():
            self.ack_ms = (time.perf_counter() - self.started) * 1e3
            self.acked.set_result(self.version)
        if len(self.written) >= majority(self.copies) and not self.told_quorum:
            self.told_quorum = True
            if self.quorum_puts_done is not None:
                self.quorum_puts_done(self.version)
        if len(self.written) >= self.copies:
            self.tell_all()

    def tell_all(self) -> None:
        if not self.told_all:
            self.told_all = True
            if self.all_puts_done is not None:
                self.all_puts_done(self.version)

    def fail(self, error: BaseException) -> None:
        if not self.acked.done():
            self.acked.set_exception(error)


class VmLibrary:
    """PUTs of the application's VMs in the serving region (§5.1: the VM library).

    ``regions`` as this VM reaches them (the serving region direct, the second through
    the WAN); ``lock_port`` is the serving region's lock service; ``owner_id`` names this
    VM: a lock is held by ``<owner_id>/<boot>/<n>``, one owner per operation, and a
    restarted VM takes its operations' locks back under the names in its log.
    ``lease_s`` is how long a lock outlives a holder that stops renewing it;
    ``lock_timeout_s`` how long a PUT waits for a lock; ``write_deadline_s`` how long a
    request retries an unreachable storage server. ``lock_port`` is the region's lock
    service on loopback, or a :class:`LockEndpoint` (its host, port and secret). With
    ``budget_pool``, the configuration's hedge budget is the pool's, shared by every
    library and client that names it, in that lock service (``SharedBudget``).
    """

    def __init__(
        self,
        configuration: Configuration,
        regions: Regions,
        lock_port: int | LockEndpoint,
        log_path: Path,
        owner_id: str,
        strong: bool = False,
        seed: int = 0,
        write_deadline_s: float = 5.0,
        lease_s: float = DEFAULT_LEASE_S,
        lock_timeout_s: float = 15.0,
        budget_pool: str | None = None,
    ) -> None:
        self.configuration = configuration
        self.regions = regions
        self.lock_port = lock_port
        self.log_path = Path(log_path)
        self.owner_id = owner_id
        self.strong = strong
        self.write_deadline_s = write_deadline_s
        self.lease_s = lease_s
        self.lock_timeout_s = lock_timeout_s
        self.plan: PutPlan = put_plan(configuration, strong)
        budget = configuration.hedge_budget
        self.budget: LocalBudget | SharedBudget | None = (
            None if budget is None else LocalBudget(budget)
        )
        self.budget_pool = budget_pool
        self.copies = len(object_copies(configuration))
        self.records: list[PutRecord] = []
        self.errors: list[BaseException] = []
        self._rng = random.Random(seed)
        self._op_ids = itertools.count()
        self._boot = f"{time.time_ns():x}"
        self._stores: dict[str, Store] = {}
        self._locks: LockClient | None = None
        self._log: VmLog | None = None
        self._unfinished: list[LoggedOp] = []
        self._background: set[asyncio.Task] = set()
        self._active_ops: set[str] = set()  # this boot's operations being worked on
        self._repairer: asyncio.Task | None = None
        self._closing = asyncio.Event()  # set by close(): the repair ends after its round
        self.repaired = 0  # operations the background repair finished
        self.retries_refused = 0  # writes not sent again now: the hedge budget refused

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> VmLibrary:
        """Open the log (keeping its unfinished operations for :meth:`recover`), the lock
        service (waited for up to ``lock_timeout_s``) and the storage servers."""
        self._unfinished = [op for op in replay_log(self.log_path) if not op.finished]
        self._log = VmLog(self.log_path, {op.op for op in self._unfinished})
        self._locks = await LockClient.open(self.lock_port, wait_s=self.lock_timeout_s)
        if self.configuration.hedge_budget is not None and self.budget_pool is not None:
            budget = self.configuration.hedge_budget  # the fleet's, in the lock service
            self.budget = SharedBudget(self._locks, self.budget_pool, budget)
        self._stores[SERVING] = region_store(self.regions.serving, SERVING)
        if self.configuration.second.copies > 0:
            self._stores[SECOND] = region_store(self.regions.region(SECOND), SECOND)
        for store in self._stores.values():
            await store.open()
        return self

    async def close(self) -> None:
        """Stop the repair (what it left stays in the log for :meth:`recover`), finish
        background work, then close every connection and the log."""
        self._closing.set()
        if self._repairer is not None:  # its round ends (a lock it waits for is released)
            await asyncio.gather(self._repairer, return_exceptions=True)
            self._repairer = None
        await self.drain()
        for store in self._stores.values():
            await store.close()
        if self._locks is not None:
            await self._locks.close()
        if self._log is not None:
            self._log.close()
        self._stores, self._locks, self._log = {}, None, None

    async def __aenter__(self) -> VmLibrary:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def drain(self) -> None:
        """Wait until every synchronous phase and propagation started so far has ended."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(task.exception())
            print(f"costlo vm: background work failed: {task.exception()}", file=sys.stderr)

    @property
    def log(self) -> VmLog:
        if self._log is None:
            raise TestbedError("the VM library is not started (call start())")
        return self._log

    @property
    def locks(self) -> LockClient:
        if self._locks is None:
            raise TestbedError("the VM library is not started (call start())")
        return self._locks

    # --- locks: leases, timeouts, releases that survive a restarting service ---------------
    async def _grant(self, kind: str, key: str, op: str) -> LockGrant:
        return await self.locks.grant(kind, key, op, self.lease_s, self.lock_timeout_s)

    def _keep_lease(self, kind: str, key: str, op: str) -> asyncio.Task:
        """Renew a held lock's lease every third of it until cancelled or lost."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lease_s / 3)
                with contextlib.suppress(TestbedError):  # the service restarts: try again
                    if not await self.locks.renew(kind, key, op, self.lease_s):
                        return

        return asyncio.create_task(renew())

    @contextlib.asynccontextmanager
    async def _holding(self, kind: str, key: str, op: str):
        """Renew the lease of a lock granted just before, for the block's duration."""
        renewal = self._keep_lease(kind, key, op)
        try:
            yield
        finally:
            await _stop(renewal)

    async def _release(self, kind: str, key: str, op: str, version: int | None = None) -> None:
        """Release, asking again while the service is unreachable (up to the lock
        timeout). A lock lost meanwhile (lease, service state) is reported, not fatal:
        the service still records the version, and the storage guard keeps the order."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.lock_timeout_s
        while True:
            try:
                _, held = await self.locks.release_lock(kind, key, op, version)
                break
            except TestbedError:
                if loop.time() >= give_up:
                    raise
                await asyncio.sleep(0.05)
        if not held:
            print(
                f"costlo vm: {op} had lost L_{kind} of {key!r} before releasing it", file=sys.stderr
            )

    # --- PUT ---------------------------------------------------------------------------------
    async def put(
        self,
        key: str,
        value: bytes,
        quorum_puts_done: Callback | None = None,
        all_puts_done: Callback | None = None,
    ) -> int:
        """Write ``value`` as the object's next version; return that version once any one
        PUT request completed (strong: once a majority of the copies hold it). Raises
        WriteRefusedError if a copy refused it first, LockTimeoutError if L_S was not
        granted in time, TestbedError if no request could complete."""
        started = time.perf_counter()  # the ack time counts the lock and the log too
        op = f"{self.owner_id}/{self._boot}/{next(self._op_ids)}"
        self._active_ops.add(op)  # from its first log line on: the repair leaves it alone
        self.log.begin(op, key)
        try:
            grant = await self._grant("S", key, op)
        except BaseException:
            self.log.finished(op)  # nothing held, nothing written
            self._active_ops.discard(op)
            raise
        renewal = self._keep_lease("S", key, op)
        try:
            version = await self._next_version(key, grant)
        except BaseException:
            await _stop(renewal)
            await self._release("S", key, op)
            self.log.finished(op)
            self._active_ops.discard(op)
            raise
        self.log.update(op, key, version, value, self.plan.requests)
        state = _Put(
            op,
            key,
            version,
            value,
            self.copies,
            majority(self.copies) if self.strong else 1,
            asyncio.get_running_loop().create_future(),
            quorum_puts_done,
            all_puts_done,
            started=started,
            renewal=renewal,
        )
        self._spawn(self._tracked(op, self._synchronous(state)))
        return await state.acked

    async def _tracked(self, op: str, work) -> None:
        """Run the work of an operation the caller marked active, then mark it inactive; if
        the work fails with the operation left unfinished in the log (a copy's server down
        past ``write_deadline_s``), the repair takes it up."""
        try:
            await work
        except Exception:
            self._start_repair()
            raise
        finally:
            self._active_ops.discard(op)

    # --- background repair: a failed write's copy is re-driven while the VM runs ----------
    def _start_repair(self) -> None:
        if self._repairer is None or self._repairer.done():
            self._repairer = asyncio.create_task(self._repair())

    async def _repair(self) -> None:
        """Every REPAIR_FIRST_S (doubling to REPAIR_MAX_S while repairs fail) finish this
        boot's operations the log holds unfinished and nothing works on, as recovery would
        after a restart; end when none is left or the library closes. An operation is taken
        up only when every copy it has left to write answers a read (no lock is held waiting
        on a server that is still down). So a copy a failed write left stale is written
        within about REPAIR_MAX_S + ``write_deadline_s`` of its server's return."""
        wait_s = REPAIR_FIRST_S
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), wait_s)
                return
            mine = f"/{self._boot}/"
            left = [
                logged
                for logged in replay_log(self.log_path)
                if not logged.finished and mine in logged.op and logged.op not in self._active_ops
            ]
            if not left:
                return
            answers = await asyncio.gather(*(self._targets_answer(logged) for logged in left))
            ready = [logged for logged, answered in zip(left, answers, strict=True) if answered]
            self._active_ops.update(logged.op for logged in ready)
            results = await asyncio.gather(
                *(self._tracked(logged.op, self._recover_one(logged, False)) for logged in ready),
                return_exceptions=True,
            )
            failed = len(left) - len(ready) + sum(isinstance(r, BaseException) for r in results)
            self.repaired += len(left) - failed
            wait_s = min(2.0 * wait_s, REPAIR_MAX_S) if failed else REPAIR_FIRST_S

    async def _targets_answer(self, logged: LoggedOp) -> bool:
        """Whether every copy the operation has left to write answers a read in time."""
        targets = propagation_targets(self.configuration, logged.written_copies)
        reads = [
            asyncio.wait_for(
                self._stores[ref.region].read(logged.key, ref.copy), self.write_deadline_s
            )
            for ref in targets
        ]
        results = await asyncio.gather(*reads, return_exceptions=True)
        return not any(isinstance(r, BaseException) for r in results)

    # --- PUT internals -------------------------------------------------------------------------
    async def _next_version(self, key: str, grant: LockGrant) -> int:
        """v+1. If the service lost its state, v is learned from storage, plus one for a
        version the lost state may have given a PUT still in flight."""
        if grant.known:
            return grant.version + 1
        return max(grant.version, await self._stored_version(key) + 1) + 1

    async def _stored_version(self, key: str) -> int:
        """The newest version among the copies that hold the latest released one: copy
        0 and the serving region's (eventual), or a majority of all copies (strong, §7)."""
        copies = [
            ref for ref in object_copies(self.configuration) if self.strong or ref.region == SERVING
        ]
        needed = majority(len(copies)) if self.strong else 1
        reads = [
            asyncio.wait_for(self._stores[ref.region].read(key, ref.copy), self.write_deadline_s)
            for ref in copies
        ]
        replies = await asyncio.gather(*reads, return_exceptions=True)
        found = [r for r in replies if not isinstance(r, BaseException)]
        if len(found) < needed:
            raise TestbedError(
                f"PUT of {key!r}: the lock service lost its state and only {len(found)} of "
                f"{needed} copies could be read to learn the version; retry later"
            )
        return max((f[0] for f in found if f is not None), default=0)

    async def _write(self, state: _Put, copy: CopyRef, synchronous: bool = True) -> None:
        """One guarded write. A refusal fails the PUT at once (before any later request
        can acknowledge it) when the request is synchronous, or when the copy holds this
        version with another value; propagation may find a newer version: that is fine."""
        store = self._stores[copy.region]
        outcome = await store.write_retrying(
            state.key, copy.copy, state.version, state.value, self.write_deadline_s,
            may_retry=self._retry_gate(),
        )  # fmt: skip
        if outcome.accepted:
            state.on_written(copy)
            return
        state.refused_version = max(state.refused_version, outcome.stored_version)
        if synchronous or outcome.stored_version == state.version:
            error = WriteRefusedError(state.key, str(copy), state.version, outcome.stored_version)
            state.fail(error)
            raise error

    async def _request(
        self, state: _Put, request_id: int, request: StorageRequest, synchronous: bool = True
    ) -> None:
        await self._write(state, request.copy_ref, synchronous)
        self.log.done(state.op, request_id)

    async def _synchronous(self, state: _Put) -> None:
        """Steps 2-5: the synchronous requests, L_S, then propagation. A failed PUT
        releases L_S too, and propagates if some copy took its version."""
        failure: BaseException | None = None
        try:
            await self._synchronous_requests(state)
        except Exception as error:
            failure = error
            state.fail(error)  # the caller, if still waiting, gets the error
        finally:
            if state.renewal is not None:
                await _stop(state.renewal)
        await self._release("S", state.key, state.op, max(state.version, state.refused_version))
        self.log.released(state.op)
        if failure is not None and not state.written:
            self.log.finished(state.op)
            raise failure
        await self._propagate(state)
        if failure is not None:
            raise failure

    async def _synchronous_requests(self, state: _Put) -> None:
        plan = self.plan
        if self.budget is not None:
            self.budget.record_primary(asyncio.get_running_loop().time(), len(plan.first))
        tasks = [asyncio.create_task(self._request(state, i, r)) for i, r in enumerate(plan.first)]
        redundant = False
        if plan.redundant:
            redundant = await self._gate(state, tasks[0])
            if redundant:
                ids = range(len(plan.first), len(plan.requests))
                tasks += [
                    asyncio.create_task(self._request(state, i, plan.requests[i])) for i in ids
                ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            refused = [f for f in failures if isinstance(f, WriteRefusedError)]
            fatal = [f for f in failures if isinstance(f, self._fatal_errors())]
            if refused or fatal:
                raise (refused or fatal)[0]
            raise StoreUnavailable(
                f"PUT {state.op} of {state.key!r}: {failures[0]} (a copy it wrote is "
                "propagated and repaired; if none, it was not acknowledged: put it again)"
            )
        ack_ms = state.ack_ms if state.ack_ms is not None else float("nan")
        self.records.append(
            PutRecord(state.key, state.version, ack_ms, len(tasks), redundant, state.budget_refused)
        )

    def _fatal_errors(self) -> tuple[type[BaseException], ...]:
        """Replies that retrying cannot change, of every store (a refused request, say)."""
        return tuple(e for store in self._stores.values() for e in store.fatal_errors)

    def _retry_gate(self):
        """What a write asks before it is sent again: the hedge budget, if any, for one
        extra storage request (a retry is one, issue 38, item 4); None: no budget."""
        if self.budget is None:
            return None
        budget = self.budget

        async def may_retry() -> bool:
            admitted = await budget.try_extra(asyncio.get_running_loop().time(), 1)
            self.retries_refused += not admitted
            return admitted

        return may_retry

    async def _gate(self, state: _Put, first: asyncio.Task) -> bool:
        """After ``put_timeout_ms`` without the first request's completion, issue the
        redundant set with ``put_probability`` if the hedge budget, if any, allows it; log
        the requests left out (§5.2)."""
        timeout_s = self.configuration.put_timeout_ms / 1e3
        if timeout_s > 0:
            await asyncio.wait({first}, timeout=timeout_s)
        answered = first.done() and first.exception() is None
        if not answered and self._rng.random() < self.configuration.put_probability:
            extra = len(self.plan.redundant)
            now_s = asyncio.get_running_loop().time()
            if self.budget is None or await self.budget.try_extra(now_s, extra):
                return True
            state.budget_refused = True
        self.log.skip(state.op, list(range(len(self.plan.first), len(self.plan.requests))))
        return False

    async def _propagate(self, state: _Put) -> None:
        """Step 5: under L_A, write the copies no synchronous request wrote, unless a
        newer version exists (then its own propagation covers them). A service that lost
        its state does not know the version: then the storage guard decides."""
        targets = propagation_targets(self.configuration, frozenset(state.written))
        if targets:
            grant = await self._grant("A", state.key, state.op)
            try:
                async with self._holding("A", state.key, state.op):
                    if grant.version == state.version or not grant.known:
                        writes = [self._write(state, copy, synchronous=False) for copy in targets]
                        results = await asyncio.gather(*writes, return_exceptions=True)
                        failures = [r for r in results if isinstance(r, BaseException)]
                        if failures:
                            raise failures[0]
            finally:
                await self._release("A", state.key, state.op)
        self.log.finished(state.op)
        state.tell_all()

    # --- recovery ----------------------------------------------------------------------------
    async def recover(self) -> int:
        """Finish every operation the log holds unfinished (after a crash): re-take L_S
        under the operation's owner id, re-issue only the requests not logged as done,
        release, and propagate in the background. Returns how many it took up.

        The operations are recovered concurrently, not in log order: an operation may have
        released L_S (and a later one been given it) just before the crash, without the
        release reaching the log; in log order the first would wait for the second.
        """
        taken, self._unfinished = self._unfinished, []
        results = await asyncio.gather(
            *(self._recover_one(logged) for logged in taken), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise TestbedError(f"recovery of {len(failures)} operations failed: {failures[0]}")
        return len(taken)

    async def _recover_one(self, logged: LoggedOp, background: bool = True) -> None:
        if logged.version is None:
            # L_S asked for, maybe given: take it (as its owner) and give it back.
            await self._grant("S", logged.key, logged.op)
            await self._release("S", logged.key, logged.op)
            self.log.finished(logged.op)
            return
        state = self._recovered_state(logged)
        if not logged.released:
            await self._finish_synchronous(logged, state)
        if background:
            self._spawn(self._propagate(state))
        else:
            await self._propagate(state)

    def _recovered_state(self, logged: LoggedOp) -> _Put:
        acked = asyncio.get_running_loop().create_future()
        acked.set_result(logged.version)  # nobody waits: the caller is gone
        # Only copies logged as written count: propagation writes the others (guarded).
        written = set(logged.written_copies)
        return _Put(
            logged.op,
            logged.key,
            int(logged.version or 0),
            logged.value or b"",
            self.copies,
            1,
            acked,
            written=written,
        )

    async def _finish_synchronous(self, logged: LoggedOp, state: _Put) -> None:
        """Re-issue the requests not logged as done, unless L_S was released (with this
        version) before the crash or its lease expired (the service then raised the
        version past it). A copy holding a newer version means a newer PUT: not an error."""
        grant = await self._grant("S", logged.key, logged.op)
        async with self._holding("S", logged.key, logged.op):
            if grant.known and grant.version >= state.version:
                release_version = None
            else:
                missing = [(i, logged.requests[i]) for i in logged.missing]
                await asyncio.gather(
                    *(self._request(state, i, r, synchronous=False) for i, r in missing)
                )
                release_version = max(state.version, state.refused_version)
        await self._release("S", logged.key, logged.op, release_version)
        self.log.released(logged.op)


async def _stop(task: asyncio.Task) -> None:
    """Cancel a helper task and wait for it to end."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
