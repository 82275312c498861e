"""Route changes on toxiproxy's paths while traffic flows (Kurma §6, Table 2).

toxiproxy holds a fixed delay per path; a route change is an update of that delay. The
route keeper (``python -m geoslo.live routes CONFIG``, one process per testbed, recorded
by PID) brings every path's delay to its schedule at the start and again at each change
time: toxiproxy updates a toxic in place, so open connections keep flowing and see the new
base RTT from then on. An update interrupts the path's latency toxics, which pass on the
chunk each holds without the rest of its delay (toxiproxy's latency toxic), so only the
paths whose delay changes are updated. Schedules count from the testbed's epoch.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.errors import TestbedError
from geoslo.live._toxiproxy import ToxiproxyApi, path_toxics
from geoslo.topology import BaseRttSchedule

__all__ = ["RoutedPath", "RoutesConfig", "follow_routes", "schedule_from_dict", "schedule_to_dict"]


def schedule_to_dict(schedule: BaseRttSchedule) -> dict:
    return {
        "change_times_s": schedule.change_times_s.tolist(),
        "rtt_ms": schedule.rtt_ms.tolist(),
    }


def schedule_from_dict(data: dict) -> BaseRttSchedule:
    return BaseRttSchedule(np.array(data["change_times_s"]), np.array(data["rtt_ms"]))


@dataclass(frozen=True)
class RoutedPath:
    """One toxiproxy path and the base RTT and residual it must carry."""

    proxy: str
    base_rtt: BaseRttSchedule
    residual_rtt_mean_ms: float


@dataclass(frozen=True)
class RoutesConfig:
    toxiproxy_port: int
    epoch_unix_s: float
    paths: tuple[RoutedPath, ...]

    def write(self, path: Path) -> None:
        data = {
            "toxiproxy_port": self.toxiproxy_port,
            "epoch_unix_s": self.epoch_unix_s,
            "paths": [
                {
                    "proxy": p.proxy,
                    "base_rtt": schedule_to_dict(p.base_rtt),
                    "residual_rtt_mean_ms": p.residual_rtt_mean_ms,
                }
                for p in self.paths
            ],
        }
        Path(path).write_text(json.dumps(data))

    @classmethod
    def read(cls, path: Path) -> RoutesConfig:
        data = json.loads(Path(path).read_text())
        paths = tuple(
            RoutedPath(p["proxy"], schedule_from_dict(p["base_rtt"]), p["residual_rtt_mean_ms"])
            for p in data["paths"]
        )
        return cls(int(data["toxiproxy_port"]), float(data["epoch_unix_s"]), paths)

    def set_all(self, t_s: float) -> int:
        """Every path's delay as its schedule has it at ``t_s`` since the epoch; only the
        paths whose toxics differ are updated (an update releases the chunk a latency
        toxic holds at once: toxiproxy interrupts it). How many were updated."""
        api = ToxiproxyApi(self.toxiproxy_port)
        updated = 0
        for path in self.paths:
            wanted = path_toxics(float(path.base_rtt.at(t_s)), path.residual_rtt_mean_ms)
            held = api.toxics(path.proxy)  # a stall's toxics may be there too: left alone
            if any(held.get(toxic.name) != toxic.body() for toxic in wanted):
                api.set_toxics(path.proxy, wanted)
                updated += 1
        return updated

    def next_change_s(self, t_s: float) -> float | None:
        """The first change time of any schedule after ``t_s`` (None: no more)."""
        later = [
            float(times[times > t_s][0])
            for times in (p.base_rtt.change_times_s for p in self.paths)
            if np.any(times > t_s)
        ]
        return min(later) if later else None


def follow_routes(config: RoutesConfig, stop: threading.Event | None = None) -> None:
    """Set every path now, then at each change time, until ``stop`` (or SIGTERM)."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config.set_all(time.time() - config.epoch_unix_s)
    while True:
        at = config.next_change_s(time.time() - config.epoch_unix_s)
        if at is None:
            stop.wait()
            return
        if stop.wait(max(0.0, config.epoch_unix_s + at - time.time())):
            return
        try:
            config.set_all(at)
        except TestbedError as error:  # toxiproxy restarting: the next change sets all
            print(f"routes: {error}", flush=True)
