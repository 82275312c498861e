"""Latency distributions on a lattice and their algebra (Kurma §4.2, CosTLO §5.3).

Times are milliseconds. See :class:`LatencyDistribution` for the representation.
"""

from geoslo.dist._distribution import LatencyDistribution, minimum, mixture, order_statistic
from geoslo.dist._lattice import MAX_LATTICE_POINTS

__all__ = [
    "LatencyDistribution",
    "MAX_LATTICE_POINTS",
    "minimum",
    "mixture",
    "order_statistic",
]
