"""The live binned store as the Director's environment handle (``geoslo.control.Environment``).

``start()`` brings up a ``DirectorCluster`` (Redis servers on loopback, router, client,
executor, statistics) and an open-loop load generator replaying ``load`` round after round
(each round a fresh ``replay_load``, so memory stays bounded over a long run);
``observe()`` returns the servers, the running actions and the sampled histograms of the
periods that ended (§5.5), with the last period's p99; ``apply(step)`` cancels and starts
the step's actions through the executor; ``close()`` stops the load, cancels the actions and
stops every process the cluster started, returning when all have exited.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import numpy as np

from geoslo.control.director import Observation, Step
from geoslo.live.director._cluster import DirectorCluster
from geoslo.live.director._config import ClusterConfig
from geoslo.live.director._loadgen import LoadSpec, replay_load

__all__ = ["DirectorTestbedEnvironment"]


class DirectorTestbedEnvironment:
    """One live cluster and its load; real time (``simulated = False``)."""

    simulated = False

    def __init__(self, state_dir: Path, config: ClusterConfig, load: LoadSpec) -> None:
        self.state_dir = Path(state_dir)
        self.config = config
        self.load = load
        self.cluster: DirectorCluster | None = None
        self.rounds = 0  # load rounds completed
        self.requests = 0  # requests issued by completed rounds
        self._load_task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._started_s = 0.0

    async def start(self) -> None:
        self.cluster = await DirectorCluster.up(self.state_dir, self.config)
        self._stop = asyncio.Event()
        self._started_s = self.cluster.client.now_s()
        self._load_task = asyncio.create_task(self._replay_rounds(self.cluster))

    async def _replay_rounds(self, cluster: DirectorCluster) -> None:
        while not self._stop.is_set():
            result = await replay_load(cluster.client, self.load, self._stop)
            self.rounds += 1
            self.requests += result.requests

    def bin_bytes(self) -> np.ndarray:
        """Stored bytes per bin (what a copy of the bin moves)."""
        return self._cluster().bin_bytes()

    async def observe(self) -> Observation:
        cluster = self._cluster()
        if self._load_task is not None and self._load_task.done():
            self._load_task.result()  # the load generator failed: say why
        now_s = cluster.client.now_s()
        return cluster.observation(now_s - self._started_s, cluster.collect_stats())

    async def apply(self, step: Step) -> None:
        await self._cluster().apply(step)

    async def close(self) -> None:
        """Stop the load (requests in flight end), then the cluster and its processes."""
        self._stop.set()
        if self._load_task is not None:
            with contextlib.suppress(Exception):
                await self._load_task
            self._load_task = None
        if self.cluster is not None:
            await self.cluster.down()
            self.cluster = None

    def _cluster(self) -> DirectorCluster:
        if self.cluster is None:
            raise RuntimeError("start() the live store before using it")
        return self.cluster
