"""The one loop of ``geoslo run`` (DESIGN: "The one loop every controller follows", "The
runtime"): every interval observe the environment, step the controller in a worker thread
(the solver never blocks the event loop), apply the plan, and wait for the next interval.

Failure semantics: an observation that raises or outlasts ``observe_timeout_s``, a step
that raises or ends ``failed``, and an apply that raises or outlasts ``apply_timeout_s``
each keep the plan in force, count ``geoslo_errors_total{kind}`` and log one line; the
loop goes on. A step cannot be cancelled (it runs in a thread), so it is not timed out:
``/healthz`` turns 503 when no interval completes for three intervals plus the timeouts,
and while the environment says it is degraded (an optional ``degraded_reasons()``: the
reasons are logged as a warning when they change, and ``--once`` exits 5).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from geoslo.control import Outcome
from geoslo.errors import GeosloError
from geoslo.live import MetricsServer, serve_metrics
from geoslo.live._metrics import json_line
from geoslo.live._processes import is_loopback
from geoslo.runtime._config import RunConfig, ServiceSettings, parse_listen
from geoslo.runtime._dryrun import DryRunEnvironment, is_self_paced
from geoslo.runtime._log import ServiceLog
from geoslo.runtime._metrics import Health, Metrics
from geoslo.runtime._service import Service

__all__ = ["IntervalReport", "ServiceLoop", "serve", "ONCE_DEGRADED_EXIT", "ONCE_FAILED_EXIT"]

ONCE_FAILED_EXIT = 3  # `geoslo run --once`: the one interval counted an error
ONCE_DEGRADED_EXIT = 5  # `geoslo run --once`: no error, but the environment was degraded
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # SIGHUP: its terminal closed
_FAILED = object()  # an observation that did not come
_STOPPED = object()  # a self-paced observation given up at stop()


@dataclass
class IntervalReport:
    """How one interval went: its status (the outcome's, or what failed before one), the
    step's wall time, whether a plan was applied, and the kinds of error counted."""

    interval: int
    status: str = "observe_failed"
    decide_ms: float | None = None
    applied: bool = False
    objective: float | None = None
    errors: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)  # the environment's reasons


class ServiceLoop:
    """One service's loop; ``run()`` until ``stop()``, ``max_intervals`` or forever."""

    def __init__(
        self,
        service: Service,
        settings: ServiceSettings,
        log: ServiceLog,
        *,
        metrics: Metrics | None = None,
        dry_run: bool = False,
        max_intervals: int | None = None,
    ) -> None:
        self.service = service
        self.log = log
        self.metrics = metrics or Metrics(service.system)
        for collector in service.collectors:
            self.metrics.registry.register(collector)
        environment = service.environment
        if dry_run:
            environment = DryRunEnvironment(environment, service.plan_record, log)
        self.environment = environment
        self.self_paced = is_self_paced(environment)
        self.observe_timeout_s = (
            settings.observe_timeout_s or service.observe_timeout_s or service.interval_s
        )
        if self.self_paced:  # observe() first waits up to an interval for its point
            self.observe_timeout_s += service.interval_s
        self.apply_timeout_s = (
            settings.apply_timeout_s or service.apply_timeout_s or service.interval_s
        )
        self.max_intervals = settings.intervals if max_intervals is None else max_intervals
        stale_after_s = 3 * service.interval_s + self.observe_timeout_s + self.apply_timeout_s
        self.health = Health(stale_after_s)
        self.interval = 0
        self.failed_intervals = 0  # intervals that counted at least one error
        self.degraded_intervals = 0  # intervals whose environment reported a degradation
        self._degraded: list[str] = []  # the last interval's reasons (logged on change)
        self.dry_run = dry_run
        self.plan_file = None if settings.plan_file is None else Path(settings.plan_file)
        self.plan_in_force: dict[str, Any] | None = None  # what /plan answers
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Stop after the current interval (from any thread: the signal watcher calls it)."""
        self._stopping = True
        if self._wake is not None and self._event_loop is not None:
            try:
                self._event_loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the event loop has closed: nothing left to wake
                pass

    async def run(self) -> None:
        """Start the environment, run intervals, close the environment whatever happens."""
        self._event_loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if self._stopping:
            self._wake.set()
        try:
            await self.environment.start()
            await self._intervals()
        finally:
            await self.environment.close()

    async def _intervals(self) -> None:
        """A simulated environment's clock advances in observe(), and a self-paced one's
        observe() waits for its own point, so intervals follow each other at once; a real
        one is observed at the end of each interval of wall time, the first one included
        (an observation right after start() would cover nothing)."""
        clock = asyncio.get_running_loop()
        next_s = clock.time()
        while not self._stopping:
            if not (self.environment.simulated or self.self_paced):
                next_s = max(next_s + self.service.interval_s, clock.time())  # late: no burst
                await self._sleep_until(next_s)
                if self._stopping:
                    break
            await self.run_interval()
            if self.max_intervals and self.interval >= self.max_intervals:
                break
            await asyncio.sleep(0)  # let the signal handlers and the HTTP thread in

    async def _sleep_until(self, deadline_s: float) -> None:
        """Wait until ``deadline_s`` on the event loop's clock, or until stop()."""
        assert self._wake is not None
        remaining_s = deadline_s - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(self._wake.wait(), max(remaining_s, 0.0))
        except TimeoutError:
            pass

    async def run_interval(self) -> IntervalReport:
        """Observe, decide, apply: one interval, which never raises for a bad one."""
        self.interval += 1
        report = IntervalReport(self.interval)
        observation = await self._observe(report)
        if observation is not _FAILED:
            plan = await self._decide(observation, report)
            if plan is not None:
                await self._apply(plan, report)
        self.metrics.intervals.labels(self.service.system).inc()
        self.failed_intervals += bool(report.errors)
        report.degraded = self._degraded_reasons()
        self.degraded_intervals += bool(report.degraded)
        self.health.completed(report.status, report.degraded)
        extra = {"degraded": report.degraded} if report.degraded else {}
        self.log.emit(
            "interval",
            interval=report.interval,
            status=report.status,
            applied=report.applied,
            decide_ms=report.decide_ms,
            objective=report.objective,
            errors=report.errors,
            **extra,
        )
        if report.degraded != self._degraded:
            if report.degraded:
                self.log.emit(
                    "degraded", level="warning", interval=report.interval, reasons=report.degraded
                )
            else:
                self.log.emit("recovered", interval=report.interval)
            self._degraded = report.degraded
        return report

    def _degraded_reasons(self) -> list[str]:
        """What the environment (``degraded_reasons()``, optional) says is wrong now."""
        reasons = getattr(self.service.environment, "degraded_reasons", None)
        if reasons is None:
            return []
        try:
            return [str(reason) for reason in reasons()]
        except Exception as error:  # the health check must not end the loop
            return [f"degraded_reasons() failed: {_describe(error)}"]

    async def _observe(self, report: IntervalReport) -> Any:
        try:
            observation = await asyncio.wait_for(self._observation(), self.observe_timeout_s)
            if observation is _STOPPED:
                report.status = "stopped"
                return _FAILED
            self.metrics.set_observation(self.service.observation_gauges(observation))
        except TimeoutError:
            self._error(report, "observe", f"no observation within {self.observe_timeout_s:g} s")
            return _FAILED
        except Exception as error:
            self._error(report, "observe", _describe(error))
            return _FAILED
        return observation

    async def _observation(self) -> Any:
        """The environment's observation; a self-paced one's wait ends at stop()."""
        if not self.self_paced:
            return await self.environment.observe()
        assert self._wake is not None
        observing = asyncio.ensure_future(self.environment.observe())
        stopped = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({observing, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not observing.done():
                observing.cancel()
        if observing.cancelled() or not observing.done():
            return _STOPPED
        return observing.result()

    async def _decide(self, observation: Any, report: IntervalReport) -> Any:
        """The plan to apply, or None (no plan, or one that may not be applied)."""
        report.status = "decide_failed"
        try:
            plan, seconds = await asyncio.to_thread(
                _timed_step, self.service.controller, observation
            )
        except Exception as error:
            self._error(report, "decide", _describe(error))
            return None
        report.decide_ms = round(seconds * 1e3, 3)
        self.metrics.decision_seconds.labels(self.service.system).observe(seconds)
        if plan is None:
            report.status = "no_plan"
            return None
        outcome = getattr(plan, "outcome", None)
        if not isinstance(outcome, Outcome):
            self._error(report, "decide", f"{type(plan).__name__} carries no Outcome (.outcome)")
            return None
        report.status, report.objective = outcome.status, outcome.objective
        if outcome.solver_status.lower().startswith("interrupt"):
            # a solver that hooks SIGINT while it runs (OSQP does) took the operator's
            # Ctrl-C: stop as the signal would have
            self.log.emit("stopping", signal="SIGINT", interval=report.interval, via="solver")
            self.stop()
        self.metrics.plans.labels(self.service.system, outcome.status).inc()
        if outcome.objective is not None:
            self.metrics.objective.labels(self.service.system).set(outcome.objective)
        if not outcome.applicable:
            self._error(report, "decide", f"outcome failed ({outcome.solver_status}); plan kept")
            return None
        return plan

    async def _apply(self, plan: Any, report: IntervalReport) -> None:
        try:
            gauges = self.service.plan_gauges(plan)
            await asyncio.wait_for(self.environment.apply(plan), self.apply_timeout_s)
        except TimeoutError:
            self._error(report, "apply", f"not applied within {self.apply_timeout_s:g} s")
            return
        except Exception as error:
            self._error(report, "apply", _describe(error))
            return
        report.applied = True
        self.metrics.set_plan(gauges)
        self.plan_in_force = {
            "system": self.service.system,
            "interval": report.interval,
            "applied_unix_s": time.time(),
            "dry_run": self.dry_run,  # then logged, not applied
            "plan": dict(self.service.plan_record(plan)),
        }
        if self.plan_file is not None:
            try:
                with self.plan_file.open("a") as out:
                    out.write(json_line(self.plan_in_force))
            except OSError as error:
                self._error(report, "apply", f"plan_file {self.plan_file}: {error}")

    def plan_report(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and the JSON body of ``/plan``: the last plan applied (or, in a
        dry run, logged), 503 before the first."""
        if self.plan_in_force is None:
            return 503, {"system": self.service.system, "plan": None, "reason": "no plan yet"}
        return 200, self.plan_in_force

    def _error(self, report: IntervalReport, kind: str, message: str) -> None:
        report.errors.append(kind)
        self.metrics.count_error(kind)
        self.log.emit("error", level="error", interval=report.interval, kind=kind, error=message)


def _timed_step(controller: Any, observation: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    plan = controller.step(observation)
    return plan, time.perf_counter() - started


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def serve(
    config: RunConfig,
    *,
    dry_run: bool = False,
    once: bool = False,
    log_stream: TextIO | None = None,
) -> int:
    """Run ``config``'s service with its HTTP endpoints until it stops; the exit status
    (0: stopped cleanly; ``ONCE_FAILED_EXIT``: ``--once`` and its interval had an error;
    ``ONCE_DEGRADED_EXIT``: ``--once`` and its environment reported a degradation).
    SIGTERM, SIGINT or SIGHUP stops it after the current interval; a second one exits at
    once."""
    system = config.system.name
    log = ServiceLog(system, log_stream, config.service.log_format)
    service = config.system.build(config.controller, config.environment, config.interval_s)
    loop = ServiceLoop(
        service, config.service, log, dry_run=dry_run, max_intervals=1 if once else None
    )
    bridge = _LogBridge(log)
    try:
        server = _start_server(config, loop, log)
        try:
            log.emit(
                "started",
                listen=f"{server.host}:{server.port}",
                interval_s=service.interval_s,
                environment=getattr(config.environment, "kind", None),
                dry_run=dry_run,
                intervals=loop.max_intervals,
            )
            asyncio.run(_run_with_signals(loop, log))
        finally:
            server.close()
            log.emit(
                "stopped",
                intervals=loop.interval,
                failed_intervals=loop.failed_intervals,
                degraded_intervals=loop.degraded_intervals,
            )
    finally:
        bridge.close()
    if once and loop.failed_intervals:
        return ONCE_FAILED_EXIT
    return ONCE_DEGRADED_EXIT if once and loop.degraded_intervals else 0


def _start_server(config: RunConfig, loop: ServiceLoop, log: ServiceLog) -> MetricsServer:
    """/metrics, /healthz and /plan on ``service.listen``; a warning when beyond loopback."""
    host, port = parse_listen(config.service.listen)
    try:
        server = serve_metrics(
            loop.metrics.registry, port, host, health=loop.health.report, plan=loop.plan_report
        )
    except OSError as error:
        reason = error.strerror or error
        raise GeosloError(
            f"service.listen: cannot listen on {config.service.listen}: {reason}"
        ) from None
    if not is_loopback(host):
        log.emit(
            "listen_beyond_loopback",
            level="warning",
            address=f"{server.host}:{server.port}",
            note="/metrics, /healthz and /plan are reachable from other machines",
        )
    return server


async def _run_with_signals(loop: ServiceLoop, log: ServiceLog) -> None:
    """SIGTERM, SIGINT and SIGHUP stop the loop after its current interval; a second one
    exits."""
    event_loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        event_loop.add_signal_handler(signum, _on_signal, loop, log, signum)
    try:
        await loop.run()
    finally:
        for signum in STOP_SIGNALS:
            event_loop.remove_signal_handler(signum)


def _on_signal(loop: ServiceLoop, log: ServiceLog, signum: int) -> None:
    name = signal.Signals(signum).name
    if loop.stopping:
        log.emit("stop_forced", level="warning", signal=name, interval=loop.interval)
        os._exit(128 + signum)  # a second signal: the operator will not wait
    log.emit("stopping", signal=name, interval=loop.interval)
    loop.stop()


class _LogBridge(logging.Handler):
    """Warnings that libraries write with ``logging`` become records of the service log
    (one JSON object per line, never a stray text line)."""

    def __init__(self, log: ServiceLog) -> None:
        super().__init__(logging.WARNING)
        self._log = log
        logging.getLogger().addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self._log.emit(
            "library_log",
            level=record.levelname.lower(),
            logger=record.name,
            message=record.getMessage(),
        )

    def close(self) -> None:
        logging.getLogger().removeHandler(self)
        super().close()
