"""The live reproduction's incidents (Kurma §9): KurmaPerf replays Trace-1 while, in turn,
a server fails and comes back, one direction between two sites is cut at the delay injector
and mended, and a site's agent fails and comes back. What the agents did is read from their
round logs, what the clients saw from their request logs.

Which sites: the server fails at the least-loaded site (the one the busiest site redirects
to), the cut is from the busiest site to it, and the agent that fails is the third site's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geoslo.experiments.kurma._live import INTERVAL_S, Event, LiveRun
from geoslo.live import stop_pid
from geoslo.live.kurma import Testbed

__all__ = ["Incidents", "incident_events", "incident_findings", "incident_checks"]

# when each incident starts and ends, as fractions of the replay (ramp included)
SERVER_FAILS, SERVER_BACK = 0.18, 0.35
CUT, MENDED = 0.47, 0.61
AGENT_FAILS, AGENT_BACK = 0.70, 0.82
DETECTION_S = 2 * INTERVAL_S + 0.5  # §9: a failure shows within two rounds
TIMELINE_BIN_S = 5.0


@dataclass(frozen=True)
class Incidents:
    """The sites the incidents touch (indices), and whether the cut could be made."""

    busiest: int
    spare: int  # the least loaded: its server fails, the cut is towards it
    third: int  # its agent fails
    cut: bool  # False on the loopback form (no per-direction paths to disable)


def choose_sites(traces: Sequence[np.ndarray], testbed: Testbed) -> Incidents:
    means = [float(np.mean(t)) for t in traces]
    busiest, spare = int(np.argmax(means)), int(np.argmin(means))
    third = next(k for k in range(len(means)) if k not in (busiest, spare))
    return Incidents(busiest, spare, third, testbed.network == "namespaces")


def incident_events(incidents: Incidents, testbed: Testbed, length_s: float) -> list[Event]:
    """The events of the replay, at their fractions of its ``length_s`` seconds."""
    sites = testbed.spec.sites
    server = f"redis-{sites[incidents.spare].lower()}-0"
    busiest, spare = sites[incidents.busiest], sites[incidents.spare]

    def fail_server(bed: Testbed, agents) -> None:
        stop_pid(next(p for p in bed.processes if p["name"] == server)["pid"])

    events = [
        Event(SERVER_FAILS * length_s, "server_fails", fail_server),
        Event(SERVER_BACK * length_s, "server_back", lambda bed, _: bed.restart_process(server)),
        Event(AGENT_FAILS * length_s, "agent_fails", lambda _, a: a[incidents.third].stop()),
        Event(AGENT_BACK * length_s, "agent_back", lambda _, a: a[incidents.third].start()),
    ]
    if incidents.cut:
        events += [
            Event(CUT * length_s, "cut", lambda bed, _: bed.cut(busiest, spare)),
            Event(MENDED * length_s, "mended", lambda bed, _: bed.cut(busiest, spare, False)),
        ]
    return events


def incident_findings(
    run: LiveRun, incidents: Incidents, sites: tuple[str, ...], capacity_rps: float
) -> dict:
    """What the agents and clients did around each incident (numbers for the report);
    ``capacity_rps`` is a site's capacity in the agents' model."""
    e, logs = run.events, run.rounds
    spare, third = incidents.spare, incidents.third
    others = [k for k in range(len(sites)) if k != third]
    return {
        "server": _server_failure(logs, e["server_fails"], e["server_back"], spare, capacity_rps),
        "agent": {
            sites[k]: _exclusion(logs[k], run.requests[k], e["agent_fails"], e["agent_back"], third)
            for k in others
        },
        "views": _views(logs, e.get("cut"), e.get("mended")),
        "timeline": _timeline(run),
        "events": {name: t - run.start_unix_s for name, t in e.items()},
    }


def _planned(log: list[dict]) -> list[dict]:
    return [rec for rec in log if "rates_rps" in rec]


def _server_failure(
    logs: list[list[dict]], failed_s: float, back_s: float, x: int, capacity_rps: float
) -> dict:
    """Did every agent see site x's reduced capacity within two rounds, and plan within it
    (its load at most the share of servers up times the site's capacity)?"""
    seen, over, planned = [], 0, 0
    for log in logs:
        during = [rec for rec in log if failed_s <= rec["t_unix_s"] < back_s]
        reduced = [rec for rec in during if rec["capacity_share"][x] < 1.0]
        seen.append(reduced[0]["t_unix_s"] - failed_s if reduced else None)
        for rec in _planned(reduced):
            planned += 1
            load = sum(row[x] for row in rec["rates_rps"])
            over += load > rec["capacity_share"][x] * capacity_rps * (1 + 1e-6)
    return {"seen_after_s": seen, "plans": planned, "plans_over_capacity": over}


def _exclusion(log, requests, failed_s: float, back_s: float, x: int) -> dict:
    """When a site with this log excluded site x and took it back, and whether any of its
    requests went to x in between (after the exclusion was applied)."""
    excluded = next(
        (
            r
            for r in log
            if r["t_unix_s"] >= failed_s and not r["available"][x] and "fractions" in r
        ),
        None,
    )
    readmitted = next((r for r in log if r["t_unix_s"] >= back_s and r["available"][x]), None)
    sent = 0
    if excluded is not None:
        until = readmitted["t_unix_s"] if readmitted else np.inf
        issued = requests["issued_unix_s"]
        window = (issued > excluded["enforced_unix_s"] + 0.05) & (issued < until)
        sent = int(np.sum(requests["site"][window] == x))
    return {
        "excluded_after_s": None if excluded is None else excluded["t_unix_s"] - failed_s,
        "readmitted_after_s": None if readmitted is None else readmitted["t_unix_s"] - back_s,
        "sent_while_excluded": sent,
    }


def _views(logs: list[list[dict]], cut_s: float | None, mended_s: float | None) -> dict:
    """The partition rule: rounds where two agents applied solved plans from different
    views (must be none), rounds held all-local, and the first round after the mend that
    every agent planned with every site."""
    by_round: dict[int, dict[int, tuple]] = {}
    for k, log in enumerate(logs):
        for rec in _planned(log):
            by_round.setdefault(rec["round"], {})[k] = tuple(rec["available"])
    split = sorted(r for r, views in by_round.items() if len(set(views.values())) > 1)
    held = sum("views_disagree" in rec for log in logs for rec in log)
    recovered = None
    if mended_s is not None:
        times = {rec["round"]: rec["t_unix_s"] for log in logs for rec in log}
        whole = [
            r for r, views in by_round.items()
            if len(views) == len(logs) and all(all(v) for v in views.values())
            and times[r] > mended_s
        ]  # fmt: skip
        recovered = min(times[r] for r in whole) - mended_s if whole else None
    return {"split_rounds": split, "held_rounds": held, "recovered_after_s": recovered}


def _timeline(run: LiveRun) -> dict[str, list[float]]:
    """Global violations and the share of requests redirected, per 5 s bin."""
    issued = np.concatenate([r["issued_unix_s"] for r in run.requests]) - run.start_unix_s
    violated = np.concatenate([run.violated(i) for i in range(len(run.requests))])
    remote = np.concatenate([r["site"] != i for i, r in enumerate(run.requests)])
    bins = np.floor(issued / TIMELINE_BIN_S).astype(int)
    count = np.bincount(bins)
    safe = np.maximum(count, 1)
    return {
        "t_s": (np.arange(len(count)) * TIMELINE_BIN_S).tolist(),
        "violation_pct": (100 * np.bincount(bins, violated) / safe).tolist(),
        "redirected_pct": (100 * np.bincount(bins, remote) / safe).tolist(),
    }


def incident_checks(findings: dict) -> dict[str, bool]:
    """The incidents' acceptance checks (§9)."""
    server, views = findings["server"], findings["views"]
    checks = {
        "every agent saw the failed server within two rounds": all(
            s is not None and s <= DETECTION_S for s in server["seen_after_s"]
        ),
        "no plan put more on the site than its reduced capacity": (
            server["plans"] > 0 and server["plans_over_capacity"] == 0
        ),
        "no round had two agents applying plans from different views": not views["split_rounds"],
    }
    for site, agent in findings["agent"].items():
        excluded, back = agent["excluded_after_s"], agent["readmitted_after_s"]
        checks[f"{site} excluded the failed agent's site within two rounds"] = (
            excluded is not None and excluded <= DETECTION_S
        )
        checks[f"{site} sent it nothing while it was excluded"] = agent["sent_while_excluded"] == 0
        checks[f"{site} readmitted it within two rounds of its return"] = (
            back is not None and back <= DETECTION_S
        )
    if "cut" in findings["events"]:
        checks["every agent planned with every site again after the mend"] = (
            views["recovered_after_s"] is not None
        )
    return checks
