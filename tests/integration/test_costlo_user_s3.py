"""``geoslo run`` CosTLO on the user's own S3 (issue 38, item 1): two versitygw gateways
started here as a user would (two regions, credentials in the environment), measured from
this machine, the plan published at /plan, in the plan file and as gauges; the user's own
objects untouched, and nothing written outside the probe prefix."""

from __future__ import annotations

import json

import pytest

from _engines import s3_client, versitygw
from _run import Running, http_get, run_service, write_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KEY, SECRET = "user-key", "user-secret-key"
REGIONS = (("east", "app-east"), ("west", "app-west"))


def _config(urls: list[str], plan_file, intervals: int, listen: str = "127.0.0.1:0") -> str:
    regions = "".join(
        f'[[environment.regions]]\nname = "{name}"\nendpoint_url = "{url}"\nbucket = "{bucket}"\n'
        for (name, bucket), url in zip(REGIONS, urls, strict=True)
    )
    return f"""system = "costlo"
interval_s = 2.0

[environment]
kind = "s3"
prefix = "office"
probe_objects = 5
agent_pairs = 40
pairs_per_s = 200.0
pings = 10
peak_get_rps = 10.0

{regions}
[controller]
get_slo_ms = 30.0

[service]
listen = "{listen}"
intervals = {intervals}
observe_timeout_s = 60.0
plan_file = "{plan_file}"
"""


@pytest.fixture
def gateways(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)  # botocore's chain, as a user sets it
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with (
        versitygw(tmp_path / "east", KEY, SECRET, (REGIONS[0][1],)) as east,
        versitygw(tmp_path / "west", KEY, SECRET, (REGIONS[1][1],)) as west,
    ):
        yield [east, west]


def _objects(url: str, bucket: str) -> dict[str, str]:
    """Every key of the bucket and its ETag."""
    listing = s3_client(url, KEY, SECRET).list_objects_v2(Bucket=bucket)
    return {o["Key"]: o["ETag"] for o in listing.get("Contents", [])}


def test_geoslo_run_chooses_for_the_users_s3_and_touches_only_its_probes(tmp_path, gateways):
    for url, (_, bucket) in zip(gateways, REGIONS, strict=True):
        client = s3_client(url, KEY, SECRET)
        client.put_object(Bucket=bucket, Key="user/photo-1", Body=b"the user's bytes")
    before = [_objects(url, bucket) for url, (_, bucket) in zip(gateways, REGIONS, strict=True)]
    plan_file = tmp_path / "plans.jsonl"
    run = Running(write_config(tmp_path, _config(gateways, plan_file, 0)))
    try:
        base = run.base_url()
        run.wait_for(lambda: plan_file.exists() and plan_file.read_text().count("\n") >= 2,
                     "two plans in the plan file")  # fmt: skip
        status, body = http_get(f"{base}/plan")
        assert run.stop() == 0
    finally:
        run.close()
    published = json.loads(body)
    assert status == 200 and published["system"] == "costlo" and not published["dry_run"]
    office = published["plan"]["prefixes"]["office"]
    configuration = office["configuration"]
    assert office["status"] != "failed" and office["second_region"] in (None, "west")
    assert not (configuration["serving"]["relay_vm"] or configuration["second"]["relay_vm"])
    lines = [json.loads(line) for line in plan_file.read_text().splitlines()]
    assert len(lines) >= 2 and all("office" in line["plan"]["prefixes"] for line in lines)
    after = [_objects(url, bucket) for url, (_, bucket) in zip(gateways, REGIONS, strict=True)]
    for old, new in zip(before, after, strict=True):
        assert new["user/photo-1"] == old["user/photo-1"]  # the user's object as it was
        added = set(new) - set(old)
        assert added and all(k.startswith("geoslo-probe/") for k in added), sorted(added)


def test_a_dry_run_measures_and_publishes_what_it_would_apply(tmp_path, gateways):
    plan_file = tmp_path / "plans.jsonl"
    result = run_service(write_config(tmp_path, _config(gateways, plan_file, 1)), "--dry-run")
    (logged,) = [r for r in result.records if r["event"] == "dry_run"]
    assert "office" in logged["plan"]["prefixes"]
    (line,) = [json.loads(x) for x in plan_file.read_text().splitlines()]
    assert line["dry_run"] is True and line["plan"] == logged["plan"]
