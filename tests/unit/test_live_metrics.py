"""The Prometheus endpoint of live controllers: prometheus-client's registry and server."""

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Summary
from prometheus_client.parser import text_string_to_metric_families

from geoslo.errors import InputError
from geoslo.live._metrics import serve_metrics


def parsed_samples(text):
    """{(sample name, sorted label items): value} of an exposition text."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


@pytest.fixture
def registry():
    registry = CollectorRegistry()
    requests = Counter("geoslo_requests", "Requests answered.", ("site",), registry=registry)
    load = Gauge("geoslo_load", "Offered load.", registry=registry)
    decision = Summary("geoslo_decision_seconds", "Per decision.", registry=registry)
    requests.labels(site="a").inc(3.5)
    load.set(0.25)
    decision.observe(0.5)
    decision.observe(1.25)
    return registry


def test_metrics_are_served_and_parse_back_to_the_values_set(registry):
    server = serve_metrics(registry, 0)
    try:
        content_type, text = scrape(server.port)
        Gauge("geoslo_late", "Declared after start.", registry=registry).set(7)
        _, later = scrape(server.port)
    finally:
        server.close()
    assert content_type.startswith("text/plain; version=0.0.4")
    assert parsed_samples(text) == {
        ("geoslo_requests_total", (("site", "a"),)): 3.5,
        ("geoslo_load", ()): 0.25,
        ("geoslo_decision_seconds_count", ()): 2.0,
        ("geoslo_decision_seconds_sum", ()): 1.75,
    }
    assert parsed_samples(later)[("geoslo_late", ())] == 7.0


def test_the_endpoint_binds_loopback_by_default_and_close_frees_the_port(registry):
    server = serve_metrics(registry, 0)
    try:
        assert server.host == "127.0.0.1"
        assert server._server.socket.getsockname()[0] == "127.0.0.1"
    finally:
        server.close()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.settimeout(5)
        probe.connect(("127.0.0.1", server.port))


@pytest.mark.parametrize("port", [-1, 65536, "9100", True, 1.5])
def test_bad_ports_are_refused(registry, port):
    with pytest.raises(InputError) as caught:
        serve_metrics(registry, port)
    assert caught.value.field == "port"


def test_only_a_collector_registry_is_served():
    with pytest.raises(InputError) as caught:
        serve_metrics({"geoslo_x": 1.0}, 0)
    assert caught.value.field == "registry"
