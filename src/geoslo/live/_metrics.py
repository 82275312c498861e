"""The Prometheus exposition every live controller serves (DESIGN: "metrics: Prometheus
exposition format from live controllers, an HTTP port per controller").

A :class:`MetricsRegistry` holds counters, gauges and summaries (``_sum`` and ``_count``,
no quantiles) and renders them in the text format 0.0.4; :func:`serve_metrics` answers
``GET /metrics`` with it on an asyncio server. No threads, no dependencies, no locks: it
is meant to be used from the controller's event loop. Units in metric names (``_seconds``,
``_bytes``) are the caller's job.
"""

from __future__ import annotations

import asyncio
import functools
import math
import numbers
import re
from contextlib import suppress
from dataclasses import dataclass, field

from geoslo.errors import InputError

__all__ = ["MetricsRegistry", "serve_metrics"]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_HEAD_TIMEOUT = 2.0  # seconds to receive a request head
_HTTP_VERSION = re.compile(r"HTTP/1\.[01]\Z")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
}


@dataclass(slots=True)
class _Metric:
    kind: str  # "counter", "gauge" or "summary"
    full_name: str
    help_text: str
    labels: tuple[str, ...]
    samples: dict[tuple[str, ...], float] = field(default_factory=dict)
    count: int = 0  # summaries: observations so far (their sum is samples[()])


class MetricsRegistry:
    """Declared metrics and their current values, rendered as Prometheus text (0.0.4).

    Names are given without ``prefix``, and counters without ``_total`` (rendering adds
    both). A metric without labels is exposed (as 0) from its declaration; one with labels
    gets a sample per label combination once that combination is first used.
    """

    def __init__(self, prefix: str = "geoslo_") -> None:
        if not isinstance(prefix, str) or (prefix and not _METRIC_NAME.match(prefix)):
            raise InputError("prefix", f"must be empty or a valid metric name, got {prefix!r}")
        self._prefix = prefix
        self._metrics: dict[str, _Metric] = {}
        self._exposed: set[str] = set()  # every family and sample name taken so far

    def counter(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> None:
        """Declare a counter; it is exposed as ``<prefix><name>_total``."""
        if isinstance(name, str) and name.endswith("_total"):
            raise InputError(name, "give a counter's name without _total; rendering adds it")
        self._declare("counter", name, help_text, labels)

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> None:
        """Declare a gauge."""
        self._declare("gauge", name, help_text, labels)

    def summary(self, name: str, help_text: str) -> None:
        """Declare a summary without labels; it exposes ``<name>_sum`` and ``<name>_count``."""
        self._declare("summary", name, help_text, ())

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` (>= 0) to a counter."""
        metric = self._get(name, "counter")
        amount = _number(name, "amount", amount)
        if not amount >= 0:
            raise InputError(name, f"a counter only goes up; the amount must be >= 0, got {amount}")
        key = _label_key(name, metric, labels)
        metric.samples[key] = metric.samples.get(key, 0.0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge."""
        metric = self._get(name, "gauge")
        value = _number(name, "value", value)
        metric.samples[_label_key(name, metric, labels)] = value

    def observe(self, name: str, value: float) -> None:
        """Record one observation in a summary."""
        metric = self._get(name, "summary")
        metric.samples[()] += _number(name, "value", value)
        metric.count += 1

    def value(self, name: str, **labels: str) -> float:
        """A metric's current value (0.0 if never set); a summary's is its ``_sum``."""
        metric = self._get(name, None)
        return metric.samples.get(_label_key(name, metric, labels), 0.0)

    def render(self) -> str:
        """The full exposition text, in declaration order; empty when nothing is declared."""
        lines: list[str] = []
        for metric in self._metrics.values():
            family = metric.full_name + ("_total" if metric.kind == "counter" else "")
            lines.append(f"# HELP {family} {_escape_help(metric.help_text)}")
            lines.append(f"# TYPE {family} {metric.kind}")
            if metric.kind == "summary":
                lines.append(f"{family}_sum {_format(metric.samples[()])}")
                lines.append(f"{family}_count {metric.count}")
                continue
            for key, value in metric.samples.items():
                lines.append(f"{family}{_format_labels(metric.labels, key)} {_format(value)}")
        return "".join(line + "\n" for line in lines)

    def _declare(self, kind: str, name: str, help_text: str, labels: tuple[str, ...]) -> None:
        if not isinstance(name, str) or not _METRIC_NAME.match(self._prefix + name):
            raise InputError(str(name), "is not a valid Prometheus metric name")
        if name in self._metrics:
            raise InputError(name, "is already declared")
        if not isinstance(help_text, str):
            raise InputError(name, f"help text must be a string, got {help_text!r}")
        if isinstance(labels, str) or not isinstance(labels, tuple | list):
            raise InputError(name, f"labels must be a tuple of names, got {labels!r}")
        labels = tuple(labels)
        for label in labels:
            if not isinstance(label, str) or not _LABEL_NAME.match(label):
                raise InputError(name, f"{label!r} is not a valid label name")
            if label.startswith("__"):
                raise InputError(name, f"label names starting with __ are reserved: {label!r}")
        if len(set(labels)) != len(labels):
            raise InputError(name, f"label names repeat: {labels}")
        full = self._prefix + name
        exposed = {
            "counter": {full, full + "_total"},
            "gauge": {full},
            "summary": {full, full + "_sum", full + "_count"},
        }[kind]
        if clash := exposed & self._exposed:
            raise InputError(name, f"clashes with an already declared metric ({min(clash)})")
        self._exposed |= exposed
        metric = _Metric(kind, full, help_text, labels)
        if not labels:
            metric.samples[()] = 0.0
        self._metrics[name] = metric

    def _get(self, name: str, kind: str | None) -> _Metric:
        metric = self._metrics.get(name)
        if metric is None:
            raise InputError(str(name), "is not a declared metric")
        if kind is not None and metric.kind != kind:
            raise InputError(name, f"is a {metric.kind}, not a {kind}")
        return metric


def _number(name: str, what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(name, f"{what} must be a number, got {value!r}")
    return float(value)


def _label_key(name: str, metric: _Metric, labels: dict[str, object]) -> tuple[str, ...]:
    if set(labels) != set(metric.labels):
        expected = ", ".join(metric.labels) or "none"
        given = ", ".join(sorted(labels)) or "none"
        raise InputError(name, f"takes the labels ({expected}), got ({given})")
    key = tuple(labels[label] for label in metric.labels)
    for label, value in zip(metric.labels, key, strict=True):
        if not isinstance(value, str):
            raise InputError(name, f"label {label} must be a string, got {value!r}")
    return key


def _format(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    pairs = []
    for name, value in zip(names, values, strict=True):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        pairs.append(f'{name}="{escaped}"')
    return "{" + ",".join(pairs) + "}"


async def serve_metrics(
    registry: MetricsRegistry, port: int, host: str = "127.0.0.1"
) -> asyncio.base_events.Server:
    """Serve ``registry`` at ``http://host:port/metrics`` (port 0: any free port).

    Each connection gets one answer and is closed: 200 with :meth:`MetricsRegistry.render`
    for ``GET`` (or ``HEAD``) ``/metrics``, 404 for another path, 405 for another method,
    400 for a malformed request, 408 when the head takes over 2 s. The caller closes the
    returned server.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError("port", f"must be an integer in 0..65535, got {port!r}")
    return await asyncio.start_server(functools.partial(_answer, registry), host, port)


async def _answer(
    registry: MetricsRegistry, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
        except TimeoutError:
            await _respond(writer, "HTTP/1.1", 408)
            return
        except asyncio.IncompleteReadError as error:  # the peer stopped sending mid-head
            if error.partial:
                await _respond(writer, "HTTP/1.1", 400)
            return
        except asyncio.LimitOverrunError:
            await _respond(writer, "HTTP/1.1", 400)
            return
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if (
            len(parts) != 3
            or not parts[0].isalpha()
            or not parts[1].startswith("/")
            or not _HTTP_VERSION.match(parts[2])
            or any(":" not in line for line in lines[1:])
        ):
            await _respond(writer, "HTTP/1.1", 400)
            return
        method, target, version = parts
        if method not in ("GET", "HEAD"):
            await _respond(writer, version, 405, extra="Allow: GET, HEAD\r\n")
        elif target.split("?", 1)[0] != "/metrics":
            await _respond(writer, version, 404)
        else:
            body = registry.render().encode("utf-8")
            await _respond(writer, version, 200, body, send_body=method == "GET")
    except OSError:  # the client went away; nothing to answer
        pass
    finally:
        writer.close()
        with suppress(OSError):
            await writer.wait_closed()


async def _respond(
    writer: asyncio.StreamWriter,
    version: str,
    status: int,
    body: bytes | None = None,
    *,
    send_body: bool = True,
    extra: str = "",
) -> None:
    reason = _REASONS[status]
    if body is None:
        body = f"{status} {reason}\n".encode()
        content_type = "text/plain; charset=utf-8"
    else:
        content_type = _CONTENT_TYPE
    head = (
        f"{version} {status} {reason}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{extra}"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + (body if send_body else b""))
    await writer.drain()
