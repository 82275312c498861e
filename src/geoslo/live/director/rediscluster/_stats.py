"""Per-bin workload statistics on a Redis Cluster, sampled at the clients (FAST 2011 §5.5).

A bin is ``SLOTS_PER_BIN`` contiguous hash slots; a key's slot is CRC16 mod 16384 of
the key (or of its ``{hash tag}``), as the cluster itself computes it. Redis 7.0 has no
per-slot counters (``CLUSTER SLOT-STATS``, CPU time and bytes per slot, came in Redis
8.2 and Valkey 8.0); ``INFO commandstats`` counts calls per command and ``INFO keyspace``
keys per database, both per node, and ``CLUSTER COUNTKEYSINSLOT`` counts keys, not
requests: none tells gets from puts per slot. So, as the paper does, the
clients sample 2% of gets and 40% of puts and the samples become per-bin rates every
period: the Director's histogram (``geoslo.live.director.WorkloadStats``, shared with
the binned store).
"""

from __future__ import annotations

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from geoslo.errors import ConfigError
from geoslo.live.director._stats import WorkloadStats
from geoslo.live.director.rediscluster._engine import SLOTS_PER_BIN

__all__ = ["BINS", "bin_of_key", "bin_of_slot", "slots_of_bin", "cluster_workload_stats"]

BINS = REDIS_CLUSTER_HASH_SLOTS // SLOTS_PER_BIN


def bin_of_slot(slot: int) -> int:
    """The bin holding hash slot ``slot``."""
    if not 0 <= slot < REDIS_CLUSTER_HASH_SLOTS:
        raise ConfigError("slot", f"must be in [0, {REDIS_CLUSTER_HASH_SLOTS}), got {slot}")
    return slot // SLOTS_PER_BIN


def bin_of_key(key: bytes) -> int:
    """The bin of a key: its hash slot (CRC16 with hash tags, as Redis computes it) // bin size."""
    return key_slot(key) // SLOTS_PER_BIN


def slots_of_bin(b: int) -> range:
    """The hash slots of bin ``b``."""
    if not 0 <= b < BINS:
        raise ConfigError("bin", f"must be in [0, {BINS}), got {b}")
    return range(b * SLOTS_PER_BIN, (b + 1) * SLOTS_PER_BIN)


def cluster_workload_stats(
    period_s: float,
    get_sample_fraction: float,
    put_sample_fraction: float,
    threshold_ms: float,
    seed: int,
    failed_ms: float,
    start_s: float = 0.0,
) -> WorkloadStats:
    """The Director's per-period statistics over the cluster's ``BINS`` bins (§5.5); a failed
    request counts in the p99 as ``failed_ms`` (the client's timeout)."""
    return WorkloadStats(
        bins=BINS,
        period_s=period_s,
        get_sample_fraction=get_sample_fraction,
        put_sample_fraction=put_sample_fraction,
        threshold_ms=threshold_ms,
        seed=seed,
        start_s=start_s,
        failed_get_ms=failed_ms,
    )
