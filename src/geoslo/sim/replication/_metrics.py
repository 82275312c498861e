"""The metrics of §V-B (Dürango et al., CDC 2016) from a simulated link run.

* buffered application and replication data (mean, 95th percentile over time); the
  replication buffer is also the data lost should the site fail at that moment;
* the age of the newest VM image at the backup (the backup holds the image of time 0 at
  the start) and the transfer times of the images that finished;
* the application's waiting time: each stream is served in order, so data that arrived
  in step k leaves when the stream's cumulative departures reach its cumulative arrivals;
* the Disaster Recovery Overhead: the replication writes since the newest image at the
  backup was taken;
* the cost (7) the run incurred, interval by interval (``realized_cost``): what the MPC
  minimises over its horizon, scored on what happened.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from geoslo.control.replication.decide import next_integral
from geoslo.control.replication.mpc import plan_cost
from geoslo.control.replication.types import ReplicationConfig
from geoslo.sim.replication._link import LinkRun

__all__ = [
    "LinkMetrics",
    "link_metrics",
    "application_wait_s",
    "image_age_s",
    "dro_mb",
    "realized_cost",
]

APPLICATION, REPLICATION = 0, 1


@dataclass(frozen=True)
class LinkMetrics:
    """Table I/II's rows and the figures' summaries for one run."""

    app_mean_mb: float
    app_p95_mb: float
    rep_mean_mb: float
    rep_p95_mb: float
    image_age_mean_s: float  # vm-sigma
    image_age_p95_s: float
    transfer_mean_s: float  # vm-mu, images that finished
    transfer_p95_s: float
    images_done: int
    images_started: int
    app_wait_mean_s: float
    app_wait_p95_s: float
    dro_mean_mb: float
    dro_end_mb: float
    data_loss_max_mb: float

    def to_dict(self) -> dict:
        return asdict(self)


def link_metrics(run: LinkRun) -> LinkMetrics:
    app, rep = run.buffers_mb[:, APPLICATION], run.buffers_mb[:, REPLICATION]
    transfer = run.image_done_s - run.image_created_s
    done = transfer[np.isfinite(transfer)]
    age = image_age_s(run)
    wait_s, weight_mb = application_wait_s(run)
    dro = dro_mb(run)
    return LinkMetrics(
        app_mean_mb=float(app.mean()),
        app_p95_mb=float(np.percentile(app, 95)),
        rep_mean_mb=float(rep.mean()),
        rep_p95_mb=float(np.percentile(rep, 95)),
        image_age_mean_s=float(age.mean()),
        image_age_p95_s=float(np.percentile(age, 95)),
        transfer_mean_s=float(done.mean()) if done.size else float("nan"),
        transfer_p95_s=float(np.percentile(done, 95)) if done.size else float("nan"),
        images_done=int(done.size),
        images_started=int(transfer.size),
        app_wait_mean_s=_weighted_mean(wait_s, weight_mb),
        app_wait_p95_s=_weighted_percentile(wait_s, weight_mb, 95),
        dro_mean_mb=float(dro.mean()),
        dro_end_mb=float(dro[-1]),
        data_loss_max_mb=float(rep.max()),
    )


def realized_cost(run: LinkRun, config: ReplicationConfig) -> float:
    """The cost (7) per interval that the run incurred (§IV), with ``config``'s weights:
    each interval's buffers at its end, the move into its shares, and the image integral
    as the MPC keeps it (``next_integral``); buffers in units of C as in ``plan_cost``.
    The first interval (equal shares, before any decision) is not counted; its image
    backlog starts the integral, as it does the MPC's."""
    per_interval = round(config.interval_s / run.step_s)
    buffers_mb = run.buffers_mb[per_interval - 1 :: per_interval]
    shares = run.shares[: len(buffers_mb)]
    integral_mb, total = next_integral(0.0, float(buffers_mb[0, 2])), 0.0
    for k in range(1, len(buffers_mb)):
        image_mb = float(buffers_mb[k, 2])
        after_mb = next_integral(integral_mb, image_mb)
        # plan_cost adds this interval's image backlog to the integral it is given
        total += plan_cost(
            config, shares[k : k + 1], buffers_mb[k : k + 1], shares[k - 1], after_mb - image_mb
        )
        integral_mb = after_mb
    return total / max(len(buffers_mb) - 1, 1)


def image_age_s(run: LinkRun) -> np.ndarray:
    """Per step, how old the newest image at the backup is."""
    newest = np.zeros_like(run.time_s)
    order = np.argsort(run.image_done_s)  # nan (in flight) last
    for n in order:
        done = run.image_done_s[n]
        if not np.isfinite(done):
            break
        later = run.time_s >= done - 1e-9
        newest[later] = np.maximum(newest[later], run.image_created_s[n])
    return run.time_s - newest


def dro_mb(run: LinkRun) -> np.ndarray:
    """Per step, the replication data written since the newest image at the backup."""
    age = image_age_s(run)
    taken_s = run.time_s - age
    written = run.arrived_mb[:, REPLICATION]
    step = np.clip(np.round(taken_s / run.step_s).astype(int) - 1, -1, len(written) - 1)
    before = np.where(step >= 0, written[np.maximum(step, 0)], 0.0)
    return written - before


def application_wait_s(run: LinkRun) -> tuple[np.ndarray, np.ndarray]:
    """Per step: how long the application data that arrived in it waited, and how much
    arrived. Data still waiting at the end counts as waiting until the end."""
    arrived = run.arrived_mb[:, APPLICATION]
    sent = run.sent_mb[:, APPLICATION]
    amount = np.diff(arrived, prepend=0.0)
    middle = arrived - amount / 2
    leaves = np.searchsorted(sent, middle - 1e-9, side="left")
    wait = (leaves - np.arange(len(arrived)) + 1) * run.step_s
    return wait.astype(float), amount


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    total = weights.sum()
    return float((values * weights).sum() / total) if total > 0 else float("nan")


def _weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    keep = weights > 0
    if not keep.any():
        return float("nan")
    order = np.argsort(values[keep])
    v, w = values[keep][order], weights[keep][order]
    cumulative = np.cumsum(w) / w.sum()
    return float(v[np.searchsorted(cumulative, q / 100.0)])
