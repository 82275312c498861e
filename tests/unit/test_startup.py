"""Start-up (issue 17): commands import only what they use; the warm-up compiles every kernel."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

from geoslo._warmup import compile_kernels
from geoslo.control.kurma import _solver_kernels, solve
from geoslo.control.kurma.example import example_problem
from geoslo.sim.kurma import BackendParams, RequestLevelSim, residual_wan_samples_ms
from geoslo.sim.kurma import _kernels as _sim_kernels

HEAVY = ("scipy.stats", "scipy.signal", "matplotlib", "ray")


def _imported_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("geoslo.cli", HEAVY + ("numba", "geoslo.control.kurma")),
        *[
            (f"geoslo.control.{system}", HEAVY)
            for system in ("kurma", "costlo", "director", "replication", "supercloud")
        ],
        ("geoslo.experiments.costlo", HEAVY),  # `costlo decide` runs its select_many
        ("geoslo.runtime", HEAVY),
        ("geoslo.dist", HEAVY),
        ("geoslo.models", HEAVY),
    ],
)
def test_import_leaves_heavy_modules_out(module: str, forbidden: tuple[str, ...]) -> None:
    loaded = _imported_after(module)
    assert module in loaded
    assert sorted(set(forbidden) & loaded) == []


def _signatures() -> dict[str, int]:
    kernels = {**vars(_solver_kernels), **{f"sim.{k}": v for k, v in vars(_sim_kernels).items()}}
    return {
        name: len(fn.signatures) for name, fn in kernels.items() if isinstance(fn, CPUDispatcher)
    }


def _other_problems():
    """Sizes, seeds, quanta and availability the warm-up does not use."""
    for n_sites, seed, quantum in [(3, 7, 0.02), (5, 8, 0.01), (7, 9, 0.02), (8, 3, 0.04)]:
        problem = replace(example_problem(n_sites, seed), quantum_fraction=quantum)
        unequal = problem.capacity_rps * np.linspace(1.0, 1.3, n_sites)
        available = np.ones(n_sites, dtype=bool)
        available[-1] = False
        for variant in (problem, replace(problem, capacity_rps=unequal)):
            yield variant
            yield replace(variant, available=available)


def _other_simulation(policy: str) -> None:
    """Two sites, reads only, a policy's own parameters: none of the warm-up's choices."""
    sim = RequestLevelSim(
        site_names=["x", "y"],
        backend=BackendParams(),
        rate_traces=[np.full(2, 150.0)] * 2,
        base_rtt_ms=np.array([[0.0, 15.0], [15.0, 0.0]]),
        residual_rtt_samples_ms=residual_wan_samples_ms(50, seed=3),
        seed=4,
        policy=policy,
    )
    sim.run(0.5, np.array([[0.8, 0.2], [0.0, 1.0]]))


def test_warmup_compiles_every_kernel_signature() -> None:
    """After the warm-up, solving other problems and simulating other sites compiles
    nothing (each signature is already in memory or loaded from NUMBA_CACHE_DIR)."""
    compile_kernels()
    before = _signatures()
    for problem in _other_problems():
        for objective in ("perf", "cost"):
            solve(problem, objective, time_limit_s=0.5)
    for policy in ("rates", "c3"):
        _other_simulation(policy)
    after = _signatures()
    assert {k: (before[k], v) for k, v in after.items() if v != before[k]} == {}
