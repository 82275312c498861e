"""The link's capacity as measured (Dürango et al., CDC 2016, §III: C is what the egress
link carries when it is full): the goodput of each interval in which the streams' total
backlog stayed above what the link sends in that interval, at both its ends. Their
median is C as the link delivers it (headers excluded), beside the C the controller was
given or read from the interface."""

from __future__ import annotations

import numpy as np

__all__ = ["full_link_goodput_mbps"]


def full_link_goodput_mbps(
    time_s: np.ndarray, backlog_mb: np.ndarray, sent_mb: np.ndarray, capacity_mbps: float
) -> np.ndarray:
    """Per interval k >= 1 (from ``time_s[k-1]`` to ``time_s[k]``) in which the link was
    full, its goodput (Mbit/s). ``backlog_mb``: the total backlog at each ``time_s``;
    ``sent_mb``: the total sent in the interval ending there."""
    t, backlog, sent = (np.asarray(a, float) for a in (time_s, backlog_mb, sent_mb))
    duration_s = np.diff(t)
    worth_mb = capacity_mbps / 8 * duration_s
    full = (backlog[:-1] > worth_mb) & (backlog[1:] > worth_mb) & (duration_s > 0)
    return (sent[1:] * 8 / np.where(duration_s > 0, duration_s, 1.0))[full]
