"""The WAN delay injector between sites: Shopify's toxiproxy (v2.5.0, built by _gobuild).

``ToxiproxyServer.start(state_dir)`` runs the server in the root namespace on a free
loopback port (its PID and port recorded in ``<state_dir>/toxiproxy.json``, its log in
``toxiproxy.log``); ``ToxiproxyApi`` drives its REST API (urllib, synchronous): a proxy
listens on ``127.0.0.1:<free port>`` and forwards to a server inside a site namespace
(``SiteNamespaces.address``). A path's delay is a pair of ``latency`` toxics (CosTLO,
NSDI 2015, §5: inter-region latency is a base RTT plus a residual):

* Half the base RTT each way: ``upstream`` (client -> server) and ``downstream``
  (server -> client), as the project's own _wan.py does, so a one-way message (a request
  whose reply is not awaited, a server's push) sees a one-way delay, not 0 or a full RTT.
* toxiproxy's delay is ``latency + rand.Int63n(2 * jitter) - jitter`` in whole
  milliseconds (toxics/latency.go): uniform on ``latency - jitter .. latency + jitter - 1``,
  mean ``latency - 0.5`` ms. The residual is therefore built from uniform integer parts
  added on top of the base, and its mean is a multiple of 0.5 ms (``path_toxics``).
* A chunk is held from the moment toxiproxy read it, and toxics in a chain add up (each
  counts from the release time the previous one set), so a stall is one more latency
  toxic (``stall``) on every proxy to a site; removing it releases what it holds.

toxiproxy dials the upstream when a client connects, without delay: the TCP handshake
does not see the path's RTT (nor does _wan.py's).
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import TestbedError
from geoslo.live._gobuild import go_program
from geoslo.live._processes import ManagedProcess, free_ports, process_alive, stop_pid

__all__ = [
    "STATE_FILE",
    "LatencyToxic",
    "ToxiproxyApi",
    "ToxiproxyServer",
    "path_toxics",
    "stall_toxics",
    "slowdown_extra_rtt_ms",
    "PATH_TOXIC",
    "STALL_TOXIC",
]

STATE_FILE, LOG_FILE = "toxiproxy.json", "toxiproxy.log"
PATH_TOXIC, STALL_TOXIC = "path", "stall"


@dataclass(frozen=True)
class LatencyToxic:
    """One toxiproxy ``latency`` toxic: whole milliseconds, on one stream."""

    name: str
    stream: str  # "upstream" (client -> server) or "downstream" (server -> client)
    latency_ms: int
    jitter_ms: int = 0

    def body(self) -> dict:
        return {
            "name": self.name,
            "type": "latency",
            "stream": self.stream,
            "toxicity": 1.0,
            "attributes": {"latency": self.latency_ms, "jitter": self.jitter_ms},
        }

    @property
    def mean_ms(self) -> float:
        """Mean delay: the jitter draw ``Int63n(2j) - j`` has mean -0.5 ms when j > 0."""
        return self.latency_ms - (0.5 if self.jitter_ms > 0 else 0.0)


def _split_ms(total_ms: float) -> tuple[int, int]:
    """A whole-millisecond total split into (upstream, downstream) halves."""
    whole = round(total_ms)
    return whole // 2, whole - whole // 2


def path_toxics(rtt_ms: float, residual_rtt_mean_ms: float) -> list[LatencyToxic]:
    """The toxics of a path: base RTT (rounded to whole ms) split half each way, plus a
    residual of mean ``residual_rtt_mean_ms`` rounded to 0.5 ms, made of jitter draws
    that start at 0 (0.5 ms: downstream 0 or 1 ms; 1 ms: downstream 0..2 uniform; 2 ms:
    upstream 0..1 plus downstream 0..3)."""
    if rtt_ms < 0 or residual_rtt_mean_ms < 0:
        raise ValueError("RTT and residual must be >= 0 ms")
    up_ms, down_ms = _split_ms(rtt_ms)
    half_steps = round(2 * residual_rtt_mean_ms)
    up_jitter, down_jitter = 0, 0
    if half_steps % 2 == 1:
        down_jitter = (half_steps + 1) // 2  # mean residual J - 0.5 = half_steps / 2
    elif half_steps > 0:
        up_jitter, down_jitter = 1, half_steps // 2  # 0.5 + (J - 0.5) = half_steps / 2
    return [
        LatencyToxic(PATH_TOXIC + "_up", "upstream", up_ms + up_jitter, up_jitter),
        LatencyToxic(PATH_TOXIC + "_down", "downstream", down_ms + down_jitter, down_jitter),
    ]


def stall_toxics(extra_rtt_ms: float) -> list[LatencyToxic]:
    """A stall's toxics: ``extra_rtt_ms`` (whole ms) more RTT, half each way."""
    up_ms, down_ms = _split_ms(extra_rtt_ms)
    return [
        LatencyToxic(STALL_TOXIC + "_up", "upstream", up_ms),
        LatencyToxic(STALL_TOXIC + "_down", "downstream", down_ms),
    ]


def slowdown_extra_rtt_ms(rtt_ms: float, factor: float) -> float:
    """The extra RTT that makes a path of ``rtt_ms`` ``factor`` times slower."""
    if factor < 1:
        raise ValueError(f"a slowdown factor is >= 1, not {factor}")
    return (factor - 1.0) * rtt_ms


class ToxiproxyApi:
    """A synchronous client of toxiproxy's REST API at ``http://127.0.0.1:<port>``."""

    def __init__(self, port: int, timeout_s: float = 5.0):
        self.base_url = f"http://127.0.0.1:{port}"
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace").strip()
            raise TestbedError(f"toxiproxy {method} {path}: {error.code} {detail}") from None
        except OSError as error:
            raise TestbedError(f"toxiproxy {method} {path}: {error}") from None
        return json.loads(text) if text.strip() else None

    def version(self) -> str:
        request = urllib.request.Request(self.base_url + "/version")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read().decode().strip()

    def create_proxy(
        self, name: str, upstream_host: str, upstream_port: int, listen_host: str = "127.0.0.1"
    ) -> int:
        """A proxy on ``listen_host`` (toxiproxy picks a free port) to the upstream; its
        port. A site namespace reaches the root end of its own link only, so a path that
        starts at a site listens on that address."""
        body = {
            "name": name,
            "listen": f"{listen_host}:0",
            "upstream": f"{upstream_host}:{upstream_port}",
            "enabled": True,
        }
        made = self._call("POST", "/proxies", body)
        return int(made["listen"].rsplit(":", 1)[1])

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        """Open or cut a path: a disabled proxy closes its connections and refuses new
        ones (one direction of a partition between two sites is one path)."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def delete_proxy(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def proxies(self) -> dict[str, dict]:
        """Every proxy by name, with its ``listen``, ``upstream`` and ``toxics``."""
        return self._call("GET", "/proxies")

    def proxies_to(self, host: str) -> list[str]:
        """The names of the proxies whose upstream is on ``host`` (e.g. a site's address)."""
        return sorted(
            name
            for name, proxy in self.proxies().items()
            if proxy["upstream"].rsplit(":", 1)[0] == host
        )

    def toxics(self, proxy: str) -> dict[str, dict]:
        """The proxy's toxics by name, in the form ``LatencyToxic.body`` writes."""
        return {
            t["name"]: {key: t[key] for key in ("name", "type", "stream", "toxicity", "attributes")}
            for t in self._call("GET", f"/proxies/{proxy}/toxics")
        }

    def set_toxics(self, proxy: str, toxics: list[LatencyToxic]) -> None:
        """Add the toxics to the proxy, updating those of the same name in place (live
        connections keep flowing, with the new delay)."""
        present = {t["name"] for t in self._call("GET", f"/proxies/{proxy}/toxics")}
        for toxic in toxics:
            if toxic.name in present:
                self._call("POST", f"/proxies/{proxy}/toxics/{toxic.name}", toxic.body())
            else:
                self._call("POST", f"/proxies/{proxy}/toxics", toxic.body())

    def remove_toxics(self, proxy: str, prefix: str = "") -> None:
        """Remove the proxy's toxics whose name starts with ``prefix`` (all by default)."""
        for toxic in self._call("GET", f"/proxies/{proxy}/toxics"):
            if toxic["name"].startswith(prefix):
                self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic['name']}")

    def set_path_delay(self, proxy: str, rtt_ms: float, residual_rtt_mean_ms: float) -> None:
        """The path's base RTT and residual (see ``path_toxics``)."""
        self.set_toxics(proxy, path_toxics(rtt_ms, residual_rtt_mean_ms))

    def start_stall(self, proxies: list[str], extra_rtt_ms: float) -> None:
        """``extra_rtt_ms`` more RTT on every one of ``proxies`` (e.g. ``proxies_to(site
        address)``: a region-wide stall; ``slowdown_extra_rtt_ms`` for a k x slowdown)."""
        for proxy in proxies:
            self.set_toxics(proxy, stall_toxics(extra_rtt_ms))

    def end_stall(self, proxies: list[str]) -> None:
        for proxy in proxies:
            self.remove_toxics(proxy, STALL_TOXIC)

    def stall_for(self, proxies: list[str], extra_rtt_ms: float, duration_s: float):
        """Start a stall now and end it after ``duration_s`` (a started daemon Timer;
        ``cancel()`` it and call ``end_stall`` to end it early)."""
        self.start_stall(proxies, extra_rtt_ms)
        timer = threading.Timer(duration_s, self.end_stall, args=(proxies,))
        timer.daemon = True
        timer.start()
        return timer


@dataclass
class ToxiproxyServer:
    """A toxiproxy server process geoslo started, by PID."""

    pid: int
    port: int
    state_dir: str

    @classmethod
    def start(cls, state_dir: Path, seed: int = 0) -> ToxiproxyServer:
        """Start it on a free loopback port, record it, wait until its API answers."""
        binary = go_program("toxiproxy")
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        (port,) = free_ports(1)
        env = shutil.which("env") or "/usr/bin/env"  # env execs: the PID is the server's
        command = [env, "LOG_LEVEL=warn", binary, "-host", "127.0.0.1",
                   "-port", str(port), "-seed", str(seed)]  # fmt: skip
        process = ManagedProcess("toxiproxy", command, Path(state_dir) / LOG_FILE, port)
        process.start(detached=True)  # outlives the command that started it, as the servers
        server = cls(int(process.pid), port, str(state_dir))
        (Path(state_dir) / STATE_FILE).write_text(json.dumps({"pid": server.pid, "port": port}))
        return server

    @property
    def api(self) -> ToxiproxyApi:
        return ToxiproxyApi(self.port)

    @property
    def alive(self) -> bool:
        return process_alive(self.pid)

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) to its PID only; forget the record."""
        stop_pid(self.pid)
        path = Path(self.state_dir) / STATE_FILE
        if path.exists():
            path.unlink()

    @classmethod
    def recorded_in(cls, state_dir: Path) -> ToxiproxyServer | None:
        """The server a state folder records (to stop it after a crash)."""
        path = Path(state_dir) / STATE_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(int(data["pid"]), int(data["port"]), str(state_dir))
