"""`geoslo reproduce supercloud --live`: follow the sun against a fixed US and a fixed global
ensemble, on a live ZooKeeper ensemble over IBM Cloud sites (``_live_sun``); with ``--vm``
the same day on live-migrated VMs beside §5.2.2's reconfigurations (``_live_vm_sun``)."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from geoslo.errors import GeosloError, TestbedError
from geoslo.experiments.supercloud._live_sun import (
    ENSEMBLES,
    FIXED_GLOBAL,
    FIXED_US,
    FOLLOW,
    HOURS,
    LiveSunRun,
    LiveSunSettings,
    run_live_ensemble,
)
from geoslo.report import Report

__all__ = ["reproduce_live_sun", "check_live_sun"]

# Proactive propagation (§4.1.3) should have the blocks a moved VM reads there before it
# arrives; on demand, each is fetched on its first read (tests/integration/
# test_supercloud_live_images.py shows both).
IMAGE_LOCAL_READS = 0.75
# A comparison of two ensembles is judged over the compressed hours (after the first): the
# mean hourly difference's bootstrap interval (90%, resampling hours) must lie above zero
# to pass and below it to fail; one that straddles zero is within the run's own spread
# (issue 41: the ops/s check hinged on a 0.7% gap): inconclusive.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_CONFIDENCE = 0.90

INTRO = (
    "The Supercloud's follow-the-sun scheduler (SoCC 2016 §5.1) moving a real ZooKeeper 3.8 "
    "ensemble by dynamic reconfiguration, against the same ensemble kept in one place. Each "
    "site is a network namespace; each pair of sites is apart by the RTT IBM Cloud measured "
    "between those regions (the project's delay proxy); each site's clients follow their "
    "local day in a compressed day, their pause after each operation set by the Wikipedia "
    "trace's load at that local hour. The scheduler sees each site's requests and the RTTs "
    "it probes every interval, and nothing else."
)


def reproduce_live_sun(
    out_dir: str | Path, quick: bool = False, seed: int = 0, progress=print, vm: bool = False
) -> Path:
    """Run the three ensembles one after the other and write the report; with ``vm``,
    then the same schedule on live-migrated VMs beside §5.2.2's reconfigurations
    (``_live_vm_sun``)."""
    from geoslo.live.supercloud.zookeeper import cannot_run_reason

    reason = cannot_run_reason()
    if reason:
        raise TestbedError(f"the live ZooKeeper testbed cannot run here: {reason}")
    settings = LiveSunSettings.quick() if quick else LiveSunSettings()
    settings = LiveSunSettings(**{**asdict(settings), "seed": seed})
    out = Path(out_dir)
    run_dir = out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    runs = {}
    for ensemble in ENSEMBLES:
        progress(f"supercloud live: {ensemble}, a day of {settings.day_s / 60:.0f} min")
        runs[ensemble] = run_live_ensemble(
            settings, ensemble, run_dir / ensemble.replace(" ", "-"), progress
        )
    results = live_sun_results(runs, settings)
    results["elapsed_s"] = time.monotonic() - started
    report = Report("Supercloud: follow the sun, live" + (" (quick)" if quick else ""), INTRO)
    _write(report, runs, settings, results)
    checks = check_live_sun(results)
    if vm:
        checks |= _vm_section(report, settings, run_dir, runs, results, progress)
    report.checks(checks)
    index = report.write(out)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    return index


def _vm_section(report, settings: LiveSunSettings, run_dir: Path, runs, results, progress):
    """The same schedule on live-migrated VMs (``_live_vm_sun``); its checks."""
    from geoslo.experiments.supercloud._live_vm_sun import (
        VmSunSettings,
        check_vm_sun,
        measure_vm_sun,
        vm_sun_section,
    )
    from geoslo.experiments.supercloud._report import PAPER_VALUES
    from geoslo.report import load_paper_values

    vm_settings = VmSunSettings(sun=settings)
    started = time.monotonic()
    progress(f"supercloud live: the same day on live-migrated VMs ({settings.day_s / 60:.0f} min)")
    try:
        vm = measure_vm_sun(
            vm_settings, run_dir / "vms",
            runs[FOLLOW].reconfigurations if FOLLOW in runs else None, progress,
        )  # fmt: skip
    except GeosloError as error:  # the ensembles' report stands; the section says why not
        report.section("Follow the sun by live VM migration (§5.2, Figs. 6-7)")
        report.text(f"The VMs' day could not run: {error}.")
        return {"live VMs: the same day by live migration": None}
    vm_sun_section(report, vm, vm_settings, load_paper_values(PAPER_VALUES))
    report.text(f"This section added {time.monotonic() - started:.0f} s to the run.")
    results["vm"] = vm
    results["vm_elapsed_s"] = time.monotonic() - started
    return check_vm_sun(vm)


def live_sun_results(runs: dict[str, LiveSunRun], settings: LiveSunSettings) -> dict:
    rows = []
    for ensemble, run in runs.items():
        per_second = run.per_second(settings.day_s)
        measured = per_second[int(settings.hour_s) :]  # the first hour warms up
        bound = settings.bound_ms
        durations = [r["end_unix_s"] - r["start_unix_s"] for r in run.reconfigurations]
        rows.append(
            {
                "ensemble": ensemble,
                f"reads within {bound:g} ms %": 100 * run.share_within(bound, True),
                f"writes within {bound:g} ms %": 100 * run.share_within(bound, False),
                "ops/s": float(measured.mean()) if measured.size else 0.0,
                "ops/s per hour": _hourly_mean(measured, settings.hour_s),
                f"within {bound:g} ms % per hour": run.hourly_within(
                    bound, settings.hour_s, HOURS
                )[1:],
                "worst second (ops)": float(measured.min()) if measured.size else 0.0,
                "reconfigurations": len(run.reconfigurations),
                "failed reconfigurations": sum(not r["ok"] for r in run.reconfigurations),
                "longest reconfiguration (s)": max(durations, default=0.0),
                "leader sites": len({p["leader"] for p in run.placements}),
                "refused plans": run.refused,
                "failed observations": len(run.failures),
            }
        )  # fmt: skip
    return {
        "settings": asdict(settings),
        "ensembles": rows,
        "placements": {e: r.placements for e, r in runs.items()},
        "reconfigurations": {e: r.reconfigurations for e, r in runs.items()},
        "failures": {e: r.failures for e, r in runs.items()},
        "image_moves": runs[FOLLOW].image_moves if FOLLOW in runs else [],
    }


def _hourly_mean(per_second: np.ndarray, hour_s: float) -> list[float]:
    """The mean of ``per_second`` over each whole compressed hour."""
    n = int(per_second.size // hour_s)
    step = int(hour_s)
    return [float(per_second[k * step : (k + 1) * step].mean()) for k in range(n)]


def paired_verdict(ours, theirs, seed: int = 0) -> bool | None:
    """Is ``ours`` above ``theirs``, hour by hour? True when the bootstrap interval of the
    mean hourly difference lies above zero, False below, None (inconclusive) across it;
    False when there are no hours to compare."""
    d = np.asarray(ours, float) - np.asarray(theirs, float)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return False
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, (BOOTSTRAP_RESAMPLES, d.size))].mean(axis=1)
    tail = (1 - BOOTSTRAP_CONFIDENCE) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return True if low > 0 else False if high < 0 else None


def check_live_sun(results: dict) -> dict[str, bool | None]:
    """§5.1's pattern, as the simulated reproduction checks it (``check_sun``): follow the
    sun has more reads and writes within the bound than either fixed ensemble, and more
    throughput, hour by hour beyond the run's own spread (``paired_verdict``); its leader
    moves; every reconfiguration it starts finishes."""
    rows = {r["ensemble"]: r for r in results["ensembles"]}
    bound = results["settings"]["bound_ms"]
    fast = f"within {bound:g} ms % per hour"
    follow = rows[FOLLOW]
    checks: dict[str, bool | None] = {}
    for other in (FIXED_US, FIXED_GLOBAL):
        checks[f"follow the sun: more reads and writes within {bound:g} ms than {other}"] = (
            paired_verdict(follow[fast], rows[other][fast])
        )
        checks[f"follow the sun: more operations/s than {other}"] = paired_verdict(
            follow["ops/s per hour"], rows[other]["ops/s per hour"]
        )
    checks["follow the sun: the leader moved"] = follow["leader sites"] > 1
    checks["follow the sun: every reconfiguration finished"] = (
        follow["reconfigurations"] > 0 and follow["failed reconfigurations"] == 0
    )
    moves = results.get("image_moves", [])
    checks[
        f"follow the sun: the images followed, their first reads {IMAGE_LOCAL_READS:.0%} local"
    ] = bool(moves) and min(m["local_read_fraction"] for m in moves) >= IMAGE_LOCAL_READS
    return checks


def _write(report: Report, runs, settings: LiveSunSettings, results: dict) -> None:
    report.section("The ensembles through a compressed day")
    rows = [  # the hourly series stay in results.json
        {k: v for k, v in r.items() if not isinstance(v, list)} for r in results["ensembles"]
    ]
    report.table("live_sun", rows, formats={k: ".1f" for k in rows[0] if k != "ensemble"})
    follow = {r["ensemble"]: r for r in rows}[FOLLOW]
    report.text(
        f"A day of {HOURS} hours of {settings.hour_s:g} s; the scheduler every "
        f"{settings.interval_s:g} s with T = {settings.threshold_fraction:g} of the current "
        f"score. Follow the sun reconfigured {follow['reconfigurations']} times (the longest "
        f"{follow['longest reconfiguration (s)']:.1f} s) and put the leader in "
        f"{follow['leader sites']} sites."
    )
    report.text(_reads_text(rows, settings.bound_ms))
    _write_images(report, results["image_moves"])
    report.figure("live_sun", _plot(runs, settings), "Throughput per compressed hour")


def _write_images(report: Report, moves: list[dict]) -> None:
    report.section("The nodes' images follow them")
    if not moves:
        report.text("No image moved: the scheduler did not move a node.")
        return
    rows = [
        {"image": m["image"], "from": m["from"], "to": m["to"], "at (s)": m["t_s"],
         "first reads": m["reads"], "served at the new site %": 100 * m["local_read_fraction"]}
        for m in moves
    ]  # fmt: skip
    report.table("image_moves", rows, formats={"at (s)": ".0f", "served at the new site %": ".0f"})
    local = [m["local_read_fraction"] for m in moves]
    report.text(
        f"Each node's VM image lives in the Supercloud image store (§4.1) and follows the node: "
        f"{len(moves)} moves, the VM's first reads at the new site served there "
        f"{100 * min(local):.0f}% to {100 * max(local):.0f}% (proactive propagation, "
        "§4.1.3; the rest fetched across the WAN)."
    )


def _reads_text(rows: list[dict], bound_ms: float) -> str:
    """Where the ensembles' reads differ, and the model behind the scheduler's choice."""
    by = {r["ensemble"]: r for r in rows}
    key = f"reads within {bound_ms:g} ms %"
    best = max(rows, key=lambda r: r[key])["ensemble"]
    return (
        f"Reads within {bound_ms:g} ms: "
        + ", ".join(f"{e} {by[e][key]:.1f}%" for e in by)
        + f". {best} serves the most. Each session connects to a random server, as §5.1's "
        "clients did and as §3.2's f assumes when it scores a read at the mean RTT to every "
        "node: an ensemble with a node in every site serves locally only the reads of the "
        "sessions that happen to be connected to their own site's node."
    )


def _plot(runs: dict[str, LiveSunRun], settings: LiveSunSettings):
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for ensemble, run in runs.items():
        per_second = run.per_second(settings.day_s)
        hours = per_second[: int(HOURS * settings.hour_s)].reshape(HOURS, -1).mean(axis=1)
        ax.plot(np.arange(HOURS), hours, marker="o", ms=3, label=ensemble)
    ax.set_xlabel("hour of the compressed day (UTC)")
    ax.set_ylabel("operations/s")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
