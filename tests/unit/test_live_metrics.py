"""The Prometheus exposition of live controllers: text format and the HTTP endpoint."""

import asyncio
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from geoslo.errors import InputError
from geoslo.live import _metrics
from geoslo.live._metrics import MetricsRegistry, serve_metrics


def parsed_samples(text):
    """{(sample name, sorted label items): value} of an exposition text."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def example_registry():
    registry = MetricsRegistry()
    registry.counter("requests", "Requests answered.", ("site", "outcome"))
    registry.gauge("replicas", "Replicas per site.", ("site",))
    registry.gauge("load", "Offered load.")
    registry.summary("decision_seconds", "Time per controller decision.")
    registry.inc("requests", site="a", outcome="ok")
    registry.inc("requests", 2.5, site="a", outcome="ok")
    registry.inc("requests", 4, site="b", outcome="slow")
    registry.set("replicas", 3, site="a")
    registry.set("replicas", 5, site="a")
    registry.set("replicas", 1, site="c")
    registry.set("load", 0.25)
    registry.observe("decision_seconds", 0.5)
    registry.observe("decision_seconds", 1.25)
    return registry


EXAMPLE_SAMPLES = {
    ("geoslo_requests_total", (("outcome", "ok"), ("site", "a"))): 3.5,
    ("geoslo_requests_total", (("outcome", "slow"), ("site", "b"))): 4.0,
    ("geoslo_replicas", (("site", "a"),)): 5.0,
    ("geoslo_replicas", (("site", "c"),)): 1.0,
    ("geoslo_load", ()): 0.25,
    ("geoslo_decision_seconds_sum", ()): 1.75,
    ("geoslo_decision_seconds_count", ()): 2.0,
}


def test_render_parses_back_to_the_values_set():
    text = example_registry().render()
    assert parsed_samples(text) == EXAMPLE_SAMPLES
    families = list(text_string_to_metric_families(text))
    assert [(f.name, f.type, f.documentation) for f in families] == [
        ("geoslo_requests", "counter", "Requests answered."),
        ("geoslo_replicas", "gauge", "Replicas per site."),
        ("geoslo_load", "gauge", "Offered load."),
        ("geoslo_decision_seconds", "summary", "Time per controller decision."),
    ]


def test_render_text_layout():
    assert example_registry().render() == (
        "# HELP geoslo_requests_total Requests answered.\n"
        "# TYPE geoslo_requests_total counter\n"
        'geoslo_requests_total{site="a",outcome="ok"} 3.5\n'
        'geoslo_requests_total{site="b",outcome="slow"} 4.0\n'
        "# HELP geoslo_replicas Replicas per site.\n"
        "# TYPE geoslo_replicas gauge\n"
        'geoslo_replicas{site="a"} 5.0\n'
        'geoslo_replicas{site="c"} 1.0\n'
        "# HELP geoslo_load Offered load.\n"
        "# TYPE geoslo_load gauge\n"
        "geoslo_load 0.25\n"
        "# HELP geoslo_decision_seconds Time per controller decision.\n"
        "# TYPE geoslo_decision_seconds summary\n"
        "geoslo_decision_seconds_sum 1.75\n"
        "geoslo_decision_seconds_count 2\n"
    )


def test_unlabelled_metrics_are_exposed_as_zero_and_labelled_ones_only_once_used():
    registry = MetricsRegistry(prefix="")
    registry.counter("ticks", "Ticks.")
    registry.gauge("depth", "Queue depth.", ("site",))
    registry.summary("wait_seconds", "Waits.")
    assert parsed_samples(registry.render()) == {
        ("ticks_total", ()): 0.0,
        ("wait_seconds_sum", ()): 0.0,
        ("wait_seconds_count", ()): 0.0,
    }
    assert MetricsRegistry().render() == ""


@pytest.mark.parametrize(
    ("operations", "name", "labels", "expected"),
    [
        ([], "requests", {"site": "a", "outcome": "ok"}, 0.0),
        ([("inc", "requests", (), {"site": "a", "outcome": "ok"})], "requests", None, 1.0),
        ([("inc", "requests", (2,), {"site": "a", "outcome": "ok"})] * 3, "requests", None, 6.0),
        ([("set", "load", (7,), {}), ("set", "load", (-2.5,), {})], "load", {}, -2.5),
        ([("observe", "latency", (0.5,), {})] * 4, "latency", {}, 2.0),
        ([], "latency", {}, 0.0),
    ],
)
def test_value_reads_back(operations, name, labels, expected):
    registry = MetricsRegistry()
    registry.counter("requests", "Requests.", ("site", "outcome"))
    registry.gauge("load", "Load.")
    registry.summary("latency", "Latency.")
    for method, metric, args, kwargs in operations:
        getattr(registry, method)(metric, *args, **kwargs)
    if labels is None:
        labels = operations[0][3]
    assert registry.value(name, **labels) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [(math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf"), (1e20, "1e+20")],
)
def test_special_values(value, text):
    registry = MetricsRegistry()
    registry.gauge("x", "X.")
    registry.set("x", value)
    rendered = registry.render()
    assert rendered.endswith(f"\ngeoslo_x {text}\n")
    back = parsed_samples(rendered)[("geoslo_x", ())]
    assert back == value or (math.isnan(value) and math.isnan(back))


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("back\\slash", "back\\\\slash"),
        ('say "hi"', 'say \\"hi\\"'),
        ("two\nlines", "two\\nlines"),
        ('all \\ " \n', 'all \\\\ \\" \\n'),
        ("plain ünïcode", "plain ünïcode"),
    ],
)
def test_label_values_are_escaped(raw, escaped):
    registry = MetricsRegistry()
    registry.gauge("g", "Help with \\ and\nnewline.", ("who",))
    registry.set("g", 1, who=raw)
    text = registry.render()
    assert f'geoslo_g{{who="{escaped}"}} 1.0\n' in text
    assert "# HELP geoslo_g Help with \\\\ and\\nnewline.\n" in text
    [family] = text_string_to_metric_families(text)
    assert family.documentation == "Help with \\ and\nnewline."
    assert [(s.labels, s.value) for s in family.samples] == [({"who": raw}, 1.0)]


@pytest.mark.parametrize("amount", [-1, -0.001, -math.inf, math.nan])
def test_counters_reject_negative_increments(amount):
    registry = MetricsRegistry()
    registry.counter("c", "C.")
    registry.inc("c", 2)
    with pytest.raises(InputError) as caught:
        registry.inc("c", amount)
    assert caught.value.field == "c"
    assert registry.value("c") == 2.0


def _declared():
    registry = MetricsRegistry()
    registry.counter("c", "C.", ("site",))
    registry.gauge("g", "G.", ("site", "kind"))
    registry.summary("s", "S.")
    return registry


@pytest.mark.parametrize(
    ("call", "field"),
    [
        # labels: missing, extra, misnamed, not strings
        (lambda r: r.inc("c"), "c"),
        (lambda r: r.inc("c", site="a", kind="x"), "c"),
        (lambda r: r.inc("c", place="a"), "c"),
        (lambda r: r.inc("c", site=3), "c"),
        (lambda r: r.set("g", 1, site="a"), "g"),
        (lambda r: r.set("g", 1, site="a", kind="x", more="y"), "g"),
        (lambda r: r.value("g", site="a"), "g"),
        (lambda r: r.value("s", site="a"), "s"),
        # undeclared names and the wrong kind
        (lambda r: r.inc("nope"), "nope"),
        (lambda r: r.set("nope", 1), "nope"),
        (lambda r: r.observe("nope", 1), "nope"),
        (lambda r: r.value("nope"), "nope"),
        (lambda r: r.inc("g", site="a", kind="x"), "g"),
        (lambda r: r.set("c", 1, site="a"), "c"),
        (lambda r: r.observe("c", 1), "c"),
        (lambda r: r.inc("s"), "s"),
        # values that are not numbers
        (lambda r: r.set("g", "1", site="a", kind="x"), "g"),
        (lambda r: r.inc("c", True, site="a"), "c"),
        (lambda r: r.observe("s", None), "s"),
        # declarations: twice, clashing, invalid names
        (lambda r: r.counter("c", "Again."), "c"),
        (lambda r: r.gauge("c", "Other kind, same name."), "c"),
        (lambda r: r.gauge("c_total", "Same exposed name as the counter."), "c_total"),
        (lambda r: r.gauge("s_count", "Same exposed name as the summary."), "s_count"),
        (lambda r: r.counter("done_total", "Suffix given."), "done_total"),
        (lambda r: r.gauge("has-dash", "Bad name."), "has-dash"),
        (lambda r: r.gauge("ok", "Bad label.", ("bad-label",)), "ok"),
        (lambda r: r.gauge("ok", "Reserved label.", ("__x",)), "ok"),
        (lambda r: r.gauge("ok", "Repeated label.", ("a", "a")), "ok"),
    ],
)
def test_misuse_raises_input_error_naming_the_metric(call, field):
    registry = _declared()
    before = registry.render()
    with pytest.raises(InputError) as caught:
        call(registry)
    assert caught.value.field == field
    assert registry.render() == before


# --- the HTTP endpoint -------------------------------------------------------------------


async def _exchange(port, request, *, eof=False):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        if eof:
            writer.write_eof()
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return status_line, headers, body


def _serve(registry, requests, **kwargs):
    async def main():
        server = await serve_metrics(registry, 0)
        try:
            port = server.sockets[0].getsockname()[1]
            return [await _exchange(port, request, **kwargs) for request in requests]
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


@pytest.mark.parametrize("version", ["HTTP/1.0", "HTTP/1.1"])
def test_http_metrics_answers_the_exposition(version):
    registry = example_registry()
    request = f"GET /metrics {version}\r\nHost: localhost\r\nAccept: */*\r\n\r\n".encode()
    [(status, headers, body)] = _serve(registry, [request])
    assert status == f"{version} 200 OK"
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["Content-Length"]) == len(body)
    assert body.decode() == registry.render()
    assert parsed_samples(body.decode()) == EXAMPLE_SAMPLES


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (b"GET / HTTP/1.0\r\n\r\n", "HTTP/1.0 404 Not Found"),
        (b"GET /metrics/x HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (b"GET /metrics?name=x HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 405 Method Not Allowed"),
        (b"GET /metrics\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"\x00\x01garbage\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ],
)
def test_http_other_requests(request_bytes, status):
    [(status_line, headers, body)] = _serve(example_registry(), [request_bytes])
    assert status_line == status
    assert int(headers["Content-Length"]) == len(body)
    if not status.endswith("200 OK"):
        assert body.decode() == status.split(" ", 1)[1] + "\n"


def test_http_head_sends_no_body_and_truncated_head_is_malformed():
    requests = [b"HEAD /metrics HTTP/1.1\r\n\r\n"]
    [(status, headers, body)] = _serve(example_registry(), requests)
    assert status == "HTTP/1.1 200 OK"
    assert int(headers["Content-Length"]) == len(example_registry().render().encode())
    assert body == b""
    [(status, _, _)] = _serve(example_registry(), [b"GET /metrics HTTP/1.1\r\n"], eof=True)
    assert status == "HTTP/1.1 400 Bad Request"


def test_http_slow_request_head_times_out(monkeypatch):
    monkeypatch.setattr(_metrics, "_HEAD_TIMEOUT", 0.05)
    [(status, _, _)] = _serve(example_registry(), [b"GET /metrics HTTP/1.1\r\n"])
    assert status == "HTTP/1.1 408 Request Timeout"


def test_http_serves_several_connections_and_current_values():
    registry = MetricsRegistry()
    registry.counter("scrapes", "Scrapes.")

    async def main():
        server = await serve_metrics(registry, 0)
        try:
            port = server.sockets[0].getsockname()[1]
            seen = []
            for _ in range(3):
                registry.inc("scrapes")
                _, _, body = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
                seen.append(parsed_samples(body.decode())[("geoslo_scrapes_total", ())])
            return seen
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(main()) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("port", [-1, 65536, "9100", True])
def test_serve_metrics_rejects_bad_ports(port):
    with pytest.raises(InputError) as caught:
        asyncio.run(serve_metrics(MetricsRegistry(), port))
    assert caught.value.field == "port"
