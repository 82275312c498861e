"""Cloud storage regions, their clients and a propagation-delay model (CosTLO §2, §4.1, §6).

CosTLO measures 120 PlanetLab sites fetching 1 KB objects from the data centers of
Amazon S3 and Microsoft Azure (§2), observes that the second closest data center
across both providers is usually about as near as the closest S3 one while the second
closest S3 data center is far (§4.1, Fig. 6), and evaluates with the same 120 sites
as clients and every S3 and Azure data center (§6). The embedded JSON files hold the
21 regions of 2015 with approximate list prices and 120 PlanetLab-like client sites;
their README says what the numbers are and are not.
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from geoslo._checks import non_negative
from geoslo.errors import DataError, InputError

__all__ = [
    "StoragePrices",
    "CloudRegion",
    "ClientPrefix",
    "cloud_regions",
    "client_prefixes",
    "great_circle_km",
    "propagation_rtt_ms",
]

PROVIDERS = ("s3", "azure")
EARTH_RADIUS_KM = 6371.0
# Light in fibre travels at about 2/3 of c: 200 km per ms one way.
FIBRE_KM_PER_MS = 200.0
_REGIONS_JSON = "cloud_regions.json"
_PREFIXES_JSON = "client_prefixes.json"
_PRICE_FIELDS = (
    "storage_usd_per_gb_month",
    "get_usd_per_10k",
    "put_usd_per_1k",
    "vm_usd_per_hour",
    "egress_usd_per_gb",
)


@dataclass(frozen=True)
class StoragePrices:
    """Unit prices of one storage region: storage per GB-month, GETs per 10K, PUTs per
    1K, a small VM per hour and egress to the Internet per GB (first tier)."""

    storage_usd_per_gb_month: float
    get_usd_per_10k: float
    put_usd_per_1k: float
    vm_usd_per_hour: float
    egress_usd_per_gb: float

    def __post_init__(self) -> None:
        for field in _PRICE_FIELDS:
            object.__setattr__(self, field, non_negative(getattr(self, field), field))

    @property
    def usd_per_get(self) -> float:
        return self.get_usd_per_10k / 10_000

    @property
    def usd_per_put(self) -> float:
        return self.put_usd_per_1k / 1_000


def _degrees(value: object, field: str, bound: float) -> float:
    """``value`` as a float within [-bound, bound] degrees, else InputError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(field, f"must be a number of degrees, got {value!r}")
    degrees = float(value)
    if not -bound <= degrees <= bound:  # also rejects NaN
        raise InputError(field, f"must be within [-{bound:g}, {bound:g}] degrees, got {value!r}")
    return degrees


def _check_text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class CloudRegion:
    """One storage region of a provider (``name`` is ``"<provider>:<region>"``)."""

    name: str
    provider: str
    city: str
    latitude: float
    longitude: float
    prices: StoragePrices

    def __post_init__(self) -> None:
        _check_text(self.name, "name")
        _check_text(self.city, "city")
        if self.provider not in PROVIDERS:
            raise InputError("provider", f"must be one of {PROVIDERS}, got {self.provider!r}")
        if not isinstance(self.prices, StoragePrices):
            raise InputError("prices", f"must be StoragePrices, got {type(self.prices).__name__}")
        object.__setattr__(self, "latitude", _degrees(self.latitude, "latitude", 90.0))
        object.__setattr__(self, "longitude", _degrees(self.longitude, "longitude", 180.0))


@dataclass(frozen=True)
class ClientPrefix:
    """One client site (a PlanetLab-like IP prefix) and its last-mile latency."""

    name: str
    city: str
    country: str  # ISO 3166-1 alpha-2
    latitude: float
    longitude: float
    access_ms: float

    def __post_init__(self) -> None:
        _check_text(self.name, "name")
        _check_text(self.city, "city")
        if not isinstance(self.country, str) or len(self.country) != 2:
            raise InputError("country", f"must be an ISO-2 code, got {self.country!r}")
        object.__setattr__(self, "latitude", _degrees(self.latitude, "latitude", 90.0))
        object.__setattr__(self, "longitude", _degrees(self.longitude, "longitude", 180.0))
        object.__setattr__(self, "access_ms", non_negative(self.access_ms, "access_ms"))


def _read_json(path: Path | None, default: str, key: str) -> tuple[str, list[Any]]:
    """(where, rows) of the list ``key`` in a JSON file, the embedded ``default`` if no
    ``path`` is given."""
    resource = resources.files("geoslo.topology") / "data" / default if path is None else path
    where = str(resource)
    try:
        document = json.loads(resource.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{where}: no such file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{where}: not UTF-8 text ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get(key), list):
        raise DataError(f'{where}: must be an object with a "{key}" list')
    if not document[key]:
        raise DataError(f'{where}: "{key}" is empty')
    return where, document[key]


def _build(kind: type, rows: Iterable[Any], where: str, key: str) -> tuple[Any, ...]:
    built = []
    for number, row in enumerate(rows):
        at = f"{where}: {key}[{number}]"
        if not isinstance(row, dict):
            raise DataError(f"{at}: must be an object, got {row!r}")
        try:
            if kind is CloudRegion:
                prices = row.get("prices")
                if not isinstance(prices, dict) or set(prices) != set(_PRICE_FIELDS):
                    raise DataError(f"{at}: prices must be an object with {_PRICE_FIELDS}")
                row = {**row, "prices": StoragePrices(**prices)}
            built.append(kind(**row))
        except TypeError as exc:  # missing or unknown fields
            raise DataError(f"{at}: {exc}") from None
        except InputError as exc:
            raise DataError(f"{at}: {exc}") from None
    names = [item.name for item in built]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise DataError(f"{where}: names given more than once: {duplicates}")
    return tuple(built)


@functools.lru_cache(maxsize=8)
def _load(kind: type, path: str | None, mtime_ns: int) -> tuple[Any, ...]:
    default, key = (
        (_REGIONS_JSON, "regions") if kind is CloudRegion else (_PREFIXES_JSON, "prefixes")
    )
    where, rows = _read_json(None if path is None else Path(path), default, key)
    return _build(kind, rows, where, key)


def _cached(kind: type, path: str | Path | None) -> tuple[Any, ...]:
    if path is None:
        return _load(kind, None, 0)
    resolved = Path(path).resolve()
    try:
        mtime_ns = resolved.stat().st_mtime_ns
    except FileNotFoundError:
        raise DataError(f"{resolved}: no such file") from None
    return _load(kind, str(resolved), mtime_ns)


def cloud_regions(
    providers: tuple[str, ...] = PROVIDERS, *, path: str | Path | None = None
) -> tuple[CloudRegion, ...]:
    """The S3 and Azure regions of 2015 (CosTLO §2, §6) of ``providers``, in file order;
    ``path`` reads another file of the same layout instead of the embedded one."""
    if isinstance(providers, str):
        providers = (providers,)
    unknown = [provider for provider in providers if provider not in PROVIDERS]
    if unknown:
        raise InputError("providers", f"unknown {unknown}; known providers: {PROVIDERS}")
    return tuple(r for r in _cached(CloudRegion, path) if r.provider in providers)


def client_prefixes(
    limit: int | None = None, *, path: str | Path | None = None
) -> tuple[ClientPrefix, ...]:
    """The first ``limit`` (all by default) of 120 PlanetLab-like client sites (CosTLO §2,
    §6). The file interleaves the continents, so any leading slice is spread over the
    world roughly like the whole list."""
    prefixes = _cached(ClientPrefix, path)
    if limit is None:
        return prefixes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InputError("limit", f"must be an integer >= 0 or None, got {limit!r}")
    if limit > len(prefixes):
        raise InputError("limit", f"only {len(prefixes)} prefixes are known, got {limit}")
    return prefixes[:limit]


def great_circle_km(
    lat1: ArrayLike, lon1: ArrayLike, lat2: ArrayLike, lon2: ArrayLike
) -> float | np.ndarray:
    """Great-circle distance in km between points given in degrees (haversine formula,
    earth radius 6371 km); arguments broadcast like numpy arrays, scalars give a float."""
    phi1, lam1, phi2, lam2 = (
        np.radians(np.asarray(x, dtype=float)) for x in (lat1, lon1, lat2, lon2)
    )
    half = (
        np.sin((phi2 - phi1) / 2) ** 2
        + np.cos(phi1) * np.cos(phi2) * np.sin((lam2 - lam1) / 2) ** 2
    )
    distance_km = 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(half, 0.0, 1.0)))
    return float(distance_km) if np.ndim(distance_km) == 0 else distance_km


def propagation_rtt_ms(distance_km: ArrayLike, route_inflation: float = 2.0) -> float | np.ndarray:
    """Round-trip propagation delay in ms over ``distance_km`` of great circle: light in
    fibre (200 km/ms one way) along a route ``route_inflation`` times the great circle.

    The default 2 stands for circuitous routing plus router delays: minimum RTTs between
    Internet hosts are typically about twice the fibre time along the great circle
    (Singla et al., HotNets 2014, measure roughly 3x the speed-of-light-in-vacuum time).
    With it, 50 km of distance cost 1 ms of RTT."""
    inflation = non_negative(route_inflation, "route_inflation")
    if inflation < 1:
        raise InputError("route_inflation", f"must be >= 1, got {route_inflation!r}")
    distance = np.asarray(distance_km, dtype=float)
    if np.any(~np.isfinite(distance)) or np.any(distance < 0):
        raise InputError("distance_km", "must be finite and >= 0")
    rtt_ms = 2.0 * inflation * distance / FIBRE_KM_PER_MS
    return float(rtt_ms) if np.ndim(rtt_ms) == 0 else rtt_ms
