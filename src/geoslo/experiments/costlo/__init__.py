"""Reproduction of CosTLO's evaluation (NSDI 2015, §6-§7) on the simulated clouds.

``reproduce(out_dir, quick)`` builds the world and the agents' view of it, runs every
figure's experiment and writes the report; ``check_done`` holds the issue's checks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from geoslo.control.costlo.example import example_dict, example_problem  # the CLI's example
from geoslo.experiments.costlo._live import LiveSettings, budget_excess, live_report
from geoslo.experiments.costlo._many import select_many
from geoslo.experiments.costlo._study import Settings, Study, build_study
from geoslo.experiments.costlo._truth import ground_truth, truth_text
from geoslo.report import Report, load_paper_values

__all__ = [
    "PAPER_VALUES",
    "LiveSettings",
    "budget_excess",
    "live_report",
    "Settings",
    "Study",
    "build_study",
    "check_done",
    "differences",
    "example_dict",
    "example_problem",
    "reproduce",
    "select_many",
    "truth_text",
]

PAPER_VALUES = Path(__file__).parent / "data" / "paper.json"

INTRO = (
    "CosTLO (Wu, Yu, Madhyastha, NSDI 2015) adds redundant GET/PUT requests, chosen for the "
    "lowest cost, to bound the spread between the 99th percentile and the median latency on "
    "cloud storage. Everything below runs on geoslo's simulated clouds: S3-like and Azure-like "
    "regions at their real locations, 120 client prefixes, isolated latency spikes in DNS, the "
    "Internet, data-centre networks and storage services. ConfSelector sees only its agents' "
    "measurements (10K samples each); the 'measured' numbers are fresh ground-truth operations. "
    "The 'paper' column quotes the paper; ours is computed."
)


def differences(results: dict) -> str:
    """Where this run differs from the paper, every number taken from ``results``."""
    fig13 = results["fig13"]["rows"]
    bias = [r["median_measured_minus_estimated_ms"] for r in fig13]
    margins = {r["slo_margin_ms"]: r for r in results["fig13"]["margin_rows"]}
    by_slo = {r["slo_ms"]: r["total_overhead_pct"] for r in results["fig16"]["rows"]}
    saved = [r["overhead_without_pct"] - r["overhead_with_pct"] for r in results["fig17"]["rows_b"]]
    strategies = {r["strategy"][:2]: r["slo_met_fraction"] for r in results["fig17"]["rows_a"]}
    met = [r["met_fraction"] for r in fig13]
    within = min(r["within_5ms_fraction"] for r in fig13)
    c, d = (results["truth"]["per_truth"][t] for t in ("circular", "departing"))
    margin_text = ", ".join(
        f"{m:g} ms under it meets it on {r['met_fraction']:.0%} of prefixes for "
        f"{r['total_overhead_pct']:.1f}% extra cost"
        for m, r in sorted(margins.items())
        if m > 0
    )
    return f"""\
* **The clouds are simulated.** The paper measured S3 and Azure from PlanetLab for a week. Our
  ground truth has the structure the paper measured (S3: concurrent requests share the network
  latency, GETs spread over 2 replicas; Azure: independent network latencies, 1 replica,
  serialised PUTs), with spike rates chosen so that the median prefix's baseline inflation lands
  near the paper's. The inference must find the structure from the agents' pairs. This ground
  truth is built with the structure the estimator assumes, so agreement with it shows
  self-consistency, not that the estimator holds on a real cloud. On the same world with
  slowdowns that persist (the section above), the p99 of a GET re-sent to the same copy is
  estimated {d["resent_p99_error_pct"]:+.1f}% off (circular {c["resent_p99_error_pct"]:+.1f}%),
  that of Fig. 15's 8 GETs {d["vm_median_abs_p99_error_pct"]:.0f}% off (circular
  {c["vm_median_abs_p99_error_pct"]:.1f}%), and a {d["slo_ms"]:.0f} ms SLO is met on
  {d["met_fraction"]:.0%} of prefixes instead of {c["met_fraction"]:.0%}.
* **SLOs met by {min(met):.0%}-{max(met):.0%} of prefixes, within 5 ms by at least
  {within:.0%} (Fig. 13).** The search stops at the cheapest configuration whose estimate meets
  the SLO, so estimates sit just under it. Measured minus estimated at the median:
  {min(bias):+.1f} to {max(bias):+.1f} ms (DNS misses and relay overhead, which the estimator,
  like the paper's, does not model); a p99 measured on a finite sample scatters by a few ms. Aiming
  {margin_text} (table `fig13_margin`).
* **Cost.** Halving the median prefix's inflation costs
  {100 * results["headline"]["cost_increase_fraction"]:.1f}% more here; a 70 ms SLO costs
  {by_slo.get(70.0, float("nan")):.1f}% more; the timeout and probability save up to
  {max(saved):.1f} points of overhead (Fig. 17b). The paper's values are in the tables above.
  Our objects are 1 KB (§2's measurements), so requests, not bandwidth, dominate the bill, and
  an Azure-like GET is about ten times cheaper than an S3-like one. The probability is solved,
  not stepped, at every timeout.
* **Strategies (Fig. 17a).** Requests to one copy (S1) meet a 30 ms SLO on
  {strategies["S1"]:.0%} of prefixes, relays give {strategies["S2"]:.0%} (S2), copies
  {strategies["S3"]:.0%} (S3), a second region {strategies["S4"]:.0%} (S4), and CosTLO's
  combination of all dimensions {strategies["Co"]:.0%}.
* **Workload.** A week of Wikipedia's English page requests (January 2016, 1% sample, 30% of
  GETs to distinct objects, one PUT per ten GETs for the PUT experiments: our choices, the paper
  gives none). Its cost shares matter, its absolute volume does not.
* **Application SLOs (Fig. 14)** use one configuration for all of a user's followers (the
  paper extends the representation with every follower's tuples), and the follower groups are
  drawn from the prefixes served by the user's region.
"""


def reproduce(out_dir: str | Path, quick: bool = False, seed: int = 1) -> Path:
    """Run every CosTLO experiment and write the report; returns the path of index.md."""
    from geoslo.experiments.costlo import _figures  # matplotlib: not for `costlo decide`

    settings = Settings.quick() if quick else Settings()
    paper = load_paper_values(PAPER_VALUES)
    report = Report(
        "CosTLO: cost-effective redundancy for lower latency variance"
        + (" (quick)" if quick else ""),
        INTRO,
    )
    started = time.perf_counter()
    study = build_study(settings, seed)
    results = {
        "fig13": _figures.fig1_13(study, report, paper),
        "fig5": _figures.fig5(study, report, paper),
        "put_slos": _figures.put_slos(study, report, paper),
        "headline": _figures.headline(study, report, paper),
        "fig15": _figures.fig15(study, report, paper),
        "fig16": _figures.fig16(study, report, paper),
        "fig17": _figures.fig17(study, report, paper),
        "fig14": _figures.fig14(study, report, paper),
        "fig18a": _figures.fig18a(study, report, paper),
        "truth": ground_truth(study, report, paper),
    }
    checks = check_done(results)
    report.checks(checks, "The issue's checks on this run's numbers.")
    report.section("Still differs from the paper, and why", differences(results))
    elapsed_s = time.perf_counter() - started
    report.text(f"Run time: {elapsed_s:.0f} s; seed {seed}; {len(study.world.prefixes)} prefixes.")
    report.data("results", results)
    index = report.write(out_dir)
    (Path(out_dir) / "checks.json").write_text(json.dumps(checks, indent=2) + "\n")
    return index


def check_done(results: dict) -> dict[str, bool]:
    """The issue's acceptance checks that a reproduction can show."""
    fig15 = results["fig15"]["rows"]
    same = [r for r in fig15 if r["requests"] == "same object"]
    headline = results["headline"]
    return {
        "estimate p99 within 5% of truth in the median S3 region (8 GETs, one object)": results[
            "fig15"
        ]["median_error_fraction"]
        <= 0.05,
        "naive estimate visibly below the truth (every S3 region, p99 >= 20% lower)": all(
            r["naive_p99_ms"] <= 0.8 * r["measured_p99_ms"] for r in same
        ),
        "median client's inflation halved (measured, 5% slack)": headline["measured_ms"]
        <= 0.525 * headline["baseline_ms"],
        "at a cost increase in the paper's range (at most 50%)": headline["cost_increase_fraction"]
        <= 0.5,
    } | truth_checks(results["truth"])


def truth_checks(truth: dict) -> dict[str, bool]:
    """Claims about the ground truth the model does not assume (issue 23): it exposes the
    independence the estimator assumes, the estimate holds where that assumption holds,
    and ConfSelector's choices miss there by a bounded amount."""
    c, d = truth["per_truth"]["circular"], truth["per_truth"]["departing"]
    slo_ms, median_ms = d["slo_ms"], d["median_measured_ms"]
    second = next(
        r
        for r in truth["estimate_rows"]
        if r["truth"] == "departing" and r["probe"] == "GET re-sent to the second region"
    )
    return {
        "departing truth: a GET re-sent to the same copy is under-estimated (p99) by at least "
        "3 points more than on the circular truth": d["resent_p99_error_pct"]
        <= c["resent_p99_error_pct"] - 3.0,
        "departing truth: re-sent to the second region (independent path and servers), the p99 "
        "estimate is within 5%": abs(second["median_p99_error_pct"]) <= 5.0,
        f"departing truth: at the median prefix, ConfSelector's choice stays within SLO + "
        f"10 ms (SLO {slo_ms:.0f} ms, measured)": median_ms <= slo_ms + 10.0,
    }
