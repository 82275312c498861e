"""HAProxy as a Kurma site's data plane (issue 42, item 1), without processes: the
generated haproxy.cfg, the plan's row as weights, ``show stat`` read back (the CSV below is
HAProxy 2.6's own, captured), the Runtime API against a stand-in socket, the agent's
``[environment.dataplane]`` table and ``geoslo kurma haproxy-config``."""

from __future__ import annotations

import asyncio
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from geoslo.cli._app import app
from geoslo.errors import ConfigError, TestbedError
from geoslo.live.kurma import AgentSpec
from geoslo.live.kurma._haproxy import (
    MAX_WEIGHT,
    SITES_BACKEND,
    HaproxySpec,
    RuntimeApi,
    StatRow,
    arrivals_with_connections,
    balance_problems,
    connection_counts,
    down_servers,
    haproxy_config,
    parse_stat,
    site_section,
    site_weights,
    sites_up,
)
from geoslo.runtime._config import parse_config
from geoslo.runtime.kurma import AGENT_EXAMPLE_CONFIG

SITES = ("Toronto", "Montreal", "Washington-DC")


def spec(choice: str | None = "p2c", servers_per_site: int = 2, **change) -> HaproxySpec:
    """Site Toronto's proxy; site j's servers on ports 7000 + 10 j + k."""
    servers = {
        site: tuple(("127.0.0.1", 7000 + 10 * j + k) for k in range(servers_per_site))
        for j, site in enumerate(SITES)
    }
    fields = {
        "site": "Toronto",
        "sites": SITES,
        "servers": servers,
        "listen": ("127.0.0.1", 6380),
        "socket": "/run/geoslo/toronto.sock",
        "server_choice": choice,
    }
    return HaproxySpec(**{**fields, **change})


def server_row(proxy: str, name: str, status: str = "UP", stot: int = 0, weight: int = 1):
    return StatRow(proxy, name, "server", status, weight, stot, 0, 0, 0, "L7OK", "")


def backend_row(proxy: str, algo: str, stot: int = 0):
    return StatRow(proxy, "BACKEND", "backend", "UP", 0, stot, 0, 0, 0, "", algo)


def rows_of(s: HaproxySpec, algo: str = "unknown", down: tuple[str, ...] = ()) -> list[StatRow]:
    """``show stat`` of a proxy generated from ``s``, the servers ``down`` (``site/name``)
    marked DOWN."""
    rows = [backend_row(SITES_BACKEND, "roundrobin")]
    rows += [server_row(SITES_BACKEND, site) for site in s.sites]
    for site in s.sites:
        section = site_section(site, s.choice)
        rows.append(backend_row(section, algo))
        for host, port in s.servers[site]:
            name = f"{host}:{port}"
            rows.append(server_row(section, name, "DOWN" if f"{site}/{name}" in down else "UP"))
    return rows


# --- haproxy.cfg ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "balance"),
    [
        ("random", "random(1)"),
        (None, "random(1)"),  # no choice: a uniform server, Kurma §3
        ("round_robin", "roundrobin"),
        ("least_outstanding", "leastconn"),
        ("p2c", "random(2)"),
    ],
)
def test_each_site_balances_by_the_in_site_choice(choice, balance):
    text = haproxy_config(spec(choice))
    entries, *sections = text.split("\nlisten ")
    assert "    balance roundrobin\n" in entries  # the site choice: exact weighted shares
    assert len(sections) == len(SITES)
    assert all(f"    balance {balance}  #" in section for section in sections)


def test_the_config_has_a_tcp_frontend_one_entry_per_site_and_an_admin_socket():
    s = spec()
    text = haproxy_config(s)
    assert "stats socket /run/geoslo/toronto.sock mode 600 level admin" in text
    assert "    mode tcp" in text and "    bind 127.0.0.1:6380" in text
    assert "option redis-check" in text and "check inter 1000ms fall 2 rise 2" in text
    sections = [line.split()[1] for line in text.splitlines() if line.startswith("listen ")]
    assert sections == [site_section(site, "p2c") for site in SITES]
    entries = [line.split() for line in text.splitlines() if "abns@" in line and "server" in line]
    assert [(e[1], e[-1]) for e in entries] == [  # all local until the agent writes a row
        ("Toronto", str(MAX_WEIGHT)),
        ("Montreal", "0"),
        ("Washington-DC", "0"),
    ]
    for site in SITES:
        for host, port in s.servers[site]:
            assert f"    server {host}:{port} {host}:{port}" in text


def test_stores_that_need_auth_or_tls_are_checked_by_a_connection_not_a_ping():
    assert "redis-check" not in haproxy_config(spec(ping_checks=False))
    assert "check inter 1000ms" in haproxy_config(spec(ping_checks=False))


def test_section_sockets_differ_between_two_proxies_on_one_machine():
    def sockets(text: str) -> set[str]:
        return {word for word in text.split() if word.startswith("abns@")}

    one = sockets(haproxy_config(spec(socket="/run/a.sock")))
    other = sockets(haproxy_config(spec(socket="/run/b.sock")))
    assert len(one) == len(SITES) and not one & other


def test_an_ipv6_store_is_bracketed_and_named_without_brackets():
    servers = {site: (("::1", 7000 + j),) for j, site in enumerate(SITES)}
    text = haproxy_config(spec(servers=servers))
    assert "    server ::1:7000 [::1]:7000" in text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"choice": "c3"}, "server_choice"),
        ({"choice": "fastest"}, "server_choice"),
        ({"site": "Paris"}, "site"),
        ({"socket": "/" + "s" * 120}, "dataplane.socket"),
        ({"sites": (*SITES, "Paris")}, "dataplane.peer_servers"),  # Paris has no servers
        ({"arrivals": "requests"}, "dataplane.arrivals"),
    ],
)
def test_a_spec_haproxy_cannot_run_is_refused_naming_the_field(change, field):
    with pytest.raises(ConfigError) as caught:
        spec(**change)
    assert caught.value.field.startswith(field)


def test_two_site_names_haproxy_would_spell_alike_are_refused():
    servers = {site: (("127.0.0.1", 7000),) for site in ("A B", "A_B")}
    with pytest.raises(ConfigError, match="same HAProxy name"):
        spec(site="A B", sites=("A B", "A_B"), servers=servers)


# --- weights ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "up", "me", "weights"),
    [
        ([1.0, 0.0, 0.0], [True, True, True], 0, [256, 0, 0]),
        ([0.5, 0.25, 0.25], [True, True, True], 0, [256, 128, 128]),
        ([0.48, 0.26, 0.26], [True, True, True], 0, [256, 139, 139]),  # 138.67 up
        ([0.999, 0.001, 0.0], [True, True, True], 0, [256, 1, 0]),  # 0.26: raised to 1
        ([0.5, 0.5, 0.0], [True, False, True], 0, [256, 0, 0]),  # a site down: renormalised
        ([0.0, 0.5, 0.5], [True, False, False], 0, [256, 0, 0]),  # the row's sites down: local
        ([0.5, 0.5, 0.0], [False, False, True], 0, [0, 0, 256]),  # ... and this one: who is up
        ([0.2, 0.3, 0.5], [False, False, False], 0, [102, 154, 256]),  # none up: the row
        ([0.0, 0.0, 0.0], [True, True, True], 1, [0, 256, 0]),  # no row: local
    ],
)
def test_row_to_weights(row, up, me, weights):
    assert site_weights(row, up, me).tolist() == weights


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6).flatmap(
        lambda f: st.tuples(
            st.just(f),
            st.lists(st.booleans(), min_size=len(f), max_size=len(f)),
            st.integers(0, len(f) - 1),
        )
    )
)
def test_weights_are_in_range_never_all_zero_and_follow_the_row(case):
    fractions, up, me = case
    f, up = np.array(fractions), np.array(up)
    w = site_weights(f, up, me)
    assert w.dtype.kind == "i" and (w >= 0).all() and (w <= MAX_WEIGHT).all()
    assert w.sum() > 0 and w.max() == MAX_WEIGHT
    kept = np.where(up, f, 0.0)
    if kept.sum() > 0:  # the row uses a site that is up: only those, in proportion
        assert (w[kept == 0] == 0).all()
        assert (w[kept > 0] >= 1).all()
        exact = MAX_WEIGHT * kept / kept.max()
        off = np.abs(w - exact)[exact >= 1]
        assert (off <= 0.5 + 1e-9).all()  # half a step, rounding


def test_a_row_that_does_not_fit_the_sites_is_refused():
    with pytest.raises(ValueError):
        site_weights([0.5, 0.5], [True, True, True], 0)


# --- show stat -----------------------------------------------------------------------------

# HAProxy 2.6.12's `show stat` for a config like haproxy_config's (two sites, no Redis up),
# trimmed to the columns' first 80 of 130 (parse_stat reads them by name).
HEADER = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,"
    "wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,"
    "throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,"
    "check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,"
    "req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,"
    "lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,"
    "agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health,agent_rise,"
    "agent_fall,agent_health,addr,cookie,mode,algo,conn_rate,conn_rate_max,conn_tot,"
)
CAPTURED = HEADER + "\n" + "\n".join([
    "kurma,FRONTEND,,,0,0,9984,7,70,21,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,0,,,,,,,,,,,"
    "0,0,0,,,0,0,0,0,,,,,,,,,,,,,,,,,,,,,tcp,,0,0,0,",
    "kurma_sites,Toronto,0,0,0,0,,5,0,0,,0,,0,0,0,0,UP,256,1,0,1,1,1,1,,1,3,1,,5,,2,0,,0,"
    "L7OK,,1001,,,,,,,,,,,0,0,,,,,-1,,,0,0,0,0,,,,Layer7 check passed,,2,3,0,,,,unix,,tcp,,,,",
    "kurma_sites,Montreal,0,0,0,0,,2,0,0,,0,,0,0,0,0,DOWN,0,1,0,1,1,0,0,,1,3,2,,2,,2,0,,0,"
    "L7TOUT,,1005,,,,,,,,,,,0,0,,,,,-1,,,0,0,0,0,,,,Layer7 timeout,,2,3,0,,,,unix,,tcp,,,,",
    "kurma_sites,BACKEND,0,0,0,0,999,7,0,0,0,0,,0,0,0,0,UP,256,1,0,,1,1,1,,1,3,0,,7,,1,0,,0,"
    ",,,,,,,,,,,,,0,0,0,0,0,0,-1,,,0,0,0,0,,,,,,,,,,,,,,tcp,roundrobin,,,",
    "site.Toronto.p2c,127.0.0.1:16379,0,0,0,1,,2,0,0,,0,,0,0,2,0,DOWN,1,1,0,1,1,1,1,,1,5,1,"
    ",1,,2,1,,1,L4CON,,0,,,,,,,,,,,0,0,,,,,1,Connection refused,,0,0,0,0,,,,Layer4 "
    "connection problem,,2,3,0,,,,127.0.0.1:16379,,tcp,,,,",
    "site.Toronto.p2c,127.0.0.1:16378,0,0,0,1,,3,0,0,,0,,0,0,2,0,UP 1/2,1,1,0,1,1,1,1,,1,5,"
    "2,,1,,2,1,,1,L7OK,,0,,,,,,,,,,,0,0,,,,,1,,,0,0,0,0,,,,Layer7 check passed,,2,3,0,,,,"
    "127.0.0.1:16378,,tcp,,,,",
    "site.Toronto.p2c,BACKEND,0,0,1,1,999,5,0,0,0,0,,0,0,2,0,UP,1,1,0,,1,1,1,,1,5,0,,1,,1,"
    "1,,1,,,,,,,,,,,,,,0,0,0,0,0,0,2,,,0,0,0,0,,,,,,,,,,,,,,tcp,unknown,,,",
    "site.Montreal.p2c,127.0.0.1:16377,0,0,0,1,,2,0,0,,0,,0,0,2,0,DOWN 1/2,1,1,0,1,1,1,1,,"
    "1,7,1,,1,,2,1,,1,L7OK,,0,,,,,,,,,,,0,0,,,,,0,,,0,0,0,0,,,,Layer7 check passed,,2,3,0,,"
    ",,127.0.0.1:16377,,tcp,,,,",
    "site.Montreal.p2c,BACKEND,0,0,1,1,999,1,0,0,0,0,,0,0,2,0,DOWN,0,0,0,,1,1,1,,1,7,0,,1,"
    ",1,1,,1,,,,,,,,,,,,,,0,0,0,0,0,0,1,,,0,0,0,0,,,,,,,,,,,,,,tcp,unknown,,,",
]) + "\n\n"  # fmt: skip
TWO = spec(
    sites=("Toronto", "Montreal"),
    servers={
        "Toronto": (("127.0.0.1", 16379), ("127.0.0.1", 16378)),
        "Montreal": (("127.0.0.1", 16377),),
    },
)


def test_show_stat_parses_into_rows_by_proxy_and_server():
    rows = parse_stat(CAPTURED)
    assert len(rows) == 9
    by_name = {(r.proxy, r.name): r for r in rows}
    frontend = by_name[("kurma", "FRONTEND")]
    assert (frontend.kind, frontend.sessions_total, frontend.bytes_in) == ("frontend", 7, 70)
    entry = by_name[("kurma_sites", "Montreal")]
    assert (entry.kind, entry.status, entry.weight, entry.check_status) == (
        "server",
        "DOWN",
        0,
        "L7TOUT",
    )
    assert by_name[("kurma_sites", "BACKEND")].algo == "roundrobin"
    going_down = by_name[("site.Toronto.p2c", "127.0.0.1:16378")]
    assert going_down.status == "UP 1/2" and going_down.serving  # still gets connections
    assert not by_name[("site.Montreal.p2c", "127.0.0.1:16377")].serving  # not back yet


def test_sites_up_and_down_servers_come_from_each_sites_section():
    rows = parse_stat(CAPTURED)
    assert sites_up(rows, TWO).tolist() == [True, False]
    assert down_servers(rows, TWO) == [
        "Toronto/127.0.0.1:16379 (DOWN)",
        "Montreal/127.0.0.1:16377 (DOWN 1/2)",
    ]
    assert balance_problems(rows, TWO) == []


@pytest.mark.parametrize("text", ["Unknown command.\n", "", "pxname,svname\n"])
def test_what_is_not_show_stat_is_refused(text):
    with pytest.raises(ValueError):
        parse_stat(text)


def test_a_proxy_balancing_otherwise_than_the_agent_is_named():
    rows = rows_of(spec("p2c"))
    assert balance_problems(rows, spec("p2c")) == []
    [problem] = [p for p in balance_problems(rows, spec("round_robin")) if "Toronto" in p]
    assert "no section site.Toronto.round_robin" in problem and "site.Toronto.p2c" in problem
    edited = rows_of(spec("round_robin"), algo="leastconn")  # the section's balance edited
    assert "by leastconn, not roundrobin" in balance_problems(edited, spec("round_robin"))[0]
    no_entries = [r for r in rows if r.proxy != SITES_BACKEND]
    assert SITES_BACKEND in balance_problems(no_entries, spec("p2c"))[-1]


def test_connections_are_counted_between_two_reads_from_zero_after_a_restart():
    s = spec()

    def read(frontend: int, per_site: list[int]) -> list[StatRow]:
        rows = [StatRow("kurma", "FRONTEND", "frontend", "OPEN", 0, frontend, 0, 0, 0, "", "")]
        return rows + [
            server_row(SITES_BACKEND, site, stot=n) for site, n in zip(SITES, per_site, strict=True)
        ]

    first, second = read(100, [60, 30, 10]), read(150, [90, 40, 20])
    assert connection_counts(None, first, s) is None
    total, per_site = connection_counts(first, second, s)
    assert total == 50 and per_site.tolist() == [30, 10, 10]
    total, per_site = connection_counts(second, read(4, [2, 1, 1]), s)  # HAProxy restarted
    assert total == 4 and per_site.tolist() == [2, 1, 1]


def test_connections_add_to_arrivals_only():
    report = {"arrivals": 10.0, "writes": 1.0, "requests": np.array([8.0, 2.0])}
    counted = arrivals_with_connections(report, (5.0, np.array([4.0, 1.0])))
    assert counted["arrivals"] == 15.0 and counted["requests"].tolist() == [8.0, 2.0]
    assert arrivals_with_connections(report, None) is report


# --- the Runtime API, against a stand-in socket ----------------------------------------------


def talk(tmp_path: Path, answer: bytes, call):
    """Run ``call(api)`` against a UNIX socket that records each line and answers
    ``answer``, as HAProxy's non-interactive mode does (then closes)."""
    received: list[bytes] = []

    async def main():
        async def serve(reader, writer):
            received.append(await reader.readline())
            writer.write(answer)
            await writer.drain()
            writer.close()

        path = str(tmp_path / "admin.sock")
        server = await asyncio.start_unix_server(serve, path)
        try:
            return await call(RuntimeApi(path, timeout_s=5.0))
        finally:
            server.close()

    return asyncio.run(main()), received


def test_set_weights_sends_one_line_and_a_refusal_raises_with_haproxys_words(tmp_path):
    weights = {"Toronto": 256, "Montreal": 0}
    _, sent = talk(tmp_path, b"\n\n", lambda api: api.set_weights(SITES_BACKEND, weights))
    assert sent == [b"set weight kurma_sites/Toronto 256; set weight kurma_sites/Montreal 0\n"]
    with pytest.raises(TestbedError, match="No such server"):
        talk(tmp_path, b"\nNo such server.\n\n", lambda api: api.set_weights("b", weights))


def test_show_stat_over_the_socket(tmp_path):
    rows, sent = talk(tmp_path, CAPTURED.encode(), lambda api: api.show_stat())
    assert sent == [b"show stat\n"] and len(rows) == 9


def test_a_missing_socket_is_a_testbed_error_naming_it(tmp_path):
    api = RuntimeApi(str(tmp_path / "absent.sock"))
    with pytest.raises(TestbedError, match="absent.sock"):
        asyncio.run(api.show_stat())


# --- the agent's table and the command ---------------------------------------------------------


def agent_file(tmp_path: Path, dataplane: str, server_choice: str = "p2c") -> Path:
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    path = tmp_path / "agent.toml"
    path.write_text(f"""\
system = "kurma"
[environment]
kind = "agent"
site = "Toronto"
sites = ["Toronto", "Montreal", "Washington-DC"]
peers = {{ Montreal = "127.0.0.1:7410", "Washington-DC" = "127.0.0.1:7420" }}
exchange_listen = "127.0.0.1:7400"
clients_listen = "127.0.0.1:7401"
servers = ["127.0.0.1:7000", "127.0.0.1:7001"]
secret_file = "{secret}"
server_choice = "{server_choice}"
{dataplane}
""")
    return path


DATAPLANE = """\
[environment.dataplane]
kind = "haproxy"
socket = "/run/geoslo/toronto.sock"
peer_servers = { Montreal = ["127.0.0.1:7010", "127.0.0.1:7011"], "Washington-DC" = ["127.0.0.1:7020", "127.0.0.1:7021"] }
"""  # noqa: E501 (one TOML line)


def test_the_agents_dataplane_table_gives_the_spec_the_command_writes(tmp_path):
    from geoslo.runtime.kurma import haproxy_spec

    path = agent_file(tmp_path, DATAPLANE)
    environment = parse_config(tomllib.loads(path.read_text())).environment
    built = haproxy_spec(environment)
    assert built == spec(socket="/run/geoslo/toronto.sock")
    agent = AgentSpec(
        sites=SITES, site="Toronto", peers={"Montreal": ("127.0.0.1", 1), "Washington-DC":
        ("127.0.0.1", 2)}, exchange_listen=("127.0.0.1", 3), clients_listen=("127.0.0.1", 4),
        servers=built.servers["Toronto"], secret_file="s", server_choice="p2c", dataplane=built,
    )  # fmt: skip
    assert agent.dataplane is built
    out = tmp_path / "haproxy.cfg"
    result = CliRunner().invoke(
        app, ["kurma", "haproxy-config", "--config", str(path), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_text() == haproxy_config(built)


def test_an_agent_spec_whose_dataplane_is_another_sites_is_refused():
    with pytest.raises(ConfigError) as caught:
        AgentSpec(
            sites=SITES, site="Toronto", peers={"Montreal": ("127.0.0.1", 1), "Washington-DC":
            ("127.0.0.1", 2)}, exchange_listen=("127.0.0.1", 3), clients_listen=("127.0.0.1", 4),
            servers=(("127.0.0.1", 9),), secret_file="s", server_choice="p2c", dataplane=spec(),
        )  # fmt: skip
    assert caught.value.field == "dataplane"


@pytest.mark.parametrize(
    ("dataplane", "choice", "message"),
    [
        (DATAPLANE.replace("Montreal = [", "Paris = ["), "p2c", "environment.dataplane.peer_"),
        (DATAPLANE.replace("Montreal = [", "Toronto = ["), "p2c", "environment.dataplane.peer_"),
        (DATAPLANE, "c3", "environment.server_choice"),
        (DATAPLANE.replace('"haproxy"', '"envoy"'), "p2c", "environment.dataplane.kind"),
        (DATAPLANE.replace("127.0.0.1:7010", "nowhere"), "p2c", "environment.dataplane.peer_"),
        ("", "p2c", "[environment.dataplane]"),
    ],
)
def test_bad_input_to_haproxy_config_is_exit_2_naming_the_option(
    tmp_path, dataplane, choice, message
):
    path = agent_file(tmp_path, dataplane, choice)
    result = CliRunner().invoke(app, ["kurma", "haproxy-config", "--config", str(path)])
    assert result.exit_code == 2
    assert result.output.startswith("geoslo: error: --config:") and message in result.output


def test_haproxy_config_names_a_missing_file_and_an_unwritable_output(tmp_path):
    missing = CliRunner().invoke(
        app, ["kurma", "haproxy-config", "--config", str(tmp_path / "none.toml")]
    )
    assert missing.exit_code == 2 and "--config:" in missing.output
    path = agent_file(tmp_path, DATAPLANE)
    unwritable = CliRunner().invoke(
        app,
        ["kurma", "haproxy-config", "--config", str(path), "-o", str(tmp_path / "no" / "h.cfg")],
    )
    assert unwritable.exit_code == 2 and "--output:" in unwritable.output


def test_the_agent_examples_dataplane_lines_load_once_uncommented():
    lines = AGENT_EXAMPLE_CONFIG.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("# [environment.dataplane]"))
    end = next(k for k, line in enumerate(lines) if line.startswith("# arrivals")) + 1
    lines[start:end] = [line.removeprefix("# ") for line in lines[start:end]]
    config = parse_config(tomllib.loads("\n".join(lines)))
    dataplane = config.environment.dataplane
    assert dataplane.kind == "haproxy" and dataplane.arrivals == "clients"
    assert set(dataplane.peer_servers) == {"Montreal", "Washington-DC"}
