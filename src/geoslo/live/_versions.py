"""Versioned values on Redis, shared by the live libraries that keep several copies of a
key (CosTLO's redundant PUTs, the SCADS Director's replicas and copies).

A stored value is ``b"<version>:<payload>"``; a write replaces it only with a strictly
newer version. The rule runs on the server as a Lua script, so concurrent writers (puts,
propagation, copies) can arrive in any order and the newest version still wins.
"""

from __future__ import annotations

from geoslo.errors import InputError

__all__ = ["GUARDED_SET_SCRIPT", "encode_value", "decode_value", "should_write"]

# KEYS[1] = key, ARGV[1] = version, ARGV[2] = "<version>:<payload>"; 1 written, 0 not.
GUARDED_SET_SCRIPT = """
local current = redis.call('GET', KEYS[1])
if current then
  local version = tonumber(string.match(current, '^(%d+):'))
  if version and version >= tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


def encode_value(version: int, payload: bytes) -> bytes:
    """The stored form of one version: ``b"<version>:<payload>"``."""
    if version < 0:
        raise InputError("version", f"must be >= 0, got {version}")
    return b"%d:%s" % (version, payload)


def decode_value(stored: bytes) -> tuple[int, bytes]:
    """``(version, payload)`` of a stored value."""
    head, sep, payload = stored.partition(b":")
    if not sep or not head.isdigit():
        raise InputError("value", f"not a versioned value: {stored[:40]!r}")
    return int(head), payload


def should_write(current: bytes | None, incoming: bytes) -> bool:
    """The script's rule in Python: write unless the stored version is as new or newer."""
    if current is None:
        return True
    return decode_value(incoming)[0] > decode_value(current)[0]
