"""Fig. 12: what Kurma saves over a month with a threshold elastic controller per site (§7.2).

Every minute each site's elastic controller adds a VM when its violations would exceed the
5% target and removes one (at most one a minute) when the target holds without it. Kurma
runs first and shares load, so VMs are added only when redistribution cannot keep the
target. Capacity grows linearly with the number of VMs (§4.1). Cost = VM hours (minimum
billing period 1 or 60 minutes) + WAN bytes of redirected requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control.kurma import KurmaProblem, solve
from geoslo.models import SloCurve
from geoslo.topology import Prices

__all__ = ["ElasticResult", "simulate_elastic", "billed_vm_hours"]


@dataclass(frozen=True)
class ElasticResult:
    strategy: str
    vms: np.ndarray  # [minute, site] (AllShared: one pool in column 0)
    redirected_rps: np.ndarray  # [minute]
    over_target_minutes: int  # minutes where even the chosen VMs miss the target somewhere


def _problem(demand_rps, vms, curves_per_vm, grid_per_vm, sites, rho, quantum):
    """Kurma's problem with each site's curves stretched to its number of VMs (§4.1)."""
    n = len(sites)
    grid = np.unique(np.concatenate([grid_per_vm * v for v in np.unique(vms)] + [[0.0]]))
    violation = np.empty((n, n, grid.size))
    for j in range(n):
        per_vm_load = grid / vms[j]
        for i in range(n):
            violation[i, j] = np.interp(per_vm_load, grid_per_vm, curves_per_vm[i][j], right=1.0)
    return KurmaProblem(
        sites=tuple(sites),
        demand_rps=np.asarray(demand_rps, float),
        capacity_rps=grid_per_vm[-1] * np.asarray(vms, float),
        load_grid_rps=grid,
        violation=violation,
        slo_violation_target=rho,
        quantum_fraction=quantum,
    )


def _meets_target(plan, objective: str, rho: float) -> bool:
    if objective == "cost":
        return bool(plan.feasible)
    return bool(np.all(np.asarray(plan.site_violation_fraction) <= rho + 1e-12))


def simulate_elastic(
    strategy: str,
    demand_rps: np.ndarray,
    curves: list[list[SloCurve]],
    sites: tuple[str, ...],
    vm_capacity_rps: float,
    rho: float = 0.05,
    quantum: float = 0.01,
    max_vms: int = 64,
    on_minute=None,
) -> ElasticResult:
    """Run one strategy over per-minute demands ``[minute, site]``.

    ``curves[i][j]`` is the SLO curve of requests from i served at j for ONE VM (its load
    axis per VM); ``vm_capacity_rps`` the load one VM saturates at.
    """
    minutes, n = demand_rps.shape
    local = [curves[i][i] for i in range(n)]
    if strategy == "AllLocal":
        per_vm = np.array([c.load_at(rho) for c in local])
        vms = np.clip(np.ceil(demand_rps / per_vm), 1, max_vms)
        return ElasticResult(strategy, vms.astype(int), np.zeros(minutes), 0)
    if strategy == "AllShared":
        per_vm = float(np.mean([c.load_at(rho) for c in local]))
        pool = np.clip(np.ceil(demand_rps.sum(axis=1) / per_vm), n, max_vms * n)
        vms = np.zeros((minutes, n), int)
        vms[:, 0] = pool
        return ElasticResult(strategy, vms, np.zeros(minutes), 0)
    objective = {"KurmaPerf": "perf", "KurmaCost": "cost"}[strategy]
    grid = curves[0][0].load_rps
    table = [
        [np.interp(grid, c.load_rps, c.violation_fraction, right=1.0) for c in row]
        for row in curves
    ]
    per_vm_local = np.array([c.load_at(rho) for c in local])
    current = np.clip(np.ceil(demand_rps[0] / per_vm_local), 1, max_vms).astype(int)
    vms = np.zeros((minutes, n), int)
    redirected = np.zeros(minutes)
    misses = 0

    for minute in range(minutes):
        demand = demand_rps[minute]

        def plan_for(v, demand=demand):
            return solve(_problem(demand, v, table, grid, sites, rho, quantum), objective)

        plan = plan_for(current)
        # scale in: each site may drop one VM a minute if the target still holds without it
        for site in np.argsort(-(current * vm_capacity_rps - demand)):
            if current[site] <= 1 or not _meets_target(plan, objective, rho):
                continue
            trial = current.copy()
            trial[site] -= 1
            trial_plan = plan_for(trial)
            if _meets_target(trial_plan, objective, rho):
                current, plan = trial, trial_plan
        # scale out: add a VM to the worst site until the target holds
        while not _meets_target(plan, objective, rho) and current.max() < max_vms:
            worst = int(np.argmax(np.asarray(plan.site_violation_fraction)))
            current = current.copy()
            current[worst] += 1
            plan = plan_for(current)
        misses += not _meets_target(plan, objective, rho)
        vms[minute] = current
        redirected[minute] = plan.redirected_rps
        if on_minute is not None:
            on_minute(minute + 1, minutes)
    return ElasticResult(strategy, vms, redirected, misses)


def billed_vm_hours(vms: np.ndarray, billing_minutes: int) -> float:
    """VM hours billed when each VM is paid for whole billing periods (§7.2).

    Within each period a site pays for the largest number of VMs it ran in that period.
    """
    minutes = vms.shape[0] - vms.shape[0] % billing_minutes
    blocks = vms[:minutes].reshape(-1, billing_minutes, vms.shape[1]).max(axis=1)
    return float(blocks.sum() * billing_minutes / 60.0)


def daily_cost_usd(result: ElasticResult, billing_minutes: int, prices: Prices) -> dict[str, float]:
    """Average cost per day: VMs, WAN and total."""
    days = result.vms.shape[0] / 1440.0
    vm_usd = billed_vm_hours(result.vms, billing_minutes) * prices.vm_usd_per_hour
    wan_gb = float(result.redirected_rps.sum() * 60.0 * prices.bytes_per_request / 1e9)
    wan_usd = wan_gb * prices.wan_usd_per_gb
    return {
        "vm_usd": vm_usd / days,
        "wan_usd": wan_usd / days,
        "total_usd": (vm_usd + wan_usd) / days,
    }
