"""Measured inter-region RTTs of IBM Cloud: realistic base RTTs and their drift.

The shared table ``wan/ibm-cloud-inter-region-latency.csv`` (see the data README)
holds one matrix of monthly average RTTs per weekly publication; regions join over
time, so early matrices cover fewer regions. Without the shared folder the compact
copy embedded by ``scripts/embed_data.py`` is used (the same numbers).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from geoslo.errors import DataError, InputError
from geoslo.topology._links import BaseRttSchedule, WanLink, poisson_change_times
from geoslo.topology._sites import Prices, Site
from geoslo.topology._topology import Topology
from geoslo.workload import find_data_dir

__all__ = [
    "load_ibm_latency",
    "ibm_rtt_history",
    "ibm_routing_changes",
    "ibm_regions",
    "ibm_topology",
]

IBM_CSV = "wan/ibm-cloud-inter-region-latency.csv"
_COLUMNS = ("published", "window", "src_region", "dst_region", "avg_latency_ms")
_EMBEDDED = "ibm_latency.npz"


@dataclass(frozen=True, eq=False)
class _IbmTable:
    dates: np.ndarray  # datetime64[D], ascending publication dates
    regions: tuple[str, ...]  # sorted
    rtt_ms: np.ndarray  # (dates, regions, regions); NaN where not published
    source: str


def _parse_date(text: str, where: str) -> np.datetime64:
    try:
        return np.datetime64(dt.date.fromisoformat(text.strip()), "D")
    except ValueError:
        raise DataError(f"{where}: {text!r} is not a YYYY-MM-DD date") from None


def _read_rows(path: Path) -> list[tuple[np.datetime64, str, str, float]]:
    try:
        with path.open(newline="", encoding="utf-8") as stream:
            reader = csv.reader(stream)
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header) != _COLUMNS:
                raise DataError(f"{path}: header must be {','.join(_COLUMNS)}, got {header}")
            rows = []
            for number, row in enumerate(reader, start=2):
                if len(row) != len(_COLUMNS):
                    raise DataError(f"{path}: line {number} has {len(row)} fields, expected 5")
                where = f"{path}: line {number}"
                try:
                    rtt_ms = float(row[4])
                except ValueError:
                    raise DataError(f"{where}: avg_latency_ms {row[4]!r} is not a number") from None
                if not np.isfinite(rtt_ms) or rtt_ms < 0:
                    raise DataError(f"{where}: avg_latency_ms {row[4]!r} must be finite and >= 0")
                rows.append((_parse_date(row[0], where), row[2].strip(), row[3].strip(), rtt_ms))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc})") from None
    if not rows:
        raise DataError(f"{path}: has no data rows")
    return rows


def _parse_ibm_csv(path: Path) -> _IbmTable:
    """The CSV as a (dates x regions x regions) cube; also used by scripts/embed_data.py."""
    rows = _read_rows(path)
    dates = np.unique(np.array([row[0] for row in rows]))
    regions = tuple(sorted({row[1] for row in rows} | {row[2] for row in rows}))
    cube = np.full((dates.size, len(regions), len(regions)), np.nan)
    where = {region: k for k, region in enumerate(regions)}
    for published, src, dst, rtt_ms in rows:
        d, i, j = int(np.searchsorted(dates, published)), where[src], where[dst]
        if i == j:
            raise DataError(f"{path}: {published} lists {src} -> {dst}, a region to itself")
        if not np.isnan(cube[d, i, j]) and cube[d, i, j] != rtt_ms:
            raise DataError(f"{path}: {published} {src} -> {dst} given twice with different RTTs")
        cube[d, i, j] = rtt_ms
    cube.setflags(write=False)
    return _IbmTable(dates, regions, cube, str(path))


@functools.lru_cache(maxsize=4)
def _parse_cached(path: str, mtime_ns: int) -> _IbmTable:
    return _parse_ibm_csv(Path(path))


@functools.lru_cache(maxsize=1)
def _embedded_table() -> _IbmTable:
    resource = resources.files("geoslo.topology") / "data" / _EMBEDDED
    try:
        with resource.open("rb") as stream, np.load(stream, allow_pickle=False) as archive:
            tenths = archive["rtt_tenths_ms"].astype(np.float64)
            rtt_ms = np.where(tenths < 0, np.nan, tenths / 10.0)
            rtt_ms.setflags(write=False)
            regions = tuple(str(region) for region in archive["regions"])
            return _IbmTable(archive["dates"], regions, rtt_ms, f"{resource} (embedded)")
    except FileNotFoundError:
        raise DataError(f"{resource}: embedded data missing; run scripts/embed_data.py") from None


def _ibm_table() -> _IbmTable:
    data_dir = find_data_dir()
    if data_dir is not None and (data_dir / IBM_CSV).is_file():
        path = data_dir / IBM_CSV
        return _parse_cached(str(path.resolve()), path.stat().st_mtime_ns)
    return _embedded_table()


def _to_date(published: object) -> np.datetime64:
    try:
        if isinstance(published, str):
            return np.datetime64(dt.date.fromisoformat(published), "D")
        return np.datetime64(published, "D")  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise InputError("published", f"must be a YYYY-MM-DD date, got {published!r}") from None


def load_ibm_latency(published: object = None) -> tuple[list[str], np.ndarray]:
    """(regions, RTT matrix in ms) of one publication: the latest by default, else the
    latest published on or before ``published`` (a date or ``"YYYY-MM-DD"``). Only the
    regions measured then are returned; ``rtt_ms[i, j]`` is region i -> region j, the
    diagonal is 0 and a pair not measured that week is NaN."""
    table = _ibm_table()
    if published is None:
        d = table.dates.size - 1
    else:
        when = _to_date(published)
        d = int(np.searchsorted(table.dates, when, side="right")) - 1
        if d < 0:
            raise InputError(
                "published", f"{when} is before the first publication {table.dates[0]}"
            )
    matrix = table.rtt_ms[d]
    present = [k for k in range(len(table.regions)) if np.any(np.isfinite(matrix[k]))]
    rtt_ms = matrix[np.ix_(present, present)].copy()
    np.fill_diagonal(rtt_ms, 0.0)
    return [table.regions[k] for k in present], rtt_ms


def _region_index(table: _IbmTable, region: str, field: str) -> int:
    lowered = [name.lower() for name in table.regions]
    if not isinstance(region, str) or region.strip().lower() not in lowered:
        raise InputError(field, f"unknown IBM region {region!r}; regions: {list(table.regions)}")
    return lowered.index(region.strip().lower())


def ibm_rtt_history(src: str, dst: str) -> tuple[np.ndarray, np.ndarray]:
    """(publication dates as datetime64[D], RTT in ms) of ``src -> dst`` over every
    publication that measured the pair."""
    table = _ibm_table()
    i = _region_index(table, src, "src")
    j = _region_index(table, dst, "dst")
    if i == j:
        raise InputError("dst", f"must differ from src ({src!r})")
    series = table.rtt_ms[:, i, j]
    measured = np.isfinite(series)
    return table.dates[measured].copy(), series[measured].copy()


def ibm_regions() -> tuple[str, ...]:
    """Every region the table names, as it spells them."""
    return tuple(_ibm_table().regions)


def ibm_routing_changes(
    src: str, dst: str, mean_interval_s: float, duration_s: float, seed: int
) -> BaseRttSchedule:
    """The measured drift of one pair's RTT, compressed in time: route changes at Poisson
    times (mean gap ``mean_interval_s`` over ``[0, duration_s)``), each taking the pair's
    next weekly average in publication order, from a seeded publication on (and around
    again after the last). The pair's two directions are one path: the series of
    ``min(src, dst) -> max(src, dst)`` (alphabetical) serves both."""
    first, second = sorted((src, dst), key=str.lower)
    _, series = ibm_rtt_history(first, second)
    times = poisson_change_times(mean_interval_s, duration_s, np.random.default_rng(seed))
    start = int(np.random.default_rng(seed + 1).integers(series.size))
    return BaseRttSchedule(times, series[(start + np.arange(times.size)) % series.size])


def ibm_topology(
    regions: Sequence[str],
    capacity_rps: float | Sequence[float],
    *,
    published: object = None,
    prices: Prices | None = None,
) -> Topology:
    """A topology of IBM Cloud ``regions`` with constant base RTTs from one
    publication (see :func:`load_ibm_latency`); both directions are kept, and a pair
    not measured then has no link."""
    names, rtt_ms = load_ibm_latency(published)
    chosen = list(regions)
    if len(chosen) < 1:
        raise InputError("regions", "need at least one region")
    capacities = [capacity_rps] * len(chosen) if np.ndim(capacity_rps) == 0 else list(capacity_rps)  # type: ignore[arg-type]
    if len(capacities) != len(chosen):
        raise InputError("capacity_rps", f"need one value or {len(chosen)}, got {len(capacities)}")
    lowered = [name.lower() for name in names]
    index = []
    for region in chosen:
        if not isinstance(region, str) or region.lower() not in lowered:
            raise InputError("regions", f"{region!r} not measured then; regions: {names}")
        index.append(lowered.index(region.lower()))
    prices = prices or Prices()
    sites = tuple(
        Site(names[k], capacity, vm_price_usd_per_hour=prices.vm_usd_per_hour)
        for k, capacity in zip(index, capacities, strict=True)
    )
    links = tuple(
        WanLink(names[a], names[b], float(rtt_ms[a, b]))
        for a in index
        for b in index
        if a != b and np.isfinite(rtt_ms[a, b])
    )
    return Topology(sites, links, prices)
