"""A problem.json to try ``geoslo costlo select`` with, built from the simulated clouds.

The serving region is the prefix's closest S3-like region; the candidates are the closest
other region (§5.2's second region) and the next two closest, each with its agent's
concurrent pairs, pings to the prefix, relay rate and prices (§5.2's inputs).
"""

from __future__ import annotations

import numpy as np

from geoslo.control.costlo.decide import CostloProblem, RegionInput
from geoslo.control.costlo.types import PrefixWorkload, Slo
from geoslo.control.costlo.validation import problem_to_dict
from geoslo.errors import InputError
from geoslo.sim.costlo import DEFAULT_SAMPLES, CloudWorld, build_world, measure_storage, ping_ms

__all__ = ["EXAMPLE_WORKLOAD", "example_problem", "example_dict"]

# Illustrative read-heavy workload of 1 KB objects (§2), not the Wikipedia trace of §6.
EXAMPLE_WORKLOAD = PrefixWorkload(
    gets_per_month=10_000_000.0,
    puts_per_month=100_000.0,
    object_bytes=1024.0,
    stored_gb=1.0,
    peak_get_rps=10.0,
    peak_put_rps=0.1,
)
EXTRA_CANDIDATES = 2  # regions offered beyond the second one


def _region(world: CloudWorld, prefix: int, j: int, samples: int, seed: int) -> RegionInput:
    return RegionInput(
        name=world.regions[j].name,
        prices=world.regions[j].prices,
        storage=measure_storage(world, j, samples, seed=seed + 1 + 2 * j),
        ping_ms=ping_ms(world, prefix, j, samples, seed=seed + 2 + 2 * j),
        relay_rps=world.behaviours[j].relay_rps,
    )


def _check(world: CloudWorld, prefix: int, samples: int) -> None:
    if isinstance(prefix, bool) or not isinstance(prefix, int):
        raise InputError("--prefix", f"must be an integer, not {prefix!r}")
    if not 0 <= prefix < len(world.prefixes):
        raise InputError("--prefix", f"must be in [0, {len(world.prefixes) - 1}], not {prefix}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 10:
        raise InputError("--samples", f"must be an integer >= 10, not {samples!r}")


def example_problem(
    seed: int = 0,
    prefix: int = 0,
    samples: int = DEFAULT_SAMPLES,
    workload: PrefixWorkload = EXAMPLE_WORKLOAD,
    slo: Slo | None = None,
    world: CloudWorld | None = None,
) -> CostloProblem:
    """One prefix of the world of ``seed`` as ConfSelector's input (``samples`` pairs of
    each kind and pings per region; §6.5 uses 10K)."""
    world = world if world is not None else build_world(seed)
    _check(world, prefix, samples)
    serving, second = world.serving_and_second(prefix)
    order = [int(j) for j in np.argsort(world.base_rtt_ms[prefix], kind="stable")]
    others = [j for j in order if j not in (serving, second)][:EXTRA_CANDIDATES]
    return CostloProblem(
        workload=workload,
        serving=_region(world, prefix, serving, samples, seed),
        candidates=tuple(_region(world, prefix, j, samples, seed) for j in (second, *others)),
        slo=slo if slo is not None else Slo(),
    )


def example_dict(seed: int = 0, prefix: int = 0, samples: int = DEFAULT_SAMPLES) -> dict:
    """The problem.json of :func:`example_problem`, named after the prefix."""
    world = build_world(seed)
    problem = example_problem(seed, prefix, samples, world=world)
    return problem_to_dict(problem, prefix=world.prefixes[prefix].name)
