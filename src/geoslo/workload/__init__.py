"""Workloads: per-second request-rate traces, arrivals, operation mix and key
popularity (Kurma §7), with loaders for the real traces in ``shared/data``."""

from geoslo.workload._arrivals import ZipfKeys, operation_mix, poisson_arrivals
from geoslo.workload._loaders import (
    TRACE_NAMES,
    load_csv,
    load_trace,
    load_trace_day,
    load_trace_minutes,
)
from geoslo.workload._paths import cache_dir, find_data_dir
from geoslo.workload._trace import RateTrace, diurnal, flash_spike, multi_site

__all__ = [
    "TRACE_NAMES",
    "RateTrace",
    "ZipfKeys",
    "cache_dir",
    "diurnal",
    "find_data_dir",
    "flash_spike",
    "load_csv",
    "load_trace",
    "load_trace_day",
    "load_trace_minutes",
    "multi_site",
    "operation_mix",
    "poisson_arrivals",
]
