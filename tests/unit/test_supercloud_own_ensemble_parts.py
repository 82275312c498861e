"""One's own ensemble under the placement loop (``kind = "ensemble"``, docs/placement.md):
its config refused with the key named, the site counters read from the Prometheus text
format, and the spares each site may start. Nothing is contacted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from geoslo.errors import ConfigError
from geoslo.live.supercloud.zookeeper import (
    EnsembleServer,
    SiteCounters,
    SupercloudEnsembleEnvironment,
)
from geoslo.live.supercloud.zookeeper._own_ensemble import increments, site_increments
from geoslo.runtime.supercloud import SYSTEM, ControllerSettings

SERVERS = [
    {"id": 1, "site": "east", "host": "10.0.0.1"},
    {"id": 2, "site": "east", "host": "10.0.0.2"},
    {"id": 3, "site": "east", "host": "10.0.0.3"},
    {"id": 4, "site": "west", "host": "10.0.1.4", "start": "start 4", "stop": "stop 4"},
    {"id": 5, "site": "west", "host": "10.0.1.5", "start": "start 5"},
    {"id": 6, "site": "west", "host": "10.0.1.6"},  # listed, but cannot be started
]
TABLE = {
    "kind": "ensemble",
    "sites": ["east", "west"],
    "rtt_ms": [[0.0, 80.0], [80.0, 0.0]],
    "counters_url": "http://127.0.0.1:9/metrics",
    "servers": SERVERS,
}


def _settings(**change):
    return SYSTEM.environments["ensemble"].model_validate({**TABLE, **change})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rtt_ms": [[0.0, 80.0]]}, "rtt_ms must be 2 rows"),
        ({"rtt_ms": [[0.0, -1.0], [80.0, 0.0]]}, "rtt_ms must be 2 rows"),
        ({"servers": [*SERVERS, {"id": 1, "site": "west", "host": "h"}]}, "its own id"),
        ({"servers": [{"id": 1, "site": "north", "host": "h"}]}, "'north'"),
        ({"servers": [{"id": 1, "site": "east", "host": "h", "port": 1}]}, "port"),
        ({"servers": []}, "servers"),
        ({"counters_url": ""}, "counters_url"),
    ],
)
def test_a_bad_ensemble_table_is_refused_naming_what(change, words) -> None:
    with pytest.raises(ValidationError, match=words):
        _settings(**change)


def test_the_environment_is_built_without_contacting_anything() -> None:
    service = SYSTEM.build(ControllerSettings(), _settings(), 60.0)
    env = service.environment
    assert isinstance(env, SupercloudEnsembleEnvironment)
    assert env.sites == ("east", "west") and env.rtt_ms.tolist() == [[0, 80], [80, 0]]
    assert env.ids_of("west") == [4, 5] and env.ids_of("east") == []  # a start command each
    assert env.server(4).config_line() == "server.4=10.0.1.4:2888:3888:participant;10.0.1.4:2181"
    assert env.measure_rtt_ms().tolist() == [[0, 80], [80, 0]]


def test_sites_without_rtts_are_ibm_cloud_regions() -> None:
    table = {**TABLE, "sites": ["Washington DC", "Tokyo"], "rtt_ms": None}
    table["servers"] = [{**s, "site": "Tokyo" if s["site"] == "west" else "Washington DC"}
                        for s in SERVERS]  # fmt: skip
    env = SYSTEM.build(ControllerSettings(), _settings(**table), 60.0).environment
    assert min(env.rtt_ms[0, 1], env.rtt_ms[1, 0]) > 100.0  # measured, across the Pacific
    unknown = {**table, "sites": ["Mars", "Tokyo"]}
    unknown["servers"] = [{**s, "site": "Mars"} if s["site"] != "Tokyo" else s
                          for s in table["servers"]]  # fmt: skip
    with pytest.raises(ConfigError, match="Mars"):
        SYSTEM.build(ControllerSettings(), _settings(**unknown), 60.0)


def test_the_single_vm_evaluation_is_refused_on_an_ensemble() -> None:
    with pytest.raises(ConfigError, match="zookeeper"):
        SYSTEM.build(ControllerSettings(evaluation="single_vm"), _settings(), 60.0)


PAGE = """\
# HELP geoslo_zk_reads_total reads
# TYPE geoslo_zk_reads_total counter
geoslo_zk_reads_total{site="east",client="a"} 10.0
geoslo_zk_reads_total{site="east",client="b"} 5.0
geoslo_zk_reads_total{site="west",client="c"} 7.0
geoslo_zk_reads_total{site="mars",client="d"} 100.0
# HELP geoslo_zk_writes_total writes
# TYPE geoslo_zk_writes_total counter
geoslo_zk_writes_total{site="west"} 2.0
# HELP other_total something else
# TYPE other_total counter
other_total{site="east"} 99.0
"""


def test_site_counters_add_each_sites_series_and_ignore_the_rest() -> None:
    series = SiteCounters("http://unused").series(PAGE, ["east", "west"])
    assert len(series) == 4  # east's two clients, west's read and write series
    assert site_increments(series, {}, ["east", "west"]) == {
        "east": (15.0, 0.0),
        "west": (7.0, 2.0),
    }
    renamed = SiteCounters("http://unused", reads_metric="other_total")
    assert site_increments(renamed.series(PAGE, ["east"]), {}, ["east"]) == {"east": (99.0, 0.0)}


def test_a_counter_that_went_down_restarted_from_zero() -> None:
    assert increments(15.0, 10.0) == 5.0
    assert increments(3.0, 10.0) == 3.0  # a client restarted: its 3 are all new


def test_one_clients_restart_counts_only_its_own_series_again() -> None:
    """Resets are told per series, as Prometheus does: a site's sum going down because
    one of its clients restarted must not count the other client's whole total."""
    a = ("east", 0, (("client", "a"), ("site", "east")))
    b = ("east", 0, (("client", "b"), ("site", "east")))
    before = {a: 1000.0, b: 500.0}
    after = {a: 1010.0, b: 4.0}  # b restarted and counted 4 since
    assert site_increments(after, before, ["east"]) == {"east": (14.0, 0.0)}
    gone = {a: 1020.0}  # b left the page: nothing of its own to add
    assert site_increments(gone, after, ["east"]) == {"east": (10.0, 0.0)}


def test_servers_of_a_site_the_environment_does_not_have_are_refused() -> None:
    east = EnsembleServer(1, "east", "h")
    with pytest.raises(ConfigError, match="north"):
        SupercloudEnsembleEnvironment(
            [east, EnsembleServer(2, "north", "h")], ["east", "west"],
            [[0, 1], [1, 0]], SiteCounters("http://unused"), 60.0,
        )  # fmt: skip


def test_the_digest_file_must_be_private_and_hold_user_and_password(tmp_path) -> None:
    path = tmp_path / "digest"
    path.write_text("super:secret\n")
    path.chmod(0o600)
    env = SYSTEM.build(ControllerSettings(), _settings(digest_file=str(path)), 60.0).environment
    assert env.digest == "super:secret"
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others") as refused:
        SYSTEM.build(ControllerSettings(), _settings(digest_file=str(path)), 60.0)
    assert refused.value.field == "environment.digest_file"
    path.write_text("no-password\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="user:password"):
        SYSTEM.build(ControllerSettings(), _settings(digest_file=str(path)), 60.0)
    with pytest.raises(ConfigError, match="cannot read"):
        SYSTEM.build(ControllerSettings(), _settings(digest_file=str(tmp_path / "none")), 60.0)
