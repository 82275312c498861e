"""The server inside the chosen site on the live client (issue 37, the balancer's second
level): each server choice's pure decision, its composition with every site choice, the
client's in-flight counts, and the site's choice as the agent's config carries it."""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np
import pytest
from pydantic import ValidationError

from geoslo.control.kurma import SERVER_CHOICES
from geoslo.errors import ConfigError
from geoslo.live._backend import SleepWork
from geoslo.live.kurma._client import SiteClient, StoreEndpoints
from geoslo.live.kurma._policies import (
    POLICY_NAMES,
    C3Scores,
    RatesPolicy,
    RoutingPolicy,
    ServerChoice,
    key_replicas,
    least_outstanding,
    lowest_psi,
    make_policy,
    power_of_two,
    round_robin,
)
from geoslo.runtime.kurma import AgentSettings, TestbedSettings

NEAREST = [0, 1, 2]


class Scripted:
    """An rng whose ``random()`` returns the given uniforms in turn."""

    def __init__(self, *uniforms: float) -> None:
        self.uniforms = iter(uniforms)

    def random(self) -> float:
        return next(self.uniforms)


def up_everywhere(servers_per_site: list[int]) -> RoutingPolicy:
    """The hosts of a site choice whose servers are all up."""
    return RoutingPolicy(0, servers_per_site)


def start_uniform(server: int, n_servers: int) -> float:
    """The uniform that draws ``server`` as a key's start replica among ``n_servers``."""
    return (server + 0.5) / n_servers


# --- the pure decisions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "n", "rf", "replicas"),
    [(0, 5, 3, (0, 1, 2)), (3, 5, 3, (3, 4, 0)), (1, 2, 3, (1, 0)), (0, 1, 3, (0,))],
)
def test_a_keys_replicas_are_rf_consecutive_servers_from_its_start(start, n, rf, replicas):
    assert key_replicas(start, n, rf) == replicas


@pytest.mark.parametrize(
    ("candidates", "in_flight", "chosen"),
    [
        ([0, 1, 2], [3, 1, 2], 1),
        ([2, 3, 0], [0, 5, 5, 5], 0),  # the fewest, wherever it is in ring order
        ([1, 2, 0], [4, 2, 2], 1),  # a tie: the first from the key's start
        ([3, 0, 1], [0, 0, 0, 0], 3),
        ([4], [9, 9, 9, 9, 9], 4),
    ],
)
def test_least_outstanding_takes_the_fewest_in_flight_ties_first_in_ring_order(
    candidates, in_flight, chosen
):
    assert least_outstanding(candidates, in_flight) == chosen


@pytest.mark.parametrize(
    ("first", "second", "in_flight", "chosen"),
    [
        (0.0, 0.0, [5, 1, 0], 1),  # draws 0 then 1 (the second is over the others)
        (0.0, 0.99, [5, 1, 0], 2),  # draws 0 then 2
        (0.5, 0.0, [0, 1, 0], 0),  # draws 1 then 0: 0 has fewer
        (0.5, 0.6, [3, 2, 2], 1),  # draws 1 then 2, a tie: the first drawn
        (0.9, 0.0, [2, 0, 2], 2),  # draws 2 then 0, a tie: the first drawn
        (0.9, 0.7, [2, 0, 2], 1),  # draws 2 then 1
    ],
)
def test_p2c_draws_two_distinct_and_takes_fewer_in_flight_ties_the_first(
    first, second, in_flight, chosen
):
    assert power_of_two([0, 1, 2], in_flight, first, second) == chosen


def test_p2c_never_draws_the_same_replica_twice():
    pairs = set()
    for first in np.linspace(0, 0.999, 50):
        for second in np.linspace(0, 0.999, 50):
            # with every count distinct the choice tells which pair was drawn
            chosen = power_of_two([0, 1, 2], [0, 0, 0], first, second)
            assert chosen == min(int(first * 3), 2)  # ties: the first drawn
            a = min(int(first * 3), 2)
            b = min(int(second * 2), 1)
            pairs.add((a, b + (b >= a)))
    assert pairs == {(a, b) for a in range(3) for b in range(3) if a != b}


@pytest.mark.parametrize(
    ("candidates", "cursor", "chosen", "cursor_after"),
    [
        ([0, 1, 2], 0, 0, 1),
        ([0, 1, 2], 1, 1, 2),
        ([0, 1, 2], 3, 0, 1),  # past every replica: wraps to the first in ring order
        ([3, 4, 0], 1, 3, 4),  # the first replica at or after the cursor
        ([3, 4, 0], 4, 4, 0),
        ([3, 4, 0], 0, 0, 1),
    ],
)
def test_round_robin_takes_the_first_replica_at_or_after_its_cursor(
    candidates, cursor, chosen, cursor_after
):
    assert round_robin(candidates, 5, cursor) == (chosen, cursor_after)


def test_round_robin_walks_every_server_in_turn_when_every_server_is_a_replica():
    choice = ServerChoice("round_robin", [4])
    down = up_everywhere([4])
    starts = [0.1, 0.9, 0.4, 0.6, 0.3, 0.2, 0.8, 0.0]  # any key: rf 3 of 4 servers
    served = [choice.choose(0, Scripted(u), 0.0, down) for u in starts]
    # keys from 0, 3, 1, 2, 1, 0, 3, 0: the cursor's server while it is a replica, else the
    # next replica after it (the 5th key's replicas 1, 2, 3 skip the cursor at 0)
    assert served == [0, 1, 2, 3, 1, 2, 3, 0]
    choice = ServerChoice("round_robin", [2])  # rf >= n: plain round robin
    assert [choice.choose(0, Scripted(u), 0.0, up_everywhere([2])) for u in starts] == [0, 1] * 4


@pytest.mark.parametrize(
    ("psi", "chosen"),
    [([3.0, 1.0, 2.0], 1), ([1.0, 1.0, 0.5], 2), ([2.0, 2.0, 2.0], 0), ([0.1, 5.0, 0.1], 0)],
)
def test_lowest_psi_ties_first_in_ring_order(psi, chosen):
    assert lowest_psi([0, 1, 2], psi) == chosen


def test_c3_ranks_by_score_from_this_clients_ewmas_and_in_flight():
    """C3's score R' + (1 + q + n os)^3 / mu (the authors' ScoreTracker): a server with a
    long queue loses to one with a short one, and enough of this client's requests in
    flight turn the ranking around."""
    choice = ServerChoice("c3", [3])
    for server, (response_ms, queue, service_ms) in enumerate(
        [(4.0, 6.0, 1.0), (4.0, 1.0, 1.0), (2.0, 3.0, 1.0)]
    ):
        choice.feedback(0, server, queue, service_ms)
        choice.observe(0, server, response_ms)  # the new sample weighs 0.9, from 0
    scores = choice.scores
    score = {s: scores.score((0, s), 0) for s in range(3)}
    assert score[1] == pytest.approx(0.9 * (4.0 - 1.0) + (1 + 0.9 * 1.0) ** 3 * 0.9)
    assert sorted(score, key=score.get) == [1, 2, 0]
    down = up_everywhere([3])
    assert choice.choose(0, Scripted(0.0), 0.0, down) == 1
    assert scores.known == {(0, 1)}  # n: the hosts this client has sent to
    choice.in_flight[0][1] = 2  # q_hat 1 + 0.9 + 1 * 2: 3.9^3 x 0.9 > server 2's
    assert choice.choose(0, Scripted(0.0), 0.0, down) == 2


def test_c3_scores_are_the_c3_policys():
    """The c3 server choice and policy C3 keep the same EWMAs from the same events."""
    policy = make_policy("C3", 0, [2, 2], [0, 1])
    scores = C3Scores([(j, s) for j in range(2) for s in range(2)])
    for queue, service_ms, response_ms in [(4.0, 0.5, 3.0), (1.0, 0.7, 9.0), (2.0, 0.6, 1.0)]:
        policy.feedback(0, 1, queue, service_ms)
        scores.feedback(0, 1, queue, service_ms)
        policy.observe(0, 1, response_ms, 0.0)
        scores.observe(0, 1, response_ms)
    assert policy.score((0, 1)) == pytest.approx(scores.score((0, 1), 0))


@pytest.mark.parametrize("name", SERVER_CHOICES)
def test_a_server_down_is_never_chosen_while_a_replica_is_up(name):
    choice = ServerChoice(name, [3])
    down = RoutingPolicy(0, [3])
    down.mark_down(0, 0, 100.0)
    down.mark_down(0, 2, 100.0)
    rng = np.random.default_rng(1)
    assert {choice.choose(0, rng, 50.0, down) for _ in range(50)} == {1}
    assert {choice.choose(0, rng, 150.0, down) for _ in range(50)} > {1}  # the marks expired
    down.mark_down(0, 1, 100.0)
    assert choice.choose(0, rng, 50.0, down) in {0, 1, 2}  # nowhere better


def test_random_is_the_keys_start_replica_uniform_over_the_site():
    choice = ServerChoice("random", [4])
    rng = np.random.default_rng(7)
    counts = Counter(choice.choose(0, rng, 0.0, up_everywhere([4])) for _ in range(8000))
    assert sorted(counts) == [0, 1, 2, 3]
    assert all(abs(c / 8000 - 0.25) < 0.03 for c in counts.values())


def test_an_unknown_server_choice_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="server_choice.*least_outstanding"):
        ServerChoice("fewest", [2])


# --- composed with every site choice ------------------------------------------------------------


@pytest.mark.parametrize("policy_name", [p for p in POLICY_NAMES if p != "C3"])
@pytest.mark.parametrize("name", SERVER_CHOICES)
def test_every_site_choice_composes_with_every_server_choice(policy_name, name):
    policy = make_policy(policy_name, 0, [2, 3, 2], NEAREST, server_choice=name)
    assert policy.server_choice.name == name
    rng = np.random.default_rng(3)
    hosts = [policy.choose(rng, float(t)) for t in range(200)]
    assert all(0 <= s < [2, 3, 2][j] for j, s in hosts)


def test_the_rates_policy_keeps_its_split_of_sites_under_a_server_choice():
    policy = RatesPolicy(0, [2, 2, 2], follows_plan=True)
    policy.set_fractions(np.array([0.5, 0.3, 0.2]))
    policy.set_server_choice(ServerChoice("least_outstanding", [2, 2, 2]))
    assert policy.site_weights(0.0) == pytest.approx({0: 0.5, 1: 0.3, 2: 0.2})
    rng = np.random.default_rng(5)
    sites = Counter(policy.choose(rng, 0.0)[0] for _ in range(20_000))
    assert [sites[j] / 20_000 for j in range(3)] == pytest.approx([0.5, 0.3, 0.2], abs=0.015)
    policy.mark_down(1, 0, 1e12)
    policy.mark_down(1, 1, 1e12)  # an unreachable site's share stays local, as without one
    assert policy.site_weights(1.0) == pytest.approx({0: 0.8, 2: 0.2})


def test_least_outstanding_inside_the_site_the_latency_aware_policy_picks():
    policy = make_policy("LatencyAware", 1, [3, 3, 3], NEAREST, server_choice="least_outstanding")
    policy.server_choice.in_flight[1][:] = [4, 0, 4]
    rng = np.random.default_rng(0)
    assert {policy.choose(rng, 0.0) for _ in range(30)} == {(1, 1)}  # local site, idle server


def test_the_policys_own_server_is_the_default_and_c3_takes_none():
    assert make_policy("KurmaPerf", 0, [2, 2], [0, 1]).server_choice is None
    with pytest.raises(ConfigError, match="server_choice"):
        make_policy("C3", 0, [2, 2], [0, 1], server_choice="p2c")


# --- the client: its in-flight counts and where its choice comes from ---------------------------


def endpoints(feedback: bool = False) -> StoreEndpoints:
    servers = ((("127.0.0.1", 1), ("127.0.0.1", 2)), (("127.0.0.1", 3), ("127.0.0.1", 4)))
    return StoreEndpoints(
        ("Here", "There"), "Here", servers,
        feedback=(("127.0.0.1", 5), ("127.0.0.1", 6)) if feedback else None,
    )  # fmt: skip


def test_a_client_composes_a_site_choice_with_a_server_choice():
    client = SiteClient(endpoints(), SleepWork(), "KurmaPerf", server_choice="p2c")
    assert client.policy.server_choice is client.server_choice
    assert client.server_choice.in_flight is client.in_flight  # every request counts
    assert SiteClient(endpoints(), SleepWork(), "KurmaPerf").server_choice is None


def test_c3_inside_a_site_needs_the_feedback_processes_as_c3_does():
    with pytest.raises(ConfigError, match="feedback"):
        SiteClient(endpoints(), SleepWork(), "AllLocal", server_choice="c3")
    client = SiteClient(endpoints(feedback=True), SleepWork(), "AllLocal", server_choice="c3")
    assert client.server_choice.needs_feedback
    with pytest.raises(ConfigError, match="both levels"):
        SiteClient(endpoints(feedback=True), SleepWork(), "C3", server_choice="p2c")


@pytest.mark.parametrize("outcome", ["reply", "timeout", "refused", "cancelled"])
def test_in_flight_counts_fall_on_every_outcome(outcome):
    async def scenario():
        client = SiteClient(endpoints(), SleepWork(), "AllLocal", server_choice="least_outstanding")
        answer = asyncio.get_running_loop().create_future()

        async def send(host, payload, replies, sent):
            return await answer

        client._send = send
        request = asyncio.ensure_future(client.get(b"k"))
        await asyncio.sleep(0)
        during = [list(c) for c in client.in_flight]
        if outcome == "reply":
            answer.set_result([b"OK", b"v"])
        elif outcome == "timeout":
            answer.set_exception(TimeoutError())
        elif outcome == "refused":
            from geoslo.errors import TestbedError

            answer.set_exception(TestbedError("refused"))
        else:
            request.cancel()
        await asyncio.gather(request, return_exceptions=True)
        return during, client.in_flight

    during, after = asyncio.run(scenario())
    assert sum(map(sum, during)) == 1 and sum(during[0]) == 1  # AllLocal: this site
    assert after == [[0, 0], [0, 0]]


def test_a_client_follows_the_server_choice_its_agent_sends():
    client = SiteClient(endpoints(), SleepWork(), "KurmaPerf")
    client._on_agent_message({"type": "site", "server_choice": "least_outstanding"}, None)
    assert client.server_choice.name == "least_outstanding" and client.server_choice_refused is None
    client._on_agent_message({"type": "site", "server_choice": "c3"}, None)  # no feedback here
    assert client.server_choice.name == "least_outstanding"
    assert "feedback" in client.server_choice_refused
    c3 = SiteClient(endpoints(feedback=True), SleepWork(), "C3")
    c3._on_agent_message({"type": "site", "server_choice": "p2c"}, None)
    assert c3.server_choice is None and "both levels" in c3.server_choice_refused


# --- the configuration ----------------------------------------------------------------------------


def agent_table(**change) -> dict:
    table = {
        "kind": "agent",
        "site": "A",
        "sites": ["A", "B"],
        "peers": {"B": "127.0.0.1:7400"},
        "exchange_listen": "127.0.0.1:7401",
        "clients_listen": "127.0.0.1:7402",
        "servers": ["127.0.0.1:6379"],
        "secret_file": "/nonexistent",
    }
    return {**table, **change}


@pytest.mark.parametrize("settings", [AgentSettings, TestbedSettings])
def test_the_server_choice_setting_is_checked_naming_the_field(settings):
    table = agent_table() if settings is AgentSettings else {"kind": "testbed"}
    assert settings.model_validate(table).server_choice is None  # the policy's own
    for name in SERVER_CHOICES:
        assert settings.model_validate({**table, "server_choice": name}).server_choice == name
    with pytest.raises(ValidationError) as refused:
        settings.model_validate({**table, "server_choice": "fewest"})
    assert "server_choice" in str(refused.value) and "p2c" in str(refused.value)


def test_the_testbeds_agent_file_names_the_server_choice(tmp_path):
    from geoslo.live.kurma._instance import InstanceConfig, agent_config

    class Ends:
        agent_port, agent_local_port, servers, metrics_port = 1, 2, [3], 4

    class Bed:
        class spec:
            sites = ("A", "B")

        sites = {"A": Ends()}
        epoch_unix_s = 0.0

        def host(self, site):
            return "127.0.0.1"

        def agent_address(self, site, peer):
            return ("127.0.0.1", 9)

        def max_one_way_ms(self):
            return 5.0

        def clients_secret_file(self):
            return str(tmp_path / "kurma-clients.key")

    config = InstanceConfig(str(tmp_path), "A", str(tmp_path), server_choice="p2c")
    assert 'server_choice = "p2c"' in agent_config(Bed(), config)
    assert "server_choice" not in agent_config(Bed(), InstanceConfig(str(tmp_path), "A", "r"))


def test_a_bad_server_choice_in_a_run_file_is_one_line_naming_the_key():
    from geoslo.errors import InputError
    from geoslo.runtime._config import parse_config

    data = {"system": "kurma", "environment": {"kind": "testbed", "server_choice": "fewest"}}
    with pytest.raises(InputError) as refused:
        parse_config(data)
    assert str(refused.value).startswith("environment.server_choice: must be one of random")
