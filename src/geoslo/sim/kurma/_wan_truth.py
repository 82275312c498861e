"""A WAN ground truth that Kurma's model does not assume (issue 23).

Kurma's model (§4.2) takes a remote response as service + base RTT + one residual drawn
independently of everything else; the default simulator draws every residual from one
pool, which is that model, so it cannot show where the model breaks. This truth keeps the
base RTTs and makes the residual:

* **per pair**: every directed link scales the residual by its own factor
  (lognormal, spread ``pair_spread_sigma``), where Kurma pools all links' probes;
* **correlated in time, heavy tailed**: each link alternates calm and congested periods
  (exponential lengths); in a congested period every request on the link draws from a
  Pareto residual instead of the calm one;
* **load dependent**: the residual grows as 1 / (1 - u) with u the link's request rate over
  ``link_capacity_rps`` (a queue on the path that Kurma's own redirections fill).

The parameters are our choices (the paper gives no WAN residual model; the public WAN
history in /work/shared/data/wan holds monthly averages, too coarse for sub-second
residuals). The kernel is untouched: every (link, state, load level) has its own block of
residual samples, and each simulated second points the kernel's per-link pools at the
block in force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import ConfigError

__all__ = ["WanTruthParams", "WanResidualTruth"]


@dataclass(frozen=True)
class WanTruthParams:
    """Knobs of the WAN truth; every one is our choice, not the paper's."""

    pair_spread_sigma: float = 0.5  # log-sd of the per-pair residual scale
    calm_mean_s: float = 90.0  # mean length of a calm period on a link
    congested_mean_s: float = 15.0  # mean length of a congested period
    congested_mean_ms: float = 4.0  # mean congested residual (Pareto)
    congested_tail_index: float = 1.5  # Pareto alpha: heavy tail, finite mean
    link_capacity_rps: float = 40_000.0  # load at which the path's queue would saturate
    max_utilisation_fraction: float = 0.8  # the 1 / (1 - u) factor is capped at 5x
    load_levels: int = 12  # load factors are rounded to this many levels
    pool_size: int = 4096  # samples per (link, state, level) block
    # seed of the WAN's fixed features (pair scales, sample blocks); a run's own seed
    # drives when its links are congested
    wan_seed: int = 0

    def __post_init__(self) -> None:
        positive = ("calm_mean_s", "congested_mean_s", "congested_mean_ms", "link_capacity_rps")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be > 0, got {getattr(self, name)}")
        if not self.congested_tail_index > 1:
            raise ConfigError("congested_tail_index", "must be > 1 (a finite mean)")
        if not 0 < self.max_utilisation_fraction < 1:
            raise ConfigError("max_utilisation_fraction", "must be in (0, 1)")
        if not self.pair_spread_sigma >= 0:
            raise ConfigError("pair_spread_sigma", "must be >= 0")
        if self.load_levels < 1 or self.pool_size < 1:
            field = "load_levels" if self.load_levels < 1 else "pool_size"
            raise ConfigError(field, "must be >= 1")

    @property
    def congested_fraction(self) -> float:
        """Long-run share of the time a link spends congested."""
        return self.congested_mean_s / (self.calm_mean_s + self.congested_mean_s)


class WanResidualTruth:
    """Per-link residual WAN latency whose law changes with time and load (see module).

    The pair scales and sample blocks come from ``params.wan_seed``, the calm and
    congested periods from ``seed``."""

    def __init__(
        self, n_sites: int, calm_pool_ms: np.ndarray, params: WanTruthParams, seed: int
    ) -> None:
        calm = np.asarray(calm_pool_ms, dtype=float).ravel()
        if calm.size == 0 or np.any(~np.isfinite(calm)) or np.any(calm < 0):
            raise ConfigError("calm_pool_ms", "must be a non-empty 1-D pool of values >= 0")
        self.params = params
        self.n_sites = n_sites
        rng = np.random.default_rng([params.wan_seed, 23])
        sigma = params.pair_spread_sigma  # a lognormal of mean 1: pairs differ, the mean stays
        self.pair_scale = np.exp(rng.normal(-(sigma**2) / 2, sigma, (n_sites, n_sites)))
        np.fill_diagonal(self.pair_scale, 0.0)
        utilisation = np.linspace(0.0, params.max_utilisation_fraction, params.load_levels)
        self.load_factor = 1.0 / (1.0 - utilisation)
        self.pool_ms, self._block_off = self._build_pool(calm, rng)
        self._chain_rng = np.random.default_rng([seed, 24])
        # every link starts in its long-run state, not calm
        self.congested = self._chain_rng.random((n_sites, n_sites)) < params.congested_fraction
        np.fill_diagonal(self.congested, False)
        self.level = np.zeros((n_sites, n_sites), dtype=np.int64)

    def _build_pool(self, calm: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
        p, n = self.params, self.n_sites
        alpha = p.congested_tail_index
        x_min_ms = p.congested_mean_ms * (alpha - 1) / alpha
        blocks, off = [], np.zeros((n, n, 2, p.load_levels), dtype=np.int64)
        pos = 0
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                calm_draw = rng.choice(calm, size=p.pool_size)
                congested_draw = x_min_ms * rng.random(p.pool_size) ** (-1.0 / alpha)
                for state, draw in enumerate((calm_draw, congested_draw)):
                    for level, factor in enumerate(self.load_factor):
                        off[i, j, state, level] = pos
                        blocks.append(draw * self.pair_scale[i, j] * factor)
                        pos += p.pool_size
        return np.concatenate(blocks) if blocks else np.zeros(1), off

    def advance(self, dt_s: float, link_rate_rps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Move every link's calm/congested state on by ``dt_s`` and set its load level
        from ``link_rate_rps`` [src, dst]; the kernel's (offsets, lengths) in force now."""
        p, n = self.params, self.n_sites
        u = self._chain_rng.random((n, n))
        enter = u < -np.expm1(-dt_s / p.calm_mean_s)
        leave = u < -np.expm1(-dt_s / p.congested_mean_s)
        self.congested = np.where(self.congested, ~leave, enter)
        np.fill_diagonal(self.congested, False)
        utilisation = np.clip(np.asarray(link_rate_rps) / p.link_capacity_rps, 0.0, None)
        step = p.max_utilisation_fraction / max(p.load_levels - 1, 1)
        self.level = np.minimum(np.rint(utilisation / step), p.load_levels - 1).astype(np.int64)
        return self.offsets()

    def offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-link (offset, length) into ``pool_ms`` of the block in force (0 locally)."""
        n = self.n_sites
        off = np.zeros((n, n), dtype=np.int64)
        length = np.zeros((n, n), dtype=np.int64)
        for i in range(n):
            for j in range(n):
                if i != j:
                    state = int(self.congested[i, j])
                    off[i, j] = self._block_off[i, j, state, self.level[i, j]]
                    length[i, j] = self.params.pool_size
        return off, length

    def probe_residuals_ms(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """[src, dst, count] residuals of probes sent now (they share the link's state and
        queue), 0 locally."""
        n, size = self.n_sites, self.params.pool_size
        out = np.zeros((n, n, count))
        for i in range(n):
            for j in range(n):
                if i != j:
                    state, level = int(self.congested[i, j]), self.level[i, j]
                    start = self._block_off[i, j, state, level]
                    out[i, j] = self.pool_ms[start + rng.integers(0, size, count)]
        return out
