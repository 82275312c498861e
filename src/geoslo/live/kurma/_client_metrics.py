"""A client's measurements as Prometheus metrics (Kurma §6: per destination, requests and
SLO violations; WAN bytes; arrivals and writes).

Each client counts in its own registry: per destination site a histogram of response times
with a bucket at the SLO (``geoslo_kurma_client_response_seconds``), failed requests
(``..._errors_total``, not in the histogram: a failure has no response time, and counts as a
violation) and WAN bytes. At every round the agent asks its clients for the registry in the
Prometheus text format and reads it with :func:`read_exposition`; any client, in any
language, that serves such a histogram with a bucket at the SLO can feed an agent. The
counts are cumulative: the agent keeps each client's last reading and takes differences.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from geoslo.errors import InputError

__all__ = ["ClientMetrics", "ClientTotals", "read_exposition"]

RESPONSE_METRIC = "geoslo_kurma_client_response_seconds"
ERRORS_METRIC = "geoslo_kurma_client_errors"
WAN_BYTES_METRIC = "geoslo_kurma_client_wan_bytes"
ARRIVALS_METRIC = "geoslo_kurma_client_arrivals"
WRITES_METRIC = "geoslo_kurma_client_writes"
RESPONSE_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500)  # and the SLO


@dataclass(frozen=True)
class ClientTotals:
    """Counts per destination site (arrays) and of the client's own requests."""

    arrivals: float
    writes: float
    requests: np.ndarray  # responses and failures
    violations: np.ndarray  # responses over the SLO and failures
    errors: np.ndarray
    wan_bytes: np.ndarray

    @classmethod
    def zero(cls, n_sites: int) -> ClientTotals:
        return cls(0.0, 0.0, *(np.zeros(n_sites) for _ in range(4)))

    def _values(self) -> tuple:
        return (self.arrivals, self.writes, self.requests, self.violations, self.errors,
                self.wan_bytes)  # fmt: skip

    def __add__(self, other: ClientTotals) -> ClientTotals:
        return ClientTotals(*(a + b for a, b in zip(self._values(), other._values(), strict=True)))

    def __sub__(self, earlier: ClientTotals) -> ClientTotals:
        return ClientTotals(
            *(a - b for a, b in zip(self._values(), earlier._values(), strict=True))
        )


class ClientMetrics:
    """One client's counts, kept as plain numbers on the request path (a request costs a
    bisect and two additions; prometheus-client's own Histogram took 0.8 us more per GET,
    a third of the library's work, measured with ``benchmarks/bench_live_client.py``) and
    exposed as Prometheus metrics by this collector of its own registry."""

    def __init__(self, sites: Sequence[str], slo_ms: float) -> None:
        self.sites, self.slo_ms = tuple(sites), slo_ms
        self.bounds_ms = sorted({*RESPONSE_BUCKETS_MS, slo_ms})
        n = len(self.sites)
        self.bucket_counts = [[0] * (len(self.bounds_ms) + 1) for _ in range(n)]  # then +Inf
        self.sum_ms = [0.0] * n
        self.errors = [0] * n
        self.wan_bytes = [0] * n
        self.arrivals = 0
        self.writes = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def observe_ms(self, site: int, response_ms: float) -> None:
        self.bucket_counts[site][bisect.bisect_left(self.bounds_ms, response_ms)] += 1
        self.sum_ms[site] += response_ms

    def collect(self):
        """The Prometheus families (the registry calls this)."""
        dst = ["dst"]
        response = HistogramMetricFamily(RESPONSE_METRIC, "Response time, SLO bucket", labels=dst)
        errors = CounterMetricFamily(ERRORS_METRIC, "Failed or timed-out requests", labels=dst)
        wan = CounterMetricFamily(WAN_BYTES_METRIC, "WAN bytes, both ways", labels=dst)
        les = [repr(b / 1e3) for b in self.bounds_ms] + ["+Inf"]  # repr: the SLO read back exact
        for j, site in enumerate(self.sites):
            buckets = list(zip(les, itertools.accumulate(self.bucket_counts[j]), strict=True))
            response.add_metric([site], buckets, self.sum_ms[j] / 1e3)
            errors.add_metric([site], self.errors[j])
            wan.add_metric([site], self.wan_bytes[j])
        yield response
        yield errors
        yield wan
        yield CounterMetricFamily(ARRIVALS_METRIC, "GETs and PUTs asked", self.arrivals)
        yield CounterMetricFamily(WRITES_METRIC, "PUTs asked", self.writes)

    def exposition(self) -> str:
        """The registry in the Prometheus text format (what the agent reads)."""
        return generate_latest(self.registry).decode()

    def totals(self) -> ClientTotals:
        return read_exposition(self.exposition(), self.sites, self.slo_ms)


def read_exposition(text: str, sites: Sequence[str], slo_ms: float) -> ClientTotals:
    """A client's cumulative counts from its Prometheus text: the response histogram must
    have a bucket at the SLO; a destination that is not in it counted nothing."""
    index = {site: j for j, site in enumerate(sites)}
    n = len(sites)
    count, within, errors, wan = (np.zeros(n) for _ in range(4))
    scalars = {ARRIVALS_METRIC: 0.0, WRITES_METRIC: 0.0}
    slo_bucket_seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if name.removesuffix("_total") in scalars:
                scalars[name.removesuffix("_total")] = value
                continue
            j = index.get(labels.get("dst", ""))
            if j is None:
                continue
            if name == f"{RESPONSE_METRIC}_count":
                count[j] = value
            elif name == f"{RESPONSE_METRIC}_bucket" and _is_slo(labels["le"], slo_ms):
                within[j], slo_bucket_seen = value, True
            elif name == f"{ERRORS_METRIC}_total":
                errors[j] = value
            elif name == f"{WAN_BYTES_METRIC}_total":
                wan[j] = value
    if count.any() and not slo_bucket_seen:
        raise InputError(RESPONSE_METRIC, f"has no bucket at the SLO ({slo_ms:g} ms)")
    return ClientTotals(
        scalars[ARRIVALS_METRIC], scalars[WRITES_METRIC], count + errors,
        count - within + errors, errors, wan,
    )  # fmt: skip


def _is_slo(le: str, slo_ms: float) -> bool:
    return le != "+Inf" and math.isclose(float(le), slo_ms / 1e3, rel_tol=1e-9)
