"""The Prometheus endpoint every live controller and every ``geoslo run`` service serves
(DESIGN: "metrics: Prometheus exposition from every `geoslo run`, an HTTP port per
controller").

Metrics are prometheus-client objects registered in one ``CollectorRegistry`` per
process or service; :func:`serve_metrics` answers ``GET /metrics`` with the registry in
the format the scraper asks for and, when given a health check, ``GET /healthz`` with its
JSON, on a threading HTTP server of its own (a scrape never waits for the controller's
event loop). It binds to loopback unless told otherwise; other paths get 404.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from geoslo.errors import InputError

__all__ = ["HealthCheck", "MetricsServer", "serve_metrics"]

HealthCheck = Callable[[], tuple[int, dict[str, Any]]]  # (HTTP status, JSON body)


class MetricsServer:
    """A running ``/metrics`` (and ``/healthz``) endpoint; :meth:`close` stops it and frees
    its port."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, health: HealthCheck | None
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(registry, health))
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
) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: any free port), and
    ``health`` at ``/healthz`` when given. OSError when the address cannot be bound."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError("port", f"must be an integer in 0..65535, got {port!r}")
    if not isinstance(registry, CollectorRegistry):
        raise InputError(
            "registry", f"must be a prometheus_client CollectorRegistry, got {registry!r}"
        )
    return MetricsServer(host, port, registry, health)


def _handler(
    registry: CollectorRegistry, health: HealthCheck | None
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":  # the format the scraper asks for (Accept), as the library's
                encode, content_type = choose_encoder(self.headers.get("Accept"))
                self._send(200, content_type, encode(registry))
            elif path == "/healthz" and health is not None:
                status, body = health()
                self._send(status, "application/json", _json_bytes(body))
            else:
                known = "/metrics or /healthz" if health is not None else "/metrics"
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
    clean = {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in body.items()
    }
    return (json.dumps(clean) + "\n").encode()
