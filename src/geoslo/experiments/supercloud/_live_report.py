"""The live parts of the Supercloud report: §5.2.2's ZooKeeper migration (Fig. 7) by
dynamic reconfiguration on a real ensemble, beside live VM migration from the cost model;
and §5.3's storage benchmark (Figs. 8-9) on the real image storage service."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from geoslo.control.supercloud import decide
from geoslo.control.supercloud.example import example_state
from geoslo.errors import GeosloError
from geoslo.live._wan import measure_throughput_bytes_per_s
from geoslo.live.supercloud.imagestore import POLICIES
from geoslo.live.supercloud.imagestore._dbench import (
    DbenchSettings,
    StorageRun,
    run_storage_benchmark,
)
from geoslo.live.supercloud.zookeeper import (
    PROCEDURES,
    ZkLiveSettings,
    cannot_run_reason,
    run_reconfiguration,
)
from geoslo.live.supercloud.zookeeper._procedures import SERVERS
from geoslo.models import MigrationModel
from geoslo.report import paper_row

__all__ = ["migration_section", "storage_section", "check_storage"]


def migration_section(report, paper, state_dir: Path, progress) -> dict:
    """Fig. 7: 2-step and 3-step reconfiguration measured live; VM migration modelled."""
    report.section("Migration approaches (§5.2.2, Fig. 7)")
    state = example_state()
    plan = decide(state)
    load = ", ".join(f"{f.site} {f.reads + f.writes:g} requests" for f in state.front_ends)
    report.text(
        f"The scheduler, with Tokyo's clients the busier ({load}), plans "
        f"{_sites_text(_leader_site(plan.placement), _site_counts(plan.placement))}."
    )
    link_bytes_per_s = measure_throughput_bytes_per_s(ZkLiveSettings().rtt_ms)
    cost = MigrationModel(bandwidth_bytes_per_s=link_bytes_per_s).cost()
    out: dict = {"vm_model": cost.__dict__, "link_bytes_per_s": link_bytes_per_s}
    reason = cannot_run_reason()
    runs = {}
    if reason:
        report.text(f"The live ZooKeeper ensemble could not run here: {reason}.")
    else:
        settings = ZkLiveSettings()
        for procedure in PROCEDURES:
            progress(f"supercloud: ZooKeeper {procedure} reconfiguration (live, ~50 s)")
            try:
                runs[procedure] = run_reconfiguration(procedure, settings, state_dir / procedure)
            except GeosloError as error:
                report.text(f"The {procedure} run failed: {error}.")
        report.text(
            f"A real ZooKeeper 3.8 ensemble over two network namespaces, {settings.rtt_ms:g} ms "
            "apart (Virginia, Tokyo), a client per site keeping a 9:1 read/write load on 1 KB "
            "znodes; servers added and removed by dynamic reconfiguration."
        )
    report.text(
        "Supercloud's alternative, moving the leader's VM, is not run: its row is the pre-copy "
        f"model (1 GB) at {link_bytes_per_s / 1e6:.0f} MB/s, the throughput one TCP stream "
        f"measured through the emulated WAN's delay pump at {ZkLiveSettings().rtt_ms:g} ms RTT "
        "in this run. That pump has no capacity limit of its own, so this is the machine's "
        "copying speed, faster than a real inter-region path."
    )
    rows = []
    for procedure, run in runs.items():
        rows.append(
            {
                "approach": f"{procedure} reconfiguration (live)",
                "leader before": run.leader_site_before,
                "leader after": run.leader_site_after,
                "before, ops/s": run.median_before_ops_per_s["total"],
                "after, ops/s": run.median_after_ops_per_s["total"],
                "lowest 1 s, of before": run.lowest_total_fraction,
                "seconds below half": run.seconds_below_half,
                "procedure, s": run.procedure_s,
            }
        )
        out[procedure] = run.to_dict()
    rows.append(
        {
            "approach": "VM live migration of the leader (modelled, not measured)",
            "leader before": "virginia",
            "leader after": "tokyo",
            "seconds below half": int(np.ceil(cost.downtime_s)),
            "procedure, s": cost.total_s,
        }
    )
    report.table("migration_approaches", rows, caption="Moving the ZooKeeper leader")
    if runs:
        report.text(_against_the_plan(plan, runs))
    comparison = [
        paper_row(
            paper, "live_migration_total_s_1gb", cost.total_s, "VM migration, 1 GB: total s (model)"
        ),
        paper_row(
            paper, "live_migration_downtime_s", cost.downtime_s, "VM migration: downtime s (model)"
        ),
    ]
    if "3-step" in runs:
        comparison.append(
            paper_row(
                paper,
                "reconfig_3step_disruption_s",
                runs["3-step"].procedure_s,
                "3-step reconfiguration: s",
            )
        )
    report.comparison("migration_paper", comparison, caption="Beside the paper")
    if runs:
        report.figure(
            "fig7_reconfiguration",
            _reconfig_figure(runs),
            "Fig. 7: stacked throughput of the Virginia and Tokyo clients; dotted lines: "
            "reconfiguration steps.",
        )
    return out


def _leader_site(placement) -> str:
    return placement.site_of(placement.leader).lower()  # the live sites' spelling


def _site_counts(placement) -> dict[str, int]:
    return dict(Counter(node.site.lower() for node in placement.nodes))


def _sites_text(leader_site: str, counts: dict[str, int]) -> str:
    where = " + ".join(f"{n} in {site}" for site, n in sorted(counts.items()))
    return f"{where}, leader in {leader_site}"


def _against_the_plan(plan, runs) -> str:
    """How each procedure's final ensemble compares with the scheduler's plan, from the
    memberships the live runs ended with (not from what the procedure is meant to do)."""
    wanted = _site_counts(plan.placement)
    sentences = []
    for procedure, run in runs.items():
        counts = dict(Counter(SERVERS[m].site for m in run.steps[-1]["members"]))
        same = counts == wanted and run.leader_site_after == _leader_site(plan.placement)
        verdict = "which is the plan" if same else "which is not the plan"
        sentences.append(
            f"{procedure} ended with {_sites_text(run.leader_site_after, counts)}, {verdict}."
        )
    return (
        " ".join(sentences) + " Carrying out any plan exactly takes a general sequence of "
        "reconfigurations; the two procedures are §5.2.2's."
    )


def _reconfig_figure(runs):
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 3.4), sharey=True, squeeze=False)
    for ax, (procedure, run) in zip(axes[0], runs.items(), strict=True):
        sites = list(run.throughput_ops_per_s)
        series = [run.throughput_ops_per_s[s] for s in sites]
        ax.stackplot(np.arange(len(series[0])), *series, labels=sites, alpha=0.8)
        for step in run.steps:
            ax.axvline(step["start_s"], color="grey", ls=":", lw=0.8)
        ax.set_title(f"{procedure}: leader {run.leader_site_before} -> {run.leader_site_after}")
        ax.set_xlabel("seconds")
    axes[0][0].set_ylabel("ops/s")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def check_storage(runs: dict[str, StorageRun], block_bytes: int) -> dict[str, bool]:
    """§5.3's claims: proactive propagation is fastest once the VM has moved; on-demand
    fetching moves the least data over the WAN (the same work in every run)."""
    after = {p: r.mean_mb_per_s(block_bytes, r.migration_end_s) for p, r in runs.items()}
    wan = {p: r.storage_wan_bytes for p, r in runs.items()}
    return {
        "proactive propagation: highest throughput after migration": max(after, key=after.get)
        == "proactive",
        "on-demand: least storage WAN traffic": min(wan, key=wan.get) == "on_demand",
    }


def storage_section(report, settings: DbenchSettings, state_dir: Path, progress) -> dict:
    """Figs. 8-9 on the real service."""
    report.section(
        "Storage under migration (§5.3, Figs. 8-9)",
        f"The image storage service as processes (a controller, a store per site) with "
        f"{settings.rtt_ms:g} ms between {settings.sites[0]} and {settings.sites[1]}; a VM "
        f"runs a DBENCH-like workload ({settings.clients} clients, as fast as they can, "
        f"{settings.operations_per_client} file operations each after creating their files, "
        f"{settings.cpu_ms_per_op:g} ms of the VM's one vCPU per block) and is live-migrated "
        "as it starts (pre-copy model: "
        f"{settings.migration.memory_bytes / 1e6:g} MB at "
        f"{settings.migration.bandwidth_bytes_per_s / 1e6:g} MB/s, the dirty rate from its "
        "writes). NFS is a store used as the central server.",
    )
    runs = {}
    for policy in POLICIES:
        progress(f"supercloud: storage benchmark, {policy} (live)")
        runs[policy] = run_storage_benchmark(policy, settings, state_dir)
    b = settings.block_bytes
    rows = [
        {
            "storage": policy,
            "benchmark, s": float(run.op_end_s.max()),
            "MB/s": run.mean_mb_per_s(b),
            "MB/s, 5 s after migration": run.mean_mb_per_s(
                b, run.migration_end_s, run.migration_end_s + 5
            ),
            "MB/s after migration": run.mean_mb_per_s(b, run.migration_end_s),
            "migration ends, s": run.migration_end_s,
            "storage WAN, MB": run.storage_wan_bytes / 1e6,
            "WAN per 1000 ops, MB": run.storage_wan_bytes / len(run.op_end_s) * 1e3 / 1e6,
            "memory WAN (model), MB": run.memory_wan_bytes / 1e6,
            "remote reads at destination": run.server_stats["store-" + settings.sites[1]][
                "remote_reads"
            ],
        }
        for policy, run in runs.items()
    ]
    report.table(
        "storage",
        rows,
        caption="Fig. 9: throughput and WAN traffic (ours; storage traffic measured at the "
        "servers, memory traffic from the model)",
    )
    report.figure(
        "fig8_storage_throughput",
        _storage_figure(runs, b),
        "Fig. 8: throughput per second; dashed: the VM resumes at the destination.",
    )
    checks = check_storage(runs, b)
    return {
        "runs": {
            p: {k: v for k, v in r.to_dict().items() if k != "op_end_s"} for p, r in runs.items()
        },
        "checks": checks,
    }


def _storage_figure(runs: dict[str, StorageRun], block_bytes: int):
    fig, axes = plt.subplots(1, len(runs), figsize=(3.4 * len(runs), 3), sharey=True)
    for ax, (policy, run) in zip(axes, runs.items(), strict=True):
        ax.plot(run.throughput_per_s(block_bytes), drawstyle="steps-post")
        ax.axvline(run.migration_end_s, color="grey", ls="--", lw=0.8)
        ax.set_title(policy)
        ax.set_xlabel("seconds")
    axes[0].set_ylabel("MB/s")
    fig.tight_layout()
    return fig


def live_state_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="geoslo-supercloud-"))
