"""Compile every numba kernel once, at install, so that no first call pays for it.

numba compiles a kernel the first time it is called with a new signature and, with
``cache=True``, stores the machine code in ``NUMBA_CACHE_DIR``; later processes load it.
A cold cache costs a first ``geoslo kurma decide`` about 20-50 s (issue 17, start-up).
``./dev`` runs ``geoslo warmup`` after installing and whenever a kernel's source changes;
one who installed with pip and did not is told so by the first call that compiles
(:func:`notice_if_cold`, one warning per process).

Kernel signatures depend on argument types (dtypes, dimensions, layouts), not sizes, so
one call of each entry point compiles it for every problem size; but the solver reaches
some entry points only on larger problems (the label DP and its Lagrangian bound from
4 sites, one or two receivers below that), so the warm-up solves a family of sizes and
both objectives. ``tests/unit/test_startup.py`` checks that solving other problems
afterwards compiles nothing new.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import ModuleType

__all__ = ["COLD_CACHE_NOTICE", "compile_kernels", "notice_if_cold", "WARMUP_SITES"]

WARMUP_SITES = (2, 3, 4, 5, 6)  # reaches one receiver, two receivers and the label DP
WARMUP_SEEDS = (0, 1)
SIM_SECONDS = 1.0  # one simulated second per routing policy
COLD_CACHE_NOTICE = (
    "geoslo: compiling the numba kernels for this machine, once (up to a minute); "
    "`geoslo warmup` after installing does it ahead of time"
)
_log = logging.getLogger("geoslo.warmup")
_checked: set[str] = set()  # kernel modules whose cache this process looked at
_told = False  # the notice is given once per process


def notice_if_cold(kernels: ModuleType) -> bool:
    """Before a first call into ``kernels`` (a module of numba kernels): if numba's cache holds
    none of them, warn once per process (COLD_CACHE_NOTICE, a ``logging`` warning: a plain
    line on stderr, a ``library_log`` record under ``geoslo run``). True if it warned."""
    global _told
    if _told or kernels.__name__ in _checked:
        return False
    _checked.add(kernels.__name__)
    if _has_cached_kernel(kernels):
        return False
    _told = True
    _log.warning(COLD_CACHE_NOTICE)
    return True


def _has_cached_kernel(kernels: ModuleType) -> bool:
    """Whether numba's cache holds machine code for any kernel of the module (numba's own
    index, the one it loads from: missing, or stale after an edit, counts as none). A module
    without cached kernels, or a numba whose cache is laid out otherwise, counts as cached:
    the notice is never given wrongly, at worst not given."""
    from numba.core.registry import CPUDispatcher

    dispatchers = [k for k in vars(kernels).values() if isinstance(k, CPUDispatcher)]
    # njit(cache=True) kernels have a FunctionCache with an index file; others a NullCache
    indexes = [getattr(getattr(d, "_cache", None), "_cache_file", None) for d in dispatchers]
    indexes = [index for index in indexes if index is not None]
    try:
        return not indexes or any(index._load_index() for index in indexes)
    except Exception:  # numba's private layout changed: never fail a call over a notice
        return True


def compile_kernels() -> dict[str, float]:
    """Compile (or load from the cache) every kernel; seconds spent per kernel module."""
    global _told
    _told = True  # this is the warm-up: no notice to run it
    return {
        "kurma solver": _timed(_kurma_solver),
        "kurma simulator": _timed(_kurma_simulator),
    }


def _timed(step: Callable[[], None]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def _kurma_solver() -> None:
    """Solve the example at every size in WARMUP_SITES, both objectives, with every site
    available and with one down (its demand is a constant of the objective, Kurma §5), with
    equal quanta (KurmaPerf's Lagrangian search) and unequal ones (the partition search)."""
    from dataclasses import replace

    import numpy as np

    from geoslo.control.kurma import solve
    from geoslo.control.kurma.example import example_problem

    for n_sites in WARMUP_SITES:
        for seed in WARMUP_SEEDS:
            problem = example_problem(n_sites, seed)
            one_down = np.arange(n_sites) != seed % n_sites
            unequal = problem.capacity_rps * (1.0 + 0.1 * np.arange(n_sites))  # partition search
            variants = (problem, replace(problem, available=one_down))
            for variant in (*variants, *(replace(v, capacity_rps=unequal) for v in variants)):
                for objective in ("perf", "cost"):
                    solve(variant, objective, time_limit_s=2.0)


def _kurma_simulator() -> None:
    """One simulated second per routing policy (Kurma §7.1), and one profiling run (§4.1)."""
    import numpy as np

    from geoslo.sim.kurma import (
        POLICIES,
        BackendParams,
        RequestLevelSim,
        profile_site,
        residual_wan_samples_ms,
    )

    rtt_ms = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])
    fractions = np.full((3, 3), 1.0 / 3.0)
    for policy in POLICIES:
        sim = RequestLevelSim(
            site_names=["a", "b", "c"],
            backend=BackendParams(),
            rate_traces=[np.full(3, 200.0)] * 3,
            write_fraction=0.1,
            base_rtt_ms=rtt_ms,
            residual_rtt_samples_ms=residual_wan_samples_ms(100, seed=0),
            seed=0,
            policy=policy,
        )
        sim.run(SIM_SECONDS, fractions)
    profile_site(BackendParams(), load_rps=100.0, write_fraction=0.1, duration_s=1.0, seed=0)
