"""Experiment 1 of Dürango et al. (CDC 2016, §V-C) compressed onto the real link
(``geoslo.live.replication``): the same traffic shape, the four policies in turn, each on
a fresh testbed, and Table I's columns measured from the real systems beside the
simulator's run of the same schedule.

Scaling (ours): the link is ``capacity_mbps`` (20) instead of 100 Mbit/s, so every rate
is scaled by capacity/100; time runs ``compression`` (60) times faster, so an image of
375 MB every 10 minutes becomes 1.25 MB every 10 s; the controller samples every second.
The MPC counts buffers in intervals of the link (``mpc.py``), so its weights are the
paper's; its Kalman noise levels are MB per interval and scale with the link's capacity
per interval (rho = 20 x 1 s / (100 x 10 s)). The interval is 60 of the paper's seconds
where the paper's is 10, so the paper's horizon of 30 intervals looks three image
periods ahead here where the paper's looked half of one; with the paper's ratio (H = 5)
the simulator's MPC finished 10 of 17 images on this schedule, so H stays 30.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from geoslo.control.replication import (
    FifoPolicy,
    MpcPolicy,
    PolicyLoop,
    PrioPolicy,
    ReplicationController,
    StaticPolicy,
)
from geoslo.experiments.replication._workloads import Experiment, experiment_1
from geoslo.live.replication import LinkSpec, ReplicationTestbedEnvironment, reply_bytes
from geoslo.models import ArrivalModel
from geoslo.sim.replication import LinkRun, LinkSettings, LinkWorkload, simulate_link

__all__ = [
    "LiveSettings",
    "LivePolicyRun",
    "live_schedule",
    "run_live_policies",
    "run_live_policy",
    "simulate_schedule",
]

POLICIES = ("MPC", "FIFO", "STATIC", "PRIO")


@dataclass(frozen=True)
class LiveSettings:
    """The compressed experiment: ``fraction`` of Experiment 1's 3 hours (the quick form
    runs the first 60%, 108 s on the link: the application's overload, from 30 to 70
    minutes of the paper's time, and the 38 minutes after it in which the images queued
    behind it can finish a horizon before the end; the first 40% ended in the overload,
    so no policy could meet the image check there)."""

    capacity_mbps: float = 20.0
    compression: int = 60  # the paper's seconds per second on the link
    interval_s: float = 1.0
    fraction: float = 1.0
    value_bytes: int = 65_536
    policies: tuple[str, ...] = POLICIES
    seed: int = 0  # of the simulator's Poisson arrivals

    @classmethod
    def quick(cls) -> LiveSettings:
        return cls(fraction=0.6)


def live_schedule(settings: LiveSettings) -> Experiment:
    """Experiment 1's traffic, averaged over each ``compression`` seconds and scaled to the
    link; the controller scaled as the module says."""
    paper = experiment_1()
    k, scale = settings.compression, settings.capacity_mbps / paper.config.capacity_mbps
    n = int(paper.duration_s * settings.fraction) // k
    app = paper.application_mbps[: n * k].reshape(n, k).mean(axis=1) * scale
    rep = paper.replication_mbps[: n * k].reshape(n, k).mean(axis=1) * scale
    rho = (
        settings.capacity_mbps
        * settings.interval_s
        / (paper.config.capacity_mbps * paper.config.interval_s)
    )
    w, model = paper.config.weights, paper.config.arrival_model  # weights: unitless (mpc.py)
    config = replace(
        paper.config,
        capacity_mbps=settings.capacity_mbps,
        interval_s=settings.interval_s,
        image_mb=paper.config.image_mb * scale / k,
        image_period_s=paper.config.image_period_s / k,
        weights=w,
        arrival_model=ArrivalModel(
            model.kind, model.process_noise_mb * rho, model.measurement_noise_mb * rho
        ),
    )
    name = f"Experiment 1 on a {settings.capacity_mbps:g} Mbit/s link, {k}x faster"
    return Experiment(name, app, rep, config, StaticPolicy.drbd(config))


def controller_for(name: str, schedule: Experiment):
    policies = {
        "MPC": lambda: ReplicationController(schedule.config),
        "FIFO": lambda: PolicyLoop(FifoPolicy()),
        "STATIC": lambda: PolicyLoop(schedule.static),
        "PRIO": lambda: PolicyLoop(PrioPolicy()),
    }
    return policies[name]()


@dataclass
class LivePolicyRun:
    """One policy on the real link: per interval, the measurement (MB) and the shares;
    per image, when it was taken and when its copy ended (s from the start); the
    reader's requests (sent at, waited s); HTB's bytes per class; the observe lateness."""

    policy: str
    run: LinkRun  # buffers and cumulative arrived and sent, as the simulator's
    interval_sent_mb: np.ndarray
    interval_arrived_mb: np.ndarray
    request_waits_s: np.ndarray  # answered requests' waits; unanswered ones count till the end
    unanswered: int
    class_bytes: dict
    late_s: np.ndarray


def run_live_policies(
    schedule: Experiment, settings: LiveSettings, state_dir: Path, progress=print
) -> dict[str, LivePolicyRun]:
    """Every policy of ``settings`` on a testbed of its own (``state_dir/<policy>``), all
    at once: each link carries a few Mbit/s, so they share only the CPU, which is idle
    most of the time (a policy's lateness is in its run); the first failure is raised
    once every run has ended. Ctrl-C (or the CLI's SIGTERM) stops every run at its next
    interval, each taking its testbed down, before it goes on."""
    stop = threading.Event()
    with ThreadPoolExecutor(len(settings.policies), thread_name_prefix="policy") as pool:
        futures = {
            name: pool.submit(
                run_live_policy, name, schedule, settings, state_dir / name, progress, stop
            )
            for name in settings.policies
        }
        try:
            wait(futures.values())
        except BaseException:
            stop.set()
            raise
    return {name: future.result() for name, future in futures.items()}


class _Stopped(Exception):
    """A run ended early because its caller was interrupted."""


def run_live_policy(
    name: str,
    schedule: Experiment,
    settings: LiveSettings,
    state_dir: Path,
    progress=print,
    stop: threading.Event | None = None,
) -> LivePolicyRun:
    """One policy on a fresh testbed (its namespaces named after it); ``stop`` set ends
    it at the next interval (its testbed taken down)."""
    stop = stop or threading.Event()
    return asyncio.run(_run_live_policy(name, schedule, settings, state_dir, progress, stop))


async def _run_live_policy(name, schedule, settings, state_dir, progress, stop) -> LivePolicyRun:
    spec = LinkSpec(
        capacity_mbps=settings.capacity_mbps,
        application_mbps=tuple(float(v) for v in schedule.application_mbps),
        replication_mbps=tuple(float(v) for v in schedule.replication_mbps),
        level_period_s=1.0,
        image_mb=schedule.config.image_mb,
        image_period_s=schedule.config.image_period_s,
        value_bytes=settings.value_bytes,
        namespace_prefix=f"geoslo-rlive-{name.lower()}",
        state_dir=state_dir,
        start_delay_s=2.0,
    )
    env = ReplicationTestbedEnvironment(spec)
    controller = controller_for(name, schedule)
    steps = int(round(schedule.duration_s / settings.interval_s))
    rows, shares, late, decide_ms = [], [], [], []
    await env.start()
    try:
        await asyncio.sleep(max(env.start_epoch_s - time.time(), 0.0))
        await env.observe()  # the intervals count from the load's start
        for k in range(1, steps + 1):
            if stop.is_set():
                raise _Stopped(name)
            due = env.start_epoch_s + k * settings.interval_s
            await asyncio.sleep(max(due - time.time(), 0.0))
            late.append(time.time() - due)
            observation = await env.observe()
            decision = controller.step(observation)
            await env.apply(decision)
            m = observation.measurement
            rows.append((observation.now_s, m.buffers_mb, m.sent_mb, m.arrived_mb))
            allocation = decision.allocation
            shares.append(allocation.shares if allocation.mode == "shares" else (np.nan,) * 3)
            decide_ms.append(decision.outcome.decide_ms or 0.0)
            if k % 30 == 0:
                progress(f"  {name}: {k}/{steps} s, buffers {np.round(m.buffers_mb, 2)} MB")
        class_bytes = env.egress.class_bytes()
        images = list(env.egress.images)
        start = env.start_epoch_s
    finally:
        await env.close()
    reader = env.request_logs.get("reader", [])
    end_s = steps * settings.interval_s
    waits = np.array(
        [w if w is not None else max(end_s - (sent - start), 0.0) for sent, w in reader]
    )
    t = np.array([r[0] for r in rows])
    sent = np.array([r[2] for r in rows])
    arrived = np.array([r[3] for r in rows])
    run = LinkRun(
        policy=name,
        step_s=settings.interval_s,
        time_s=t,
        buffers_mb=np.array([r[1] for r in rows]),
        arrived_mb=np.cumsum(arrived, axis=0),
        sent_mb=np.cumsum(sent, axis=0),
        image_created_s=np.array([i.created_s - start for i in images]),
        image_done_s=np.array([np.nan if i.done_s is None else i.done_s - start for i in images]),
        shares=np.array(shares),
        decide_ms=np.array(decide_ms),
    )
    unanswered = sum(1 for _, w in reader if w is None)
    return LivePolicyRun(name, run, sent, arrived, waits, unanswered, class_bytes, np.array(late))


def simulate_schedule(name: str, schedule: Experiment, settings: LiveSettings) -> LinkRun:
    """The simulator on the same schedule: messages of one value (reply) each, 0.1 s steps."""
    link = LinkSettings(
        capacity_mbps=settings.capacity_mbps,
        interval_s=settings.interval_s,
        step_s=settings.interval_s / 10,
        message_mb=reply_bytes(settings.value_bytes) / 1e6,
        image_mb=schedule.config.image_mb,
        image_period_s=schedule.config.image_period_s,
        seed=settings.seed,
    )
    workload = LinkWorkload(schedule.application_mbps, schedule.replication_mbps)
    policy = {
        "MPC": lambda: MpcPolicy(schedule.config),
        "FIFO": FifoPolicy,
        "STATIC": lambda: schedule.static,
        "PRIO": PrioPolicy,
    }[name]()
    return simulate_link(workload, policy, link)
