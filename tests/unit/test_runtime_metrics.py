"""The runtime's metrics, health and log: stale series are dropped, /healthz turns 503
when the loop stops completing intervals, log lines are JSON even for NaN."""

from __future__ import annotations

import io
import json
import time
from urllib.error import HTTPError
from urllib.request import urlopen

import numpy as np

from geoslo.live._metrics import _json_bytes, serve_metrics
from geoslo.runtime import Metrics, ServiceLog
from geoslo.runtime._metrics import DECISION_BUCKETS_S, Health


def test_plan_gauges_follow_the_plan_and_drop_names_that_are_gone():
    metrics = Metrics("replication")
    metrics.set_plan({"share_fraction:application": 0.5, "share_fraction:replication": 0.3})
    metrics.set_plan({"priority_rank:application": 0.0})
    registry = metrics.registry
    labels = {"system": "replication", "name": "share_fraction:application"}
    assert registry.get_sample_value("geoslo_plan", labels) is None
    labels["name"] = "priority_rank:application"
    assert registry.get_sample_value("geoslo_plan", labels) == 0.0


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
