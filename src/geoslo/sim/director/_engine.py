"""A time-stepped simulation of the binned key-value store under a SCADS Director loop
(FAST 2011, §5-§6; the "framework simulator" the paper leaves to future work, §8).

Every second: the per-bin get and put rates of the workload, each server's load from the
bins it holds (a replica carries ``get * fanout / replicas`` gets and every put), the
servers' tails at the threshold (``_truth``), and each get's chance of being late: the
fastest of ``read_fanout`` replicas counts. Every period the loop receives the per-bin
histogram *sampled* as the live cluster does (2% of gets, 40% of puts, §5.5), and every
second it may start or cancel actions, which then run here: servers boot for
``boot_delay_s``; copies run bin after bin at the actual copy rate, loading the target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geoslo.control.director import Histogram, Observation, RunningAction, ServerState, Step
from geoslo.sim.director._truth import ServerPerformance

__all__ = ["Workload", "SimSettings", "SimResult", "StoreSimulation", "simulate"]

_P99_GRID_MS = np.geomspace(1.0, 2000.0, 160)


@dataclass(frozen=True)
class Workload:
    """Per second: the aggregate rate over all keys (``read_fraction`` of it gets) and an
    extra rate of gets on one hot bin (a flash crowd reads)."""

    total_rps: np.ndarray
    popularity: np.ndarray  # per bin, sums to 1
    read_fraction: float = 0.95
    hot_rps: np.ndarray | None = None
    hot_bin: int = 0

    def rates(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        rate = self.total_rps[t] * self.popularity
        get, put = rate * self.read_fraction, rate * (1.0 - self.read_fraction)
        if self.hot_rps is not None:
            get[self.hot_bin] += self.hot_rps[t]
        return get, put


@dataclass(frozen=True)
class SimSettings:
    threshold_ms: float = 100.0  # §6.1: 100 ms for gets
    period_s: int = 20  # the controller's period and the histogram's (§5.5)
    boot_delay_s: int = 120
    get_sample_fraction: float = 0.02  # §5.5
    put_sample_fraction: float = 0.4
    read_fanout: int = 2
    performance: ServerPerformance = field(default_factory=ServerPerformance)
    charge_interval_s: int = 3600  # for counting server units
    seed: int = 0


@dataclass
class SimResult:
    """Per second (``late_fraction``, ``gets``, ``servers_*``) and per period (``p99_ms``)."""

    late_fraction: np.ndarray
    gets: np.ndarray
    servers_leased: np.ndarray  # ready or booting
    servers_serving: np.ndarray  # holding data
    p99_ms: np.ndarray  # per period
    leases: list[tuple[str, float, float]]  # (server, from s, to s)
    serving_units: int  # (server, paid charge interval) pairs in which it held data
    replicas_of_hot_bin: np.ndarray
    actions: dict[str, int]
    copied_bytes: float
    cancelled: int


@dataclass
class _Copy:
    running: RunningAction
    remaining_bytes: list[float]


class _Cluster:
    """The environment side of the loop: servers, leases, running actions."""

    def __init__(
        self,
        layout: list[ServerState],
        bin_bytes: np.ndarray,
        settings: SimSettings,
        copy_rate_bytes_per_s: float,
    ):
        self.settings = settings
        self.copy_rate_bytes_per_s = copy_rate_bytes_per_s
        self.bin_bytes = bin_bytes
        self.bins: dict[str, set[int]] = {s.name: set(s.bins) for s in layout}
        self.ready_at: dict[str, float] = {s.name: 0.0 for s in layout}
        self.leased_from: dict[str, float] = {s.name: 0.0 for s in layout}
        self.leases: list[tuple[str, float, float]] = []
        self.copies: list[_Copy] = []
        self.booting: dict[str, RunningAction] = {}
        self.counts = {kind: 0 for kind in ("add-server", "copy", "move", "delete-replica")}
        self.counts["remove-server"] = 0
        self.copied_bytes = 0.0
        self.cancelled = 0
        self.changed = True

    def states(self, now_s: float) -> tuple[ServerState, ...]:
        return tuple(
            ServerState(name, tuple(sorted(bins)), self.ready_at[name] <= now_s)
            for name, bins in self.bins.items()
        )

    def running(self) -> tuple[RunningAction, ...]:
        return tuple(c.running for c in self.copies) + tuple(self.booting.values())

    def apply(self, step: Step, now_s: float) -> None:
        for action in step.cancel:
            self.copies = [c for c in self.copies if c.running.action != action]
            self.cancelled += 1
        for item in step.start:
            self._start(item, now_s)

    def _start(self, item: RunningAction, now_s: float) -> None:
        action = item.action
        self.counts[action.kind] += 1
        if action.kind == "add-server":
            name = action.server or ""
            self.bins[name] = set()
            self.ready_at[name] = now_s + self.settings.boot_delay_s
            self.leased_from[name] = now_s
            self.booting[name] = item
        elif action.kind == "remove-server":
            name = action.server or ""
            self.leases.append((name, self.leased_from.pop(name), now_s))
            del self.bins[name], self.ready_at[name]
        elif action.kind == "delete-replica":
            self.bins[action.server or ""].difference_update(action.bins)
        else:
            sizes = [float(self.bin_bytes[b]) for b in action.bins]
            self.copies.append(_Copy(item, sizes))
        self.changed = True

    def advance(self, now_s: float, copy_rate_bytes_per_s: np.ndarray) -> None:
        """One second of every running copy, at its actual rate; boots that end."""
        for name in [n for n, item in self.booting.items() if self.ready_at[n] <= now_s]:
            del self.booting[name]
        for copy, rate in zip(list(self.copies), copy_rate_bytes_per_s, strict=True):
            budget = float(rate)
            action = copy.running.action
            while budget > 0 and copy.remaining_bytes:
                done = min(budget, copy.remaining_bytes[0])
                copy.remaining_bytes[0] -= done
                budget -= done
                self.copied_bytes += done
                if copy.remaining_bytes[0] <= 0:
                    copy.remaining_bytes.pop(0)
            if not copy.remaining_bytes:
                self.bins[action.target or ""].update(action.bins)
                if action.kind == "move":
                    self.bins[action.source or ""].difference_update(action.bins)
                self.copies.remove(copy)
                self.changed = True

    def close(self, end_s: float) -> None:
        for name, start in self.leased_from.items():
            self.leases.append((name, start, end_s))


class StoreSimulation:
    """The simulated store, one second at a time (the steppable form of :func:`simulate`).

    Each second ``t``: ``observe()`` begins it and returns what the loop reads (the
    servers, the running actions and, at a period's end, the sampled histogram);
    ``apply(step)`` starts and cancels actions; ``finish()`` serves the second, records
    it, runs the copies and moves to ``t + 1``. Past the workload's end the workload
    repeats and nothing more is recorded (a service runs on)."""

    def __init__(
        self,
        workload: Workload,
        layout: list[ServerState],
        bin_bytes: np.ndarray,
        settings: SimSettings,
        copy_rate_bytes_per_s: float,
    ) -> None:
        self.workload = workload
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)
        self.cluster = _Cluster(
            layout, np.asarray(bin_bytes, float), settings, copy_rate_bytes_per_s
        )
        self.duration_s = len(workload.total_rps)
        self.n_bins = len(workload.popularity)
        self.outputs = _Outputs(
            self.duration_s, self.duration_s // settings.period_s, settings.charge_interval_s
        )
        self.t = 0
        self.last_p99_ms = float("nan")  # of the last period that ended
        self.last_late_fraction = 0.0  # of the last second served
        self._names: list[str] = []
        self._membership = np.zeros((0, self.n_bins))
        self._factor = self._hiccup = self._capacity = np.zeros(0)
        self._noise_names: list[str] = []
        self._lasting = _LastingState()
        self._period_get = np.zeros(self.n_bins)
        self._period_put = np.zeros(self.n_bins)
        self._rates: tuple[np.ndarray, np.ndarray] | None = None  # this second's, once begun

    def observe(self) -> Observation:
        """Begin second ``t``: the loop's observation (a histogram when a period ended)."""
        perf, t = self.settings.performance, self.t
        new_noise_period = t % int(perf.noise_period_s) == 0
        if new_noise_period and t > 0:
            self._lasting.step(perf, self.rng)
        if new_noise_period or self.cluster.changed:
            self._refresh(fresh=True)
        get, put = self.workload.rates(t % self.duration_s)
        self._rates = (get, put)
        self._period_get += get
        self._period_put += put
        histograms: tuple[Histogram, ...] = ()
        if t > 0 and t % self.settings.period_s == 0:
            sampled = _sampled(self._period_get, self._period_put, self.settings, self.rng)
            histograms = (Histogram(*sampled),)
            self._period_get[:] = 0.0
            self._period_put[:] = 0.0
        return Observation(
            float(t),
            self.cluster.states(float(t)),
            self.cluster.running(),
            histograms,
            self.measurements(),
        )

    def measurements(self) -> dict[str, float]:
        """The store's own figures for logs and gauges (the loop does not read them)."""
        return {
            "servers": float(len(self.cluster.bins)),
            "servers_serving": float(sum(1 for bins in self.cluster.bins.values() if bins)),
            "late_fraction": self.last_late_fraction,
            "period_p99_ms": self.last_p99_ms,
        }

    def apply(self, step: Step) -> None:
        """Start and cancel the step's actions at second ``t``."""
        self.cluster.apply(step, float(self.t))
        self._refresh(fresh=False)

    def _refresh(self, fresh: bool) -> None:
        """Who holds which bin, and the servers' noise (fresh, or carried by name)."""
        self._names, self._membership = _membership(self.cluster, self.n_bins)
        self._factor, self._hiccup, self._noise_names = _noise(
            self._names,
            self._noise_names,
            self._factor,
            self._hiccup,
            self.settings.performance,
            self.rng,
            fresh=fresh,
        )
        lasting = self._lasting.factors(self._names, self.settings.performance, self.rng)
        self._capacity = self._factor * lasting
        self.cluster.changed = False

    def finish(self) -> None:
        """Serve second ``t`` (begun by ``observe``), record it, run the copies one second."""
        assert self._rates is not None, "observe() begins a second before finish()"
        get, put = self._rates
        settings, perf, t = self.settings, self.settings.performance, self.t
        names, membership = self._names, self._membership
        rho, copy_rates = _utilisation(
            self.cluster, names, membership, get, put, self._capacity, settings
        )
        tails = perf.tail(settings.threshold_ms, rho, self._hiccup)
        late = _late(membership, tails, settings.read_fanout)
        total = float(get.sum())
        self.last_late_fraction = float(get @ late) / total if total > 0 else 0.0
        recording = t < self.duration_s
        if recording:
            self.outputs.record_second(t, get, late, self.cluster, names)
        if (t + 1) % settings.period_s == 0:
            grid = perf.tail(_P99_GRID_MS[:, None], rho[None, :], self._hiccup)
            self.last_p99_ms = _p99_ms(get, membership, grid, settings.read_fanout)
            if recording:
                self.outputs.p99[t // settings.period_s] = self.last_p99_ms
        if recording:
            hot = membership[:, self.workload.hot_bin].sum() if len(names) else 0
            self.outputs.hot_replicas[t] = hot
        self.cluster.advance(float(t + 1), copy_rates)
        self._rates = None
        self.t += 1

    def result(self) -> SimResult:
        """The run's figures over the workload's duration (leases end at its end)."""
        self.cluster.close(float(self.duration_s))
        return self.outputs.result(self.cluster)


def simulate(
    workload: Workload,
    layout: list[ServerState],
    bin_bytes: np.ndarray,
    loop,
    settings: SimSettings,
    copy_rate_bytes_per_s: float,
    progress=None,
) -> SimResult:
    """Run ``loop`` (``step(observation) -> Step | None``, see
    ``geoslo.control.director.loop``) on the simulated cluster for the workload's
    duration."""
    store = StoreSimulation(workload, layout, bin_bytes, settings, copy_rate_bytes_per_s)
    for t in range(store.duration_s):
        step = loop.step(store.observe())
        if step is not None and (step.start or step.cancel):
            store.apply(step)
        store.finish()
        if progress is not None and t % 3600 == 0:
            progress(t)
    return store.result()


def _membership(cluster: _Cluster, n_bins: int) -> tuple[list[str], np.ndarray]:
    names = list(cluster.bins)
    matrix = np.zeros((len(names), n_bins))
    for i, name in enumerate(names):
        matrix[i, list(cluster.bins[name])] = 1.0
    return names, matrix


def _noise(names, old_names, factor, hiccup, perf, rng, fresh=True):
    """Fresh noise for every server, or (``fresh=False``) the old noise carried over by
    name, with fresh draws only for new servers."""
    fresh_factor, fresh_hiccup = perf.draw_noise(len(names), rng)
    if fresh:
        return fresh_factor, fresh_hiccup, list(names)
    where = {name: i for i, name in enumerate(old_names)}
    for i, name in enumerate(names):
        if name in where:
            fresh_factor[i], fresh_hiccup[i] = factor[where[name]], hiccup[where[name]]
    return fresh_factor, fresh_hiccup, list(names)


class _LastingState:
    """Per server, by name, what outlives a noise period (``_truth``): its own capacity
    factor, drawn when it is first seen, and whether it is in a slowdown, a Markov chain
    stepped once per noise period. Nothing is drawn for the linear truth."""

    def __init__(self) -> None:
        self.server_factor: dict[str, float] = {}
        self.slow: dict[str, bool] = {}

    def step(self, perf: ServerPerformance, rng: np.random.Generator) -> None:
        if perf.slowdown_probability == 0.0 or not self.slow:
            return
        names = list(self.slow)
        stepped = perf.step_slow(np.array([self.slow[n] for n in names]), rng)
        self.slow = dict(zip(names, stepped.tolist(), strict=True))

    def factors(self, names: list[str], perf: ServerPerformance, rng) -> np.ndarray:
        """Each server's lasting capacity factor, drawing for servers not seen before."""
        if perf.is_linear:
            return np.ones(len(names))
        self.server_factor = {n: f for n, f in self.server_factor.items() if n in names}
        self.slow = {n: s for n, s in self.slow.items() if n in names}  # removed: forgotten
        new = [n for n in names if n not in self.server_factor]
        if new:
            factor, slow = perf.draw_server_factor(len(new), rng), perf.draw_slow(len(new), rng)
            self.server_factor.update(zip(new, factor.tolist(), strict=True))
            self.slow.update(zip(new, slow.tolist(), strict=True))
        server_factor = np.array([self.server_factor[n] for n in names])
        return perf.lasting_factor(server_factor, np.array([self.slow[n] for n in names], bool))


def _utilisation(cluster, names, membership, get, put, factor, settings):
    """Each server's utilisation this second, with the copies' work, and each running
    copy's actual rate (§5.4: the specified rate times a factor the target's load sets)."""
    perf = settings.performance
    replicas = np.maximum(membership.sum(axis=0), 1.0)
    share = np.minimum(settings.read_fanout, replicas) / replicas
    rho = perf.utilisation(membership @ (get * share), membership @ put, factor)
    index = {name: i for i, name in enumerate(names)}
    copy_rates = np.zeros(len(cluster.copies))
    copy_in = np.zeros(len(names))  # bytes/s, the source's share counted as copying in
    specified = cluster.copy_rate_bytes_per_s
    for k, copy in enumerate(cluster.copies):
        action = copy.running.action
        target, source = index[action.target or ""], index[action.source or ""]
        copy_rates[k] = specified * perf.copy_factor(specified, rho[target])
        copy_in[target] += copy_rates[k]
        copy_in[source] += perf.copy_source_share * copy_rates[k]
    return rho + perf.copy_utilisation(copy_in), copy_rates


def _late(membership: np.ndarray, tails: np.ndarray, fanout: int) -> np.ndarray:
    """Per bin, the chance a get is late: the fastest of ``fanout`` random replicas.
    ``tails`` is one value per server, or rows of them (one row per latency threshold)."""
    replicas = membership.sum(axis=0)
    n = np.maximum(replicas, 1.0)
    s1 = tails @ membership
    if fanout == 1:
        return s1 / n
    s2 = (tails**2) @ membership
    pairs = np.where(replicas >= 2, (s1**2 - s2) / np.maximum(n * (n - 1), 1.0), s1)
    if fanout == 2:
        return pairs
    every = np.exp(np.log(np.maximum(tails, 1e-300)) @ membership)
    return np.where(replicas <= fanout, every, (s1 / n) ** fanout)


def _sampled(get_sum, put_sum, settings: SimSettings, rng) -> tuple[np.ndarray, np.ndarray]:
    """The histogram as sampling sees it: counts of sampled requests over the period."""
    gets = rng.poisson(get_sum * settings.get_sample_fraction)
    puts = rng.poisson(put_sum * settings.put_sample_fraction)
    period = settings.period_s
    return (
        gets / settings.get_sample_fraction / period,
        puts / settings.put_sample_fraction / period,
    )


def _p99_ms(get, membership, grid, fanout) -> float:
    """The p99 of the gets from the servers' tails on a latency grid (one row each; all
    rows at once, as ``_late`` broadcasts over them)."""
    late = _late(membership, grid, fanout) @ get
    late /= max(float(get.sum()), 1e-12)
    above = np.flatnonzero(late <= 0.01)
    return float(_P99_GRID_MS[above[0]] if above.size else _P99_GRID_MS[-1])


class _Outputs:
    def __init__(self, duration: int, periods: int, charge_interval_s: int) -> None:
        self.charge_interval_s = charge_interval_s
        self.held: set[tuple[str, int]] = set()
        self.late = np.zeros(duration)
        self.gets = np.zeros(duration)
        self.leased = np.zeros(duration, dtype=np.int64)
        self.serving = np.zeros(duration, dtype=np.int64)
        self.hot_replicas = np.zeros(duration, dtype=np.int64)
        self.p99 = np.full(periods, np.nan)

    def record_second(self, t, get, late_per_bin, cluster, names) -> None:
        total = float(get.sum())
        self.gets[t] = total
        self.late[t] = float(get @ late_per_bin) / total if total > 0 else 0.0
        self.leased[t] = len(names)
        holding = [name for name in names if cluster.bins[name]]
        self.serving[t] = len(holding)
        self.held.update(  # the lease's own charge intervals, counted from its start
            (name, int((t - cluster.leased_from[name]) // self.charge_interval_s))
            for name in holding
        )

    def result(self, cluster: _Cluster) -> SimResult:
        return SimResult(
            self.late,
            self.gets,
            self.leased,
            self.serving,
            self.p99,
            cluster.leases,
            len(self.held),
            self.hot_replicas,
            dict(cluster.counts),
            cluster.copied_bytes,
            cluster.cancelled,
        )
