"""A service's Prometheus exposition, as the tests read it."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int, host: str = "127.0.0.1") -> dict[tuple[str, tuple], float]:
    """Every sample at ``host:port/metrics``, keyed by (name, sorted labels), parsed by
    prometheus-client's reference parser."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
