"""Kurma's redirect-rate problem and its answer (Kurma §5, partial replication §9).

A :class:`KurmaProblem` holds what models (1) and (2) need: demand D_i, the SLO curves
Omega_ij sampled on one load grid, the violation target rho and the load balancing quantum.
A :class:`KurmaPlan` is the answer: the rate matrix lambda_ij and what it achieves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from geoslo.control import Outcome

__all__ = ["KurmaProblem", "KurmaPlan", "OBJECTIVES"]

OBJECTIVES = ("perf", "cost")  # KurmaPerf, model (1); KurmaCost, model (2), §5.1-5.2


@dataclass(frozen=True)
class KurmaProblem:
    """One instance of KurmaPerf / KurmaCost, quantised (§5.2).

    ``violation[i, j, k]`` is Omega_ij at ``load_grid_rps[k]``: the fraction of requests from
    site i served at site j that miss the SLO when j's total load is that rate. Between grid
    points the curve is linear; below the first point it keeps the first value and above the
    last point it is 1 (the site is past anything profiled). ``available[i]`` false: site i
    neither sends nor receives (§9, failures). ``max_redirect_fraction[i, j]`` bounds
    lambda_ij / D_i (§9, partial replication).
    """

    sites: tuple[str, ...]
    demand_rps: np.ndarray
    capacity_rps: np.ndarray
    load_grid_rps: np.ndarray
    violation: np.ndarray
    slo_violation_target: float = 0.05  # rho: 5% for a 95th-percentile SLO, §5 and §7
    quantum_fraction: float = 0.01  # 1% of a site's capacity, §5.2
    available: np.ndarray | None = None
    max_redirect_fraction: np.ndarray | None = None

    @property
    def n_sites(self) -> int:
        return len(self.sites)

    @property
    def available_mask(self) -> np.ndarray:
        """Boolean [i]: the sites that take part in redirection (all when unspecified)."""
        if self.available is None:
            return np.ones(self.n_sites, dtype=bool)
        return np.asarray(self.available, dtype=bool)

    @property
    def max_redirect_matrix(self) -> np.ndarray:
        """[i, j] bound on lambda_ij / D_i (1 where unspecified)."""
        if self.max_redirect_fraction is None:
            return np.ones((self.n_sites, self.n_sites))
        return np.asarray(self.max_redirect_fraction, dtype=float)

    @property
    def quantum_rps(self) -> np.ndarray:
        """[i] the redirect quantum of each sender: quantum_fraction * capacity_rps[i] (§5.2)."""
        return self.quantum_fraction * np.asarray(self.capacity_rps, dtype=float)

    def omega(self, i: int, j: int, load_rps: float | np.ndarray) -> float | np.ndarray:
        """Omega_ij(load): the piecewise-linear SLO curve of the pair (i, j) (§4, §5)."""
        grid = np.asarray(self.load_grid_rps, dtype=float)
        values = np.asarray(self.violation, dtype=float)[i, j]
        out = np.interp(load_rps, grid, values, left=values[0], right=1.0)
        return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class KurmaPlan:
    """The redirect rates and what they achieve.

    ``rates_rps[i, j]``: rate site i sends to j (the diagonal is what i serves itself).
    ``formulation``: "perf" (KurmaPerf, model 1) or "cost" (KurmaCost, model 2).
    ``outcome``: the one status vocabulary (``optimal``, ``time_limit``: the search stopped
    with ``gap`` left, ``infeasible``: KurmaCost cannot meet every site's bound), the solver's
    own word, the objective (perf: expected violations req/s; cost: redirected req/s) and the
    decision time. ``optimal``: a proven optimum of the quantised problem; otherwise ``gap``
    bounds how far from it, in the objective's unit. ``feasible`` is false when KurmaCost
    cannot meet every site's bound; then ``infeasible_sites`` names the sites that miss it and
    the plan is the least violating. ``work_limit``: the work units the search was allowed
    (a limit counts work, not time, so a stopped search is reproducible); ``work_units``: how
    many it spent (not in plan.json).
    """

    formulation: str
    outcome: Outcome
    rates_rps: np.ndarray
    expected_violations_rps: float
    site_violation_fraction: np.ndarray
    redirected_rps: float
    optimal: bool
    gap: float
    feasible: bool
    infeasible_sites: tuple[str, ...] = field(default_factory=tuple)
    work_limit: int = 0
    work_units: int = 0

    @property
    def status(self) -> str:
        """The outcome's status (one of ``geoslo.control.STATUSES``)."""
        return self.outcome.status

    def to_dict(self) -> dict:
        """The plan.json contract: the outcome first, then plain lists and numbers."""
        return {
            **self.outcome.to_dict(),
            "formulation": self.formulation,
            "rates_rps": np.asarray(self.rates_rps, dtype=float).tolist(),
            "expected_violations_rps": float(self.expected_violations_rps),
            "site_violation_fraction": np.asarray(
                self.site_violation_fraction, dtype=float
            ).tolist(),
            "redirected_rps": float(self.redirected_rps),
            "optimal": bool(self.optimal),
            "gap": float(self.gap),
            "feasible": bool(self.feasible),
            "infeasible_sites": list(self.infeasible_sites),
            "work_limit": int(self.work_limit),
        }
