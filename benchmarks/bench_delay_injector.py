"""Benchmark of the WAN delay injectors' accuracy (a script, not a test).

    python benchmarks/bench_delay_injector.py [--rtt-ms 20] [--residuals-ms 0.5,2]
                                              [--rounds 8] [--per-round 25] [--json PATH]

For each intended path (a base RTT plus a residual of the given mean, gamma with shape 2
each way as in the simulator and _wan.py), small messages (64 B) go back and forth, one
at a time on one connection, through

* ``toxiproxy``: Shopify's toxiproxy in the root namespace, to an echo server inside a
  site namespace (``SiteNamespaces``, a veth away), the path set by ``path_toxics``
  (whole-millisecond latency + uniform jitter, so its residual is a sum of uniform
  integers with the intended mean); and
* ``_wan.py``: the project's own asyncio delay proxy (``python -m geoslo.live wan``), to
  an echo server on loopback (it only forwards to 127.0.0.1),

interleaved round by round (every path in a random order each round) so the machine's
load falls on all alike. The intended distribution is sampled from ``DelayPath``'s own
model in the same run. Printed per injector and path: median, p99 and mean residual
(mean RTT minus base), and their errors against the intended; and the floor (the same
probe straight to each echo server, no injector). Needs root and toxiproxy (built with Go
by ``_gobuild``); bounded: under a minute at the defaults.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from geoslo.live._processes import (
    ManagedProcess,
    free_ports,
    python_module_command,
    wait_for_port,
)
from geoslo.live._sites import SiteNamespaces, cannot_run_reason, echo_server_command
from geoslo.live._toxiproxy import ToxiproxyServer
from geoslo.live._wan import DelayPath, WanConfig
from geoslo.topology import BaseRttSchedule

PAYLOAD_BYTES = 64
SITE_ECHO_PORT = 7000


class Probe:
    """One open connection to an echo server; ``rtts_ms(n)`` sends n messages in turn."""

    def __init__(self, host: str, port: int):
        self.conn = socket.create_connection((host, port), timeout=30.0)
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def rtts_ms(self, count: int) -> list[float]:
        out, message = [], bytes(PAYLOAD_BYTES)
        for _ in range(count):
            started = time.perf_counter()
            self.conn.sendall(message)
            got = 0
            while got < PAYLOAD_BYTES:
                chunk = self.conn.recv(PAYLOAD_BYTES - got)
                if not chunk:
                    raise ConnectionError("the echo path closed")
                got += len(chunk)
            out.append((time.perf_counter() - started) * 1e3)
        return out

    def close(self) -> None:
        self.conn.close()


def intended_rtts_ms(path: DelayPath, count: int, seed: int) -> np.ndarray:
    """RTT samples of the intended path: one one-way delay each way (DelayPath's model)."""
    rng = np.random.default_rng(seed)
    return np.array(
        [
            (path.one_way_delay_s(0.0, rng) + path.one_way_delay_s(0.0, rng)) * 1e3
            for _ in range(count)
        ]
    )


def summary(rtts_ms, base_ms: float) -> dict:
    values = np.asarray(rtts_ms)
    return {
        "median_ms": float(np.median(values)),
        "p99_ms": float(np.percentile(values, 99)),
        "mean_residual_ms": float(values.mean() - base_ms),
        "samples": int(values.size),
    }


def errors(measured: dict, intended: dict) -> dict:
    return {
        "median_error_ms": measured["median_ms"] - intended["median_ms"],
        "p99_error_ms": measured["p99_ms"] - intended["p99_ms"],
        "mean_residual_error_ms": measured["mean_residual_ms"] - intended["mean_residual_ms"],
    }


def delay_path(rtt_ms: float, residual_ms: float, listen_port: int, target_port: int):
    base = BaseRttSchedule(np.array([0.0]), np.array([float(rtt_ms)]))
    return DelayPath("client", "storage", listen_port, target_port, base, residual_ms, 2.0)


def run(args, state_dir: Path) -> dict:
    residuals = [float(r) for r in args.residuals_ms.split(",")]
    processes, sites = [], SiteNamespaces.create(state_dir, ["storage"], prefix="geoslo-bench")
    probes: dict[tuple[str, float], Probe] = {}
    try:
        command = sites.command_in("storage", echo_server_command(SITE_ECHO_PORT))
        processes.append(ManagedProcess("echo-site", command, state_dir / "echo-site.log").start())
        sites.wait_listening("storage", SITE_ECHO_PORT)
        (loop_echo_port, *wan_ports) = free_ports(1 + len(residuals))
        loop_echo = ManagedProcess(
            "echo-loopback",
            echo_server_command(loop_echo_port),
            state_dir / "echo-lo.log",
            loop_echo_port,
        )
        processes.append(loop_echo.start())
        paths = [
            delay_path(args.rtt_ms, r, p, loop_echo_port)
            for r, p in zip(residuals, wan_ports, strict=True)
        ]
        WanConfig(tuple(paths), time.time(), seed=0).write(state_dir / "wan.json")
        wan_command = python_module_command("geoslo.live", "wan", str(state_dir / "wan.json"))
        wan = ManagedProcess("wan", wan_command, state_dir / "wan.log").start()
        processes.append(wan)
        for port in wan_ports:
            wait_for_port(port, pid=wan.pid)
        toxiproxy = ToxiproxyServer.start(state_dir)
        processes.append(toxiproxy)
        api = toxiproxy.api
        for residual, wan_port in zip(residuals, wan_ports, strict=True):
            name = f"client-storage-{residual:g}"
            port = api.create_proxy(name, sites.address("storage"), SITE_ECHO_PORT)
            api.set_path_delay(name, args.rtt_ms, residual)
            probes[("toxiproxy", residual)] = Probe("127.0.0.1", port)
            probes[("_wan.py", residual)] = Probe("127.0.0.1", wan_port)
        probes[("floor: veth", 0.0)] = Probe(sites.address("storage"), SITE_ECHO_PORT)
        probes[("floor: loopback", 0.0)] = Probe("127.0.0.1", loop_echo_port)
        measured: dict = {key: [] for key in probes}
        order = list(probes)
        for probe in probes.values():
            probe.rtts_ms(3)  # warm up every path (first messages are not counted)
        for _ in range(args.rounds):
            random.shuffle(order)
            for key in order:
                measured[key] += probes[key].rtts_ms(args.per_round)
    finally:
        for probe in probes.values():
            probe.close()
        for process in reversed(processes):
            process.stop()
        sites.delete()
    return report(args, residuals, measured)


def report(args, residuals, measured) -> dict:
    out: dict = {"rtt_ms": args.rtt_ms, "paths": {}, "floor_median_ms": {}}
    for (name, _), rtts in measured.items():
        if name.startswith("floor"):
            out["floor_median_ms"][name] = statistics.median(rtts)
    for residual in residuals:
        path = delay_path(args.rtt_ms, residual, 0, 0)
        intended = summary(intended_rtts_ms(path, 100_000, seed=1), args.rtt_ms)
        row = {"intended": intended}
        for injector in ("toxiproxy", "_wan.py"):
            got = summary(measured[(injector, residual)], args.rtt_ms)
            row[injector] = {**got, **errors(got, intended)}
        out["paths"][f"{residual:g}"] = row
    return out


def closer(row: dict) -> str:
    def total(name: str) -> float:
        r = row[name]
        return abs(r["median_error_ms"]) + abs(r["p99_error_ms"]) + abs(r["mean_residual_error_ms"])

    return min(("toxiproxy", "_wan.py"), key=total)


def print_report(out: dict) -> None:
    floors = ", ".join(f"{k} {v:.3f} ms" for k, v in out["floor_median_ms"].items())
    print(f"base RTT {out['rtt_ms']:g} ms; probe floor (median, no injector): {floors}")
    head = f"{'residual':>9} {'injector':<10} {'median':>8} {'p99':>8} {'mean res':>9}"
    print(head + f" {'err med':>8} {'err p99':>8} {'err res':>8}")
    for residual, row in out["paths"].items():
        i = row["intended"]
        print(
            f"{residual + ' ms':>9} {'intended':<10} {i['median_ms']:8.3f} {i['p99_ms']:8.3f}"
            f" {i['mean_residual_ms']:9.3f}"
        )
        for name in ("toxiproxy", "_wan.py"):
            r = row[name]
            print(
                f"{'':>9} {name:<10} {r['median_ms']:8.3f} {r['p99_ms']:8.3f}"
                f" {r['mean_residual_ms']:9.3f} {r['median_error_ms']:+8.3f}"
                f" {r['p99_error_ms']:+8.3f} {r['mean_residual_error_ms']:+8.3f}"
            )
        tp, wan = row["toxiproxy"], row["_wan.py"]
        ratio = abs(wan["mean_residual_error_ms"]) / max(abs(tp["mean_residual_error_ms"]), 1e-3)
        print(
            f"{'':>9} closer (sum of |errors|): {closer(row)}; _wan.py's residual error is"
            f" {ratio:.1f}x toxiproxy's"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--residuals-ms", default="0.5,2")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-round", type=int, default=25)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    reason = cannot_run_reason()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    with tempfile.TemporaryDirectory(prefix="geoslo-bench-injector-") as folder:
        out = run(args, Path(folder))
    print_report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
