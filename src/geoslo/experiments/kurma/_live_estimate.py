"""Kurma's estimate for redirected requests (§4.2), taken apart against what they met live.

Beside the measured share of redirected requests over the SLO, three figures per policy:

* **the estimate**: Omega_ij at the planned loads, as each agent made it when planning;
* **the curves at the loads that came**: the same Omega_ij at each destination's measured
  requests in the interval (the plan's load forecast taken out);
* **composed from the replay**: Kurma's own composition, service + the link's residual + the
  base RTT (§4.2), with the service times each destination showed its own clients during
  this replay and this replay's probes (the profile taken out).

The estimate and the curves at the loads that came differ by the forecast; the curves and the
composition differ by the profile (its service tail against the destinations' during the
replay). The composition uses the replay's own samples, so it checks how Kurma composes and
measures base RTTs, not what it profiled.
"""

from __future__ import annotations

import numpy as np

from geoslo.control.kurma.model_file import load_model
from geoslo.control.kurma.types import KurmaModel
from geoslo.dist import LatencyDistribution
from geoslo.experiments.kurma._live import (
    INTERVAL_S,
    PROBES_PER_BLOCK,
    SKIP_LOWEST_PROBES,
    LiveRun,
)
from geoslo.experiments.kurma._scenario import SLO_MS
from geoslo.models import probe_residuals_ms

__all__ = ["estimate_rows", "estimate_text", "estimate_checks", "ESTIMATE_PP"]

ESTIMATE_PP = 1.0  # the issue's tolerance for an estimate of redirected requests' violations
MAX_RESPONSE_MS = 5000.0  # a failed request counts as this late (as profiling keeps them)
COLUMNS = (
    "Kurma's estimate %",
    "curves at the loads that came %",
    "composed from the replay %",
    "measured %",
)


def estimate_rows(live_runs: dict[str, LiveRun], model_path, write_fraction: float) -> list[dict]:
    """One row per Kurma policy: redirected requests and the four fractions of COLUMNS."""
    model = load_model(model_path)
    rows = []
    for policy, run in live_runs.items():
        if policy.startswith("Kurma"):
            count, sums = _redirect_sums(run, model, write_fraction)
            rows.append(
                {"policy": policy, "redirected requests": int(count)}
                | {name: 100 * s / max(count, 1) for name, s in zip(COLUMNS, sums, strict=True)}
            )
    return rows


def _redirect_sums(run: LiveRun, model: KurmaModel, write_fraction: float):
    """(redirected requests, [estimate, curves at realised loads, composed, measured] sums
    of expected or counted violations) over the rounds that followed a plan."""
    logs = [{rec["round"]: rec for rec in log} for log in run.rounds]
    n = len(logs)
    composed: dict[tuple[int, int], LatencyDistribution] = {}
    count, sums = 0.0, np.zeros(len(COLUMNS))
    for i, log in enumerate(logs):
        for k, rec in log.items():
            plan = log.get(k - 1, {})
            if "estimate_row" not in plan or "base_rtt_ms" not in plan:
                continue
            load_rps = sum(
                np.asarray(other[k]["report"]["requests"]) for other in logs if k in other
            ) / INTERVAL_S  # fmt: skip
            requests = np.asarray(rec["report"]["requests"], dtype=float)
            for j in range(n):
                if j == i or requests[j] == 0:
                    continue
                base = float(plan["base_rtt_ms"][j])
                curve = model.surface(i, j).curve(base, write_fraction)
                if (i, j) not in composed:
                    composed[(i, j)] = _remote_response(run, i, j)
                count += requests[j]
                sums += requests[j] * np.array(
                    [
                        plan["estimate_row"][j],
                        float(curve(np.array([load_rps[j]]))[0]),
                        float(composed[(i, j)].tail_probability(SLO_MS - base)),
                        rec["report"]["violations"][j] / requests[j],
                    ]
                )
    return count, sums


def _remote_response(run: LiveRun, i: int, j: int) -> LatencyDistribution:
    """Service at j as j's own clients met it in the replay, plus the link i>j's residual
    (its probes in the replay, less each block's base): the response less the base RTT."""
    local = run.requests[j]
    mine = local["site"] == j
    service = np.where(local["ok"][mine], local["response_ms"][mine], MAX_RESPONSE_MS)
    residual = probe_residuals_ms([run.probe_rtts_ms[(i, j)]], PROBES_PER_BLOCK, SKIP_LOWEST_PROBES)
    return LatencyDistribution.from_samples(
        np.minimum(service, MAX_RESPONSE_MS), 0.1
    ) + LatencyDistribution.from_samples(residual, 0.1)


def estimate_text(rows: list[dict]) -> str:
    """What the four columns say, policy by policy, from the numbers."""
    parts, heavier = [], []
    for row in rows:
        est, at_loads, composed, measured = (row[c] for c in COLUMNS)
        profile_x = at_loads / composed if composed > 0 else float("inf")
        heavier.append(profile_x > 1)
        parts.append(
            f"{row['policy']}: Kurma expected {est:.2f}% of its {row['redirected requests']} "
            f"redirected requests over the SLO and {measured:.2f}% were. At the loads that came "
            f"its curves give {at_loads:.2f}% (the plan's forecast accounts for "
            f"{est - at_loads:+.2f} pp); composed as Kurma composes, with the service each "
            f"destination gave its own clients in this replay, {composed:.2f}% "
            f"({composed - measured:+.2f} pp from the measured). The profile's service tail "
            f"puts the curves at {profile_x:.1f}x that composition."
        )
    if all(heavier):
        verdict = (
            "Every policy's curves rest on a profile whose service tail is heavier than the "
            "one the destinations showed in the replay: the estimate errs on the safe side "
            "(Kurma redirects less than it could), and the composition checks the rest."
        )
    else:
        verdict = (
            "Where the profile's tail is lighter than the replay's, the estimate promises "
            "redirected requests better than they get: the profile is out of date."
        )
    return (
        "Where the estimate misses, the columns say which part of the model does: "
        + " ".join(parts)
        + " "
        + verdict
    )


def estimate_checks(rows: list[dict]) -> dict[str, bool]:
    """Kurma's composition within ESTIMATE_PP of the measured, and its estimate not below it
    by more (Kurma does not promise redirected requests better than they get)."""
    checks = {}
    for row in rows:
        policy, measured = row["policy"], row["measured %"]
        checks[
            f"{policy}: redirected requests composed from the replay within {ESTIMATE_PP:g} pp"
        ] = abs(row["composed from the replay %"] - measured) <= ESTIMATE_PP
        promise = f"{policy}: Kurma's estimate for redirected requests not below the measured"
        checks[f"{promise} - {ESTIMATE_PP:g} pp"] = (
            row["Kurma's estimate %"] >= measured - ESTIMATE_PP
        )
    return checks
