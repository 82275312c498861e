"""The runtime's metrics, health and log: stale series are dropped, /healthz turns 503
when the loop stops completing intervals, log lines are JSON even for NaN."""

from __future__ import annotations

import io
import json
import time
from urllib.error import HTTPError
from urllib.request import urlopen

import numpy as np
import pytest

from geoslo.live._metrics import _json_bytes, in_base_units, serve_metrics
from geoslo.runtime import Metrics, ServiceLog
from geoslo.runtime._metrics import DECISION_BUCKETS_S, Health, Reading


def test_plan_gauges_follow_the_plan_and_drop_series_that_are_gone():
    metrics = Metrics("replication")
    metrics.set_plan(
        [
            Reading.of("share_fraction", 0.5, stream="application"),
            Reading.of("share_fraction", 0.3, stream="replication"),
        ]
    )
    metrics.set_plan([Reading.of("priority_rank", 0.0, stream="application")])
    registry = metrics.registry
    labels = {"system": "replication", "stream": "application"}
    assert registry.get_sample_value("geoslo_plan_share_ratio", labels) is None
    assert registry.get_sample_value("geoslo_plan_priority_rank", labels) == 0.0
    legacy = {"system": "replication", "name": "share_fraction:application"}
    assert registry.get_sample_value("geoslo_plan", legacy) is None
    legacy["name"] = "priority_rank:application"
    assert registry.get_sample_value("geoslo_plan", legacy) == 0.0


def test_gauges_are_in_base_units_with_src_and_dst_labels_and_keep_their_old_names():
    metrics = Metrics("kurma")
    metrics.set_plan([Reading.of("rate_rps", 120.0, src="Toronto", dst="Montreal")])
    metrics.set_observation(
        [Reading.of("rtt_ms", 25.0, dst="Tokyo"), Reading.of("buffer_mb", 2.0, stream="vm")]
    )
    registry = metrics.registry
    pair = {"system": "kurma", "src": "Toronto", "dst": "Montreal"}
    assert registry.get_sample_value("geoslo_plan_rate_requests_per_second", pair) == 120.0
    rtt = registry.get_sample_value(
        "geoslo_observation_rtt_seconds", {"system": "kurma", "dst": "Tokyo"}
    )
    assert rtt == pytest.approx(0.025)
    buffer = {"system": "kurma", "stream": "vm"}
    assert registry.get_sample_value("geoslo_observation_buffer_bytes", buffer) == 2e6
    old = {"system": "kurma", "name": "rate_rps:Toronto->Montreal"}
    assert registry.get_sample_value("geoslo_plan", old) == 120.0  # deprecated, one release
    old = {"system": "kurma", "name": "rtt_ms:Tokyo"}
    assert registry.get_sample_value("geoslo_observation", old) == 25.0


def test_base_units_follow_prometheus_naming():
    assert in_base_units("get_timeout_ms", 30.0) == ("get_timeout_seconds", 0.03)
    assert in_base_units("now_s", 4.0) == ("now_seconds", 4.0)
    assert in_base_units("capacity_mbps", 8.0) == ("capacity_bytes_per_second", 1e6)
    assert in_base_units("redirect_fraction", 0.25) == ("redirect_ratio", 0.25)
    assert in_base_units("score_ms_requests", -2000.0) == ("score_request_seconds", -2.0)
    assert in_base_units("servers", 3.0) == ("servers", 3.0)


def test_every_error_kind_is_exposed_from_the_start_at_zero():
    text = Metrics("kurma").exposition().decode()
    for kind in ("observe", "decide", "apply"):
        assert f'geoslo_errors_total{{kind="{kind}",system="kurma"}} 0.0' in text
    assert 'geoslo_decision_seconds_count{system="kurma"} 0.0' in text


def test_decision_buckets_span_a_millisecond_to_ten_seconds():
    assert DECISION_BUCKETS_S[0] == 0.001 and DECISION_BUCKETS_S[-1] == 10.0
    assert list(DECISION_BUCKETS_S) == sorted(DECISION_BUCKETS_S)


def test_health_is_503_once_no_interval_completed_for_too_long():
    health = Health(stale_after_s=0.2)
    assert health.report()[0] == 200
    time.sleep(0.3)
    status, body = health.report()
    assert status == 503 and body["status"] == "stale" and body["last_interval_age_s"] >= 0.2
    health.completed("optimal")
    status, body = health.report()
    assert status == 200 and body == {**body, "status": "ok", "intervals": 1}


def test_log_lines_are_json_with_nan_as_null_or_one_plain_line():
    stream = io.StringIO()
    ServiceLog("director", stream).emit("interval", objective=float("nan"), errors=["observe"])
    record = json.loads(stream.getvalue())
    assert record["objective"] is None and record["system"] == "director"
    assert {"time", "level", "event"} <= set(record)
    text = io.StringIO()
    ServiceLog("director", text, "text").emit("interval", interval=3)
    assert text.getvalue().count("\n") == 1
    assert text.getvalue().endswith(' info interval system="director" interval=3\n')


def test_plan_is_503_until_one_is_applied_then_strict_json_with_numpy_and_nan():
    plan = {"status": 503, "body": {"plan": None}}
    server = serve_metrics(
        Metrics("costlo").registry, 0, plan=lambda: (plan["status"], plan["body"])
    )
    try:
        url = f"http://127.0.0.1:{server.port}/plan"
        try:
            urlopen(url, timeout=5)
            raise AssertionError("a 503 was expected")
        except HTTPError as error:
            assert error.code == 503
        plan["status"] = 200
        plan["body"] = {"rates": np.array([0.5, np.nan]), "n": np.int64(3), "x": [float("inf")]}
        with urlopen(url, timeout=5) as reply:
            body = json.loads(reply.read(), parse_constant=lambda c: 1 / 0)  # NaN is not JSON
        assert body == {"rates": [0.5, None], "n": 3, "x": [None]}
    finally:
        server.close()
    assert json.loads(_json_bytes({"deep": {"a": [float("nan")]}})) == {"deep": {"a": [None]}}
