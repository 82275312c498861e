"""Reproduction of CosTLO's evaluation (NSDI 2015, §6-§7) on the simulated clouds.

``reproduce(out_dir, quick)`` builds the world and the agents' view of it, runs every
figure's experiment and writes the report; ``check_done`` holds the issue's checks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from geoslo.experiments.costlo import _figures
from geoslo.experiments.costlo._example import example_dict, example_problem
from geoslo.experiments.costlo._live import LiveSettings, live_report
from geoslo.experiments.costlo._many import select_many
from geoslo.experiments.costlo._study import Settings, Study, build_study
from geoslo.report import Report, load_paper_values

__all__ = [
    "PAPER_VALUES",
    "LiveSettings",
    "live_report",
    "Settings",
    "Study",
    "build_study",
    "check_done",
    "example_dict",
    "example_problem",
    "reproduce",
    "select_many",
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

DIFFERENCES = """\
* **The clouds are simulated.** The paper measured S3 and Azure from PlanetLab for a week. Our
  ground truth has the structure the paper measured (S3: concurrent requests share the network
  latency, GETs spread over 2 replicas; Azure: independent network latencies, 1 replica,
  serialised PUTs), with spike rates chosen so that the median prefix's baseline inflation lands
  near the paper's (GET about 70 ms, PUT about 200 ms). The inference must find the structure
  from the agents' pairs; it does, in every region.
* **SLOs met by about half the prefixes, within 5 ms by almost all (Fig. 13).** The search
  stops at the cheapest configuration whose estimate meets the SLO, so estimates sit just under
  it. The estimate is nearly unbiased (measured minus estimated: +0.5 to +1.2 ms at the median,
  from DNS misses and relay overhead that the estimator, like the paper's, does not model), and
  a p99 of 40K operations scatters by a few ms. The paper reports most nodes within the SLO;
  its coarser steps left more slack. Aiming 3 ms under the SLO (`slo_margin_ms`) meets it
  on 91% of prefixes (6 ms: 97%) for under a point of extra cost (table `fig13_margin`).
* **Cheaper than the paper.** Halving the median prefix's inflation costs 4.4% here against
  25%; at a 70 ms SLO 0.9% against under 8%; the timeout and probability save up to 17 points
  against 48. Our objects are 1 KB (§2's measurements), so requests, not bandwidth, dominate
  the bill, and an Azure-like GET is about ten times cheaper than an S3-like one; the second
  region is Azure-like for most prefixes. The probability is solved, not stepped, at every
  timeout, which finds cheaper configurations than stepping through a grid.
* **Strategies (Fig. 17a).** As in the paper, requests to one copy (S1) meet a 30 ms SLO on few
  prefixes (28%, paper: a little over 10%), relays do not change that (S2), and combining all
  dimensions meets it everywhere. A second region alone (S4) already meets it on 98% of prefixes
  (paper: under 60%), because the closest region of the other provider is within 25 ms for
  almost all of our prefixes.
* **Workload.** A week of Wikipedia's English page requests (January 2016, 1% sample, 30% of
  GETs to distinct objects, one PUT per ten GETs for the PUT experiments: our choices, the paper
  gives none). Its cost shares matter, its absolute volume does not.
* **Application SLOs (Fig. 14)** use one configuration for all of a user's followers (the
  paper extends the representation with every follower's tuples), and the follower groups are
  drawn from the prefixes served by the user's region.
"""


def reproduce(out_dir: str | Path, quick: bool = False, seed: int = 1) -> Path:
    """Run every CosTLO experiment and write the report; returns the path of index.md."""
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
    }
    checks = check_done(results)
    report.checks(checks, "The issue's checks on this run's numbers.")
    report.section("Still differs from the paper, and why", DIFFERENCES)
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
    }
