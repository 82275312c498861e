"""The Prometheus endpoint every live controller serves (DESIGN: "metrics: Prometheus
exposition format from live controllers, an HTTP port per controller").

Metrics are prometheus-client objects registered in one ``CollectorRegistry`` per process;
:func:`serve_metrics` answers ``GET /metrics`` with ``generate_latest(registry)`` from
prometheus-client's own HTTP server, on a thread of its own (so a scrape never waits for
the controller's event loop). It binds to loopback unless told otherwise.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from geoslo.errors import InputError

__all__ = ["MetricsServer", "serve_metrics"]


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it and frees its port."""

    host: str
    port: int  # the bound port (the one chosen when 0 was asked)
    _server: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: any free port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError("port", f"must be an integer in 0..65535, got {port!r}")
    if not isinstance(registry, CollectorRegistry):
        raise InputError(
            "registry", f"must be a prometheus_client CollectorRegistry, got {registry!r}"
        )
    server, thread = start_http_server(port, host, registry)
    return MetricsServer(host, server.server_port, server, thread)
