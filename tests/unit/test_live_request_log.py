"""The client's request log: bounded memory for a run of any length, nothing lost."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from geoslo.errors import ConfigError
from geoslo.live.kurma import RequestLog
from geoslo.live.kurma._client import MAX_LOGGED_SITES

SLO_MS = 30.0


def requests(n: int, n_sites: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "issued_unix_s": 1.7e9 + np.sort(rng.random(n)) * 1e3,
        "site": rng.integers(n_sites, size=n).astype(np.int16),
        "response_ms": rng.exponential(15.0, n),
        "ok": rng.random(n) > 0.01,
        "write": rng.random(n) < 0.1,
    }


def log_all(log: RequestLog, r: dict[str, np.ndarray], chunk: int = 10_000) -> None:
    """Append the requests in order (chunk by chunk, so that only the log holds them)."""
    for start in range(0, len(r["ok"]), chunk):
        part = (r[k][start : start + chunk].tolist() for k in r)
        for t, site, ms, ok, write in zip(*part, strict=True):
            log.append(t, site, ms, ok, write)


def test_a_million_requests_keep_a_bounded_buffer_and_exact_counts() -> None:
    n, n_sites, capacity = 1_000_000, 3, 4096
    r = requests(n, n_sites)
    log = RequestLog(n_sites, SLO_MS, capacity=capacity)
    log_all(log, r)
    assert log.buffered <= capacity
    violated = ~r["ok"] | (r["response_ms"] > SLO_MS)
    expected = {
        "requests": np.bincount(r["site"], minlength=n_sites),
        "failures": np.bincount(r["site"], weights=~r["ok"], minlength=n_sites),
        "violations": np.bincount(r["site"], weights=violated, minlength=n_sites),
    }
    for name, counts in expected.items():
        np.testing.assert_array_equal(getattr(log, name), counts, err_msg=name)
    assert log.writes == int(r["write"].sum()) and len(log) == n
    arrays = log.arrays()
    for name, values in r.items():
        np.testing.assert_array_equal(arrays[name], values, err_msg=name)


def test_memory_does_not_grow_with_the_number_of_requests() -> None:
    r = requests(100_000, 3)
    log = RequestLog(3, SLO_MS, capacity=4096)
    tracemalloc.start()
    try:
        log_all(log, r)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # every record held as Python objects takes about 9 MB here; the buffer is 80 KB
    assert peak_bytes < 2_000_000


@pytest.mark.parametrize("n", [0, 1, 4, 5, 12])
def test_arrays_hold_every_record_in_order_across_flushes(n) -> None:
    r = requests(n, 2, seed=n)
    log = RequestLog(2, SLO_MS, capacity=4)
    log_all(log, r)
    arrays = log.arrays()
    assert set(arrays) == set(r)
    for name, values in r.items():
        assert arrays[name].dtype == values.dtype
        np.testing.assert_array_equal(arrays[name], values, err_msg=name)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        RequestLog(2, SLO_MS, capacity=0)


def test_the_last_site_an_int16_holds_beside_its_flags_round_trips() -> None:
    n_sites = MAX_LOGGED_SITES
    log = RequestLog(n_sites, SLO_MS, capacity=2)
    log.append(1.0, n_sites - 1, 40.0, True, True)
    log.append(2.0, 0, 1.0, False, False)
    log.append(3.0, n_sites - 1, 1.0, True, False)
    arrays = log.arrays()
    assert arrays["site"].tolist() == [n_sites - 1, 0, n_sites - 1]
    assert arrays["ok"].tolist() == [True, False, True]
    assert arrays["write"].tolist() == [True, False, False]
    with pytest.raises(ConfigError, match="n_sites"):
        RequestLog(n_sites + 1, SLO_MS)
