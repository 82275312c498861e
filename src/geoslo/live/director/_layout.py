"""Bins, the initial layout and the version rule of the live cluster (FAST 2011 §5.1).

Keys ``key_name(i)`` for ``i`` in ``[0, keys)`` are range-partitioned: bin ``b`` holds the
contiguous indices ``[ceil(b * keys / bins), ceil((b + 1) * keys / bins))``.

Every stored value is ``b"<version>:<payload>"``. A write (a put, or a copied key) is
applied only if its version is newer than the stored one, by a Lua script on the server,
so a copy can never overwrite a newer value with an older one (docs/director-live.md).

A version is ``tick * CLIENT_SLOTS + client_id``: ``tick`` from a :class:`VersionClock`
(wall-clock milliseconds, never repeating), so versions of different clients never
collide and a later put gets a newer version. Versions stay below 2**53, the integers the
servers' Lua numbers hold exactly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from geoslo.errors import ConfigError
from geoslo.live._versions import (
    GUARDED_SET_SCRIPT,
    decode_value,
    encode_value,
    should_write,
)

__all__ = [
    "CLIENT_SLOTS",
    "BinLayout",
    "COPY_SET_SCRIPT",
    "GUARDED_SET_SCRIPT",
    "decode_value",
    "encode_value",
    "initial_placement",
    "script_sha",
    "should_write",
    "version_of",
    "VersionClock",
]

CLIENT_SLOTS = 1024  # client ids 0..1023 (ms ticks * 1024 < 2**53 until the year 2248)


# KEYS = keys, ARGV = their stored values "<version>:<payload>"; how many were written.
COPY_SET_SCRIPT = """
local written = 0
for i, key in ipairs(KEYS) do
  local incoming = tonumber(string.match(ARGV[i], '^(%d+):'))
  local current = redis.call('GET', key)
  local version = current and tonumber(string.match(current, '^(%d+):'))
  if not version or incoming > version then
    redis.call('SET', key, ARGV[i])
    written = written + 1
  end
end
return written
"""


class VersionClock:
    """Ticks for versions: wall-clock milliseconds, but always one more than the last tick
    (a hybrid logical clock), so the clients sharing it never reuse a tick and a put
    started after another one ended gets a larger tick."""

    def __init__(self) -> None:
        self.last_tick = 0

    def next_tick(self, now_ms: int) -> int:
        self.last_tick = max(self.last_tick + 1, now_ms)
        return self.last_tick


def version_of(tick: int, client_id: int) -> int:
    """The version of a client's put at ``tick``: unique per (tick, client)."""
    if not 0 <= client_id < CLIENT_SLOTS:
        raise ConfigError("client_id", f"must be in [0, {CLIENT_SLOTS}), got {client_id}")
    return tick * CLIENT_SLOTS + client_id


def script_sha(script: str) -> str:
    """The SHA1 Redis names a script by (``EVALSHA``)."""
    return hashlib.sha1(script.encode()).hexdigest()


@dataclass(frozen=True)
class BinLayout:
    """Range partitioning of ``keys`` key indices into ``bins`` bins (§5.1)."""

    keys: int
    bins: int

    def bin_of(self, index: int) -> int:
        return index * self.bins // self.keys

    def start(self, b: int) -> int:
        """First key index of bin ``b`` (``start(bins) == keys``)."""
        return -(-b * self.keys // self.bins)

    def indices(self, b: int) -> range:
        return range(self.start(b), self.start(b + 1))

    def size(self, b: int) -> int:
        return self.start(b + 1) - self.start(b)


def initial_placement(bins: int, servers: int, replicas: int) -> list[list[int]]:
    """Server indices of each bin's replicas, round robin: replica ``r`` of bin ``b`` on
    server ``(b * replicas + r) mod servers``. The replicas are distinct (``replicas <=
    servers``) and every server holds ``bins * replicas / servers`` bins, ±1."""
    return [[(b * replicas + r) % servers for r in range(replicas)] for b in range(bins)]
