"""The Prometheus endpoint every live controller and every ``geoslo run`` service serves
(DESIGN: "metrics: Prometheus exposition from every `geoslo run`, an HTTP port per
controller").

Metrics are prometheus-client objects registered in one ``CollectorRegistry`` per
process or service; :func:`serve_metrics` answers ``GET /metrics`` with the registry in
the format the scraper asks for and, when given them, ``GET /healthz`` with the health
check's JSON and ``GET /plan`` with the plan in force (read-only JSON, for a client in any
language), on a threading HTTP server of its own (a scrape never waits for the controller's
event loop). It binds to loopback unless told otherwise; other paths get 404.

Metric names are in base units (``_seconds``, ``_bytes``, ``_ratio``: Prometheus' naming
practice) while the code counts in its own (``_ms``, ``_mb``, ``_fraction``):
:func:`in_base_units` converts one to the other in one place.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import choose_encoder

from geoslo.errors import InputError

__all__ = [
    "BASE_UNITS",
    "HealthCheck",
    "JsonEndpoint",
    "MetricsServer",
    "UnitGauge",
    "in_base_units",
    "json_line",
    "serve_metrics",
]

JsonEndpoint = Callable[[], tuple[int, dict[str, Any]]]  # (HTTP status, JSON body)
HealthCheck = JsonEndpoint


# A quantity's unit suffix as the code names it, and as Prometheus names it (its base units,
# https://prometheus.io/docs/practices/naming/) with the factor to them; first match wins.
BASE_UNITS = (
    ("_ms_requests", "_request_seconds", 1e-3),
    ("_ms", "_seconds", 1e-3),
    ("_s", "_seconds", 1.0),
    ("_mbps", "_bytes_per_second", 1e6 / 8),  # Mbit/s
    ("_mb", "_bytes", 1e6),  # MB: 10^6 bytes
    ("_rps", "_requests_per_second", 1.0),
    ("_fraction", "_ratio", 1.0),
)


def in_base_units(quantity: str, value: float) -> tuple[str, float]:
    """``quantity`` renamed to its base unit and ``value`` converted (``"rtt_ms", 25`` ->
    ``"rtt_seconds", 0.025``); a quantity with no unit suffix is kept."""
    for suffix, base, factor in BASE_UNITS:
        if quantity.endswith(suffix):
            return quantity[: -len(suffix)] + base, value * factor
    return quantity, value


class UnitGauge:
    """A gauge set in the code's unit (``capacity_mbps``), exposed in base units
    (``geoslo_replication_capacity_bytes_per_second``); its 0.x name, in the code's unit,
    is kept one release as a deprecated alias."""

    def __init__(
        self, quantity: str, doc: str, labels: tuple[str, ...], registry: CollectorRegistry
    ) -> None:
        base, self.factor = in_base_units(quantity, 1.0)
        self.gauge = Gauge(base, doc, labels, registry=registry)
        self.legacy = None
        if base != quantity:
            self.legacy = Gauge(quantity, f"Deprecated: {base} instead", labels, registry=registry)

    def set(self, value: float, **labels: str) -> None:
        for gauge, factor in ((self.gauge, self.factor), (self.legacy, 1.0)):
            if gauge is not None:
                (gauge.labels(**labels) if labels else gauge).set(value * factor)

    def remove(self, *label_values: str) -> None:
        for gauge in (self.gauge, self.legacy):
            if gauge is not None:
                gauge.remove(*label_values)


class MetricsServer:
    """A running ``/metrics`` endpoint and JSON ones (path -> callable); :meth:`close` stops
    it and frees its port."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, json: dict[str, JsonEndpoint]
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(registry, json))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="geoslo-metrics", daemon=True
        )
        self._thread.start()

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        """The bound port (the one chosen when 0 was asked)."""
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(
    registry: CollectorRegistry,
    port: int,
    host: str = "127.0.0.1",
    health: HealthCheck | None = None,
    plan: JsonEndpoint | None = None,
) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: any free port), and
    ``health`` at ``/healthz`` and ``plan`` at ``/plan`` when given. OSError when the address
    cannot be bound."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError("port", f"must be an integer in 0..65535, got {port!r}")
    if not isinstance(registry, CollectorRegistry):
        raise InputError(
            "registry", f"must be a prometheus_client CollectorRegistry, got {registry!r}"
        )
    json_paths = {"/healthz": health, "/plan": plan}
    return MetricsServer(host, port, registry, {p: f for p, f in json_paths.items() if f})


def _handler(
    registry: CollectorRegistry, json_paths: dict[str, JsonEndpoint]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":  # the format the scraper asks for (Accept), as the library's
                encode, content_type = choose_encoder(self.headers.get("Accept"))
                self._send(200, content_type, encode(registry))
            elif path in json_paths:
                status, body = json_paths[path]()
                self._send(status, "application/json", _json_bytes(body))
            else:
                known = " or ".join(["/metrics", *json_paths])
                self._send(404, "text/plain; charset=utf-8", f"not found: try {known}\n".encode())

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet: the controller's own log is the structured one."""

    return Handler


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json_line(body).encode()


def json_line(body: dict[str, Any]) -> str:
    """``body`` as one line of strict JSON (non-finite floats as null, numpy as numbers)."""
    return json.dumps(_finite(body), allow_nan=False, default=_plain) + "\n"


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists; anything else as text."""
    if hasattr(value, "tolist"):
        return _finite(value.tolist())
    return str(value)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (nested too) as null: strict JSON, which
    other languages' parsers read."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
