"""Follow the sun by live VM migration, beside ZooKeeper's reconfigurations (Shen et al.,
SoCC 2016, §5.2, Figs. 6-7; issue 39, item 4).

The schedule is ``_live_sun``'s: the same sites, RTTs and compressed day, each site's load
its sessions' rate at that local hour (``threads_per_site`` over the hour's pause); the
placement loop decides on it every interval. Here each of the three nodes is a QEMU guest
in its site's namespace (``geoslo.live.supercloud.vm.SupercloudVmEnvironment``) and every
move the loop plans is a live migration through the emulated WAN, each site's link capped
by HTB. Per move: the time from the plan to the guest answering at the destination and
QEMU's own total, the downtime QEMU measured and the one the outside prober saw, the
bytes sent across the WAN, and the pre-copy model's figures for the same guest and its
share of the link. Beside them, in the same run, §5.2.2's 2-step and 3-step
reconfigurations of a real ZooKeeper ensemble (``run_reconfiguration``), measured from
their clients' throughput, and the reconfigurations ``_live_sun``'s follow-the-sun
ensemble made on the same schedule.

``python -m geoslo.experiments.supercloud._live_vm_sun OUT_DIR [--quick]`` writes it alone.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from geoslo.control.supercloud import PlacementState
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.errors import GeosloError, TestbedError
from geoslo.experiments.supercloud._live_sun import HOURS, NODES, LiveSunSettings, think_schedule_ms
from geoslo.experiments.supercloud._live_vm import model_columns
from geoslo.report import Report, load_paper_values, paper_row

__all__ = [
    "VmSunSettings",
    "check_vm_sun",
    "reproduce_vm_sun",
    "run_vm_day",
    "vm_sun_results",
    "vm_sun_section",
]

MODEL_BAND_FRACTION = 0.5  # the pre-copy model's total time within 50% of QEMU's
PROCEDURES = ("2-step", "3-step")


@dataclass(frozen=True)
class VmSunSettings:
    """The schedule (``sun``: ``_live_sun``'s) and each guest and link. 128 MiB guests
    keep three of them (and three more while they move) light on a shared machine."""

    sun: LiveSunSettings = field(default_factory=LiveSunSettings)
    memory_mib: int = 128
    working_set_mib: int = 32
    dirty_bytes_per_s: float = 1e6
    bandwidth_bytes_per_s: float = 25e6  # each site's link (HTB): 200 Mbit/s
    downtime_limit_ms: int = 300  # QEMU's default
    reconfigurations: bool = True  # §5.2.2's 2-step and 3-step in the same run

    @classmethod
    def quick(cls) -> VmSunSettings:
        return cls(sun=LiveSunSettings.quick())


def sun_rates(sun: LiveSunSettings):
    """Each site's requests/s ``t`` seconds into the day: its sessions over the pause of
    that compressed hour (``think_schedule_ms``; the operation's own latency left out)."""
    schedules = [think_schedule_ms(sun, offset) for offset in sun.utc_offset_h]

    def rates(t_s: float) -> list[float]:
        hour = int(max(t_s, 0.0) // sun.hour_s) % HOURS
        return [sun.threads_per_site * 1e3 / pauses[hour] for pauses in schedules]

    return rates


def run_vm_day(settings: VmSunSettings, state_dir: Path, progress=print) -> dict:
    """The compressed day on VMs: every placement seen, every move made."""
    from geoslo.live.supercloud.vm import MigrationSettings, SupercloudVmEnvironment, VmSettings
    from geoslo.sim.supercloud import site_rtt_ms

    sun = settings.sun
    vm = VmSettings(settings.memory_mib, settings.working_set_mib, settings.dirty_bytes_per_s)
    link = MigrationSettings(
        bandwidth_bytes_per_s=settings.bandwidth_bytes_per_s,
        downtime_limit_ms=settings.downtime_limit_ms,
    )
    env = SupercloudVmEnvironment(
        sun.sites, site_rtt_ms(sun.sites), (sun.sites[0],) * NODES, sun.interval_s,
        sun_rates(sun), vm, link, state_dir=Path(state_dir),
    )  # fmt: skip
    return asyncio.run(_day(settings, env, progress))


async def _day(settings: VmSunSettings, env, progress) -> dict:
    sun = settings.sun
    started = time.monotonic()
    await env.start()
    boot_s = time.monotonic() - started
    placements, failures, refused = [], [], 0
    day_start = time.monotonic()
    try:
        template = PlacementState(env.sites, env.rtt_ms, (), env.start_placement)
        loop = PlacementLoop(template, sun.threshold_fraction, sun.interval_s)
        intervals = int(sun.day_s // sun.interval_s)
        for k in range(1, intervals + 1):
            await asyncio.sleep(max(day_start + k * sun.interval_s - time.monotonic(), 0))
            try:
                seen = await env.observe()
            except TestbedError as error:  # a move failed: counted, go on
                failures.append(f"{time.monotonic() - day_start:.0f} s: {error}")
                continue
            placements.append(
                {"t_s": time.monotonic() - day_start, "busy": seen.busy,
                 "leader": seen.current.site_of(seen.current.leader),
                 "sites": sorted(n.site for n in seen.current.nodes)}
            )  # fmt: skip
            plan = loop.step(seen)
            if plan is not None:
                try:
                    await env.apply(plan)
                    progress(
                        f"supercloud live VMs: {len(plan.migrations)} live migration(s) to "
                        f"{sorted({m.to_site for m in plan.migrations})}"
                    )
                except GeosloError:
                    refused += 1
        while env.busy:  # a move started late in the day ends before the count
            await asyncio.sleep(0.5)
    finally:
        await env.close()
    moves = [_with_model(m) for m in env.migrations]
    return {
        "accel": env.accel, "accel_reason": env.accel_reason, "boot_s": boot_s,
        "placements": placements, "moves": moves, "failures": failures, "refused": refused,
        "elapsed_s": time.monotonic() - started,
    }  # fmt: skip


def _with_model(move: dict) -> dict:
    """The move with the pre-copy model's figures beside it: the guest's memory, dirty
    rate and working set, the pair's RTT, and its share of the link (the moves leaving a
    site at once share its cap)."""
    if not move.get("ok"):
        return dict(move)
    share = dict(
        move, bandwidth_bytes_per_s=move["bandwidth_bytes_per_s"] / move["moving_from_site"]
    )
    return (
        move
        | model_columns(share)
        | {"model_bandwidth_bytes_per_s": share["bandwidth_bytes_per_s"]}
    )


def run_reconfigurations(state_dir: Path, progress=print) -> dict[str, dict]:
    """§5.2.2's 2-step and 3-step on a real ZooKeeper ensemble (root, Java), each's
    figures, or its error."""
    from geoslo.live.supercloud.zookeeper import ZkLiveSettings, cannot_run_reason
    from geoslo.live.supercloud.zookeeper import run_reconfiguration as run

    reason = cannot_run_reason()
    if reason:
        return {p: {"error": f"cannot run here: {reason}"} for p in PROCEDURES}
    out = {}
    for procedure in PROCEDURES:
        progress(f"supercloud live VMs: ZooKeeper {procedure} reconfiguration (~50 s)")
        try:
            run_ = run(procedure, ZkLiveSettings(), Path(state_dir) / procedure)
        except GeosloError as error:
            out[procedure] = {"error": str(error)}
            continue
        out[procedure] = {
            "procedure_s": run_.procedure_s,
            "seconds_below_half": run_.seconds_below_half,
            "lowest_fraction": run_.lowest_total_fraction,
            "leader_before": run_.leader_site_before,
            "leader_after": run_.leader_site_after,
            "rtt_ms": run_.settings["rtt_ms"],
        }
    return out


def vm_sun_results(
    day: dict, reconfigurations: dict[str, dict], follow_reconfigurations: list[dict] | None
) -> dict:
    """The rows of the comparison, one per approach."""
    ok = [m for m in day["moves"] if m.get("ok")]
    rows = []
    for m in ok:
        rows.append(
            {"approach": f"live migration {m['node']} {m['from']} -> {m['to']} (measured)",
             "time to move s": m["wall_s"], "QEMU total s": m["total_s"],
             "model total s": m["model_total_s"], "QEMU downtime s": m["downtime_s"],
             "unavailable (prober) s": m["outside_downtime_s"],
             "model downtime s": m["model_downtime_s"],
             "seconds below half": m["seconds_below_half"],
             "WAN MB": m["transferred_bytes"] / 1e6, "model WAN MB": m["model_bytes"] / 1e6}
        )  # fmt: skip
    for m in day["moves"]:
        if not m.get("ok"):
            rows.append(
                {"approach": f"live migration {m['node']} {m['from']} -> {m['to']} failed: "
                             f"{m.get('error', 'no reason recorded')}"}
            )  # fmt: skip
    for procedure, r in reconfigurations.items():
        if "error" in r:
            continue
        rows.append(
            {"approach": f"ZooKeeper {procedure} reconfiguration (measured, "
                         f"leader {r['leader_before']} -> {r['leader_after']})",
             "time to move s": r["procedure_s"], "seconds below half": r["seconds_below_half"]}
        )  # fmt: skip
    for k, r in enumerate(follow_reconfigurations or []):
        rows.append(
            {
                "approach": f"follow the sun by reconfiguration, move {k + 1} (_live_sun)",
                "time to move s": r["end_unix_s"] - r["start_unix_s"],
            }
        )
    return {"rows": rows, "day": day, "reconfigurations": reconfigurations}


def check_vm_sun(results: dict) -> dict[str, bool | None]:
    """Every planned move completed; live migration's client-seen unavailability is
    shorter than the 3-step reconfiguration's time below half throughput (Fig. 7b vs 7c;
    inconclusive without a 3-step run); the pre-copy model's total time is within
    ``MODEL_BAND_FRACTION`` of QEMU's, the median over the moves (moves that share a link
    neither start nor end together, so each one's share of it is only the model's guess)."""
    day = results["day"]
    moves = day["moves"]
    ok = [m for m in moves if m.get("ok")]
    checks: dict[str, bool | None] = {}
    checks["live VMs: the scheduler moved them and every migration completed"] = (
        bool(moves) and len(ok) == len(moves) and not day["failures"]
    )
    three = results["reconfigurations"].get("3-step", {})
    worst = max((m["outside_downtime_s"] or float("inf") for m in ok), default=None)
    name = "live VMs: clients' longest unavailability below the 3-step reconfiguration's"
    if worst is None or "error" in three:
        checks[name] = None
    else:
        checks[name] = worst < three["seconds_below_half"]
    errors = [m["model_total_s"] / m["total_s"] - 1 for m in ok]
    name = f"live VMs: the pre-copy model's total time within {MODEL_BAND_FRACTION:.0%} of QEMU's"
    checks[name + " (median over the moves)"] = (
        bool(errors) and abs(statistics.median(errors)) <= MODEL_BAND_FRACTION
    )
    return checks


def vm_sun_section(report: Report, results: dict, settings: VmSunSettings, paper) -> None:
    """The section: the table, the prose from the numbers, the paper's figures beside."""
    day = results["day"]
    how = "KVM" if day["accel"] == "kvm" else "TCG (QEMU's translator, no KVM)"
    why = f": {day['accel_reason']}" if day.get("accel_reason") else ""
    report.section(
        "Follow the sun by live VM migration (§5.2, Figs. 6-7)",
        f"The same compressed day ({HOURS} hours of {settings.sun.hour_s:g} s, the scheduler "
        f"every {settings.sun.interval_s:g} s) with each of the {NODES} nodes a QEMU guest "
        f"({settings.memory_mib} MiB, dirtying {settings.dirty_bytes_per_s / 1e6:g} MB/s of "
        f"{settings.working_set_mib} MiB) in its site's namespace; each site's link capped at "
        f"{settings.bandwidth_bytes_per_s / 1e6:g} MB/s; the plan's moves are QEMU pre-copy "
        f"live migrations across the delay proxy. The guests ran under {how}{why}.",
    )
    rows = results["rows"]
    if rows:
        formats = {k: ".2f" for r in rows for k in r if k not in ("approach", "seconds below half")}
        report.table("vm_sun", rows, formats=formats, caption="Moves, measured and modelled")
    for sentence in vm_sun_findings(results):
        report.text(sentence)
    ok = [m for m in day["moves"] if m.get("ok")]
    three = results["reconfigurations"].get("3-step", {})
    comparison = []
    if ok:
        comparison.append(
            paper_row(paper, "supercloud_leader_dip_s",
                      max(m["outside_downtime_s"] for m in ok),
                      "live migration: longest unavailability seen by the prober, s")
        )  # fmt: skip
        comparison.append(
            paper_row(paper, "cassandra_vm_parallel_downtime_s",
                      max(m["outside_downtime_s"] for m in ok),
                      "VMs moved in parallel: longest downtime, s")
        )  # fmt: skip
    if "procedure_s" in three:
        comparison.append(
            paper_row(paper, "reconfig_3step_disruption_s", three["procedure_s"],
                      "3-step reconfiguration: s")
        )  # fmt: skip
    if comparison:
        report.comparison("vm_sun_paper", comparison, caption="Beside the paper")


def vm_sun_findings(results: dict) -> list[str]:
    """What the run says, each sentence from its numbers."""
    day = results["day"]
    moves = day["moves"]
    ok = [m for m in moves if m.get("ok")]
    out = [
        f"Booting the {NODES} guests took {day['boot_s']:.0f} s; the scheduler made "
        f"{len(moves)} live migration(s), {len(ok)} of them completed"
        + (f"; failures: {'; '.join(day['failures'])}" if day["failures"] else "")
        + "."
    ]
    if not ok:
        return out
    wall = [m["wall_s"] for m in ok]
    down = [m["outside_downtime_s"] for m in ok]
    qemu_down = [m["downtime_s"] for m in ok]
    mb = [m["transferred_bytes"] / 1e6 for m in ok]
    err = [m["model_total_s"] / m["total_s"] - 1 for m in ok]
    out.append(
        f"A move took {min(wall):.1f}-{max(wall):.1f} s from the plan to the guest answering "
        f"at its destination (QEMU's total {min(m['total_s'] for m in ok):.1f}-"
        f"{max(m['total_s'] for m in ok):.1f} s) and sent {min(mb):.0f}-{max(mb):.0f} MB "
        f"across the WAN; the VMs that moved together shared their site's link. QEMU's "
        f"downtime was {1e3 * min(qemu_down):.0f}-{1e3 * max(qemu_down):.0f} ms, the prober "
        f"outside saw each guest silent {1e3 * min(down):.0f}-{1e3 * max(down):.0f} ms. The "
        f"pre-copy model, given each move's share of the link, put the total time "
        f"{min(err):+.0%} to {max(err):+.0%} off QEMU's (median {statistics.median(err):+.0%})."
    )
    for procedure, r in results["reconfigurations"].items():
        if "error" in r:
            out.append(f"The ZooKeeper {procedure} reconfiguration did not run: {r['error']}.")
            continue
        out.append(
            f"ZooKeeper's {procedure} reconfiguration ({r['rtt_ms']:g} ms between the sites) "
            f"took {r['procedure_s']:.1f} s and held its clients' throughput below half for "
            f"{r['seconds_below_half']} s (lowest second {r['lowest_fraction']:.0%} of before); "
            f"its leader went from {r['leader_before']} to {r['leader_after']}."
        )
    three = results["reconfigurations"].get("3-step", {})
    if "seconds_below_half" in three:
        shorter = max(down) < three["seconds_below_half"]
        out.append(
            f"Live migration's longest unavailability ({max(down):.2f} s) is "
            + ("shorter than" if shorter else "not shorter than")
            + f" the 3-step reconfiguration's {three['seconds_below_half']} s below half. "
            "ZooKeeper's WAN bytes per reconfiguration were not measured (a new server "
            "receives the few KB of znodes as a snapshot; the guests' memory dwarfs it)."
        )
    return out


def reproduce_vm_sun(out_dir: str | Path, quick: bool = False, progress=print) -> Path:
    """The section alone, as its own report (``geoslo reproduce supercloud --live --vm``
    adds it to the live report instead)."""
    from geoslo.experiments.supercloud._report import PAPER_VALUES

    settings = VmSunSettings.quick() if quick else VmSunSettings()
    out = Path(out_dir)
    started = time.monotonic()
    results = measure_vm_sun(settings, out / "run", None, progress)
    report = Report("Supercloud: follow the sun by live VM migration", "")
    vm_sun_section(report, results, settings, load_paper_values(PAPER_VALUES))
    report.checks(check_vm_sun(results))
    report.text(f"{time.monotonic() - started:.0f} s on this machine.")
    index = report.write(out)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    return index


def measure_vm_sun(
    settings: VmSunSettings, state_dir: Path, follow_reconfigurations, progress=print
) -> dict:
    """The VM day and (if asked) the two reconfigurations; the results."""
    from geoslo.live.supercloud.vm import cannot_run_reason

    reason = cannot_run_reason()
    if reason:
        raise TestbedError(f"live VMs cannot run here: {reason}")
    started = time.monotonic()
    day = run_vm_day(settings, Path(state_dir) / "vms", progress)
    reconfigurations = (
        run_reconfigurations(Path(state_dir) / "zk", progress) if settings.reconfigurations else {}
    )
    results = vm_sun_results(day, reconfigurations, follow_reconfigurations)
    results["settings"] = asdict(settings)
    results["elapsed_s"] = time.monotonic() - started
    return results


if __name__ == "__main__":
    import sys

    if not sys.argv[1:]:
        raise SystemExit(
            "usage: python -m geoslo.experiments.supercloud._live_vm_sun OUT [--quick]"
        )
    print(reproduce_vm_sun(sys.argv[1], "--quick" in sys.argv[2:]))
