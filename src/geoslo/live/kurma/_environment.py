"""Kurma's testbed environment for ``geoslo run`` (Kurma §6, §7): real Redis servers per site
behind the WAN emulator, open-loop clients per site, one controller for every site.

* ``start()`` brings the testbed up (as ``geoslo testbed up`` does), one echo server per
  site on its agent port, inside the site (the target of §6's WAN probes), and one client per site
  (:class:`SiteClient`, following a plan, the server in a site by ``server_choice``) with its
  open-loop Poisson load.
* ``observe()`` takes every client's counts since the last observation (§6's measurements:
  arrivals, writes, requests and violations per destination, the minimum response of the last
  ``base_rtt_window_s``) and probes every link 3 times through the WAN (§6).
* ``apply(routing)`` hands each client its row of the routing fractions.
* ``close()`` stops the load, the clients and every testbed process (the echo servers too).

The clients run in the controller's process (its event loop); the solver runs off that loop
(the runtime steps the controller in a worker thread), so requests keep their timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from geoslo.control.kurma import IntervalMeasurements, Routing
from geoslo.errors import ConfigError, TestbedError
from geoslo.live._backend import key_name
from geoslo.live._tasks import cancel_and_wait
from geoslo.live.kurma._client import RequestLog, SiteClient
from geoslo.live.kurma._testbed import Testbed, TestbedSpec
from geoslo.workload import ZipfKeys

__all__ = ["KurmaTestbedEnvironment"]

PROBES_PER_LINK = 3  # §6: 3 probes per site per round
PROBE_TIMEOUT_S = 1.0
MAX_IN_FLIGHT = 4096  # per site: past this, arrivals are shed (and counted), never queued
ZIPF_EXPONENT = 0.99  # YCSB's constant (Kurma §7)


class KurmaTestbedEnvironment:
    """The local testbed as an environment (``geoslo.control.Environment``)."""

    simulated = False

    def __init__(
        self,
        spec: TestbedSpec,
        rates_rps: Sequence[float],
        *,
        interval_s: float,
        write_fraction: float = 0.0,
        slo_ms: float = 30.0,
        base_rtt_window_s: float = 1.0,
        state_dir: str | Path | None = None,
        seed: int = 0,
        request_timeout_s: float = 2.0,
        server_choice: str | None = None,
    ) -> None:
        if len(rates_rps) != len(spec.sites):
            raise ConfigError("rates_rps", f"give one rate per site ({len(spec.sites)})")
        if any(not (np.isfinite(r) and r >= 0) for r in rates_rps):
            raise ConfigError("rates_rps", "rates must be finite and >= 0")
        self.spec = spec
        self.rates_rps = [float(r) for r in rates_rps]
        self.interval_s = interval_s
        self.write_fraction = write_fraction
        self.slo_ms = slo_ms
        self.base_rtt_window_s = base_rtt_window_s
        self.state_dir = Path(state_dir) if state_dir else None
        self.seed = seed
        self.request_timeout_s = request_timeout_s
        self.server_choice = server_choice  # every client's, inside its chosen site
        self.testbed: Testbed | None = None
        self.clients: list[SiteClient] = []
        self.shed = np.zeros(len(spec.sites), dtype=np.int64)  # arrivals not issued
        self.started_s: float | None = None  # how long start() took
        self._tasks: list[asyncio.Task] = []
        self._probe_streams: dict[tuple[int, int], tuple] = {}
        self._last_observe_s = 0.0
        self._own_dir: tempfile.TemporaryDirectory | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        started = time.perf_counter()
        if self.state_dir is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="geoslo-kurma-")
            self.state_dir = Path(self._own_dir.name)
        try:
            self.testbed = await asyncio.to_thread(
                Testbed.up, self.spec, self.state_dir, lambda *_: None
            )
            await asyncio.to_thread(self.testbed.start_echo)
            for k, site in enumerate(self.spec.sites):
                client = SiteClient(
                    self.testbed.client_endpoints(site, agent=False), self.testbed.workload,
                    "KurmaPerf", self.slo_ms, self.seed + 17 * k, self.request_timeout_s,
                    self.base_rtt_window_s, self.server_choice,
                )  # fmt: skip
                self.clients.append(await client.start())
            for k in range(len(self.clients)):
                self._tasks.append(asyncio.create_task(self._load(k)))
        except BaseException:
            await self.close()
            raise
        self._last_observe_s = time.time()
        self.started_s = time.perf_counter() - started

    async def close(self) -> None:
        """Stop the load, the clients and every testbed process; return when all exited."""
        await cancel_and_wait(self._tasks)
        for client in self.clients:
            with contextlib.suppress(Exception):
                await client.drain(timeout_s=self.request_timeout_s)
                await client.close()
        self.clients.clear()
        for _, writer in self._probe_streams.values():
            writer.close()
        self._probe_streams.clear()
        if self.testbed is not None:
            await asyncio.to_thread(self.testbed.down)
            self.testbed = None
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None
            self.state_dir = None

    # --- load --------------------------------------------------------------------------------
    async def _load(self, k: int) -> None:
        """Site k's open-loop Poisson arrivals at its rate (Kurma §7), second by second."""
        client, rate = self.clients[k], self.rates_rps[k]
        rng = np.random.default_rng(self.seed + 1000 + k)
        keys = ZipfKeys(self.spec.keys, ZIPF_EXPONENT)
        value = client.work.write_value()
        pending: set[asyncio.Task] = set()
        second = float(np.ceil(time.time()))
        while True:
            count = int(rng.poisson(rate))
            times = second + np.sort(rng.random(count))
            key_ids = keys.sample(count, int(rng.integers(2**31)))
            writes = rng.random(count) < self.write_fraction
            for t, key_id, write in zip(times, key_ids, writes, strict=True):
                delay = t - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if len(pending) >= MAX_IN_FLIGHT:
                    self.shed[k] += 1
                    continue
                key = key_name(int(key_id))
                request = client.put(key, value) if write else client.get(key)
                task = asyncio.create_task(request)
                pending.add(task)
                task.add_done_callback(pending.discard)
            second += 1.0
            if second < time.time() - 1.0:  # fell behind by more than a second: skip ahead
                second = float(np.ceil(time.time()))
            await asyncio.sleep(max(0.0, second - time.time()))

    # --- probes ------------------------------------------------------------------------------

    async def _probe(self, i: int, j: int) -> float:
        """Min RTT of §6's probes from site i to site j's agent, through the WAN (inf: none)."""
        assert self.testbed is not None
        sites = self.spec.sites
        best = np.inf
        for _ in range(PROBES_PER_LINK):
            try:
                stream = self._probe_streams.get((i, j))
                if stream is None:
                    host, port = self.testbed.agent_address(sites[i], sites[j])
                    # asyncio.timeout, not wait_for: 3.11's wait_for can leak the socket
                    async with asyncio.timeout(PROBE_TIMEOUT_S):
                        stream = await asyncio.open_connection(host, port)
                    self._probe_streams[(i, j)] = stream
                reader, writer = stream
                sent = time.perf_counter()
                writer.write(b"p\n")
                await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT_S)
                best = min(best, (time.perf_counter() - sent) * 1e3)
            except (OSError, TimeoutError):
                self._probe_streams.pop((i, j), None)
        return best

    # --- observe and apply -------------------------------------------------------------------
    async def observe(self) -> IntervalMeasurements:
        """Every client's counts since the last observation, and this interval's probes."""
        if self.testbed is None:
            raise TestbedError("the testbed environment is not started")
        n = len(self.spec.sites)
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        rtts = await asyncio.gather(*(self._probe(i, j) for i, j in pairs))
        probes = np.zeros((n, n))
        for (i, j), rtt in zip(pairs, rtts, strict=True):
            probes[i, j] = rtt
        now = time.time()
        duration_s = max(now - self._last_observe_s, 1e-3)
        self._last_observe_s = now
        arrivals, writes = np.zeros(n), np.zeros(n)
        requests, violations = np.zeros((n, n)), np.zeros((n, n))
        min_response = np.full((n, n), np.inf)
        for i, client in enumerate(self.clients):
            counts = client.take_interval()
            client.log = RequestLog(n, self.slo_ms)  # a service keeps no per-request history
            arrivals[i], writes[i] = counts.arrivals, counts.writes
            requests[i], violations[i] = counts.requests, counts.violations
            min_response[i] = client.min_response_ms(now)
        return IntervalMeasurements(
            duration_s, arrivals, writes, requests, violations, min_response, probes,
            np.ones(n, dtype=bool),
        )  # fmt: skip

    async def apply(self, routing: Routing) -> None:
        """Each site's client follows its row of the routing fractions (§6, enforcement)."""
        fractions = np.asarray(routing.fractions, dtype=float)
        n = len(self.spec.sites)
        if fractions.shape != (n, n):
            raise ConfigError("fractions", f"must be {n}x{n}, not {fractions.shape}")
        for i, client in enumerate(self.clients):
            client.policy.set_fractions(fractions[i])
