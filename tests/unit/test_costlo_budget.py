"""CosTLO's hedge budget (ours, after Finagle's RetryBudget): the window that enforces it,
its steady-state cap on the redundant set's probability in the estimator and
ConfSelector, its contract, and what it does on the simulated clouds during a
region-wide slowdown."""

from dataclasses import replace

import numpy as np
import pytest

from geoslo.control.costlo import (
    Configuration,
    GetTuple,
    HedgeBudget,
    PutTuple,
    SearchLimits,
    Slo,
    configuration_from_dict,
    configuration_to_dict,
    decide,
    example_problem,
    parse_problem,
    problem_to_dict,
    selection_to_dict,
)
from geoslo.control.costlo._budget import BudgetWindow
from geoslo.control.costlo.decide import prefix_context, region_view
from geoslo.errors import ConfigError, InputError
from geoslo.live.costlo._budget import BudgetWindow as LiveBudgetWindow
from geoslo.sim.costlo import Slowdown, build_world, get_operations, put_operations
from geoslo.sim.costlo._requests import budget_admits

# ------------------------------------------------------------------ the window

# (budget, events, expected answers of the "extra" events): events are
# ("primary", t_s, requests) or ("extra", t_s, requests).
WINDOW_CASES = {
    "a fifth of ten primaries admits two extras, not a third": (
        HedgeBudget(0.2, 10.0, 0.0),
        [("primary", 0.0, 10), ("extra", 0.1, 2), ("extra", 0.2, 1)],
        [True, False],
    ),
    "one set of three is refused whole, a set of two then fits": (
        HedgeBudget(0.2, 10.0, 0.0),
        [("primary", 0.0, 10), ("extra", 0.1, 3), ("extra", 0.2, 2)],
        [False, True],
    ),
    "primaries expire after the window": (
        HedgeBudget(0.5, 10.0, 0.0),
        [("primary", 0.0, 4), ("extra", 9.5, 1), ("extra", 10.5, 1)],
        [True, False],
    ),
    "extras expire too, freeing the budget": (
        HedgeBudget(0.5, 10.0, 0.0),
        [("primary", 0.0, 4), ("extra", 0.0, 2), ("primary", 10.5, 4), ("extra", 10.6, 2)],
        [True, True],
    ),
    "the reserve: min_extra_per_s x window_s with no primaries": (
        HedgeBudget(0.0, 10.0, 1.0),
        [("extra", 0.0, 6), ("extra", 1.0, 4), ("extra", 2.0, 1)],
        [True, True, False],
    ),
    "no fraction and no reserve: nothing extra": (
        HedgeBudget(0.0, 10.0, 0.0),
        [("primary", 0.0, 1000), ("extra", 0.0, 1)],
        [False],
    ),
    "a short window: 1 s, the extra at 0.5 s counts until 1.5-1.6 s": (
        HedgeBudget(1.0, 1.0, 0.0),
        [
            ("primary", 0.0, 1),
            ("extra", 0.5, 1),
            ("primary", 1.2, 1),
            ("extra", 1.3, 1),
            ("extra", 1.6, 1),
        ],
        [True, False, True],
    ),
}


@pytest.mark.parametrize("case", WINDOW_CASES, ids=list(WINDOW_CASES))
def test_window_admits_what_the_budget_allows(case):
    budget, events, expected = WINDOW_CASES[case]
    window = BudgetWindow(budget)
    answers = []
    for kind, t_s, requests in events:
        if kind == "primary":
            window.record_primary(t_s, requests)
        else:
            answers.append(window.try_extra(t_s, requests))
    assert answers == expected
    assert window.refused == expected.count(False)


@pytest.mark.parametrize(
    ("now_s", "primary", "extra"),
    [(0.5, 3, 1), (9.9, 5, 1), (10.5, 2, 0), (14.9, 2, 0), (15.5, 0, 0), (21.0, 0, 0)],
)
def test_window_counts_over_the_last_window_s(now_s, primary, extra):
    """Buckets of a tenth of the window: at t=0 three primaries and one extra, at t=5
    two primaries; each leaves the window within a bucket of window_s later."""
    window = BudgetWindow(HedgeBudget(1.0, 10.0, 0.0))
    window.record_primary(0.0, 3)
    assert window.try_extra(0.0, 1)
    window.record_primary(5.0, 2)
    assert window.counts(now_s) == (primary, extra)


def test_window_memory_is_bounded_by_its_buckets():
    window = BudgetWindow(HedgeBudget(0.2, 10.0, 0.0), buckets=10)
    for k in range(100_000):
        window.record_primary(k * 0.01)
        window.try_extra(k * 0.01, 1)
    assert len(window._primary) == len(window._extra) == len(window._index) == 10
    primary, extra = window.counts(1000.0)
    assert 900 <= primary <= 1000  # the last 9-10 s at 100/s
    assert extra <= 0.2 * primary + 1


def test_the_live_libraries_enforce_the_same_class():
    assert LiveBudgetWindow is BudgetWindow


# ------------------------------------------------------- the budget's arithmetic


@pytest.mark.parametrize(
    ("probability", "late_share", "extra", "fraction", "expected"),
    [
        (1.0, 0.1, 1, 0.2, 1.0),  # 10% of GETs x 1 extra: within 20%
        (1.0, 0.1, 2, 0.2, 1.0),  # exactly 20%: not capped
        (1.0, 0.1, 4, 0.2, 0.5),  # 40% wanted: half the sets
        (0.5, 1.0, 1, 0.2, 0.2),  # a zero timeout: every GET draws
        (0.3, 0.0, 3, 0.2, 0.3),  # nobody is late: nothing to cap
        (1.0, 0.5, 2, 0.0, 0.0),  # no budget at all
    ],
)
def test_capped_probability(probability, late_share, extra, fraction, expected):
    budget = HedgeBudget(fraction, 10.0, 10.0)
    got = budget.capped_probability(probability, late_share, extra)
    assert got == pytest.approx(expected)
    assert got * late_share * extra <= max(fraction, probability * late_share * extra) + 1e-12


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"extra_fraction": -0.1}, "hedge_budget.extra_fraction"),
        ({"window_s": 0.0}, "hedge_budget.window_s"),
        ({"window_s": float("inf")}, "hedge_budget.window_s"),
        ({"min_extra_per_s": -1.0}, "hedge_budget.min_extra_per_s"),
    ],
)
def test_bad_budgets_name_their_field(kwargs, field):
    with pytest.raises(ConfigError) as error:
        HedgeBudget(**kwargs)
    assert error.value.field == field


# ------------------------------------------------------------ the estimator


@pytest.fixture(scope="module")
def problem():
    return example_problem(samples=2_000)


@pytest.fixture(scope="module")
def context(problem):
    second = problem.second()
    return prefix_context(
        problem.workload,
        region_view(problem.serving),
        region_view(second),
        problem.slo,
        problem.limits,
    )


def _late(first, timeout_ms: float) -> float:
    return 1.0 if timeout_ms == 0.0 else float(first.tail_probability(timeout_ms))


@pytest.mark.parametrize(
    ("serving", "second", "timeout_ms", "probability", "fraction"),
    [
        (GetTuple(1, 2), GetTuple(1, 1), 0.0, 0.8, 0.2),  # binds: 0.8 x 2 > 0.2
        (GetTuple(1, 3), GetTuple(0), 40.0, 1.0, 0.05),
        (GetTuple(1, 1), GetTuple(1, 1), 60.0, 0.5, 0.2),  # may not bind
        (GetTuple(2, 2, True), GetTuple(1, 2), 30.0, 0.9, 0.1),
    ],
)
def test_estimator_uses_the_capped_get_probability(
    context, serving, second, timeout_ms, probability, fraction
):
    """The capped p against a direct computation; the tail and the request cost are
    those of the same configuration at the capped p without a budget."""
    budget = HedgeBudget(fraction, 10.0, 10.0)
    plain = Configuration(serving, second, get_timeout_ms=timeout_ms, get_probability=probability)
    budgeted = replace(plain, hedge_budget=budget)
    estimator = context.readers[0].get
    late = _late(estimator.first, timeout_ms)
    extra = plain.get_requests - 1
    direct = min(probability, fraction / (late * extra))
    assert estimator.probability(budgeted) == pytest.approx(direct)
    assert estimator.redundant_fraction(budgeted) * extra <= fraction + 1e-9
    at_cap = replace(plain, get_probability=estimator.probability(budgeted))
    assert np.array_equal(estimator.distribution(budgeted).pmf, estimator.distribution(at_cap).pmf)
    assert context.cost(budgeted) == context.cost(at_cap)


def test_estimator_uses_the_capped_put_probability(context):
    budget = HedgeBudget(0.1, 10.0, 10.0)
    plain = Configuration(put=PutTuple(2, 2), put_timeout_ms=0.0, put_probability=0.9)
    budgeted = replace(plain, hedge_budget=budget)
    estimator = context.put
    direct = min(0.9, 0.1 / 3)
    assert estimator.probability(budgeted) == pytest.approx(direct)
    at_cap = replace(plain, put_probability=direct)
    assert context.cost(budgeted) == context.cost(at_cap)
    assert np.array_equal(estimator.distribution(budgeted).pmf, estimator.distribution(at_cap).pmf)


def test_a_budget_that_does_not_bind_changes_nothing(context):
    plain = Configuration(GetTuple(1, 1), GetTuple(1, 1), get_timeout_ms=60.0, get_probability=0.3)
    loose = replace(plain, hedge_budget=HedgeBudget(10.0, 10.0, 0.0))
    estimator = context.readers[0].get
    assert estimator.probability(loose) == 0.3
    assert context.cost(loose) == context.cost(plain)


# ------------------------------------------------------------- ConfSelector


def _decide(problem, budget, slo=None):
    limits = replace(problem.limits, hedge_budget=budget)
    return decide(replace(problem, limits=limits, slo=slo or problem.slo))


def test_selector_chooses_differently_when_the_budget_binds(problem):
    free = _decide(problem, None)
    loose = _decide(problem, HedgeBudget(10.0, 10.0, 10.0))
    tight = _decide(problem, HedgeBudget(0.01, 10.0, 0.0))
    assert free.met and free.configuration.get_redundant
    # A budget the choice stays within: the same choice, now carrying the budget.
    assert replace(loose.configuration, hedge_budget=None) == free.configuration
    assert loose.configuration.hedge_budget == HedgeBudget(10.0, 10.0, 10.0)
    assert loose.cost == free.cost
    # A budget of 1% cannot pay for the redundancy the SLO needs: another answer.
    assert replace(tight.configuration, hedge_budget=None) != free.configuration
    estimator_load = tight.cost.requests_usd
    assert estimator_load <= free.cost.requests_usd
    assert tight.outcome.status in {"infeasible", "feasible", "time_limit"}
    if tight.met:
        assert tight.cost.total_usd >= free.cost.total_usd


def test_selected_configuration_stays_within_its_budget(problem, context):
    budget = HedgeBudget(0.1, 10.0, 0.0)
    chosen = _decide(problem, budget).configuration
    estimator = context.readers[0].get
    extra = chosen.get_requests - 1
    assert chosen.hedge_budget == budget
    assert estimator.redundant_fraction(chosen) * extra <= budget.extra_fraction + 1e-9


def test_the_clients_capacity_caps_the_requests_a_get_may_issue(problem, context):
    """``max_requests_per_get`` (issue 41, item 3): a client that can afford fewer storage
    requests than the free choice issues gets a choice within them; the cap carried in
    the contract round-trips, and one below 1 is refused."""
    from geoslo.control.costlo.search import expected_get_requests

    free = decide(problem)
    free_requests = expected_get_requests(context, free.configuration)
    assert free_requests > 1.01, "the example's free choice must hedge for this test"
    cap = 1.0 + (free_requests - 1.0) / 2.0
    capped = decide(replace(problem, limits=replace(problem.limits, max_requests_per_get=cap)))
    assert expected_get_requests(context, capped.configuration) <= cap + 1e-9
    assert capped.configuration != free.configuration
    limits = replace(problem.limits, max_requests_per_get=cap)
    again = parse_problem(problem_to_dict(replace(problem, limits=limits)))
    assert again.limits.max_requests_per_get == pytest.approx(cap)
    with pytest.raises(ConfigError, match="max_requests_per_get"):
        replace(problem.limits, max_requests_per_get=0.5)


# ------------------------------------------------------------- the contract


def test_configuration_round_trips_with_and_without_a_budget():
    plain = Configuration(GetTuple(1, 2), GetTuple(1, 1), get_timeout_ms=40.0)
    assert "hedge_budget" not in configuration_to_dict(plain)  # absent stays absent
    assert configuration_from_dict(configuration_to_dict(plain)) == plain
    budgeted = replace(plain, hedge_budget=HedgeBudget(0.3, 5.0, 2.0))
    data = configuration_to_dict(budgeted)
    assert data["hedge_budget"] == {"extra_fraction": 0.3, "window_s": 5.0, "min_extra_per_s": 2.0}
    assert configuration_from_dict(data) == budgeted
    assert configuration_from_dict({**data, "hedge_budget": None}) == plain


def test_problem_round_trips_its_budget(problem):
    with_budget = replace(problem, limits=SearchLimits(hedge_budget=HedgeBudget(0.1, 20.0, 1.0)))
    data = problem_to_dict(with_budget)
    assert data["limits"]["hedge_budget"]["window_s"] == 20.0
    assert parse_problem(data).limits == with_budget.limits
    assert "hedge_budget" not in problem_to_dict(problem)["limits"]
    assert parse_problem(problem_to_dict(problem)).limits.hedge_budget is None


def test_selection_output_carries_the_budget(problem):
    budget = HedgeBudget(10.0, 10.0, 10.0)
    out = selection_to_dict(_decide(problem, budget))
    assert out["configuration"]["hedge_budget"]["extra_fraction"] == 10.0


@pytest.mark.parametrize(
    ("budget", "field", "words"),
    [
        ({"extra_fraction": -0.1}, "limits.hedge_budget.extra_fraction", "in [0, 10]"),
        ({"window_s": 0}, "limits.hedge_budget.window_s", "in (0, 3600]"),
        ({"min_extra_per_s": -1}, "limits.hedge_budget.min_extra_per_s", "in [0, 1e+09]"),
        ({"fraction": 0.2}, "limits.hedge_budget.fraction", ""),
    ],
)
def test_schema_errors_name_the_budget_field(problem, budget, field, words):
    data = problem_to_dict(problem)
    data["limits"]["hedge_budget"] = budget
    with pytest.raises(InputError) as error:
        parse_problem(data)
    assert error.value.field == field
    assert words in error.value.problem


# ------------------------------------------------------ the simulated clouds

RATE_RPS = 200.0
RUN_S = 90.0
SLOW_FROM_S, SLOW_UNTIL_S = 30.0, 60.0  # 30 simulated seconds
BUDGET = HedgeBudget()  # Finagle's: 20%, 10 s, 10 extra/s


@pytest.fixture(scope="module")
def slowdown_run():
    """Prefix 0's GETs at 200/s for 90 s; its serving region 10x slower in [30 s, 60 s).
    The configuration hedges every GET unanswered at the baseline's p90 with two more
    requests (one in the serving region, one in the second): 20% extra in steady state,
    200% during the slowdown."""
    world = build_world(0, 5)
    serving, second = world.serving_and_second(0)
    n = int(RATE_RPS * RUN_S)
    arrival_s = np.arange(n) / RATE_RPS
    slowdown = Slowdown(serving, SLOW_FROM_S, SLOW_UNTIL_S, 10.0)

    def run(configuration):
        return get_operations(
            world, 0, serving, second, configuration, n, 7, arrival_s=arrival_s, slowdown=slowdown
        )

    baseline = run(Configuration())
    timeout_ms = float(np.ceil(np.percentile(baseline.latency_ms[arrival_s < SLOW_FROM_S], 90)))
    hedged = Configuration(
        GetTuple(1, 2), GetTuple(1, 1), get_timeout_ms=timeout_ms, get_probability=1.0
    )
    return {
        "arrival_s": arrival_s,
        "timeout_ms": timeout_ms,
        "baseline": baseline,
        "unbudgeted": run(hedged),
        "budgeted": run(replace(hedged, hedge_budget=BUDGET)),
    }


def _worst_excess(arrival_s, sample, timeout_ms) -> float:
    """The most extra storage requests over what the budget allows, over every 10 s
    window (ends a second apart), extras counted when issued (at the timeout)."""
    extra = sample.storage_requests - 1
    issued_s = arrival_s + timeout_ms / 1e3
    worst = -np.inf
    for end_s in np.arange(BUDGET.window_s, RUN_S + 1.0, 1.0):
        start_s = end_s - BUDGET.window_s
        primaries = np.count_nonzero((arrival_s > start_s) & (arrival_s <= end_s))
        extras = extra[(issued_s > start_s) & (issued_s <= end_s)].sum()
        worst = max(worst, extras - BUDGET.allowed_extra(primaries))
    return float(worst)


def test_budget_bounds_extra_requests_during_a_slowdown(slowdown_run):
    """Within the budget, with a margin of a tenth of it for the window's bucket
    granularity (the window counts the last 9-10 s); without it, far beyond."""
    r = slowdown_run
    allowed = BUDGET.allowed_extra(RATE_RPS * BUDGET.window_s)
    budgeted = _worst_excess(r["arrival_s"], r["budgeted"], r["timeout_ms"])
    unbudgeted = _worst_excess(r["arrival_s"], r["unbudgeted"], r["timeout_ms"])
    assert budgeted <= 0.1 * allowed
    assert unbudgeted > 2.0 * allowed  # 200% extra against 20% + the reserve
    assert r["budgeted"].budget_refused.sum() > 0
    assert r["unbudgeted"].budget_refused is None


def test_budgeted_p99_during_a_slowdown_is_no_worse_than_no_redundancy(slowdown_run):
    r = slowdown_run
    during = (r["arrival_s"] >= SLOW_FROM_S) & (r["arrival_s"] < SLOW_UNTIL_S)
    budgeted = np.percentile(r["budgeted"].latency_ms[during], 99)
    plain = np.percentile(r["baseline"].latency_ms[during], 99)
    assert budgeted <= 1.05 * plain


def test_budget_admits_in_time_order():
    """Ten primaries a second, each wanting 1 extra 0.1 s later, a budget of 20% over
    1 s: the first asks see 2, 3, 4 primaries (under 1 extra's worth: refused), the
    fourth sees 5 (admitted); about a fifth of all are admitted."""
    budget = HedgeBudget(0.2, 1.0, 0.0)
    arrival_s = np.arange(100) / 10.0
    admitted = budget_admits(budget, arrival_s, np.ones(100, bool), 0.1, 1)
    assert not admitted[:3].any() and admitted[3]
    assert 15 <= admitted.sum() <= 25


def test_simulated_puts_obey_the_budget():
    world = build_world(0, 5)
    serving, _ = world.serving_and_second(0)
    c = Configuration(put=PutTuple(1, 3), put_timeout_ms=0.0, put_probability=1.0)
    n = 2_000
    arrival_s = np.arange(n) / 100.0
    free = put_operations(world, 0, serving, c, n, 3, arrival_s=arrival_s)
    capped = put_operations(
        world,
        0,
        serving,
        replace(c, hedge_budget=HedgeBudget(0.5, 10.0, 0.0)),
        n,
        3,
        arrival_s=arrival_s,
    )
    assert free.redundant.all()
    extra = capped.storage_requests.sum() - n
    assert extra <= 0.5 * n + 2
    assert capped.budget_refused.sum() > 0


def test_a_budget_needs_arrival_times():
    world = build_world(0, 5)
    serving, second = world.serving_and_second(0)
    c = Configuration(GetTuple(1, 2), hedge_budget=HedgeBudget())
    with pytest.raises(InputError, match="arrival_s"):
        get_operations(world, 0, serving, second, c, 10, 0)


def test_no_budget_slo_default_is_unchanged():
    assert SearchLimits().hedge_budget is None
    assert Configuration().hedge_budget is None
    assert Slo() == Slo()


def test_geoslo_run_settings_carry_the_budget():
    from pydantic import ValidationError

    from geoslo.runtime.costlo import CostloSettings

    settings = CostloSettings(hedge_budget={"extra_fraction": 0.1, "window_s": 5.0})
    assert settings.limits().hedge_budget == HedgeBudget(0.1, 5.0, 10.0)
    assert CostloSettings().limits().hedge_budget is None
    with pytest.raises(ValidationError, match="window_s"):
        CostloSettings(hedge_budget={"window_s": 0.0})


def test_the_vm_librarys_write_retries_draw_on_its_hedge_budget(tmp_path):
    """A PUT's retries are extra storage requests (issue 38, item 4): the library's retry
    gate asks its budget for one each, so they exhaust the reserve like hedges do; without
    a budget there is no gate."""
    import asyncio

    from geoslo.live.costlo import VmLibrary
    from geoslo.live.costlo._objects import RegionEndpoints, Regions

    budget = HedgeBudget(extra_fraction=0.0, window_s=1.0, min_extra_per_s=3.0)
    regions = Regions(RegionEndpoints((1,), None))

    def library(configuration):
        return VmLibrary(configuration, regions, 1, tmp_path / "log", "vm")

    assert library(Configuration())._retry_gate() is None
    budgeted = library(Configuration(hedge_budget=budget))

    async def ask(times: int) -> list[bool]:
        gate = budgeted._retry_gate()
        return [await gate() for _ in range(times)]

    assert asyncio.run(ask(5)) == [True, True, True, False, False]  # the reserve of 3
    assert budgeted.retries_refused == 2 and budgeted.budget.window.refused == 2
