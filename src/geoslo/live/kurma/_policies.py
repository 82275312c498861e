"""How a site's client picks the server of each request: the policies of Kurma §7.1.

Pure decisions over a host list ``(site, server)``; the client library owns the clock
and the sockets. The same policies run in the simulator's kernel (``geoslo.sim``):

* ``RatesPolicy``: the split of a row of rates (AllLocal is the identity row; KurmaPerf
  and KurmaCost update the row from their instance's plan every interval); the server
  within a site is uniform at random, as the simulator's backend does.
* ``GlobalRoundRobin``: every server of every site in turn.
* ``LatencyAware``: DataStax's LatencyAwarePolicy over a DC-aware child plan (the
  simulator's ``latency_aware``): local hosts first, then remote sites by proximity,
  with hosts whose time-weighted average latency exceeds twice the best one moved last.
* ``DynamicSnitch``: Cassandra's DynamicEndpointSnitch (3.x defaults), per client and per
  host, fed by the reads' responses from every replica the client reads from (the
  simulator's ``dynamic_snitch``).
* ``C3``: Suresh et al. (NSDI 2015) as its authors' code has it, per client: replicas
  ranked by response time, queue and service time (the servers' feedback, ``_feedback``),
  each under a token bucket whose rate follows the cubic rule, with a backpressure queue
  when none has a token.

Every policy but C3 chooses a *site*; the *server* inside it is the policy's own (above)
unless a :class:`ServerChoice` is set (``set_server_choice``): then the policy picks the
site as before (LatencyAware and DynamicSnitch keep the site of the host they pick) and
the server choice picks the server inside it, one of
``geoslo.control.kurma.SERVER_CHOICES`` with the semantics written above that tuple
(the simulator's kernel implements the same). C3 chooses both levels and takes none.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping, Sequence

import numpy as np

from geoslo.control.kurma import check_server_choice
from geoslo.errors import ConfigError, InputError

__all__ = [
    "AliasTable",
    "C3Scores",
    "ServerChoice",
    "key_replicas",
    "least_outstanding",
    "power_of_two",
    "round_robin",
    "lowest_psi",
    "RoutingPolicy",
    "RatesPolicy",
    "GlobalRoundRobin",
    "LatencyAware",
    "DecayingReservoir",
    "DynamicSnitch",
    "C3",
    "make_policy",
    "POLICY_NAMES",
]

POLICY_NAMES = (
    "AllLocal", "GlobalRR", "LatencyAware", "DynamicSnitch", "C3", "KurmaPerf", "KurmaCost"
)  # fmt: skip


class RoutingPolicy:
    """Chooses ``(site, server)`` for each request; hosts marked down are skipped."""

    follows_plan = False  # True: the site's agent sets the split every interval
    needs_feedback = False  # True: the servers' feedback (C3) reaches it through feedback()
    server_choice: ServerChoice | None = None  # None: the policy's own server in the site

    def __init__(self, site: int, servers_per_site: list[int]) -> None:
        self.site = site
        self.servers = list(servers_per_site)
        self.down_until_ms = {
            (j, s): -math.inf for j, n in enumerate(self.servers) for s in range(n)
        }
        self.site_down_until_ms = [-math.inf] * len(self.servers)  # the latest mark of a site

    def mark_down(self, site: int, server: int, until_ms: float) -> None:
        self.down_until_ms[(site, server)] = until_ms
        self.site_down_until_ms[site] = max(self.site_down_until_ms[site], until_ms)

    def is_up(self, site: int, server: int, now_ms: float) -> bool:
        return self.down_until_ms[(site, server)] <= now_ms

    def choose(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int] | None:
        """The host of the next request (None: hold it back until ``held_until_ms``): the
        policy's own, or its site and the server choice's server in it."""
        choice = self.server_choice
        if choice is None:
            return self.choose_host(rng, now_ms)
        site = self.choose_site(rng, now_ms)
        return site, choice.choose(site, rng, now_ms, self)

    def choose_host(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int]:
        """The policy's own host (both levels)."""
        raise NotImplementedError

    def choose_site(self, rng: np.random.Generator, now_ms: float) -> int:
        """The site alone (the first level): the site of the policy's own host."""
        return self.choose_host(rng, now_ms)[0]

    def set_server_choice(self, choice: ServerChoice | None) -> None:
        """Pick the server inside the chosen site by ``choice`` (None: the policy's own)."""
        if choice is not None and choice.servers != self.servers:
            raise ConfigError("server_choice", "its servers per site must be the policy's")
        self.server_choice = choice

    def failed(self, site: int, server: int, until_ms: float) -> None:
        """A request to the host failed or timed out: skip the host until ``until_ms``."""
        self.mark_down(site, server, until_ms)

    def observe(self, site: int, server: int, response_ms: float, now_ms: float) -> None:
        """Feedback of one response (adaptive policies use it)."""

    def set_fractions(self, row: np.ndarray) -> None:
        """A new row of the plan (only policies that follow a plan use it)."""


class AliasTable:
    """Walker's alias method (Vose's construction): O(1) draws from a fixed discrete
    distribution over ``outcomes``, one uniform number a draw; zero weights are never drawn."""

    def __init__(self, outcomes: list, weights: list[float]) -> None:
        kept = [(o, float(w)) for o, w in zip(outcomes, weights, strict=True) if w > 0]
        if not kept:
            raise InputError("weights", "need at least one positive weight")
        total = math.fsum(w for _, w in kept)
        k = len(kept)
        scaled = [w * k / total for _, w in kept]
        self.outcomes = [o for o, _ in kept]
        self.probability = [1.0] * k
        self.alias = list(self.outcomes)
        small = [i for i, p in enumerate(scaled) if p < 1.0]
        large = [i for i, p in enumerate(scaled) if p >= 1.0]
        while small and large:
            less, more = small.pop(), large[-1]
            self.probability[less] = scaled[less]
            self.alias[less] = self.outcomes[more]
            scaled[more] -= 1.0 - scaled[less]
            if scaled[more] < 1.0:
                small.append(large.pop())
        # what is left is 1 up to rounding: those columns keep probability 1, alias unused
        self.size = k

    def draw(self, uniform: float):
        """The outcome for one uniform number in [0, 1): its integer part of ``uniform * k``
        picks a column, its fractional part the column's outcome or its alias."""
        x = uniform * self.size
        column = int(x)
        if x - column < self.probability[column]:
            return self.outcomes[column]
        return self.alias[column]

    def distribution(self) -> dict:
        """The probability of each outcome the table draws (for tests and checks)."""
        share: dict = {}
        for column in range(self.size):
            p = self.probability[column]
            share[self.outcomes[column]] = share.get(self.outcomes[column], 0.0) + p / self.size
            share[self.alias[column]] = share.get(self.alias[column], 0.0) + (1 - p) / self.size
        return {o: p for o, p in share.items() if p > 0}


class RatesPolicy(RoutingPolicy):
    """Send a fraction ``row[j]`` of requests to site ``j`` (Kurma §6, enforcement).

    A remote site whose servers are all marked down gets nothing (its share stays local);
    within a site the server is uniform over those that are up, or the server choice's.
    Both are folded into one alias table over hosts (over sites with a server choice),
    rebuilt only when the row, the server choice or the set of down hosts changes (a host
    marked down, or a down mark expiring), so a choice costs O(1).
    """

    def __init__(self, site: int, servers_per_site: list[int], follows_plan: bool) -> None:
        super().__init__(site, servers_per_site)
        self.follows_plan = follows_plan
        self.row = np.zeros(len(self.servers))
        self.row[site] = 1.0
        self.table: AliasTable | None = None
        self.rebuilds = 0
        self._built_ms = math.inf  # the table holds for now_ms in [_built_ms, _valid_until_ms)
        self._valid_until_ms = -math.inf

    def set_fractions(self, row: np.ndarray) -> None:
        row = np.clip(np.asarray(row, dtype=float), 0.0, None)
        self.row = row / row.sum() if row.sum() > 0 else np.eye(len(self.servers))[self.site]
        self._valid_until_ms = -math.inf

    def mark_down(self, site: int, server: int, until_ms: float) -> None:
        super().mark_down(site, server, until_ms)
        self._valid_until_ms = -math.inf

    def set_server_choice(self, choice: ServerChoice | None) -> None:
        super().set_server_choice(choice)
        self._valid_until_ms = -math.inf  # the table's outcomes change: hosts or sites

    def _site_weights(self, up: list[list[int]]) -> list[float]:
        """The row, with a remote site that has no server up folded into this one's share;
        when this site has none up, a plan-following client sends its share to the remote
        sites that have, by the row's weights (evenly if the row sends them nothing), until
        its agent's next row (issue 42: the agent's failover row follows an interval later).
        """
        weights = [float(w) for w in self.row]
        for j in range(len(self.servers)):
            if j != self.site and not up[j]:
                weights[self.site] += weights[j]  # unreachable: keep it local
                weights[j] = 0.0
        remote = [j for j in range(len(self.servers)) if j != self.site and up[j]]
        if self.follows_plan and not up[self.site] and remote:
            spare = sum(weights[j] for j in remote)
            for j in remote:
                weights[j] += weights[self.site] * (
                    weights[j] / spare if spare else 1 / len(remote)
                )
            weights[self.site] = 0.0
        return weights

    def _up(self, now_ms: float) -> list[list[int]]:
        servers = enumerate(self.servers)
        return [[s for s in range(n) if self.is_up(j, s, now_ms)] for j, n in servers]

    def site_weights(self, now_ms: float) -> dict[int, float]:
        """The probability of each site at ``now_ms`` (what the table draws with a server
        choice)."""
        weights = self._site_weights(self._up(now_ms))
        return {j: w for j, w in enumerate(weights) if w > 0}

    def host_weights(self, now_ms: float) -> dict[tuple[int, int], float]:
        """The probability of each host at ``now_ms`` (what the alias table draws)."""
        up = self._up(now_ms)
        site_weights = self._site_weights(up)
        if not up[self.site]:
            up[self.site] = list(range(self.servers[self.site]))  # nowhere better to go
        return {
            (j, s): site_weights[j] / len(up[j])
            for j in range(len(self.servers))
            for s in up[j]
            if site_weights[j] > 0
        }

    def _rebuild(self, now_ms: float) -> None:
        if self.server_choice is None:
            weights: dict = self.host_weights(now_ms)
        else:
            weights = self.site_weights(now_ms)
        self.table = AliasTable(list(weights), list(weights.values()))
        self.rebuilds += 1
        later = [t for t in self.down_until_ms.values() if t > now_ms]
        self._built_ms, self._valid_until_ms = now_ms, min(later, default=math.inf)

    def choose_host(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int]:
        if not self._built_ms <= now_ms < self._valid_until_ms:
            self._rebuild(now_ms)
        return self.table.draw(rng.random())

    def choose_site(self, rng: np.random.Generator, now_ms: float) -> int:
        if not self._built_ms <= now_ms < self._valid_until_ms:
            self._rebuild(now_ms)
        return self.table.draw(rng.random())


class GlobalRoundRobin(RoutingPolicy):
    """Every server of every site in turn (the GlobalRR baseline, §7.1)."""

    def __init__(self, site: int, servers_per_site: list[int]) -> None:
        super().__init__(site, servers_per_site)
        self.hosts = [(j, s) for j, n in enumerate(self.servers) for s in range(n)]
        self.next = 0

    def choose_host(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int]:
        for _ in range(len(self.hosts)):
            host = self.hosts[self.next % len(self.hosts)]
            self.next += 1
            if self.is_up(*host, now_ms):
                return host
        return self.site, 0


class LatencyAware(RoutingPolicy):
    """DataStax LatencyAwarePolicy (driver 3.x defaults), per host, as in the simulator."""

    scale_ms = 100.0
    exclusion_threshold = 2.0
    retry_period_ms = 10_000.0
    min_measure = 50

    def __init__(self, site: int, servers_per_site: list[int], proximity: list[int]) -> None:
        super().__init__(site, servers_per_site)
        self.proximity = [j for j in proximity if j != site]  # remote sites, nearest first
        self.count: dict[tuple[int, int], int] = {}
        self.average_ms: dict[tuple[int, int], float] = {}
        self.stamp_ms: dict[tuple[int, int], float] = {}

    def _plan(self, rng: np.random.Generator) -> list[tuple[int, int]]:
        local = [(self.site, s) for s in rng.permutation(self.servers[self.site])]
        remote = []
        for j in self.proximity:
            start = int(rng.integers(self.servers[j]))
            remote += [(j, (start + k) % self.servers[j]) for k in range(self.servers[j])]
        return local + remote

    def _acceptable(self, host, best_ms: float | None, now_ms: float) -> bool:
        if best_ms is None or self.count.get(host, 0) < self.min_measure:
            return True
        if now_ms - self.stamp_ms[host] > self.retry_period_ms:
            return True
        return self.average_ms[host] <= self.exclusion_threshold * best_ms

    def _best_ms(self, now_ms: float) -> float | None:
        fresh = [
            avg
            for host, avg in self.average_ms.items()
            if self.count[host] >= self.min_measure
            and avg >= 0
            and now_ms - self.stamp_ms[host] <= self.retry_period_ms
        ]
        return min(fresh) if fresh else None

    def choose_host(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int]:
        best = self._best_ms(now_ms)
        plan = [h for h in self._plan(rng) if self.is_up(*h, now_ms)] or [(self.site, 0)]
        for host in plan:
            if self._acceptable(host, best, now_ms):
                return host
        return plan[0]

    def observe(self, site: int, server: int, response_ms: float, now_ms: float) -> None:
        """HostLatencyTracker.add: skip the first 30% of min_measure, then a time-weighted
        average whose weight of the past decays as log(1 + d/scale) / (d/scale)."""
        host = (site, server)
        count = self.count.get(host, 0) + 1
        previous = self.average_ms.get(host, -1.0)
        if count < math.floor(0.3 * self.min_measure) or previous < 0:
            self.count[host] = count
            self.average_ms[host] = (
                -1.0 if count < math.floor(0.3 * self.min_measure) else response_ms
            )
            self.stamp_ms[host] = now_ms
            return
        delay = now_ms - self.stamp_ms[host]
        if delay <= 0:
            return  # as the driver's tracker: a measurement with no elapsed time is dropped
        self.count[host] = count
        scaled = delay / self.scale_ms
        weight = math.log(scaled + 1.0) / scaled
        self.average_ms[host] = (1.0 - weight) * response_ms + weight * previous
        self.stamp_ms[host] = now_ms


class DecayingReservoir:
    """Codahale's ExponentiallyDecayingReservoir (forward decay, Cormode et al. 2009), as
    Cassandra's snitch keeps one per host: ``size`` samples kept by priority w(t) / u,
    w(t) = exp(alpha * (t - landmark)), u uniform; the median weighted by w. Priorities
    and weights are kept as logarithms, so no rescaling is needed."""

    def __init__(self, size: int, alpha_per_s: float, landmark_s: float) -> None:
        self.size, self.alpha_per_s, self.landmark_s = size, alpha_per_s, landmark_s
        self._heap: list[tuple[float, int, float, float]] = []  # (log priority, seq, value, log w)
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def update(self, value: float, t_s: float, uniform: float) -> None:
        """One sample at ``t_s`` (``uniform`` in (0, 1])."""
        log_weight = self.alpha_per_s * (t_s - self.landmark_s)
        entry = (log_weight - math.log(uniform), self._seq, value, log_weight)
        self._seq += 1
        if len(self._heap) < self.size:
            heapq.heappush(self._heap, entry)
        elif entry[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, entry)

    def median(self) -> float:
        """WeightedSnapshot.getMedian: the largest value whose preceding weights (in value
        order, normalised) sum to at most one half (0 when empty)."""
        if not self._heap:
            return 0.0
        samples = sorted((value, log_w) for _, _, value, log_w in self._heap)
        top = max(log_w for _, log_w in samples)
        weights = [math.exp(log_w - top) for _, log_w in samples]
        total, before = math.fsum(weights), 0.0
        chosen = samples[0][0]
        for (value, _), weight in zip(samples, weights, strict=True):
            if before / total > 0.5:
                break
            chosen = value
            before += weight
        return chosen


class DynamicSnitch(RoutingPolicy):
    """Cassandra's DynamicEndpointSnitch (3.x; cassandra.yaml defaults), one per client (a
    coordinator), as the simulator's ``dynamic_snitch``: every host's read latencies in a
    :class:`DecayingReservoir` (100 samples, alpha 0.75), scores (median over the largest
    median) every 100 ms, the reservoirs cleared every 10 min. A read's candidates are the
    key's replicas, ``replicas_per_site`` consecutive servers of every site from a random
    start, this site's first, then the other sites nearest first (the subsnitch's order);
    the first that is up is read unless one's score exceeds the sorted scores' at its
    position by more than the badness threshold (0.1): then in order of score
    (sortByProximityWithBadness, compareEndpoints). A candidate without a score keeps the
    subsnitch's order up to 3.11.0 (the paper's 3.9), so remote replicas, never read,
    keep every read local; with ``unscored_as_zero`` (3.11.1 on, CASSANDRA-13074) it
    counts as 0 and is read next. Samples are whole milliseconds, as receiveTiming's.
    Only reads feed it: Cassandra's write handlers do not time replicas for the snitch."""

    reservoir_size = 100
    alpha_per_s = 0.75
    update_interval_ms = 100.0
    reset_interval_ms = 600_000.0
    badness_threshold = 0.1
    replicas_per_site = 3  # Kurma section 7: RF 3 in each datacenter
    unscored_as_zero = False  # the paper's Cassandra 3.9

    def __init__(
        self, site: int, servers_per_site: list[int], proximity: list[int], seed: int = 0
    ) -> None:
        super().__init__(site, servers_per_site)
        self.order = [site] + [j for j in proximity if j != site]  # this site first
        self._random = random.Random(seed)
        self.reservoirs: dict[tuple[int, int], DecayingReservoir] = {}
        self.scores: dict[tuple[int, int], float] = {}
        self._next_score_ms = -math.inf
        self._next_reset_ms: float | None = None

    def observe(self, site: int, server: int, response_ms: float, now_ms: float) -> None:
        """receiveTiming: one read's response from a host."""
        if self._next_reset_ms is None:
            self._next_reset_ms = now_ms + self.reset_interval_ms
        reservoir = self.reservoirs.get((site, server))
        if reservoir is None:
            reservoir = DecayingReservoir(self.reservoir_size, self.alpha_per_s, now_ms / 1e3)
            self.reservoirs[(site, server)] = reservoir
        whole_ms = math.floor(response_ms)
        reservoir.update(whole_ms, now_ms / 1e3, 1.0 - self._random.random())

    def _update(self, now_ms: float) -> None:
        """updateScores every 100 ms (and the reset every 10 min)."""
        if self._next_reset_ms is not None and now_ms >= self._next_reset_ms:
            self.reservoirs.clear()
            self._next_reset_ms = now_ms + self.reset_interval_ms
        medians = {host: r.median() for host, r in self.reservoirs.items() if len(r)}
        largest = max(medians.values(), default=0.0)
        self.scores = {h: m / largest for h, m in medians.items()} if largest > 0 else {}
        self._next_score_ms = now_ms + self.update_interval_ms

    def replicas(self, start: float) -> list[tuple[int, int]]:
        """The key's replicas in the subsnitch's order (``start`` in [0, 1) picks the key)."""
        hosts = []
        for j in self.order:
            n = self.servers[j]
            first = min(int(start * n), n - 1)
            hosts += [(j, (first + k) % n) for k in range(min(self.replicas_per_site, n))]
        return hosts

    def _is_bad(self, hosts: list[tuple[int, int]]) -> bool:
        if not self.unscored_as_zero and any(h not in self.scores for h in hosts):
            return False  # up to 3.11.0: an unscored candidate ends the method
        scored = [self.scores.get(h, 0.0) for h in hosts]
        threshold = 1.0 + self.badness_threshold
        return any(a > b * threshold for a, b in zip(scored, sorted(scored), strict=True))

    def choose_host(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int]:
        if now_ms >= self._next_score_ms:
            self._update(now_ms)
        hosts = self.replicas(rng.random())
        if self._is_bad(hosts):
            hosts = sorted(hosts, key=lambda h: self.scores.get(h, 0.0))  # stable
        return next((h for h in hosts if self.is_up(*h, now_ms)), hosts[0])


class C3Scores:
    """C3's view of every host from one client, as the authors' ScoreTracker has it
    (github.com/lalithsuresh/cassandra-c3; NSDI 2015 §4.1; the simulator's
    ``_c3_score``): per host, EWMAs (the new sample's weight ``ewma_alpha``) of the
    response time less the service time R', the queue q and the service time 1/mu, updated
    when a response arrives, q and 1/mu from the server's latest feedback once it has
    measured the server; n is the hosts this client has sent a request to."""

    ewma_alpha = 0.9  # ScoreTracker.ALPHA

    def __init__(self, hosts: list[tuple[int, int]]) -> None:
        zero = dict.fromkeys(hosts, 0.0)
        self.net_response_ms, self.queue, self.service_ms = dict(zero), dict(zero), dict(zero)
        self.latest: dict[tuple[int, int], tuple[float, float]] = {}  # host -> (q, 1/mu ms)
        self.fed: set[tuple[int, int]] = set()  # hosts whose feedback has counted
        self.known: set[tuple[int, int]] = set()  # hosts sent a request: C3's n

    def feedback(self, site: int, server: int, queue: float, service_ms: float) -> None:
        """The server's latest feedback; it counts when one of its responses arrives."""
        self.latest[(site, server)] = (queue, service_ms)

    def sent(self, host: tuple[int, int]) -> None:
        """A request went to ``host`` (the first one adds it to n)."""
        self.known.add(host)

    def observe(self, site: int, server: int, response_ms: float) -> None:
        """One response from the host (``response_ms`` from when it was sent)."""
        host, a = (site, server), self.ewma_alpha
        queue, service_ms = self.latest.get(host, (0.0, 0.0))
        net = response_ms - service_ms
        self.net_response_ms[host] = a * net + (1 - a) * self.net_response_ms[host]
        if service_ms > 0:  # the server's feedback, once it has measured the server
            self.queue[host] = a * queue + (1 - a) * self.queue[host]
            self.service_ms[host] = a * service_ms + (1 - a) * self.service_ms[host]
            self.fed.add(host)

    def score(self, host: tuple[int, int], outstanding: int) -> float:
        """ScoreTracker.getScore: R' + (1 + q + n os)^3 / mu, os this client's requests
        in flight at the host."""
        q_hat = 1.0 + self.queue[host] + max(len(self.known), 1) * outstanding
        return self.net_response_ms[host] + q_hat**3 * self.service_ms[host]


# --- the server inside the chosen site (the second level) ----------------------------------


def key_replicas(start: int, n: int, rf: int) -> tuple[int, ...]:
    """A key's replicas in a site of ``n`` servers: ``rf`` consecutive from its start
    (every server when ``rf >= n``), in ring order."""
    return tuple((start + k) % n for k in range(min(rf, n)))


def least_outstanding(candidates: Sequence[int], in_flight: list[int]) -> int:
    """The candidate with the fewest requests in flight (ties: the first, in ring order)."""
    best = candidates[0]
    for server in candidates:
        if in_flight[server] < in_flight[best]:
            best = server
    return best


def power_of_two(
    candidates: Sequence[int], in_flight: list[int], first: float, second: float
) -> int:
    """Two distinct candidates drawn uniformly by the uniforms ``first`` and ``second`` in
    [0, 1), the one with fewer in flight (ties: the first drawn)."""
    k = len(candidates)
    if k == 1:
        return candidates[0]
    a = min(int(first * k), k - 1)
    b = min(int(second * (k - 1)), k - 2)
    b += b >= a  # the second draw is over the others
    x, y = candidates[a], candidates[b]
    return y if in_flight[y] < in_flight[x] else x


def round_robin(candidates: Sequence[int], n: int, cursor: int) -> tuple[int, int]:
    """The first candidate at or after ``cursor`` in the site's ring of ``n`` servers, and
    the cursor past it."""
    server, gap = candidates[0], n
    for candidate in candidates:
        if (candidate - cursor) % n < gap:
            server, gap = candidate, (candidate - cursor) % n
    return server, (server + 1) % n


def lowest_psi(candidates: Sequence[int], psi: Mapping[int, float] | list[float]) -> int:
    """The candidate of lowest ``psi[server]`` (ties: the first, in ring order)."""
    best = candidates[0]
    for server in candidates:
        if psi[server] < psi[best]:
            best = server
    return best


class ServerChoice:
    """The server inside the chosen site, by one of ``SERVER_CHOICES`` (their semantics:
    ``geoslo.control.kurma.types``), for one client.

    A request's key is drawn uniformly (its start replica); its candidates are the key's
    ``replicas_per_site`` replicas in the site that are up (none up: the site's servers
    that are, from the key's start; none: the key's replicas). ``in_flight[site][server]``
    counts this client's requests in flight (the client keeps it: one more when a request
    is sent, one less on its reply, failure or timeout); pass the client's lists so every
    request counts. "c3" ranks by :class:`C3Scores`, fed by the client from the servers'
    feedback (``feedback``) and the responses (``observe``), without C3's rate limiter
    and backpressure."""

    replicas_per_site = 3  # Kurma section 7: RF 3 in each datacenter

    def __init__(
        self,
        name: str,
        servers_per_site: list[int],
        in_flight: list[list[int]] | None = None,
    ) -> None:
        self.name = check_server_choice(name)
        self.servers = list(servers_per_site)
        if in_flight is None:
            in_flight = [[0] * n for n in self.servers]
        if [len(counts) for counts in in_flight] != self.servers:
            raise ConfigError("in_flight", "give one count per server of every site")
        self.in_flight = in_flight
        self.cursor = [0] * len(self.servers)  # round robin: one per site
        self.needs_feedback = name == "c3"
        self._hosts = [[(j, s) for s in range(n)] for j, n in enumerate(self.servers)]
        self.scores = C3Scores([h for site in self._hosts for h in site]) if name == "c3" else None
        rf = self.replicas_per_site
        self._replicas = [[key_replicas(k, n, rf) for k in range(n)] for n in self.servers]
        self._pick = getattr(self, f"_{name}")

    def choose(self, site: int, rng, now_ms: float, hosts: RoutingPolicy) -> int:
        """The server of the next request to ``site``; ``hosts`` (the policy) says which
        are down until after ``now_ms`` (they are not candidates)."""
        n = self.servers[site]
        start = min(int(rng.random() * n), n - 1)
        candidates = self._replicas[site][start]
        if hosts.site_down_until_ms[site] > now_ms:  # a server of the site may be down
            candidates = self._up(site, start, now_ms, hosts.down_until_ms)
        return self._pick(site, candidates, rng)

    def _up(self, site: int, start: int, now_ms: float, down_until_ms: dict) -> Sequence[int]:
        """The key's replicas that are up, else the site's servers that are (from the key's
        start), else the key's replicas (nowhere better to go)."""
        replicas = self._replicas[site][start]
        up = [s for s in replicas if down_until_ms[(site, s)] <= now_ms]
        if not up:
            ring = key_replicas(start, self.servers[site], self.servers[site])
            up = [s for s in ring if down_until_ms[(site, s)] <= now_ms] or list(replicas)
        return up

    def _random(self, site: int, candidates: Sequence[int], rng) -> int:
        return candidates[0]  # the key's start replica (or the first after it that is up)

    def _round_robin(self, site: int, candidates: Sequence[int], rng) -> int:
        server, self.cursor[site] = round_robin(candidates, self.servers[site], self.cursor[site])
        return server

    def _least_outstanding(self, site: int, candidates: Sequence[int], rng) -> int:
        return least_outstanding(candidates, self.in_flight[site])

    def _p2c(self, site: int, candidates: Sequence[int], rng) -> int:
        if len(candidates) == 1:
            return candidates[0]
        return power_of_two(candidates, self.in_flight[site], rng.random(), rng.random())

    def _c3(self, site: int, candidates: Sequence[int], rng) -> int:
        counts, hosts, score = self.in_flight[site], self._hosts[site], self.scores.score
        server = lowest_psi(candidates, {s: score(hosts[s], counts[s]) for s in candidates})
        self.scores.sent(hosts[server])
        return server

    def feedback(self, site: int, server: int, queue: float, service_ms: float) -> None:
        """A server's feedback ("c3" only)."""
        self.scores.feedback(site, server, queue, service_ms)

    def observe(self, site: int, server: int, response_ms: float) -> None:
        """A response ("c3" only)."""
        self.scores.observe(site, server, response_ms)


class C3(RoutingPolicy):
    """C3 (Suresh et al., NSDI 2015), one per client, as the authors' Cassandra 2.0.12 code
    has it (github.com/lalithsuresh/cassandra-c3, package org.apache.cassandra.c3), with the
    simulator's rules and defaults (``geoslo.sim.kurma``, ``c3_*``; docs/kurma.md).

    Replica ranking (§4.1, ScoreTracker): the lowest :class:`C3Scores` score among the
    key's replicas, ``replicas_per_site`` consecutive servers of every site from a random
    start, this site's first (ties to the earlier). Rate control (§4.3, RateController),
    per host: a token bucket (``max_tokens``) refilled at ``rate`` tokens a rate interval;
    on every response a slotted receive rate (the interval's count, weight
    ``receive_alpha``) and the cubic update: a sending rate above the receive rate is cut
    to ``beta`` x rate unless it rose within ``hysteresis_ms``, one below moves up the cubic
    by at most ``smax``. A replica without a token is skipped; when none has one,
    ``choose`` returns None and the client holds the request in its backpressure queue, in
    order, until ``held_until_ms`` (the first of those replicas' next token)."""

    needs_feedback = True
    interval_ms = 20.0  # Config.c3_rate_interval_ms
    beta = 0.2  # RateController.CUBIC_BETA
    gamma = 4e-6  # RateController.CUBIC_C, per ms^3
    smax = 10.0  # RateController.CUBIC_SMAX, tokens a rate interval
    hysteresis_ms = 80.0  # CUBIC_HYSTERISIS_FACTOR 4 x the interval
    replicas_per_site = 3  # Kurma section 7: RF 3 in each datacenter
    initial_rate = 1.0  # new SimpleRateLimiter(1, ...): tokens a rate interval
    min_rate = 0.1  # updateCubicSendingRate: Math.max(rate * CUBIC_BETA, 0.1)
    max_tokens = 200.0  # Config.c3_rate_limiter_max_tokens
    initial_receive_rate = 100.0  # RateController.RECEIVE_RATE_INITIAL, a rate interval
    receive_alpha = 0.9  # SlottedRateTracker.ALPHA, the closed slot's count's weight

    def __init__(self, site: int, servers_per_site: list[int], proximity: list[int]) -> None:
        super().__init__(site, servers_per_site)
        self.order = [site] + [j for j in proximity if j != site]  # this site first
        hosts = [(j, s) for j, n in enumerate(self.servers) for s in range(n)]
        self.scores = C3Scores(hosts)
        self.outstanding = dict.fromkeys(hosts, 0)
        self.rate = dict.fromkeys(hosts, self.initial_rate)
        self.tokens = dict.fromkeys(hosts, self.max_tokens)
        self.token_ms = dict.fromkeys(hosts, 0.0)  # the last acquire
        self.receive = {h: (self.initial_receive_rate, -math.inf, 0.0) for h in hosts}
        self.rmax = dict.fromkeys(hosts, 0.0)  # the rate before the last cut
        self.cut_ms = dict.fromkeys(hosts, -math.inf)
        self.rise_ms = dict.fromkeys(hosts, -math.inf)
        self.held_until_ms = -math.inf

    def score(self, host: tuple[int, int]) -> float:
        return self.scores.score(host, self.outstanding[host])

    def set_server_choice(self, choice: ServerChoice | None) -> None:
        if choice is not None:
            raise ConfigError(
                "server_choice", "C3 chooses the server itself (both levels): leave it unset"
            )

    def tokens_at(self, host: tuple[int, int], now_ms: float) -> float:
        """SimpleRateLimiter's tokens at ``now_ms``: refilled at the rate in force."""
        refilled = self.tokens[host] + self.rate[host] / self.interval_ms * (
            now_ms - self.token_ms[host]
        )
        return min(refilled, self.max_tokens)

    def choose(self, rng: np.random.Generator, now_ms: float) -> tuple[int, int] | None:
        start = rng.random()
        best, best_score, waits = None, math.inf, []
        for j in self.order:
            n = self.servers[j]
            first = min(int(start * n), n - 1)
            for k in range(min(self.replicas_per_site, n)):
                host = (j, (first + k) % n)
                if not self.is_up(*host, now_ms):
                    continue
                tokens = self.tokens_at(host, now_ms)
                if tokens < 1.0:
                    waits.append((1.0 - tokens) * self.interval_ms / self.rate[host])
                    continue
                score = self.score(host)
                if score < best_score:
                    best, best_score = host, score
        if best is None:
            self.held_until_ms = now_ms + min(waits, default=self.interval_ms)
            return None
        self.tokens[best] = self.tokens_at(best, now_ms) - 1.0
        self.token_ms[best] = now_ms
        self.outstanding[best] += 1
        self.scores.sent(best)
        return best

    def feedback(self, site: int, server: int, queue: float, service_ms: float) -> None:
        """The server's latest feedback; it counts when one of its responses arrives."""
        self.scores.feedback(site, server, queue, service_ms)

    def observe(self, site: int, server: int, response_ms: float, now_ms: float) -> None:
        host = (site, server)
        self.scores.observe(site, server, response_ms)
        self._settled(host)
        self._update_rate(host, now_ms)

    def _update_rate(self, host: tuple[int, int], now_ms: float) -> None:
        """RateController.updateMetrics on a response: the receive rate's slot, then the
        cubic update of the sending rate against it."""
        rate, slot, count = self.receive[host]
        now_slot = math.floor(now_ms / self.interval_ms)
        count += 1.0 if now_slot - slot < 2 else 0.0  # after a gap the response is not counted
        if now_slot > slot:
            rate, slot, count = (
                self.receive_alpha * count + (1 - self.receive_alpha) * rate,
                now_slot,
                0.0,
            )
        self.receive[host] = (rate, slot, count)
        send, t_ms = self.rate[host], math.floor(now_ms)
        if send > rate and t_ms - self.rise_ms[host] > self.hysteresis_ms:
            self.rate[host] = max(send * self.beta, self.min_rate)
            self.rmax[host], self.cut_ms[host] = send, t_ms
        elif send < rate:
            k = (self.rmax[host] * self.beta / self.gamma) ** (1 / 3)
            cubic = self.gamma * (t_ms - self.cut_ms[host] - k) ** 3 + self.rmax[host]
            self.rate[host] = min(cubic, send + self.smax)
            self.rise_ms[host] = t_ms

    def failed(self, site: int, server: int, until_ms: float) -> None:
        super().failed(site, server, until_ms)
        self._settled((site, server))

    def _settled(self, host: tuple[int, int]) -> None:
        self.outstanding[host] = max(self.outstanding[host] - 1, 0)


def make_policy(
    name: str,
    site: int,
    servers_per_site: list[int],
    proximity: list[int],
    server_choice: str | None = None,
):
    """A policy by its name in the paper (one of ``POLICY_NAMES``); ``server_choice`` (one
    of ``SERVER_CHOICES``) picks the server inside the policy's site (None: its own)."""
    policy = _policy(name, site, servers_per_site, proximity)
    if server_choice is not None:
        policy.set_server_choice(ServerChoice(server_choice, servers_per_site))
    return policy


def _policy(name: str, site: int, servers_per_site: list[int], proximity):
    if name == "AllLocal":
        return RatesPolicy(site, servers_per_site, follows_plan=False)
    if name in ("KurmaPerf", "KurmaCost"):
        return RatesPolicy(site, servers_per_site, follows_plan=True)
    if name == "GlobalRR":
        return GlobalRoundRobin(site, servers_per_site)
    if name == "LatencyAware":
        return LatencyAware(site, servers_per_site, proximity)
    if name == "DynamicSnitch":
        return DynamicSnitch(site, servers_per_site, proximity, seed=site)
    if name == "C3":
        return C3(site, servers_per_site, proximity)
    raise InputError("policy", f"unknown policy {name!r}; use one of {', '.join(POLICY_NAMES)}")
