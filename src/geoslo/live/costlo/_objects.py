"""Objects, their copies and versions in a live region (CosTLO §4.3, §5.2, §5.4).

An object ``o`` with copies ``c = 0..C-1`` in a region is stored under the keys ``o``,
``o#1``, ``o#2``, ... Copy ``c`` lives on server ``(crc32(o) + c) mod N`` of the region's
``N`` servers, so requests to different copies go to different servers when ``C <= N``
(§4.3: copies are different objects, served by different storage servers). Every stored
value carries its version, ``b"<version>:<payload>"``, so a reader can tell versions
apart and a writer can refuse to overwrite a newer one.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass

from geoslo.control.costlo.types import Configuration
from geoslo.errors import InputError
from geoslo.live._versions import decode_value
from geoslo.live._versions import encode_value as encode_stored

__all__ = [
    "SERVING",
    "SECOND",
    "CopyRef",
    "RegionEndpoints",
    "S3Access",
    "Regions",
    "copy_key",
    "server_index",
    "encode_value",
    "decode_value",
    "object_copies",
    "quorum_size",
]

SERVING = "serving"  # the data centre that serves the prefix (§5.2)
SECOND = "second"  # the closest other data centre (§5.2)
REGIONS = (SERVING, SECOND)


@dataclass(frozen=True, order=True)
class CopyRef:
    """One copy of an object: its region (``"serving"`` or ``"second"``) and index."""

    region: str
    copy: int

    def __str__(self) -> str:
        return f"{self.region}/{self.copy}"


@dataclass(frozen=True)
class S3Access:
    """How to speak S3 to a region: the bucket every copy lives in, the credentials
    (SigV4; None: botocore's own chain, e.g. AWS_ACCESS_KEY_ID or ~/.aws) and the signing
    region. ``endpoint_url`` names a provider's endpoint (``https://...``), which serves
    every copy (copies are different keys, so different storage servers, §4.3); without
    it every server of the region is its own endpoint, ``http://<host>:<port>``."""

    bucket: str
    access_key: str | None = None
    secret_key: str | None = None
    signing_region: str = "us-east-1"
    endpoint_url: str | None = None


@dataclass(frozen=True)
class RegionEndpoints:
    """How one process reaches one region: the ports of its storage servers on ``host``
    (direct when the region is local, delay-injector ports when it is remote) and of its
    relay VM, with the file of the secret the relay's requests are sealed with. With
    ``s3`` the servers speak S3 (http://host:port), otherwise Redis."""

    server_ports: tuple[int, ...]
    relay_port: int | None = None
    host: str = "127.0.0.1"
    s3: S3Access | None = None
    relay_secret_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "server_ports", tuple(int(p) for p in self.server_ports))
        if isinstance(self.s3, dict):
            object.__setattr__(self, "s3", S3Access(**self.s3))
        if not self.server_ports:
            raise InputError("server_ports", "a region needs at least one storage server")


@dataclass(frozen=True)
class Regions:
    """The two regions of a configuration (§5.2): the serving one and the second one."""

    serving: RegionEndpoints
    second: RegionEndpoints | None = None

    def region(self, name: str) -> RegionEndpoints:
        endpoints = self.serving if name == SERVING else self.second
        if name not in REGIONS or endpoints is None:
            raise InputError("regions", f"no endpoints for region {name!r}")
        return endpoints

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Regions:
        second = data.get("second")
        return cls(
            RegionEndpoints(**data["serving"]),
            None if second is None else RegionEndpoints(**second),
        )


def copy_key(key: str, copy: int) -> str:
    """The storage key of copy ``copy`` of object ``key``: ``o``, ``o#1``, ``o#2``, ..."""
    if copy < 0:
        raise InputError("copy", f"must be >= 0, got {copy}")
    return key if copy == 0 else f"{key}#{copy}"


def server_index(key: str, copy: int, servers: int) -> int:
    """The server (of ``servers``) that stores a copy: a stable hash of the object plus the
    copy index, so the copies of one object sit on different servers when they can."""
    if servers < 1:
        raise InputError("servers", f"must be >= 1, got {servers}")
    return (zlib.crc32(key.encode()) + copy) % servers


def encode_value(version: int, payload: bytes) -> bytes:
    """The stored form of one written version of an object (versions start at 1)."""
    if version < 1:
        raise InputError("version", f"a written version is >= 1, got {version}")
    return encode_stored(version, payload)


def object_copies(configuration: Configuration) -> tuple[CopyRef, ...]:
    """Every copy of an object under a configuration: the serving region's copies (the GET
    and PUT tuples share them, §5.2) and then the second region's."""
    serving = [CopyRef(SERVING, c) for c in range(configuration.serving_copies)]
    second = [CopyRef(SECOND, c) for c in range(configuration.second.copies)]
    return tuple(serving + second)


def quorum_size(copies: int) -> int:
    """A majority of ``copies`` (§7: quorum PUTs and quorum GETs intersect)."""
    if copies < 1:
        raise InputError("copies", f"must be >= 1, got {copies}")
    return copies // 2 + 1
