"""Copy throttling arithmetic (FAST 2011 §5.4: a copy runs at a specified bytes/s).

A copy sends batches; before each batch it waits until the bytes already sent would have
taken at least ``sent / rate`` seconds, so the rate never exceeds the specified one (it
may fall below it when the servers are busy: the copy-rate factor of §5.4).
"""

from __future__ import annotations

__all__ = ["batch_key_count", "pace_delay_s"]


def pace_delay_s(sent_bytes: float, elapsed_s: float, rate_bytes_per_s: float) -> float:
    """How long to wait before sending more, having sent ``sent_bytes`` in ``elapsed_s``."""
    return max(0.0, sent_bytes / rate_bytes_per_s - elapsed_s)


def batch_key_count(batch_bytes: int, stored_bytes_per_key: int) -> int:
    """Keys per batch: as many as fit in ``batch_bytes``, at least one."""
    return max(1, batch_bytes // max(1, stored_bytes_per_key))
