"""One Kurma instance per site, as its own process (Kurma §6).

Every ``interval_s`` (rounds at ``epoch + k * interval_s``, one clock for all sites) an
instance:

1. at ``t_k - dt`` collects its clients' counts for the interval, checks its backend,
   and broadcasts its state to the other instances, through the WAN;
2. at ``t_k`` builds the global measurements from the states it holds for round ``k``
   (or ``k - 1``: a state that missed the point by less than an interval still counts),
   marks the sites it has not heard from for two rounds, or whose backend is down, as
   unavailable (they neither send nor receive, §9), steps the :class:`KurmaController`
   and sends its clients their row of the plan.

The controller lives in a worker process of its own, one solve at a time (a round that comes
while one runs is skipped and logged), so the exchange, the probes, the clients and /metrics
are served during a solve. (A worker thread would not do: the solver's compiled kernels hold
the interpreter lock for up to seconds.)
Instances authenticate every exchange message with a shared secret (``geoslo.live._exchange``)
and drop, and count, whatever fails a check. ``dt`` is the largest one-way WAN delay plus a
margin (``dissemination_offset_s``). It probes every other instance 3 times every 200 ms
(§6) to track base RTTs where no requests flow, and logs every probe (the profiler estimates
residual WAN latency from them). With no objective it only measures: the baselines' runs are
measured the same way. Its state, plan, solve times and counters are served in Prometheus
format (prometheus-client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import pickle
import signal
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Summary

from geoslo.control.kurma import (
    IntervalMeasurements,
    KurmaConfig,
    KurmaController,
    KurmaModel,
    KurmaObservation,
    build_problem,
    decide,
    dissemination_offset_s,
)
from geoslo.errors import TestbedError
from geoslo.live._exchange import (
    MAX_MESSAGE_BYTES,
    REJECT_REASONS,
    Envelope,
    Opener,
    Rejected,
    create_secret_file,
    read_secret_file,
    seal,
)
from geoslo.live._metrics import serve_metrics
from geoslo.live._processes import ManagedProcess, python_module_command
from geoslo.live.kurma._testbed import Testbed

__all__ = [
    "InstanceConfig",
    "measurements_from_states",
    "run_instance",
    "start_instance",
    "views_agree",
]

PROBES_PER_SITE = 3  # §6
PROBE_PERIOD_S = 0.2  # §6
COLLECT_TIMEOUT_S = 0.015  # clients are local: their reports come back within this
HEALTH_TIMEOUT_S = 0.2
STALE_ROUNDS = 1  # a state from the previous round still counts (late by < one interval)
SECRET_FILE = "kurma-exchange.key"  # in the testbed's state folder unless the config names one


@dataclass(frozen=True)
class InstanceConfig:
    state_dir: str
    site: str
    run_dir: str  # where the instance writes its round log and probe log
    objective: str | None = None  # "perf", "cost", or None to only measure
    model_path: str | None = None  # pickled KurmaModel (needed with an objective)
    slo_ms: float = 30.0
    interval_s: float = 2.5  # §6
    slo_violation_target: float = 0.05
    quantum_fraction: float = 0.01  # 1% of capacity, §5.2 and §7.1
    solve_time_limit_s: float | None = None  # None: half the interval
    exchange_secret_file: str | None = None  # None: <state_dir>/kurma-exchange.key
    exchange_host: str | None = None  # where it accepts its peers (None: the site's address)
    metrics_host: str | None = None  # where it serves /metrics (None: the site's address)


def start_instance(config: InstanceConfig) -> ManagedProcess:
    """Start an instance process; returns once it accepts its local clients.

    Without ``exchange_secret_file`` every instance of the testbed shares a secret kept in
    its state folder (created, readable by its owner only, by the first one started)."""
    testbed = Testbed.load(Path(config.state_dir))
    if testbed is None:
        raise TestbedError(f"no testbed recorded in {config.state_dir}")
    if config.exchange_secret_file is None:
        secret = create_secret_file(Path(config.state_dir) / SECRET_FILE)
        config = replace(config, exchange_secret_file=str(secret))
    run_dir = Path(config.run_dir)
    name = f"kurma-{config.site.lower()}"
    path = run_dir / f"{name}.json"
    path.write_text(json.dumps(asdict(config)))
    command = python_module_command("geoslo.live", "kurma-instance", str(path))
    port, host = testbed.sites[config.site].agent_local_port, testbed.host(config.site)
    command = testbed.command_at(config.site, command)
    return ManagedProcess(name, command, run_dir / f"{name}.log", port, host=host).start()


def run_instance(config_path: Path) -> None:
    """``python -m geoslo.live kurma-instance CONFIG``: run until SIGTERM."""
    config = InstanceConfig(**json.loads(Path(config_path).read_text()))
    asyncio.run(_Instance(config).run())


class _Metrics:
    """The instance's Prometheus metrics, in a registry of its own (docs/live.md lists them)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"geoslo_kurma_{name}", doc, labels, registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"geoslo_kurma_{name}", doc, labels, registry=r)

        self.round = gauge("round", "Index of the last synchronised round")
        self.site_available = gauge(
            "site_available", "1 if the site took part in the last round", ("site",)
        )
        self.demand_rps = gauge(
            "demand_rps", "Client requests arriving at each site in the last interval", ("site",)
        )
        self.base_rtt_ms = gauge(
            "base_rtt_ms", "Estimated base RTT from this site (whole ms)", ("dst",)
        )
        self.probe_rtt_ms = gauge("probe_rtt_ms", "Last WAN probe RTT from this site", ("dst",))
        self.redirect_fraction = gauge(
            "redirect_fraction", "Share of this site's requests sent to each site", ("dst",)
        )
        self.plan_rate_rps = gauge(
            "plan_rate_rps", "The global plan: rate from src served at dst", ("src", "dst")
        )
        self.expected_violation_fraction = gauge(
            "expected_violation_fraction", "The plan's expected SLO misses per site", ("site",)
        )
        self.plan_optimal = gauge("plan_optimal", "1 if the last plan is a proven optimum")
        self.solve_seconds = Summary(
            "geoslo_kurma_solve_seconds", "Time to step the controller and solve", registry=r
        )
        self.solves_skipped = counter(
            "solves_skipped", "Rounds not solved because the previous solve still ran"
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
    """What one step on the worker thread hands back to the event loop."""

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
    problem = build_problem(observation, controller.model, controller.config)
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
    """The instance's :class:`KurmaController` in a spawned process: the event loop's process
    never runs a solve. :meth:`step` blocks (call it from a thread); one call at a time."""

    def __init__(self, model: KurmaModel, config: KurmaConfig) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_solver_main, args=(child, model, config), name="kurma-solver", daemon=True
        )
        self._process.start()
        child.close()

    def wait_ready(self) -> None:
        """Block until the worker has loaded the solver (raises ``EOFError`` if it died)."""
        self._conn.recv()

    def step(self, m: IntervalMeasurements, me: int) -> _Solved:
        """The worker's step; raises ``TestbedError`` if it failed, ``EOFError`` (or
        ``OSError``) if the worker died."""
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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the instance decides when it ends
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
        except Exception as error:  # reported to the instance, which keeps the plan in force
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


class _Instance:
    def __init__(self, config: InstanceConfig) -> None:
        testbed = Testbed.load(Path(config.state_dir))
        if testbed is None:
            raise TestbedError(f"no testbed recorded in {config.state_dir}")
        self.config = config
        self.testbed = testbed
        self.sites = testbed.spec.sites
        self.me = self.sites.index(config.site)
        self.n = len(self.sites)
        self.offset_s = dissemination_offset_s(np.array([testbed.max_one_way_ms()]))
        secret_path = config.exchange_secret_file or str(Path(config.state_dir) / SECRET_FILE)
        self.secret = read_secret_file(Path(secret_path))
        self.opener = Opener(self.secret, config.site)
        self.kurma = self._kurma()  # (model, config), or None to only measure
        self.solver: _SolverProcess | None = None  # started by run()
        self.solving: asyncio.Task | None = None
        self.waiting_records: list[dict] = []  # rounds skipped during a solve, logged after it
        self.clients: dict[asyncio.StreamWriter, asyncio.Queue] = {}
        self.leftover_reports: list[dict] = []
        self.peers: dict[int, asyncio.StreamWriter] = {}
        self.states: dict[int, dict] = {}  # site -> its latest state message
        self.probe_sent: dict[tuple[int, int], float] = {}
        self.probe_rtts: list[tuple[float, int, float]] = []  # (unix s, site, rtt ms)
        self.view: list[bool] | None = None  # the sites available in the last round
        self.estimate_row = np.zeros(self.n)  # Omega_ij at the planned loads, own row
        self.last_expected = 0.0  # Kurma's expected violations of the last interval's redirects
        run_dir = Path(config.run_dir)
        stem = f"kurma-{config.site.lower()}"
        self.round_log = open(run_dir / f"{stem}-rounds.jsonl", "a")  # noqa: SIM115
        self.probe_log = open(run_dir / f"{stem}-probes.csv", "a")  # noqa: SIM115
        self.metrics = _Metrics()
        self.stopping = asyncio.Event()

    def _kurma(self) -> tuple[KurmaModel, KurmaConfig] | None:
        c = self.config
        if c.objective is None:
            return None
        if c.model_path is None:
            raise TestbedError("an instance with an objective needs a model (model_path)")
        model = pickle.loads(Path(c.model_path).read_bytes())
        if tuple(model.sites) != tuple(self.sites):
            raise TestbedError(f"the model's sites {model.sites} differ from the testbed's")
        config = KurmaConfig(
            objective=c.objective,
            interval_s=c.interval_s,
            slo_ms=c.slo_ms,
            slo_violation_target=c.slo_violation_target,
            quantum_fraction=c.quantum_fraction,
            solve_time_limit_s=c.solve_time_limit_s or c.interval_s / 2,
        )
        return model, config

    # --- run ---------------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stopping.set)
        ends = self.testbed.sites[self.config.site]
        metrics_host = self.config.metrics_host or ends.host
        metrics = serve_metrics(self.metrics.registry, ends.metrics_port, metrics_host)
        if self.kurma is not None:
            self.solver = _SolverProcess(*self.kurma)
            await asyncio.to_thread(self.solver.wait_ready)  # the first round is solved in time
        servers = [
            await asyncio.start_server(
                self._on_peer,
                self.config.exchange_host or ends.host,
                ends.agent_port,
                limit=MAX_MESSAGE_BYTES,
            ),  # the clients' port last: start_instance waits for it, then everything answers
            await asyncio.start_server(self._on_client, ends.host, ends.agent_local_port),
        ]
        tasks = [loop.create_task(self._link(j)) for j in range(self.n) if j != self.me]
        tasks += [loop.create_task(self._probe_loop()), loop.create_task(self._round_loop())]
        await self.stopping.wait()
        for task in tasks + ([self.solving] if self.solving else []):
            task.cancel()
        for server in servers:
            server.close()
        metrics.close()
        if self.solver is not None:
            self.solver.close()  # a solve still running ends with its process
        self.round_log.close()
        self.probe_log.close()

    # --- peers -------------------------------------------------------------------------------
    def _reject(self, reason: str) -> None:
        self.metrics.exchange_rejected.labels(reason=reason).inc()

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
        host, port = self.testbed.agent_address(self.config.site, self.sites[j])
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
            if envelope.src != self.config.site or not _is_count(envelope.body.get("id")):
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
        self.probe_log.write(f"{now:.4f},{self.sites[j]},{rtt_ms:.4f}\n")
        self.metrics.probe_rtt_ms.labels(dst=self.sites[j]).set(rtt_ms)

    def _seal(self, j: int, body: dict) -> bytes:
        return seal(self.secret, self.config.site, self.sites[j], body)

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
        replies: asyncio.Queue = asyncio.Queue()
        self.clients[writer] = replies
        with contextlib.suppress(OSError, ValueError, asyncio.CancelledError):
            while line := await reader.readline():
                await replies.put(json.loads(line))
        self.clients.pop(writer, None)
        while not replies.empty():  # a closing client's last report: counted next round
            self.leftover_reports.append(replies.get_nowait())
        writer.close()

    async def _collect(self, k: int) -> dict:
        """Ask every local client for its counts of the interval; sum what comes back."""
        total = {
            "arrivals": 0,
            "writes": 0,
            "requests": np.zeros(self.n),
            "violations": np.zeros(self.n),
            "errors": np.zeros(self.n),
            "wan_bytes": np.zeros(self.n),
            "min_response_ms": np.full(self.n, np.inf),
        }
        message = json.dumps({"type": "collect", "round": k}).encode() + b"\n"
        for writer in list(self.clients):
            writer.write(message)
        reports, self.leftover_reports = self.leftover_reports, []
        for replies in list(self.clients.values()):
            reports += await _reports_until(replies, k, COLLECT_TIMEOUT_S)
        for report in reports:
            for key in ("arrivals", "writes"):
                total[key] += report[key]
            for key in ("requests", "violations", "errors", "wan_bytes"):
                total[key] = total[key] + np.asarray(report[key], float)
            mins = np.array([np.inf if m is None else m for m in report["min_response_ms"]])
            total["min_response_ms"] = np.minimum(total["min_response_ms"], mins)
        return total

    async def _backend_up(self) -> bool:
        """Whether any local server accepts a connection. A liveness check, not a PING: an
        overloaded server answers a PING only after its queue, which is not a failure."""
        ends = self.testbed.sites[self.config.site]
        for port in ends.servers:
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(ends.host, port), HEALTH_TIMEOUT_S
                )
            except (TimeoutError, OSError):
                continue
            writer.close()
            return True
        return False

    # --- rounds ------------------------------------------------------------------------------
    async def _round_loop(self) -> None:
        interval, epoch = self.config.interval_s, self.testbed.epoch_unix_s
        k = int((time.time() + self.offset_s - epoch) // interval) + 1
        while True:
            t_k = epoch + k * interval
            await _sleep_until(t_k - self.offset_s)
            own = await self._disseminate(k)
            await _sleep_until(t_k)
            self._decide(k, own)
            k = max(k + 1, int((time.time() + self.offset_s - epoch) // interval) + 1)

    async def _disseminate(self, k: int) -> dict:
        report, backend_up = await asyncio.gather(self._collect(k), self._backend_up())
        state = {
            "type": "state",
            "site": self.me,
            "round": k,
            "backend_up": backend_up,
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

    def _decide(self, k: int, own: dict) -> None:
        """Round ``k``'s measurements; with an objective, a solve on the worker thread unless
        the previous one still runs (then this round is skipped: one solve at a time)."""
        m = measurements_from_states(self.states, k, self.n, self.config.interval_s)
        agreed, views = views_agree(self.states, m.available, self.view, self.me)
        self.view = m.available.tolist()
        record = {
            "round": k,
            "t_unix_s": time.time(),
            "available": m.available.tolist(),
            "report": {
                key: own[key]
                for key in ("arrivals", "writes", "requests", "violations", "wan_bytes")
            },
            "expected_redirect_violations": self.last_expected,
        }
        for j, site in enumerate(self.sites):
            self.metrics.site_available.labels(site=site).set(float(m.available[j]))
            self.metrics.demand_rps.labels(site=site).set(m.arrivals[j] / m.duration_s)
        self.metrics.round.set(k)
        if self.solver is None:
            self._log(record)
        elif not agreed:
            record.update(self._hold_local(views))
            self._log(record)
        elif self.solving is not None and not self.solving.done():
            record["skipped"] = "the previous round's solve still runs"
            self.metrics.solves_skipped.inc()
            self.waiting_records.append(record)
        else:
            self.solving = asyncio.get_running_loop().create_task(self._solve(m, record))

    async def _solve(self, m: IntervalMeasurements, record: dict) -> None:
        """One solve, waited for on a thread; a failure keeps the plan in force (issue 16),
        and a dead solver process is replaced (its controller's history is lost)."""
        try:
            solved = await asyncio.to_thread(self.solver.step, m, self.me)
        except (EOFError, OSError) as error:
            self.metrics.solve_errors.inc()
            record["solve_error"] = f"the solver process ended ({type(error).__name__}); restarted"
            self.solver.close()
            self.solver = _SolverProcess(*self.kurma)
        except TestbedError as error:
            self.metrics.solve_errors.inc()
            record["solve_error"] = str(error)
        else:
            record.update(self._enforce(solved))
        self._log(record)
        for waiting in self.waiting_records:
            self._log(waiting)
        self.waiting_records.clear()

    def _hold_local(self, views: dict[int, list[bool] | None]) -> dict:
        """The views disagree: every request stays local this round (no agent applies a
        plan computed from a view another agent does not share; docs/live.md, §9)."""
        self.metrics.view_disagreements.inc()
        self.estimate_row = np.zeros(self.n)
        row = np.eye(self.n)[self.me]
        message = json.dumps({"type": "plan", "fractions": row.tolist()}).encode() + b"\n"
        for writer in list(self.clients):
            writer.write(message)
        for j, site in enumerate(self.sites):
            self.metrics.redirect_fraction.labels(dst=site).set(float(row[j]))
        return {
            "fractions": row.tolist(),
            "views_disagree": {self.sites[j]: view for j, view in views.items()},
            "enforced_unix_s": time.time(),
        }

    def _enforce(self, solved: _Solved) -> dict:
        """Send the clients this site's row; publish the plan's metrics."""
        self.estimate_row = solved.estimate_row
        row = solved.fractions_row
        message = json.dumps({"type": "plan", "fractions": row.tolist()}).encode() + b"\n"
        for writer in list(self.clients):
            writer.write(message)
        m = self.metrics
        m.solve_seconds.observe(solved.solve_s)
        m.plan_optimal.set(float(solved.optimal))
        for j, site in enumerate(self.sites):
            m.redirect_fraction.labels(dst=site).set(float(row[j]))
            m.base_rtt_ms.labels(dst=site).set(float(solved.base_rtt_row_ms[j]))
            m.expected_violation_fraction.labels(site=site).set(
                float(solved.site_violation_fraction[j])
            )
            for i, src in enumerate(self.sites):
                m.plan_rate_rps.labels(src=src, dst=site).set(float(solved.rates_rps[i, j]))
        return {
            "fractions": row.tolist(),
            "rates_rps": solved.rates_rps.tolist(),
            "demand_rps": solved.demand_rps.tolist(),
            "status": solved.status,
            "solve_ms": solved.solve_s * 1e3,
            "enforced_unix_s": time.time(),
            "estimate_row": solved.estimate_row.tolist(),
            "base_rtt_ms": solved.base_rtt_row_ms.tolist(),
        }

    def _log(self, record: dict) -> None:
        self.round_log.write(json.dumps(record) + "\n")
        self.round_log.flush()
        self.probe_log.flush()


def measurements_from_states(
    states: dict[int, dict], k: int, n: int, interval_s: float
) -> IntervalMeasurements:
    """The global measurements of round ``k`` from the latest state of each site (§6, §9).

    A site is available when its latest state is from round ``k`` or ``k - STALE_ROUNDS``
    and its backend is up; an unavailable site contributes nothing and is excluded.
    """
    arrivals, writes = np.zeros(n), np.zeros(n)
    requests, violations = np.zeros((n, n)), np.zeros((n, n))
    min_response, probes = np.full((n, n), np.inf), np.full((n, n), np.inf)
    available = np.zeros(n, dtype=bool)
    for i in range(n):
        state = states.get(i)
        if state is None or state["round"] < k - STALE_ROUNDS or not state["backend_up"]:
            continue
        available[i] = True
        arrivals[i], writes[i] = state["arrivals"], state["writes"]
        requests[i], violations[i] = state["requests"], state["violations"]
        min_response[i] = [np.inf if m is None else m for m in state["min_response_ms"]]
        probes[i] = [np.inf if m is None else m for m in state["probe_rtt_ms"]]
    return IntervalMeasurements(
        interval_s, arrivals, writes, requests, violations, min_response, probes, available
    )


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
    view = body.get("view")
    if view is not None and not (
        isinstance(view, list) and len(view) == n and all(isinstance(v, bool) for v in view)
    ):
        return False
    return True


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


async def _sleep_until(t_unix_s: float) -> None:
    delay = t_unix_s - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
