"""One Kurma agent per site, as ``geoslo run`` runs it (Kurma §6, §9): an environment and a
controller that follow the runtime's contract, with every address from its configuration.

Rounds are at ``epoch + k * interval_s`` on every site's clock (§6). The environment runs
them in the background whatever the controller is doing:

1. at ``t_k - dt`` it collects its clients' counts for the interval, checks its servers,
   and sends its state to every peer agent, through the WAN, authenticated with a shared
   secret (``geoslo.live._exchange``; whatever fails a check is dropped and counted);
2. at ``t_k`` it builds the global measurements from the states it holds for round ``k``
   (or ``k - 1``: a state that missed the point by less than an interval still counts),
   marks the sites it has not heard from for two rounds, or whose servers are down, as
   unavailable (§9), and checks that every agent saw the same sites (:func:`views_agree`).

``observe()`` returns the newest round not yet returned (it waits for the next one: the
environment is ``self_paced``); a solve that outlasts an interval leaves the round that
completed meanwhile to be solved next, late, and one superseded unread by a newer round is
logged as skipped. The controller steps a :class:`KurmaController` in
a spawned process, one solve at a time (a worker thread would not do: the solver's
compiled kernels hold the interpreter lock for up to seconds), so the exchange, the probes,
the clients and /metrics are served during a solve. When the views disagree, its plan is
this site's all-local row. ``apply(plan)`` sends the clients their row and, with a data
plane (``AgentSpec.dataplane``, ``_haproxy.py``), writes it into the site's HAProxy as weights.

A client that connects is first sent the site's settings, ``{"type": "site",
"server_choice": NAME}``, when the agent has a server choice (``AgentSpec.server_choice``):
how every client of the site picks the server inside the site its policy chose (one of
``geoslo.control.kurma.SERVER_CHOICES``; without one the clients keep their own).

``dt`` is the largest one-way WAN delay to a peer plus a margin (``dissemination_offset_s``).
The agent probes every peer 3 times every 200 ms (§6) to track base RTTs where no requests
flow, and, given a log folder, logs every round and every probe (the live experiment's
profile estimates residual WAN latency from them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import multiprocessing
import os
import signal
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Summary

from geoslo.control import Outcome
from geoslo.control.kurma import (
    IntervalMeasurements,
    KurmaConfig,
    KurmaController,
    KurmaModel,
    KurmaObservation,
    build_problem,
    check_server_choice,
    decide,
    dissemination_offset_s,
)
from geoslo.errors import ConfigError, GeosloError, TestbedError
from geoslo.live._exchange import (
    MAX_MESSAGE_BYTES,
    REJECT_REASONS,
    Envelope,
    Opener,
    Rejected,
    read_secret_file,
    seal,
)
from geoslo.live._metrics import UnitGauge
from geoslo.live._processes import is_loopback
from geoslo.live._resp import RedisConnection
from geoslo.live._tasks import cancel_and_wait
from geoslo.live.kurma._client import agent_clients_name
from geoslo.live.kurma._client_metrics import ClientTotals, read_exposition
from geoslo.live.kurma._haproxy import (
    HaproxyDataplane,
    HaproxySpec,
    arrivals_with_connections,
    check_agent_match,
)

__all__ = [
    "AgentPlan",
    "AgentRound",
    "AgentSpec",
    "KurmaAgentController",
    "KurmaAgentEnvironment",
    "checked_scale",
    "failover_row",
    "measurements_from_states",
    "read_password_file",
    "views_agree",
]

PROBES_PER_SITE = 3  # §6
PROBE_PERIOD_S = 0.2  # §6
COLLECT_TIMEOUT_S = 0.015  # clients are local: their reports come back within this
HEALTH_TIMEOUT_S = 0.2
STALE_ROUNDS = 1  # a state from the previous round still counts (late by < one interval)
SKIPPED = "the previous round's solve still runs"
SILENT_ROUNDS = 2  # a client that answered none of this many collections is reported
COUNT_SLACK_FRACTION = 0.1  # client counts may exceed the stores' by this much (timing)
COUNT_SLACK_REQUESTS = 20.0  # and by this many (the agent's own INFO and AUTH, skew)
MIN_CHECKED_SHARE = 0.05  # a local share below this bounds the demand too loosely to check
LOG_MAX_BYTES = 64 * 2**20  # a round or probe log rolls over at this size (0: never)
LOG_BACKUPS = 4  # rolled-over files kept per log: kurma-<site>-rounds.jsonl.1 ... .4
_log = logging.getLogger("geoslo.kurma.agent")


@dataclass(frozen=True)
class AgentSpec:
    """Everything one agent needs, by address (``geoslo run``'s ``kind = "agent"``).

    ``peers[site]`` is where this agent reaches that site's agent (its exchange address as
    seen from here: through the WAN); ``servers`` are this site's stores (a liveness check,
    §9). Every agent lists the same ``sites`` in the same order and shares the secret."""

    sites: tuple[str, ...]
    site: str
    peers: Mapping[str, tuple[str, int]]
    exchange_listen: tuple[str, int]
    clients_listen: tuple[str, int]
    servers: tuple[tuple[str, int], ...]
    secret_file: str
    interval_s: float = 2.5  # §6
    max_one_way_ms: float = 50.0  # the largest one-way delay to a peer: dt's first term, §6
    epoch_unix_s: float = 0.0  # rounds at epoch + k * interval_s
    log_dir: str | None = None  # round log and probe log (None: none written)
    log_max_bytes: int = LOG_MAX_BYTES  # each log rolls over at this size (0: never)
    log_backups: int = LOG_BACKUPS  # rolled-over files kept per log (path.1 newest)
    slo_ms: float = 30.0
    server_choice: str | None = None  # what the clients are told (None: they keep their own)
    clients_secret_file: str | None = None  # reports sealed with it (None: plain, loopback)
    servers_password_file: str | None = None  # AUTH for INFO on this site's stores
    servers_tls_ca_file: str | None = None  # TLS to this site's stores, verified by this CA
    dataplane: HaproxySpec | None = None  # the site's HAProxy, weights written every interval

    def __post_init__(self) -> None:
        if self.server_choice is not None:
            check_server_choice(self.server_choice)
        if self.site not in self.sites:
            raise ConfigError("site", f"{self.site!r} is not one of the sites {self.sites}")
        others = set(self.sites) - {self.site}
        if set(self.peers) != others:
            raise ConfigError("peers", f"give the address of every other site: {sorted(others)}")
        if not self.servers:
            raise ConfigError("servers", "give at least one of this site's servers")
        if self.dataplane is not None:
            check_agent_match(
                self.dataplane, self.site, self.sites, self.servers, self.server_choice
            )
        host = self.clients_listen[0]
        if self.clients_secret_file is None and not is_loopback(host):
            raise ConfigError(
                "clients_secret_file",
                f"clients_listen on {host} (beyond loopback) needs a clients_secret_file: "
                "anybody reaching it could report demand and move every site's plan",
            )


class _Metrics:
    """The agent's Prometheus metrics, in a registry of its own (docs/live.md lists them),
    served beside the runtime's at ``/metrics``."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"geoslo_kurma_{name}", doc, labels, registry=r)

        def in_units(name: str, doc: str, labels: tuple[str, ...]) -> UnitGauge:
            """Named in base units; the 0.x name (ms, rps, fraction) kept one release."""
            return UnitGauge(f"geoslo_kurma_{name}", doc, labels, r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"geoslo_kurma_{name}", doc, labels, registry=r)

        self.round = gauge("round", "Index of the last synchronised round")
        self.site_available = gauge(
            "site_available", "1 if the site took part in the last round", ("site",)
        )
        self.demand_rps = in_units(
            "demand_rps", "Client requests arriving at each site in the last interval", ("site",)
        )
        self.base_rtt_ms = in_units(
            "base_rtt_ms", "Estimated base RTT from this site (whole ms)", ("dst",)
        )
        self.probe_rtt_ms = in_units("probe_rtt_ms", "Last WAN probe RTT from this site", ("dst",))
        self.redirect_fraction = in_units(
            "redirect_fraction", "Share of this site's requests sent to each site", ("dst",)
        )
        self.plan_rate_rps = in_units(
            "plan_rate_rps", "The global plan: rate from src served at dst", ("src", "dst")
        )
        self.expected_violation_fraction = in_units(
            "expected_violation_fraction", "The plan's expected SLO misses per site", ("site",)
        )
        self.plan_optimal = gauge("plan_optimal", "1 if the last plan is a proven optimum")
        self.solve_seconds = Summary(
            "geoslo_kurma_solve_seconds", "Time to step the controller and solve", registry=r
        )
        self.solves_skipped = counter(
            "solves_skipped", "Rounds never solved: a newer one came while a solve still ran"
        )
        self.solve_errors = counter("solve_errors", "Solves that failed (the plan stays)")
        self.view_disagreements = counter(
            "view_disagreements", "Rounds held all-local: the agents' views of who is up differed"
        )
        self.requests = counter(
            "requests", "Client requests of this site, by serving site", ("dst",)
        )
        self.violations = counter(
            "violations", "Of which missed the SLO (failures included)", ("dst",)
        )
        self.errors = counter("errors", "Of which failed or timed out", ("dst",))
        self.wan_bytes = counter(
            "wan_bytes", "Bytes this site's clients sent and received over the WAN", ("dst",)
        )
        self.redirected_requests = counter("redirected_requests", "Requests this site redirected")
        self.redirected_violations = counter("redirected_violations", "Of which missed the SLO")
        self.redirected_expected_violations = counter(
            "redirected_expected_violations", "Kurma's estimate of that number"
        )
        self.states_received = counter(
            "states_received", "State messages received from each site", ("site",)
        )
        self.clients_rejected = counter(
            "clients_rejected", "Client reports refused (their connection closed)", ("reason",)
        )
        for reason in REJECT_REASONS:
            self.clients_rejected.labels(reason=reason)
        self.report_scale = gauge(
            "report_scale",
            "Factor the last round's client counts were scaled by to what the stores executed",
        )
        self.report_scale.set(1.0)
        self.reports_checked = gauge(
            "reports_checked",
            "1 if the last round's client counts were checked against the stores' INFO",
        )
        self.exchange_rejected = Counter(
            "geoslo_exchange_rejected",
            "Exchange messages dropped: truncated, oversized, malformed, unauthenticated, "
            "expired, replayed or misaddressed",
            ("reason",),
            registry=r,
        )
        for reason in REJECT_REASONS:  # every reason exposed from the start, at 0
            self.exchange_rejected.labels(reason=reason)


@dataclass(frozen=True)
class _Solved:
    """What one step in the solver process hands back to the agent."""

    fractions_row: np.ndarray  # this site's row of the routing
    rates_rps: np.ndarray
    demand_rps: np.ndarray
    status: str
    optimal: bool
    site_violation_fraction: np.ndarray
    estimate_row: np.ndarray  # Omega_ij at the planned loads, own row
    base_rtt_row_ms: np.ndarray
    solve_s: float


def _step(controller: KurmaController, m: IntervalMeasurements, me: int) -> _Solved:
    """Step the controller and read off what the instance needs (in the solver process, the
    only place that holds the controller)."""
    started = time.perf_counter()
    controller.step(m)  # the plan in force (a new one, or the last) is read below
    solve_s = time.perf_counter() - started
    plan, observation = controller.plan, controller.observation
    problem = build_problem(observation, controller.model_in_force, controller.config)
    load = plan.rates_rps.sum(axis=0)
    n = len(load)
    return _Solved(
        fractions_row=np.array(controller.fractions[me], dtype=float),
        rates_rps=np.array(plan.rates_rps, dtype=float),
        demand_rps=np.array(observation.demand_rps, dtype=float),
        status=plan.status,
        optimal=bool(plan.optimal),
        site_violation_fraction=np.array(plan.site_violation_fraction, dtype=float),
        estimate_row=np.array([problem.omega(me, j, load[j]) for j in range(n)]),
        base_rtt_row_ms=np.array(controller.base_rtt_ms[me], dtype=float),
        solve_s=solve_s,
    )


class _SolverProcess:
    """The agent's :class:`KurmaController` in a spawned process: the event loop's process
    never runs a solve. :meth:`step` blocks (call it from a thread); one call at a time."""

    def __init__(self, model: KurmaModel, config: KurmaConfig) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_solver_main, args=(child, model, config), name="kurma-solver", daemon=True
        )
        self._process.start()
        child.close()
        self._ready = False  # its "ready" not yet read

    def wait_ready(self) -> None:
        """Block until the worker has loaded the solver (raises ``EOFError`` if it died)."""
        if not self._ready:
            self._conn.recv()  # the worker's "ready", sent once
            self._ready = True

    def step(self, m: IntervalMeasurements, me: int) -> _Solved:
        """The worker's step (after its "ready": a restarted worker's first step waits for
        it); raises ``TestbedError`` if it failed, ``EOFError`` (or ``OSError``) if the
        worker died."""
        self.wait_ready()
        self._conn.send((m, me))
        ok, value = self._conn.recv()
        if not ok:
            raise TestbedError(f"the solver failed: {value}")
        return value

    def close(self) -> None:
        self._process.terminate()
        self._process.join(5.0)
        self._conn.close()


def _solver_main(conn, model: KurmaModel, config: KurmaConfig) -> None:
    """The solver process: step on every measurement received, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides when it ends
    _warm_up(model, config)
    controller = KurmaController(model, config)
    conn.send((True, "ready"))
    while True:
        try:
            m, me = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer = (True, _step(controller, m, me))
        except Exception as error:  # reported to the agent, which keeps the plan in force
            answer = (False, f"{type(error).__name__}: {error}")
        conn.send(answer)


def _warm_up(model: KurmaModel, config: KurmaConfig) -> None:
    """Solve a made-up observation (every site at 90% of capacity) once, so the solver's
    compiled kernels are loaded before the first round rather than during it."""
    n = len(model.sites)
    rtt_ms = np.full((n, n), 10.0)
    np.fill_diagonal(rtt_ms, 0.0)
    observation = KurmaObservation(0.9 * np.asarray(model.capacity_rps), np.zeros(n), rtt_ms)
    with contextlib.suppress(Exception):  # a real solve would fail too, and say why
        decide(observation, model, config)


@dataclass
class AgentRound:
    """One round as the agent saw it: the global measurements, whether every agent's view
    of who is up agreed (and the views), and the round's log record (completed by apply)."""

    round: int
    measurements: IntervalMeasurements
    agreed: bool
    views: dict[int, list[bool] | None]
    record: dict[str, Any] = field(default_factory=dict)
    own_requests: np.ndarray | None = None  # this site's clients' requests by destination


@dataclass(frozen=True)
class AgentPlan:
    """What this site's clients are told: its row of the routing, and where it came from
    (a solve, the all-local row of a round whose views disagreed, or the failover row of a
    round that found this site's own stores down), and the round it is for."""

    row: np.ndarray
    outcome: Outcome
    solved: _Solved | None = None
    views_disagree: dict[int, list[bool] | None] | None = None
    round: int | None = None
    failover: bool = False


class KurmaAgentController:
    """This site's Kurma (KurmaPerf or KurmaCost, §5) behind the runtime's ``step``: the
    solve in a spawned process (started here; :meth:`wait_ready` before the first round)."""

    def __init__(self, model: KurmaModel, config: KurmaConfig, site: str) -> None:
        if site not in model.sites:
            raise ConfigError("site", f"{site!r} is not one of the model's sites {model.sites}")
        self.model, self.config = model, config
        self.me = model.sites.index(site)
        self._solver = _SolverProcess(model, config)

    def wait_ready(self) -> None:
        self._solver.wait_ready()

    def step(self, observation: AgentRound) -> AgentPlan:
        """The plan of one round: all-local if the views disagree (the partition rule),
        else a solve; a failed solve raises (the runtime keeps the plan in force), and a
        dead solver process is replaced (its controller's history is lost). A round that
        found this site's own stores down sends its clients elsewhere (:func:`failover_row`),
        whatever the views: all-local would fail every request."""
        m, k = observation.measurements, observation.round
        if not m.available[self.me]:
            served_rps = np.asarray(m.requests, dtype=float).sum(axis=0) / m.duration_s
            if observation.own_requests is not None:  # our clients' failover traffic
                served_rps += np.asarray(observation.own_requests, dtype=float) / m.duration_s
            capacity = np.asarray(self.model.capacity_rps, dtype=float) * m.capacity_share
            row = failover_row(self.me, m.available, capacity, served_rps)
            outcome = Outcome("feasible", "local stores down: failover")
            return AgentPlan(row, outcome, round=k, failover=True)
        if not observation.agreed:
            row = np.eye(len(self.model.sites))[self.me]
            outcome = Outcome("feasible", "views disagree: all local")
            return AgentPlan(row, outcome, views_disagree=observation.views, round=k)
        try:
            solved = self._solver.step(observation.measurements, self.me)
        except (EOFError, OSError) as error:
            self._solver.close()
            self._solver = _SolverProcess(self.model, self.config)
            raise TestbedError(
                f"the solver process ended ({type(error).__name__}); restarted"
            ) from None
        outcome = Outcome(solved.status, solved.status, None, solved.solve_s * 1e3)
        return AgentPlan(solved.fractions_row, outcome, solved, round=k)

    def close(self) -> None:
        self._solver.close()


class KurmaAgentEnvironment:
    """The agent's side of the world (``geoslo.control.Environment``): its peers, its
    clients and its servers. ``solver``, if given, is waited for before the clients' port
    opens (the first round is solved in time) and closed with the environment."""

    simulated = False
    self_paced = True  # observe() waits for §6's synchronised round

    def __init__(self, spec: AgentSpec, solver: KurmaAgentController | None = None) -> None:
        self.spec = spec
        self.solver = solver
        self.sites = spec.sites
        self.me = spec.sites.index(spec.site)
        self.n = len(spec.sites)
        self.offset_s = dissemination_offset_s(np.array([spec.max_one_way_ms]))
        self.secret = read_secret_file(Path(spec.secret_file), "secret_file")
        self.opener = Opener(self.secret, spec.site)
        self.clients_opener = (
            None
            if spec.clients_secret_file is None
            else Opener(
                read_secret_file(Path(spec.clients_secret_file), "clients_secret_file"),
                agent_clients_name(spec.site),
            )
        )
        self.servers_password = (
            None
            if spec.servers_password_file is None
            else read_password_file(Path(spec.servers_password_file))
        )
        self.servers_tls = (
            None
            if spec.servers_tls_ca_file is None
            else ssl.create_default_context(cafile=spec.servers_tls_ca_file)
        )
        self.dataplane = None if spec.dataplane is None else HaproxyDataplane(spec.dataplane)
        self._store_connections: dict[int, RedisConnection] = {}
        self._executed_before: list[float | None] = [None] * len(spec.servers)
        self._share_min: float | None = None  # the least local share in force this interval
        self._clients_rejected_since: dict[str, int] = {}
        self.metrics = _Metrics()
        self.clients: dict[asyncio.StreamWriter, asyncio.Queue] = {}
        self.leftover_reports: list[dict] = []
        self.client_demand: dict[asyncio.StreamWriter, tuple[float, float]] = {}
        self.peers: dict[int, asyncio.StreamWriter] = {}
        self.states: dict[int, dict] = {}  # site -> its latest state message
        self.probe_sent: dict[tuple[int, int], float] = {}
        self.probe_rtts: list[tuple[float, int, float]] = []  # (unix s, site, rtt ms)
        self.view: list[bool] | None = None  # the sites available in the last round
        self.estimate_row = np.zeros(self.n)  # Omega_ij at the planned loads, own row
        self.last_expected = 0.0  # Kurma's expected violations of the last interval's redirects
        self.problems: list[str] = []  # what degraded the last round (degraded_reasons)
        self._store_problems: list[str] = []
        self._count_problems: list[str] = []
        self._last_scale = 1.0
        self._current_share: float | None = None  # this site's local share in force
        self._client_problems: list[str] = []
        self._rejected_since: dict[str, int] = {}  # exchange rejections since the last round
        self._client_rounds: dict[asyncio.StreamWriter, list[int]] = {}  # [joined, answered]
        self._ready: AgentRound | None = None  # a round not yet observed
        self._unlogged: AgentRound | None = None  # observed, its plan not applied yet
        self._round_done = asyncio.Event()
        self._servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task] = []
        self._round_log: SizeRotatedLog | None = None
        self._probe_log: SizeRotatedLog | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the logs, listen for peers, wait for the solver, then listen for clients
        (whoever waits for the clients' port finds everything answering)."""
        if self.spec.log_dir is not None:
            self._open_logs(Path(self.spec.log_dir))
        await self._listen("exchange_listen", self._on_peer, limit=MAX_MESSAGE_BYTES)
        if self.solver is not None:
            await asyncio.to_thread(self.solver.wait_ready)
        await self._check_dataplane()
        await self._listen("clients_listen", self._on_client)
        warning = clients_listen_warning(
            self.spec.clients_listen[0], self.clients_opener is not None
        )
        if warning is not None:
            _log.warning(warning)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._link(j)) for j in range(self.n) if j != self.me]
        self._tasks += [loop.create_task(self._probe_loop()), loop.create_task(self._rounds())]

    def _open_logs(self, log_dir: Path) -> None:
        """The round log and the probe log in ``log_dir`` (created if missing), appended to,
        each rolled over by size (``log_max_bytes``, ``log_backups``)."""
        stem = log_dir / f"kurma-{self.spec.site.lower()}"
        size = (self.spec.log_max_bytes, self.spec.log_backups)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._round_log = SizeRotatedLog(Path(f"{stem}-rounds.jsonl"), *size)
            self._probe_log = SizeRotatedLog(Path(f"{stem}-probes.csv"), *size)
        except OSError as error:
            for log in (self._round_log, self._probe_log):
                if log is not None:
                    log.close()
            self._round_log = self._probe_log = None
            reason = error.strerror or error
            raise ConfigError(
                "environment.log_dir", f"cannot write the logs in {log_dir}: {reason}"
            ) from None

    async def _check_dataplane(self) -> None:
        """Refuse (exit 2) a site HAProxy that balances inside sites otherwise than the
        model assumes, and (exit 1) one whose socket does not answer."""
        if self.dataplane is None:
            return
        try:
            await self.dataplane.check()
        except (ConfigError, TestbedError) as error:
            await self.close()
            if isinstance(error, ConfigError):
                raise ConfigError(f"environment.{error.field}", error.problem) from None
            raise GeosloError(f"environment.dataplane.socket: {error}") from None

    async def _listen(self, key: str, on_connect, **options) -> None:
        """Serve ``on_connect`` at the spec's address ``key``. An address that cannot be
        bound (in use, not this machine's) is the machine's state, not the file's: a
        ``GeosloError`` naming the key (exit 1, as for ``[service] listen``)."""
        host, port = getattr(self.spec, key)
        try:
            self._servers.append(await asyncio.start_server(on_connect, host, port, **options))
        except OSError as error:
            await self.close()
            reason = os.strerror(error.errno) if error.errno else error  # asyncio's is long
            raise GeosloError(
                f"environment.{key}: cannot listen on {host}:{port}: {reason}"
            ) from None

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)
        for server in self._servers:
            server.close()
        self._servers.clear()
        for writer in [*self.peers.values(), *self.clients]:
            writer.close()
        for connection in self._store_connections.values():
            await connection.close()
        self._store_connections.clear()
        if self.solver is not None:
            self.solver.close()  # a solve still running ends with its process
        self._flush_unlogged()
        for log in (self._round_log, self._probe_log):
            if log is not None:
                log.close()
        self._round_log = self._probe_log = None

    # --- peers -------------------------------------------------------------------------------
    def _reject(self, reason: str) -> None:
        self.metrics.exchange_rejected.labels(reason=reason).inc()
        self._rejected_since[reason] = self._rejected_since.get(reason, 0) + 1

    async def _on_peer(self, reader, writer) -> None:
        """Messages from other instances: their state, or a probe to echo. A message that
        fails a check is dropped and counted; one that breaks the framing (oversized,
        truncated) also ends the connection."""
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # over the stream's limit: no telling where the next begins
                    self._reject("oversized")
                    break
                if not line:
                    break
                try:
                    self._on_peer_message(self.opener.open(line), line, writer)
                except Rejected as rejected:
                    self._reject(rejected.reason)
                    if rejected.reason == "truncated":
                        break
        writer.close()

    def _on_peer_message(self, envelope: Envelope, line: bytes, writer) -> None:
        body = envelope.body
        if body.get("type") == "probe" and _is_count(body.get("id")):
            writer.write(line)  # the sender checks its own MAC on the echo
        elif body.get("type") == "state" and _valid_state(body, self.n, self.me):
            site = self.sites[body["site"]]
            if envelope.src != site:
                raise Rejected("malformed")
            self.states[body["site"]] = body
            self.metrics.states_received.labels(site=site).inc()
        else:
            raise Rejected("malformed")

    async def _link(self, j: int) -> None:
        """Keep a connection to instance ``j`` through the WAN; read its probe echoes."""
        host, port = self.spec.peers[self.sites[j]]
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port, limit=MAX_MESSAGE_BYTES)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            self.peers[j] = writer
            with contextlib.suppress(OSError):
                try:
                    while line := await reader.readline():
                        self._on_probe_echo(j, line)
                except ValueError:  # over the stream's limit: hang up, reconnect
                    self._reject("oversized")
            self.peers.pop(j, None)
            writer.close()
            await asyncio.sleep(0.5)

    def _on_probe_echo(self, j: int, line: bytes) -> None:
        received = time.monotonic()
        try:
            envelope = self.opener.open(line, dst=self.sites[j])
            if envelope.src != self.spec.site or not _is_count(envelope.body.get("id")):
                raise Rejected("malformed")
        except Rejected as rejected:
            self._reject(rejected.reason)
            return
        sent = self.probe_sent.pop((j, envelope.body["id"]), None)
        if sent is None:
            return
        rtt_ms = (received - sent) * 1e3
        now = time.time()
        self.probe_rtts.append((now, j, rtt_ms))
        if self._probe_log is not None:
            self._probe_log.write_line(f"{now:.4f},{self.sites[j]},{rtt_ms:.4f}")
        self.metrics.probe_rtt_ms.set(rtt_ms, dst=self.sites[j])

    def _seal(self, j: int, body: dict) -> bytes:
        return seal(self.secret, self.spec.site, self.sites[j], body)

    async def _probe_loop(self) -> None:
        probe_id = 0
        while True:
            for _ in range(PROBES_PER_SITE):
                for j, writer in list(self.peers.items()):
                    probe_id += 1
                    line = self._seal(j, {"type": "probe", "id": probe_id})
                    self.probe_sent[(j, probe_id)] = time.monotonic()
                    writer.write(line)
                await asyncio.sleep(0.002)  # separate segments: each probe sees its own delay
            await asyncio.sleep(PROBE_PERIOD_S - PROBES_PER_SITE * 0.002)
            horizon = time.monotonic() - 2.0
            self.probe_sent = {k: v for k, v in self.probe_sent.items() if v > horizon}

    def _probe_min_ms(self, window_s: float = 1.0) -> list[float | None]:
        """Min probe RTT per site over the last second (§6), None where none came back."""
        since = time.time() - window_s
        self.probe_rtts = [p for p in self.probe_rtts if p[0] >= since]
        mins: list[float | None] = [None] * self.n
        for _, j, rtt in self.probe_rtts:
            mins[j] = rtt if mins[j] is None else min(mins[j], rtt)
        return mins

    # --- clients -----------------------------------------------------------------------------
    async def _on_client(self, reader, writer) -> None:
        """The site's settings to a new client; then its reports, each its Prometheus
        metrics (``_client_metrics``): queued as the counts since its report before; a
        client's first report to this agent counts from zero only if no agent read it
        before (else it is the baseline). A report that does not parse ends the connection."""
        replies: asyncio.Queue = asyncio.Queue()
        if self.spec.server_choice is not None:
            site = {"type": "site", "server_choice": self.spec.server_choice}
            writer.write(json.dumps(site).encode() + b"\n")
        self.clients[writer] = replies
        self._client_rounds[writer] = [self._round_now(), -1]
        zero = ClientTotals.zero(self.n)
        last: ClientTotals | None = None
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, asyncio.CancelledError):
            while line := await reader.readline():
                report = self._open_report(line)
                if report is None:
                    break
                totals = read_exposition(report["metrics"], self.sites, self.spec.slo_ms)
                earlier = last if last is not None else (zero if report["first"] else totals)
                report["counts"], last = totals - earlier, totals
                await replies.put(report)
        self.clients.pop(writer, None)
        self.client_demand.pop(writer, None)
        self._client_rounds.pop(writer, None)
        while not replies.empty():  # a closing client's last report: counted next round
            self.leftover_reports.append(replies.get_nowait())
        writer.close()

    def _open_report(self, line: bytes) -> dict | None:
        """A client's report: the line itself, or with a clients secret the body of a line
        sealed with it and addressed to this agent's clients port (None: refused, counted)."""
        if self.clients_opener is None:
            return json.loads(line)
        try:
            return self.clients_opener.open(line).body
        except Rejected as rejected:
            self.metrics.clients_rejected.labels(reason=rejected.reason).inc()
            since = self._clients_rejected_since
            since[rejected.reason] = since.get(rejected.reason, 0) + 1
            return None

    async def _collect(self, k: int) -> dict:
        """Ask every local client for its counts of the interval; sum what comes back."""
        message = json.dumps({"type": "collect", "round": k}).encode() + b"\n"
        for writer in list(self.clients):
            writer.write(message)
        reports, self.leftover_reports = self.leftover_reports, []
        demand = np.zeros(2)
        silent = 0
        for writer, replies in list(self.clients.items()):
            answered = await _reports_until(replies, k, COLLECT_TIMEOUT_S)
            reports += answered
            self.client_demand[writer] = client_demand(answered, k, self.client_demand.get(writer))
            demand += self.client_demand[writer]
            rounds = self._client_rounds.get(writer)
            if rounds is not None:
                if any(report.get("round") == k for report in answered):
                    rounds[1] = k
                silent += client_silent(rounds[0], rounds[1], k)
        self._client_problems = (
            [f"{silent} registered client(s) sent no report for {SILENT_ROUNDS} rounds or more"]
            if silent
            else []
        )
        counts, mins = ClientTotals.zero(self.n), np.full(self.n, np.inf)
        for report in reports:
            counts = counts + report["counts"]
            mins = np.minimum(mins, [np.inf if m is None else m for m in report["min_response_ms"]])
        return {
            "arrivals": float(demand[0]),
            "writes": float(demand[1]),
            "requests": counts.requests,
            "violations": counts.violations,
            "errors": counts.errors,
            "wan_bytes": counts.wan_bytes,
            "min_response_ms": mins,
        }

    async def _servers_up(self) -> list[bool]:
        """Whether each local server accepts a connection. A liveness check, not a PING: an
        overloaded server answers a PING only after its queue, which is not a failure."""
        up = await asyncio.gather(*(_accepts(host, port) for host, port in self.spec.servers))
        return list(up)

    async def _executed_commands(self) -> float | None:
        """Commands this site's stores executed since the last round (``INFO stats``'
        ``total_commands_processed``, a restarted store's from zero), or None when a
        store's could not be read now or then (the reports are not checked this round)."""
        counts = await asyncio.gather(*(self._commands(i) for i in range(len(self.spec.servers))))
        total: float | None = 0.0
        for i, count in enumerate(counts):
            before, self._executed_before[i] = self._executed_before[i], count
            if count is None or before is None or total is None:
                total = None
                continue
            total += count - before if count >= before else count
        return total

    async def _commands(self, i: int) -> float | None:
        host, port = self.spec.servers[i]
        try:
            connection = self._store_connections.get(i)
            if connection is None or connection.closed:
                connection = await RedisConnection.open(
                    port, host, HEALTH_TIMEOUT_S, password=self.servers_password,
                    tls=self.servers_tls,
                )  # fmt: skip
                self._store_connections[i] = connection
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                info = await connection.command(b"INFO", b"stats")
            return _info_field(info, "total_commands_processed")
        except (TimeoutError, OSError, TestbedError, ValueError):
            connection = self._store_connections.pop(i, None)
            if connection is not None:
                await connection.close()
            return None

    def _checked(self, report: dict, executed: float | None, all_up: bool) -> dict:
        """The round's client counts, scaled down to what the stores executed when they
        claim more (:func:`checked_scale`): a client may lie, the stores' counters do not."""
        share, self._share_min = self._share_min, self._current_share
        local = float(report["requests"][self.me] - report["errors"][self.me])
        scale = checked_scale(report["arrivals"], local, executed, share if all_up else None)
        self._count_problems = []
        self._last_scale = scale
        self.metrics.report_scale.set(scale)
        self.metrics.reports_checked.set(float(executed is not None))
        if scale >= 1.0:
            return report
        self._count_problems = [
            f"client reports exceed what the local stores executed ({report['arrivals']:.0f} "
            f"arrivals and {local:.0f} local requests claimed, {executed:.0f} commands "
            f"executed): counts scaled by {scale:.3f}"
        ]
        checked = dict(report)
        for key in ("arrivals", "writes", "requests", "violations", "errors", "wan_bytes"):
            checked[key] = report[key] * scale
        return checked

    # --- rounds ------------------------------------------------------------------------------
    def _round_now(self) -> int:
        """The round whose collection comes next."""
        interval, epoch = self.spec.interval_s, self.spec.epoch_unix_s
        return int((time.time() + self.offset_s - epoch) // interval) + 1

    async def _rounds(self) -> None:
        interval, epoch = self.spec.interval_s, self.spec.epoch_unix_s
        k = int((time.time() + self.offset_s - epoch) // interval) + 1
        while True:
            t_k = epoch + k * interval
            await _sleep_until(t_k - self.offset_s)
            own = await self._disseminate(k)
            await _sleep_until(t_k)
            self._complete(k, own)
            k = max(k + 1, int((time.time() + self.offset_s - epoch) // interval) + 1)

    async def _disseminate(self, k: int) -> dict:
        report, up, executed, proxied = await asyncio.gather(
            self._collect(k), self._servers_up(), self._executed_commands(), self._proxied()
        )
        report = arrivals_with_connections(report, proxied)
        servers_up = sum(up)
        report = self._checked(report, executed, all(up))
        self._store_problems = [
            f"local store {host}:{port} does not accept connections"
            for (host, port), ok in zip(self.spec.servers, up, strict=True)
            if not ok
        ]
        state = {
            "type": "state",
            "site": self.me,
            "round": k,
            "backend_up": servers_up > 0,
            "capacity_share": servers_up / len(self.spec.servers),  # §9: a failed server
            "arrivals": report["arrivals"],
            "writes": report["writes"],
            "requests": report["requests"].tolist(),
            "violations": report["violations"].tolist(),
            "wan_bytes": report["wan_bytes"].tolist(),
            "min_response_ms": [m if np.isfinite(m) else None for m in report["min_response_ms"]],
            "probe_rtt_ms": self._probe_min_ms(),
            "view": self.view,  # the partition rule (views_agree) compares these
        }
        for j, writer in list(self.peers.items()):
            writer.write(self._seal(j, state))
        self.states[self.me] = state
        self._count(report)
        return state

    async def _proxied(self) -> tuple[float, np.ndarray] | None:
        """The connections the site's HAProxy took since the last round, when they count as
        arrivals (None: no proxy, or ``arrivals = "clients"``)."""
        if self.dataplane is None or self.dataplane.spec.arrivals != "connections":
            return None
        return await self.dataplane.connections()

    def _count(self, report: dict) -> None:
        """Counters of the interval just measured, and Kurma's estimate for its redirects."""
        m = self.metrics
        for j, site in enumerate(self.sites):
            m.requests.labels(dst=site).inc(float(report["requests"][j]))
            m.violations.labels(dst=site).inc(float(report["violations"][j]))
            m.errors.labels(dst=site).inc(float(report["errors"][j]))
            m.wan_bytes.labels(dst=site).inc(float(report["wan_bytes"][j]))
        remote = np.arange(self.n) != self.me
        requests, violations = report["requests"][remote], report["violations"][remote]
        m.redirected_requests.inc(float(requests.sum()))
        m.redirected_violations.inc(float(violations.sum()))
        expected = float((requests * self.estimate_row[remote]).sum())
        m.redirected_expected_violations.inc(expected)
        self.last_expected = expected

    def _complete(self, k: int, own: dict) -> None:
        """Round ``k``'s measurements and views, ready for observe(); a round still unread
        from before is superseded, logged as skipped (the controller was solving through it)."""
        m = measurements_from_states(self.states, k, self.n, self.spec.interval_s)
        agreed, views = views_agree(self.states, m.available, self.view, self.me)
        self.view = m.available.tolist()
        rejected, self._rejected_since = self._rejected_since, {}
        refused, self._clients_rejected_since = self._clients_rejected_since, {}
        self.problems = [
            *self._store_problems,
            *peer_problems(self.states, k, self.sites, self.me),
            *([f"exchange: rejected {_counts(rejected)} since the last round"] if rejected else []),
            *([f"clients: refused {_counts(refused)} since the last round"] if refused else []),
            *self._client_problems,
            *self._count_problems,
            *([] if self.dataplane is None else self.dataplane.problems),
        ]
        record = {
            "round": k,
            "t_unix_s": time.time(),
            "available": m.available.tolist(),
            "capacity_share": m.capacity_share.tolist(),
            "report": {
                key: own[key]
                for key in ("arrivals", "writes", "requests", "violations", "wan_bytes")
            },
            "expected_redirect_violations": self.last_expected,
        }
        if self._last_scale < 1.0:
            record["report_scale"] = self._last_scale
        if self.problems:
            record["degraded"] = list(self.problems)
        for j, site in enumerate(self.sites):
            self.metrics.site_available.labels(site=site).set(float(m.available[j]))
            self.metrics.demand_rps.set(m.arrivals[j] / m.duration_s, site=site)
        self.metrics.round.set(k)
        if self._ready is not None:
            self._ready.record["skipped"] = SKIPPED
            self.metrics.solves_skipped.inc()
            self._log(self._ready.record)
        own_requests = np.asarray(own["requests"], dtype=float)
        self._ready = AgentRound(k, m, agreed, views, record, own_requests)
        self._round_done.set()

    # --- the runtime's contract ----------------------------------------------------------------
    def degraded_reasons(self) -> list[str]:
        """What is wrong as of the last round (empty: nothing): a local store that does not
        accept connections, a peer unavailable, exchange messages rejected, a registered
        client that reports nothing. The runtime turns ``/healthz`` 503 while any holds."""
        return list(self.problems)

    async def observe(self) -> AgentRound:
        """The newest round not yet observed (waiting for the next one if none is)."""
        self._flush_unlogged()
        while self._ready is None:
            self._round_done.clear()
            await self._round_done.wait()
        observed, self._ready = self._ready, None
        self._unlogged = observed
        return observed

    async def apply(self, plan: AgentPlan) -> None:
        """Send the clients this site's row (and the site's HAProxy, as weights); publish
        the plan's metrics; log the round."""
        row = np.asarray(plan.row, dtype=float)
        if row.shape != (self.n,):
            raise ConfigError("row", f"must give {self.n} fractions, not {row.shape}")
        message = json.dumps({"type": "plan", "fractions": row.tolist()}).encode() + b"\n"
        for writer in list(self.clients):
            writer.write(message)
        self._current_share = float(row[self.me]) / max(float(row.sum()), 1e-12)
        share = self._current_share
        self._share_min = share if self._share_min is None else min(self._share_min, share)
        for j, site in enumerate(self.sites):
            self.metrics.redirect_fraction.set(float(row[j]), dst=site)
        entry = {"fractions": row.tolist(), "enforced_unix_s": time.time()}
        if plan.views_disagree is not None:
            self.metrics.view_disagreements.inc()
            self.estimate_row = np.zeros(self.n)
            entry["views_disagree"] = {self.sites[j]: v for j, v in plan.views_disagree.items()}
        if plan.failover:
            entry["failover"] = "local stores down"
        if self.dataplane is not None:  # HAProxy keeps these weights if the agent stops
            entry["dataplane"] = await self.dataplane.apply(row)
        if plan.solved is not None:
            entry.update(self._publish(plan.solved))
        if self._unlogged is not None:
            self._unlogged.record.update(entry)
        self._flush_unlogged()

    def _publish(self, solved: _Solved) -> dict:
        """The solve's metrics; its part of the round record."""
        self.estimate_row = solved.estimate_row
        m = self.metrics
        m.solve_seconds.observe(solved.solve_s)
        m.plan_optimal.set(float(solved.optimal))
        for j, site in enumerate(self.sites):
            m.base_rtt_ms.set(float(solved.base_rtt_row_ms[j]), dst=site)
            m.expected_violation_fraction.set(float(solved.site_violation_fraction[j]), site=site)
            for i, src in enumerate(self.sites):
                m.plan_rate_rps.set(float(solved.rates_rps[i, j]), src=src, dst=site)
        return {
            "rates_rps": solved.rates_rps.tolist(),
            "demand_rps": solved.demand_rps.tolist(),
            "status": solved.status,
            "solve_ms": solved.solve_s * 1e3,
            "estimate_row": solved.estimate_row.tolist(),
            "base_rtt_ms": solved.base_rtt_row_ms.tolist(),
        }

    def _flush_unlogged(self) -> None:
        """Log the last observed round (with its plan, if one was applied)."""
        if self._unlogged is not None:
            self._log(self._unlogged.record)
            self._unlogged = None

    def _log(self, record: dict) -> None:
        if self._round_log is not None:
            self._round_log.write_line(json.dumps(record))
            self._round_log.flush()
        if self._probe_log is not None:
            self._probe_log.flush()


class SizeRotatedLog:
    """A line log appended to ``path`` that rolls over by size as ``logging``'s
    ``RotatingFileHandler`` does (``path.1`` the newest of ``backups`` old files; ``max_bytes``
    0: never). Lines are written as given, not formatted; a failed write raises."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self._file = RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )

    def write_line(self, text: str) -> None:
        """Append ``text`` and a newline, rolling over first if it would reach the limit."""
        if self._file.shouldRollover(logging.makeLogRecord({"msg": text})):
            self._file.doRollover()
        assert self._file.stream is not None  # opened at construction, reopened on rollover
        self._file.stream.write(text + "\n")

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def measurements_from_states(
    states: dict[int, dict], k: int, n: int, interval_s: float
) -> IntervalMeasurements:
    """The global measurements of round ``k`` from the latest state of each site (§6, §9).

    A site is available when its latest state is from round ``k`` or ``k - STALE_ROUNDS``
    and its backend is up; an unavailable site contributes nothing and is excluded. A site
    with some of its servers down plans on its reduced-capacity curve (``capacity_share``).
    """
    arrivals, writes = np.zeros(n), np.zeros(n)
    requests, violations = np.zeros((n, n)), np.zeros((n, n))
    min_response, probes = np.full((n, n), np.inf), np.full((n, n), np.inf)
    available, capacity_share = np.zeros(n, dtype=bool), np.ones(n)
    for i in range(n):
        state = states.get(i)
        if state is None or state["round"] < k - STALE_ROUNDS or not state["backend_up"]:
            continue
        available[i] = True
        arrivals[i], writes[i] = state["arrivals"], state["writes"]
        requests[i], violations[i] = state["requests"], state["violations"]
        min_response[i] = [np.inf if m is None else m for m in state["min_response_ms"]]
        probes[i] = [np.inf if m is None else m for m in state["probe_rtt_ms"]]
        capacity_share[i] = state.get("capacity_share", 1.0)
    return IntervalMeasurements(
        interval_s, arrivals, writes, requests, violations, min_response, probes, available,
        capacity_share,
    )  # fmt: skip


def views_agree(
    states: dict[int, dict], available: np.ndarray, own_view: list[bool] | None, me: int
) -> tuple[bool, dict[int, list[bool] | None]]:
    """The partition rule (§9 extended): an agent applies round k's plan only when the sites
    it finds available are exactly the view it had in round k - 1 and the view each of
    those sites sent in its round-k state (their round k - 1 view). An asymmetric partition
    (A hears B, B does not hear A) gives A and B different views; then no agent applies a
    plan and each keeps its requests local until every view agrees again, one round after
    the membership stopped changing. Returns (agreed, every view compared by site)."""
    now = [bool(a) for a in available]
    views = {me: own_view}
    for j, state in states.items():
        if j != me and now[j]:
            views[j] = state.get("view")
    return all(view == now for view in views.values()), views


def failover_row(
    me: int, available: np.ndarray, capacity_rps: np.ndarray, served_rps: np.ndarray
) -> np.ndarray:
    """This site's row when its own stores are down (§9 keeps a failed site out of the
    plan, but its clients live on): nothing local; each available other site in proportion
    to its room, its capacity (``capacity_rps``, already scaled by its servers up) less what
    it served in the last interval (``served_rps``); by capacity if none has room left (a
    slow answer beats a failed one). All-local only when no other site is available."""
    n = len(available)
    others = np.asarray(available, dtype=bool).copy()
    others[me] = False
    if not others.any():
        return np.eye(n)[me]
    capacity = np.where(others, np.asarray(capacity_rps, dtype=float), 0.0)
    room = np.maximum(capacity - np.asarray(served_rps, dtype=float), 0.0)
    weights = room if room.sum() > 0 else capacity
    if weights.sum() <= 0:  # no capacity known: evenly
        weights = others.astype(float)
    return weights / weights.sum()


def peer_problems(states: dict[int, dict], k: int, sites: Sequence[str], me: int) -> list[str]:
    """Why each other site is unavailable in round ``k`` (:func:`measurements_from_states`'s
    rule), one line each: nothing heard, nothing since an old round, or its stores down."""
    problems = []
    for j, site in enumerate(sites):
        if j == me:
            continue
        state = states.get(j)
        if state is None:
            problems.append(f"peer {site}: no state received (unreachable, or another key)")
        elif state["round"] < k - STALE_ROUNDS:
            problems.append(f"peer {site}: no state since round {state['round']}")
        elif not state["backend_up"]:
            problems.append(f"peer {site}: its stores are down")
    return problems


def checked_scale(
    arrivals: float, local_requests: float, executed: float | None, local_share: float | None
) -> float:
    """The factor (at most 1) a round's client counts are scaled by so that they claim no
    more than this site's stores executed (``executed`` commands; None: unknown, no check).
    A request served locally is at least one command: ``local_requests`` (answered ones)
    may not exceed ``executed``. With a row in force whose local share was at least
    ``local_share`` all interval (None: no row, or a store down), the clients sent that
    share of their arrivals locally: ``arrivals`` may not exceed ``executed / local_share``.
    Both with :data:`COUNT_SLACK_FRACTION` and :data:`COUNT_SLACK_REQUESTS` of slack.
    ``executed`` also counts other sites' propagated writes: a bound, not a measurement."""
    if executed is None:
        return 1.0

    def allowed(bound: float) -> float:
        return bound * (1.0 + COUNT_SLACK_FRACTION) + COUNT_SLACK_REQUESTS

    scale = 1.0
    if local_requests > allowed(executed):
        scale = min(scale, executed / local_requests)
    if local_share is not None and local_share >= MIN_CHECKED_SHARE:
        bound = executed / local_share
        if arrivals > allowed(bound):
            scale = min(scale, bound / arrivals)
    return max(scale, 0.0)


def clients_listen_warning(host: str, sealed: bool) -> str | None:
    """The warning an agent logs for its clients' port (None: loopback, nothing to say)."""
    if is_loopback(host):
        return None
    how = "sealed reports only (clients_secret_file)" if sealed else "UNSEALED reports"
    return f"clients_listen on {host} is reachable beyond loopback: it takes {how}"


def read_password_file(path: Path, field: str = "servers_password_file") -> str:
    """The stores' AUTH password: the first line of an owner-only file (ConfigError naming
    ``field`` otherwise)."""
    try:
        mode, text = path.stat().st_mode, path.read_text()
    except OSError as error:
        raise ConfigError(field, f"cannot read {path}: {error.strerror}") from None
    if mode & 0o077:
        raise ConfigError(field, f"{path} is readable by others; chmod 600")
    return text.strip()


def _info_field(info: object, name: str) -> float:
    """One numeric field of an ``INFO`` reply (ValueError if it is not there)."""
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return float(value)
    raise ValueError(f"INFO has no {name}")


def client_silent(joined_round: int, answered_round: int, k: int) -> bool:
    """Whether a client registered before round ``joined_round`` (its first collection) has
    answered none of the last :data:`SILENT_ROUNDS` collections up to round ``k`` (one late
    answer on a busy machine is not silence)."""
    last = max(answered_round, joined_round - 1)
    return k - last >= SILENT_ROUNDS


def _counts(rejected: dict[str, int]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_amount(value: object, optional: bool = False) -> bool:
    if value is None:
        return optional
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _valid_state(body: dict, n: int, me: int) -> bool:
    """Whether an (authenticated) state message has the fields :func:`measurements_from_states`
    reads, of the right types and lengths, from another site than this one."""
    site = body.get("site")
    if not _is_count(site) or site >= n or site == me:
        return False
    if not _is_count(body.get("round")) or not isinstance(body.get("backend_up"), bool):
        return False
    if not (_is_amount(body.get("arrivals")) and _is_amount(body.get("writes"))):
        return False
    for key, optional in (
        ("requests", False),
        ("violations", False),
        ("wan_bytes", False),
        ("min_response_ms", True),
        ("probe_rtt_ms", True),
    ):
        values = body.get(key)
        if not isinstance(values, list) or len(values) != n:
            return False
        if not all(_is_amount(v, optional) for v in values):
            return False
    share = body.get("capacity_share", 1.0)
    if not (_is_amount(share) and share <= 1.0):
        return False
    view = body.get("view")
    if view is not None and not (
        isinstance(view, list) and len(view) == n and all(isinstance(v, bool) for v in view)
    ):
        return False
    return True


def client_demand(
    answered: Sequence[dict], k: int, last: tuple[float, float] | None
) -> tuple[float, float]:
    """A client's (arrivals, writes) of round ``k`` for the demand (§6): those of its answer
    to round ``k``. A client that missed the collection's deadline is taken at its last
    round's: its late answer is counted with the next round's violations, but as demand it
    would make one interval look empty and the next twice as busy, and the plan after it
    redirect for a load that never came."""
    for report in answered:
        if report.get("round") == k:
            return (float(report["counts"].arrivals), float(report["counts"].writes))
    return last if last is not None else (0.0, 0.0)


async def _reports_until(replies: asyncio.Queue, k: int, timeout_s: float) -> list[dict]:
    """Every report a client has sent, up to its answer to round ``k`` (or the timeout);
    a client that closes sends a last report unasked, which is counted with the next round."""
    reports: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            report = await asyncio.wait_for(replies.get(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return reports
        reports.append(report)
        if report.get("round") == k:
            return reports


async def _accepts(host: str, port: int) -> bool:
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):  # not wait_for: 3.11's can leak it
            _, writer = await asyncio.open_connection(host, port)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


async def _sleep_until(t_unix_s: float) -> None:
    delay = t_unix_s - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
