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

``dt`` is the largest one-way WAN delay plus a margin (``dissemination_offset_s``).
It probes every other instance 3 times every 200 ms (§6) to track base RTTs where no
requests flow, and logs every probe (the profiler estimates residual WAN latency from
them). With no objective it only measures: the baselines' runs are measured the same way.
Its state, plan, solve times and counters are served in Prometheus format.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from geoslo.control.kurma import (
    IntervalMeasurements,
    KurmaConfig,
    KurmaController,
    build_problem,
    dissemination_offset_s,
)
from geoslo.errors import TestbedError
from geoslo.live._metrics import MetricsRegistry, serve_metrics
from geoslo.live._processes import ManagedProcess, python_module_command
from geoslo.live.kurma._testbed import Testbed

__all__ = ["InstanceConfig", "measurements_from_states", "run_instance", "start_instance"]

PROBES_PER_SITE = 3  # §6
PROBE_PERIOD_S = 0.2  # §6
COLLECT_TIMEOUT_S = 0.015  # clients are local: their reports come back within this
HEALTH_TIMEOUT_S = 0.2
STALE_ROUNDS = 1  # a state from the previous round still counts (late by < one interval)


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


def start_instance(config: InstanceConfig) -> ManagedProcess:
    """Start an instance process; returns once it accepts its local clients."""
    testbed = Testbed.load(Path(config.state_dir))
    if testbed is None:
        raise TestbedError(f"no testbed recorded in {config.state_dir}")
    run_dir = Path(config.run_dir)
    name = f"kurma-{config.site.lower()}"
    path = run_dir / f"{name}.json"
    path.write_text(json.dumps(asdict(config)))
    command = python_module_command("geoslo.live", "kurma-instance", str(path))
    port = testbed.sites[config.site].agent_local_port
    return ManagedProcess(name, command, run_dir / f"{name}.log", port).start()


def run_instance(config_path: Path) -> None:
    """``python -m geoslo.live kurma-instance CONFIG``: run until SIGTERM."""
    config = InstanceConfig(**json.loads(Path(config_path).read_text()))
    asyncio.run(_Instance(config).run())


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
        self.controller = self._controller()
        self.clients: dict[asyncio.StreamWriter, asyncio.Queue] = {}
        self.leftover_reports: list[dict] = []
        self.peers: dict[int, asyncio.StreamWriter] = {}
        self.states: dict[int, dict] = {}  # site -> its latest state message
        self.probe_sent: dict[tuple[int, int], float] = {}
        self.probe_rtts: list[tuple[float, int, float]] = []  # (unix s, site, rtt ms)
        self.estimate_row = np.zeros(self.n)  # Omega_ij at the planned loads, own row
        self.last_expected = 0.0  # Kurma's expected violations of the last interval's redirects
        run_dir = Path(config.run_dir)
        stem = f"kurma-{config.site.lower()}"
        self.round_log = open(run_dir / f"{stem}-rounds.jsonl", "a")  # noqa: SIM115
        self.probe_log = open(run_dir / f"{stem}-probes.csv", "a")  # noqa: SIM115
        self.metrics = _declare_metrics()
        self.stopping = asyncio.Event()

    def _controller(self) -> KurmaController | None:
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
            solve_time_limit_s=c.interval_s / 2,
        )
        return KurmaController(model, config)

    # --- run ---------------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stopping.set)
        ends = self.testbed.sites[self.config.site]
        servers = [
            await asyncio.start_server(self._on_peer, "127.0.0.1", ends.agent_port),
            await asyncio.start_server(self._on_client, "127.0.0.1", ends.agent_local_port),
            await serve_metrics(self.metrics, ends.metrics_port),
        ]
        tasks = [loop.create_task(self._link(j)) for j in range(self.n) if j != self.me]
        tasks += [loop.create_task(self._probe_loop()), loop.create_task(self._round_loop())]
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        for server in servers:
            server.close()
        self.round_log.close()
        self.probe_log.close()

    # --- peers -------------------------------------------------------------------------------
    async def _on_peer(self, reader, writer) -> None:
        """Messages from other instances: their state, or a probe to echo."""
        with contextlib.suppress(OSError, ValueError, asyncio.CancelledError):
            while line := await reader.readline():
                message = json.loads(line)
                if message["type"] == "probe":
                    writer.write(line)
                elif message["type"] == "state":
                    self.states[int(message["site"])] = message
                    self.metrics.inc("states_received", site=self.sites[int(message["site"])])
        writer.close()

    async def _link(self, j: int) -> None:
        """Keep a connection to instance ``j`` through the WAN; read its probe echoes."""
        port = self.testbed.agent_port(self.config.site, self.sites[j])
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            self.peers[j] = writer
            with contextlib.suppress(OSError, ValueError):
                while line := await reader.readline():
                    self._on_probe_echo(j, json.loads(line))
            self.peers.pop(j, None)
            writer.close()
            await asyncio.sleep(0.5)

    def _on_probe_echo(self, j: int, message: dict) -> None:
        sent = self.probe_sent.pop((j, int(message["id"])), None)
        if sent is None:
            return
        rtt_ms = (time.monotonic() - sent) * 1e3
        now = time.time()
        self.probe_rtts.append((now, j, rtt_ms))
        self.probe_log.write(f"{now:.4f},{self.sites[j]},{rtt_ms:.4f}\n")
        self.metrics.set("probe_rtt_ms", rtt_ms, dst=self.sites[j])

    async def _probe_loop(self) -> None:
        probe_id = 0
        while True:
            for _ in range(PROBES_PER_SITE):
                for j, writer in list(self.peers.items()):
                    probe_id += 1
                    self.probe_sent[(j, probe_id)] = time.monotonic()
                    writer.write(json.dumps({"type": "probe", "id": probe_id}).encode() + b"\n")
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
        for port in self.testbed.sites[self.config.site].servers:
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port), HEALTH_TIMEOUT_S
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
        }
        line = json.dumps(state).encode() + b"\n"
        for writer in list(self.peers.values()):
            writer.write(line)
        self.states[self.me] = state
        self._count(report)
        return state

    def _count(self, report: dict) -> None:
        """Counters of the interval just measured, and Kurma's estimate for its redirects."""
        for j, site in enumerate(self.sites):
            self.metrics.inc("requests", report["requests"][j], dst=site)
            self.metrics.inc("violations", report["violations"][j], dst=site)
            self.metrics.inc("errors", report["errors"][j], dst=site)
            self.metrics.inc("wan_bytes", report["wan_bytes"][j], dst=site)
        remote = np.arange(self.n) != self.me
        requests, violations = report["requests"][remote], report["violations"][remote]
        self.metrics.inc("redirected_requests", float(requests.sum()))
        self.metrics.inc("redirected_violations", float(violations.sum()))
        expected = float((requests * self.estimate_row[remote]).sum())
        self.metrics.inc("redirected_expected_violations", expected)
        self.last_expected = expected

    def _decide(self, k: int, own: dict) -> None:
        m = measurements_from_states(self.states, k, self.n, self.config.interval_s)
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
            self.metrics.set("site_available", float(m.available[j]), site=site)
            self.metrics.set("demand_rps", m.arrivals[j] / m.duration_s, site=site)
        self.metrics.set("round", k)
        if self.controller is not None:
            record.update(self._solve(m))
        self.round_log.write(json.dumps(record) + "\n")
        self.round_log.flush()
        self.probe_log.flush()

    def _solve(self, m: IntervalMeasurements) -> dict:
        started = time.perf_counter()
        fractions = self.controller.step(m)
        solve_s = time.perf_counter() - started
        plan, observation = self.controller.plan, self.controller.observation
        problem = build_problem(observation, self.controller.model, self.controller.config)
        load = plan.rates_rps.sum(axis=0)
        self.estimate_row = np.array([problem.omega(self.me, j, load[j]) for j in range(self.n)])
        row = fractions[self.me]
        message = json.dumps({"type": "plan", "fractions": row.tolist()}).encode() + b"\n"
        for writer in list(self.clients):
            writer.write(message)
        self.metrics.observe("solve_seconds", solve_s)
        self.metrics.set("plan_optimal", float(plan.optimal))
        for j, site in enumerate(self.sites):
            self.metrics.set("redirect_fraction", float(row[j]), dst=site)
            self.metrics.set(
                "base_rtt_ms", float(self.controller.base_rtt_ms[self.me, j]), dst=site
            )
            self.metrics.set(
                "expected_violation_fraction", float(plan.site_violation_fraction[j]), site=site
            )
            for i, src in enumerate(self.sites):
                self.metrics.set("plan_rate_rps", float(plan.rates_rps[i, j]), src=src, dst=site)
        return {
            "fractions": row.tolist(),
            "rates_rps": plan.rates_rps.tolist(),
            "demand_rps": observation.demand_rps.tolist(),
            "status": plan.status,
            "solve_ms": solve_s * 1e3,
            "estimate_row": self.estimate_row.tolist(),
            "base_rtt_ms": self.controller.base_rtt_ms[self.me].tolist(),
        }


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


def _declare_metrics() -> MetricsRegistry:
    r = MetricsRegistry("geoslo_kurma_")
    r.gauge("round", "Index of the last synchronised round")
    r.gauge("site_available", "1 if the site took part in the last round", ("site",))
    r.gauge("demand_rps", "Client requests arriving at each site in the last interval", ("site",))
    r.gauge("base_rtt_ms", "Estimated base RTT from this site (whole ms)", ("dst",))
    r.gauge("probe_rtt_ms", "Last WAN probe RTT from this site", ("dst",))
    r.gauge("redirect_fraction", "Share of this site's requests sent to each site", ("dst",))
    r.gauge("plan_rate_rps", "The global plan: rate from src served at dst", ("src", "dst"))
    r.gauge("expected_violation_fraction", "The plan's expected SLO misses per site", ("site",))
    r.gauge("plan_optimal", "1 if the last plan is a proven optimum")
    r.summary("solve_seconds", "Time to step the controller and solve")
    r.counter("requests", "Client requests of this site, by serving site", ("dst",))
    r.counter("violations", "Of which missed the SLO (failures included)", ("dst",))
    r.counter("errors", "Of which failed or timed out", ("dst",))
    r.counter("wan_bytes", "Bytes this site's clients sent and received over the WAN", ("dst",))
    r.counter("redirected_requests", "Requests this site redirected")
    r.counter("redirected_violations", "Of which missed the SLO")
    r.counter("redirected_expected_violations", "Kurma's estimate of that number")
    r.counter("states_received", "State messages received from each site", ("site",))
    return r


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
