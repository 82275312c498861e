"""HAProxy as a Kurma site's data plane (issue 42): any Redis client follows the plan by
connecting to its site's HAProxy, and the agent writes the plan's row into HAProxy as
server weights through the Runtime API (``set weight``, no reload).

The generated ``haproxy.cfg`` (:func:`haproxy_config`) has two levels, as a balancer does
in DESIGN.md ("site choice" then "server choice"):

* ``frontend kurma`` on the listen address, to ``backend kurma_sites``: one server per site
  (``roundrobin``, whose smooth weighted rotation gives each site exactly its weight's share
  of connections); the agent sets these weights from its row (:func:`site_weights`);
* one ``listen site.<Site>.<choice>`` section per site, reached through an abstract UNIX
  socket, balancing over that site's servers with the in-site choice
  (:data:`BALANCE`: random, round_robin, least_outstanding, p2c; c3 has no HAProxy form).

Why not one backend holding every site's servers: its ``balance`` would then choose across
sites, not inside one (``random(2)`` draws two servers, possibly of two sites, and keeps the
less loaded: the split between sites would no longer be the row). The price is one more
hop inside the same process: +34-36 us per GET at p50 over a one-level HAProxy, of +98-109
us over the store directly (``benchmarks/bench_kurma_haproxy.py``, 2 busy cores).

Each site's entry is health-checked *through* its section with ``option redis-check``, so
a site whose servers are all down is drained by HAProxy itself; inside a section each
server is checked the same way and drained when it fails (stores behind AUTH or TLS: by a
connection only, ``HaproxySpec.ping_checks``).

HAProxy in TCP mode (RESP) balances **connections**, not requests: a client that keeps one
connection sends every request on it to the site and server chosen when it connected. The
row is followed request by request only by clients that connect per request (or keep a pool
of many short-lived connections); the split of requests is the split of connections. The
counters of ``show stat`` count connections too (:func:`connection_counts`); requests are
counted from the stores' ``INFO`` (the agent's ``_executed_commands``).
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from geoslo.control.kurma import check_server_choice
from geoslo.errors import ConfigError, TestbedError

__all__ = [
    "BALANCE",
    "FRONTEND",
    "MAX_WEIGHT",
    "SITES_BACKEND",
    "HaproxyDataplane",
    "HaproxySpec",
    "RuntimeApi",
    "StatRow",
    "arrivals_with_connections",
    "balance_problems",
    "check_agent_match",
    "connection_counts",
    "down_servers",
    "haproxy_config",
    "parse_stat",
    "server_name",
    "site_section",
    "site_weights",
    "sites_up",
]

MAX_WEIGHT = 256  # HAProxy's largest server weight (set weight takes 0-256)
FRONTEND = "kurma"
SITES_BACKEND = "kurma_sites"
DEFAULT_CHOICE = "random"  # no server choice configured: a uniform server (Kurma §3)
# The in-site choices (geoslo.control.kurma.SERVER_CHOICES) as HAProxy balances. In TCP mode
# leastconn counts open connections: least outstanding requests only for clients that
# connect per request. random(1) is written out: HAProxy's plain "random" draws 2.
BALANCE = {
    "random": "random(1)",
    "round_robin": "roundrobin",
    "least_outstanding": "leastconn",
    "p2c": "random(2)",
}
# What `show stat`'s "algo" column says for each (HAProxy 2.6 prints "unknown" for random).
_STAT_ALGO = {
    "random": ("random", "unknown"),
    "round_robin": ("roundrobin",),
    "least_outstanding": ("leastconn",),
    "p2c": ("random", "unknown"),
}
CHECK_FALL = 2  # failed checks before a server is DOWN (HAProxy's default is 3)
CHECK_RISE = 2
SOCKET_TIMEOUT_S = 1.0  # one Runtime API command on a local socket
COUNT_TIMEOUT_S = 0.2  # the counters' read, part of a round's collection (as a store's INFO)
_NAME = re.compile(r"[^A-Za-z0-9_.:-]")  # HAProxy names: letters, digits, - _ . :
_MAX_UNIX_PATH = 107  # sockaddr_un's sun_path, less its terminating NUL


@dataclass(frozen=True)
class HaproxySpec:
    """One site's HAProxy: every site's Redis servers as reached from this site (``servers``,
    this site's own included: a redirected request goes straight to the remote store, through
    the WAN), where applications connect (``listen``), the admin socket the agent writes
    weights through (``socket``), and the in-site choice its model was profiled with.

    ``arrivals``: what the agent counts as this site's demand, ``"clients"`` (the reports of
    the site's ``SiteClient``s, as without a proxy) or ``"connections"`` (also every
    connection the proxy took in the interval, one request each: right for clients that
    connect per request, an undercount for pooled ones).

    ``ping_checks``: health checks by PING (``option redis-check``); False for stores that
    need AUTH or TLS, whose PING HAProxy cannot send: then a check is a connection accepted,
    and a site whose stores are all down is drained by the agent's weights, not by HAProxy."""

    site: str
    sites: tuple[str, ...]
    servers: Mapping[str, tuple[tuple[str, int], ...]]
    listen: tuple[str, int]
    socket: str
    server_choice: str | None = None
    check_interval_ms: int = 1000
    maxconn: int = 4096  # two descriptors each: within a default 20000-descriptor limit
    idle_timeout_s: int = 3600  # a pooled Redis connection may idle this long
    arrivals: str = "clients"
    ping_checks: bool = True

    def __post_init__(self) -> None:
        if self.server_choice is not None:
            check_server_choice(self.server_choice)
        if self.choice not in BALANCE:
            raise ConfigError(
                "server_choice",
                f"{self.choice} ranks servers from the clients' own measurements; HAProxy "
                f"has no such balance: use one of {', '.join(BALANCE)} with a dataplane",
            )
        if self.site not in self.sites:
            raise ConfigError("site", f"{self.site!r} is not one of the sites {self.sites}")
        missing = [site for site in self.sites if not self.servers.get(site)]
        if missing:
            raise ConfigError(
                "dataplane.peer_servers", f"give the servers of every other site: {missing}"
            )
        names = [_name(site) for site in self.sites]
        if len(set(names)) != len(names):
            raise ConfigError("sites", f"two sites have the same HAProxy name: {names}")
        if len(self.socket.encode()) > _MAX_UNIX_PATH:
            raise ConfigError(
                "dataplane.socket", f"a UNIX socket path is at most {_MAX_UNIX_PATH} bytes"
            )
        if self.arrivals not in ("clients", "connections"):
            raise ConfigError("dataplane.arrivals", "must be clients or connections")

    @property
    def choice(self) -> str:
        """The in-site choice HAProxy balances with (a uniform server when none is set)."""
        return self.server_choice or DEFAULT_CHOICE


def check_agent_match(
    spec: HaproxySpec,
    site: str,
    sites: tuple[str, ...],
    servers: tuple[tuple[str, int], ...],
    server_choice: str | None,
) -> None:
    """ConfigError naming ``dataplane`` unless ``spec`` is the agent's own site: the same
    site, sites, local servers and in-site choice."""
    mine = (site, tuple(sites), tuple(servers), server_choice)
    theirs = (spec.site, spec.sites, tuple(spec.servers[spec.site]), spec.server_choice)
    if mine != theirs:
        raise ConfigError(
            "dataplane", f"is for {theirs}, not the agent's (site, sites, servers, choice) {mine}"
        )


def site_section(site: str, choice: str) -> str:
    """The name of ``site``'s ``listen`` section: it carries the in-site choice, which
    :func:`balance_problems` compares with the agent's."""
    return f"site.{_name(site)}.{choice}"


def server_name(host: str, port: int) -> str:
    """A store's name in HAProxy: its address (``show stat`` names servers by it)."""
    return _name(f"{host}:{port}")


def _name(text: str) -> str:
    return _NAME.sub("_", text)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _socket_stem(spec: HaproxySpec) -> str:
    """A prefix for the sections' abstract sockets, unique per HAProxy on a machine (two
    sites' proxies may share one): derived from the admin socket's path."""
    digest = hashlib.sha256(spec.socket.encode()).hexdigest()[:12]
    return f"geoslo-kurma-{digest}"


def haproxy_config(spec: HaproxySpec) -> str:
    """The site's ``haproxy.cfg`` (see the module's docstring). Every site starts at weight
    0 but this one, at :data:`MAX_WEIGHT`: all local until the agent writes a row."""
    stem, choice = _socket_stem(spec), spec.choice
    checks = f"check inter {spec.check_interval_ms}ms fall {CHECK_FALL} rise {CHECK_RISE}"
    ping = ["    option redis-check"] if spec.ping_checks else []
    lines = [
        f"# geoslo kurma haproxy-config: site {spec.site}'s data plane (generated; Kurma's",
        "# agent sets the weights of kurma_sites through the stats socket every interval).",
        "# TCP mode: HAProxy balances connections, not requests (docs/live.md).",
        "global",
        f"    stats socket {spec.socket} mode 600 level admin",
        "    stats timeout 10s",
        f"    maxconn {spec.maxconn}",
        "",
        "defaults",
        "    mode tcp",
        "    timeout connect 2s",
        "    timeout check 2s",
        "    timeout queue 2s",
        f"    timeout client {spec.idle_timeout_s}s",
        f"    timeout server {spec.idle_timeout_s}s",
        "    retries 2",
        "    option redispatch",
        "",
        f"frontend {FRONTEND}",
        f"    bind {_address(*spec.listen)}",
        f"    default_backend {SITES_BACKEND}",
        "",
        f"backend {SITES_BACKEND}",
        "    # the site choice: weights from this site's row of Kurma's plan",
        "    balance roundrobin",
        *[f"{line}  # through the site's section: DOWN when all its servers are" for line in ping],
        f"    default-server {checks}",
    ]
    for j, site in enumerate(spec.sites):
        weight = MAX_WEIGHT if site == spec.site else 0
        lines.append(f"    server {_name(site)} abns@{stem}-{j} weight {weight}")
    for j, site in enumerate(spec.sites):
        lines += [
            "",
            f"listen {site_section(site, choice)}",
            f"    bind abns@{stem}-{j}",
            f"    balance {BALANCE[choice]}  # the in-site choice: {choice}",
            *ping,
            f"    default-server {checks}",
        ]
        lines += [
            f"    server {server_name(host, port)} {_address(host, port)}"
            for host, port in spec.servers[site]
        ]
    return "\n".join(lines) + "\n"


# --- the Runtime API ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StatRow:
    """One line of ``show stat``: a frontend, a backend or a server (``name``) of a proxy.
    The counters are HAProxy's since it started: connections (``sessions_total``), not
    requests, in TCP mode."""

    proxy: str
    name: str
    kind: str  # "frontend", "backend", "server" (or "listener")
    status: str  # UP, DOWN, "UP 1/2" (going down), "DOWN 1/2" (going up), MAINT, no check, ...
    weight: int
    sessions_total: int
    current_sessions: int
    bytes_in: int
    bytes_out: int
    check_status: str
    algo: str  # a backend's balance as HAProxy names it

    @property
    def serving(self) -> bool:
        """Whether HAProxy sends this server new connections (a server going down, "UP
        1/2", still gets them; one coming back, "DOWN 1/2", not yet)."""
        return self.status in ("UP", "no check") or self.status.startswith("UP ")


_KINDS = {"0": "frontend", "1": "backend", "2": "server", "3": "listener"}


def parse_stat(text: str) -> list[StatRow]:
    """``show stat``'s CSV (its header line starts with ``# ``) as rows; ValueError if it
    is not that CSV."""
    if not text.startswith("# "):
        raise ValueError(f"not show stat's CSV: {text[:80]!r}")
    reader = csv.DictReader(io.StringIO(text[2:]))

    def number(record: dict, key: str) -> int:
        value = record.get(key) or ""
        return int(value) if value.isdigit() else 0

    return [
        StatRow(
            proxy=record["pxname"],
            name=record["svname"],
            kind=_KINDS.get(record.get("type") or "", "unknown"),
            status=record.get("status") or "",
            weight=number(record, "weight"),
            sessions_total=number(record, "stot"),
            current_sessions=number(record, "scur"),
            bytes_in=number(record, "bin"),
            bytes_out=number(record, "bout"),
            check_status=record.get("check_status") or "",
            algo=record.get("algo") or "",
        )
        for record in reader
        if record.get("pxname")
    ]


class RuntimeApi:
    """HAProxy's Runtime API on its stats socket (``level admin``), one connection per call
    (the socket's non-interactive mode: commands in, answers out, closed)."""

    def __init__(self, path: str, timeout_s: float = SOCKET_TIMEOUT_S) -> None:
        self.path, self.timeout_s = path, timeout_s

    async def command(self, *commands: str) -> str:
        """Every answer to ``commands`` (sent at once, separated by ``;``), as one text;
        TestbedError naming the socket if it cannot be reached in time."""
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_unix_connection(self.path)
                try:
                    writer.write(("; ".join(commands) + "\n").encode())
                    await writer.drain()
                    answer = await reader.read()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as error:
            reason = "no answer in time" if isinstance(error, TimeoutError) else error
            raise TestbedError(f"HAProxy's runtime API at {self.path}: {reason}") from None
        return answer.decode(errors="replace")

    async def show_stat(self) -> list[StatRow]:
        text = await self.command("show stat")
        try:
            return parse_stat(text)
        except ValueError as error:
            raise TestbedError(f"HAProxy's runtime API at {self.path}: {error}") from None

    async def set_weights(self, backend: str, weights: Mapping[str, int]) -> None:
        """``set weight backend/server w`` for each; TestbedError with HAProxy's answer if
        any is refused (each success answers nothing)."""
        commands = [f"set weight {backend}/{name} {int(w)}" for name, w in weights.items()]
        answer = await self.command(*commands)
        if answer.strip():
            raise TestbedError(f"HAProxy refused {commands}: {answer.strip()}")


# --- from the plan to weights, from the counters to arrivals -------------------------------------


def site_weights(row: Sequence[float], up: Sequence[bool], me: int) -> np.ndarray:
    """The integer weights (0..:data:`MAX_WEIGHT`) of each site's entry for this site's
    ``row`` (the fraction of its requests to serve at each site), ``up[j]`` whether site
    ``j`` has a server HAProxy sends connections to.

    Sites not up are left out and the rest renormalised: weights are relative, so the
    largest remaining fraction gets :data:`MAX_WEIGHT` and each other ``f`` gets
    ``round(MAX_WEIGHT * f / f_max)`` (half up): a site's share is off by at most half a
    step of 1/256 of the largest; a positive fraction too small to round to 1 gets 1 (the
    plan uses that site; it gets a little more than planned rather than nothing). A
    fraction of 0 gets 0. Never all zero: if every site the row uses is down, the sites
    that are up share evenly (this site alone if it is up: all local, the plan's fallback);
    if none is up, the row as it is (a server coming back finds the plan in force)."""
    fractions = np.clip(np.nan_to_num(np.asarray(row, dtype=float)), 0.0, None)
    up = np.asarray(up, dtype=bool)
    if fractions.shape != up.shape or not 0 <= me < len(up):
        raise ValueError(f"row {fractions.shape}, up {up.shape} and site {me} do not agree")
    kept = np.where(up, fractions, 0.0)
    if kept.sum() <= 0:
        if up[me]:
            kept = np.eye(len(up))[me]
        elif up.any():
            kept = up.astype(float)
        elif fractions.sum() > 0:
            kept = fractions
        else:
            kept = np.eye(len(up))[me]
    scaled = MAX_WEIGHT * kept / kept.max()
    weights = np.floor(scaled + 0.5).astype(int)
    weights[(kept > 0) & (weights == 0)] = 1
    return weights


def sites_up(rows: Sequence[StatRow], spec: HaproxySpec) -> np.ndarray:
    """Whether each site's section has a server HAProxy sends connections to."""
    sections = {site_section(site, spec.choice): j for j, site in enumerate(spec.sites)}
    up = np.zeros(len(spec.sites), dtype=bool)
    for row in rows:
        j = sections.get(row.proxy)
        if j is not None and row.kind == "server" and row.serving:
            up[j] = True
    return up


def down_servers(rows: Sequence[StatRow], spec: HaproxySpec) -> list[str]:
    """``site/server`` of every store HAProxy does not send connections to (drained by its
    checks, or in maintenance), with its status."""
    sections = {site_section(site, spec.choice): site for site in spec.sites}
    return [
        f"{sections[row.proxy]}/{row.name} ({row.status})"
        for row in rows
        if row.proxy in sections and row.kind == "server" and not row.serving
    ]


def balance_problems(rows: Sequence[StatRow], spec: HaproxySpec) -> list[str]:
    """Why the running HAProxy does not balance inside sites as the agent's model assumes
    (empty: it does): each site needs its section named for the agent's in-site choice
    (:func:`site_section`, from :func:`haproxy_config`), whose ``balance`` HAProxy reports
    as that choice's (``show stat``'s algo; HAProxy 2.6 does not report random's number of
    draws, so random and p2c are told apart by the section's name only), and the sites'
    backend its server per site."""
    problems = []
    backends = {row.proxy: row for row in rows if row.kind == "backend"}
    for site in spec.sites:
        name = site_section(site, spec.choice)
        if name not in backends:
            others = sorted(p for p in backends if p.startswith(f"site.{_name(site)}."))
            found = f"it has {others}" if others else "it has none"
            problems.append(
                f"site {site}: HAProxy has no section {name} for server_choice "
                f"{spec.choice!r} ({found}); regenerate it with geoslo kurma haproxy-config"
            )
        elif backends[name].algo not in _STAT_ALGO[spec.choice]:
            problems.append(
                f"site {site}: HAProxy balances {name} by {backends[name].algo}, not "
                f"{BALANCE[spec.choice]} (server_choice {spec.choice!r})"
            )
    entries = {row.name for row in rows if row.proxy == SITES_BACKEND and row.kind == "server"}
    missing = [site for site in spec.sites if _name(site) not in entries]
    if missing:
        problems.append(f"HAProxy's backend {SITES_BACKEND} has no server for {missing}")
    return problems


def connection_counts(
    before: Sequence[StatRow] | None, after: Sequence[StatRow], spec: HaproxySpec
) -> tuple[float, np.ndarray] | None:
    """Connections the proxy took between two ``show stat`` reads (its frontend's), and how
    many it sent to each site; None without a first read. A counter that went down (HAProxy
    restarted) counts from zero. Connections, not requests (TCP mode)."""
    if before is None:
        return None

    def counters(rows: Sequence[StatRow]) -> dict[tuple[str, str], int]:
        return {(row.proxy, row.name): row.sessions_total for row in rows}

    old, new = counters(before), counters(after)

    def delta(key: tuple[str, str]) -> float:
        now, then = new.get(key, 0), old.get(key, 0)
        return float(now - then if now >= then else now)

    per_site = np.array([delta((SITES_BACKEND, _name(site))) for site in spec.sites])
    return delta((FRONTEND, "FRONTEND")), per_site


# --- the agent's side ----------------------------------------------------------------------------


@dataclass
class HaproxyDataplane:
    """What a Kurma agent does with its site's HAProxy: refuse one that balances inside
    sites otherwise than its model (:meth:`check`), write each row as weights
    (:meth:`apply`) and count the proxy's connections (:meth:`connections`). HAProxy keeps
    the last weights written when the agent is gone. ``problems`` says what went wrong in
    the last call (the agent's degraded reasons)."""

    spec: HaproxySpec
    api: RuntimeApi = field(init=False)
    problems: list[str] = field(default_factory=list)
    _counter_api: RuntimeApi = field(init=False)
    _counted: list[StatRow] | None = None

    def __post_init__(self) -> None:
        self.api = RuntimeApi(self.spec.socket)
        self._counter_api = RuntimeApi(self.spec.socket, COUNT_TIMEOUT_S)

    async def check(self) -> None:
        """Raise ConfigError naming ``dataplane.socket`` if HAProxy does not balance as the
        agent's model assumes, TestbedError if its socket does not answer."""
        problems = balance_problems(await self.api.show_stat(), self.spec)
        if problems:
            raise ConfigError("dataplane.socket", "; ".join(problems))

    async def apply(self, row: Sequence[float]) -> dict:
        """Write ``row`` as the sites' weights (:func:`site_weights`, with the sites HAProxy
        finds up); nothing if its balance is not the agent's. Returns the round log's record
        (weights, servers down, problems); never raises for HAProxy's state."""
        me = self.spec.sites.index(self.spec.site)
        try:
            rows = await self.api.show_stat()
            self.problems = balance_problems(rows, self.spec)
            down = down_servers(rows, self.spec)
            if self.problems:
                return {"problems": list(self.problems), "down": down}
            weights = site_weights(row, sites_up(rows, self.spec), me)
            names = [_name(site) for site in self.spec.sites]
            await self.api.set_weights(SITES_BACKEND, dict(zip(names, weights, strict=True)))
        except TestbedError as error:
            self.problems = [f"dataplane: {error}"]
            return {"problems": list(self.problems)}
        if down:
            self.problems = [f"HAProxy drained {', '.join(down)}"]
        return {"weights": weights.tolist(), "down": down}

    async def connections(self) -> tuple[float, np.ndarray] | None:
        """Connections since the last call, in all and to each site (None the first time, or
        when HAProxy does not answer)."""
        try:
            rows = await self._counter_api.show_stat()
        except TestbedError:
            self._counted = None
            return None
        counts = connection_counts(self._counted, rows, self.spec)
        self._counted = rows
        return counts


def arrivals_with_connections(report: dict, counts: tuple[float, np.ndarray] | None) -> dict:
    """``report`` (the site's client counts for the round) with the proxy's connections
    added to its arrivals, one request each (``arrivals = "connections"``). Requests and
    violations are left to the clients that report: a connection says nothing about how
    long its requests took."""
    if counts is None:
        return report
    total, _ = counts
    if not math.isfinite(total):
        return report
    return {**report, "arrivals": float(report["arrivals"]) + total}
