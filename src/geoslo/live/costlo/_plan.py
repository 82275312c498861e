"""Which requests a configuration issues, and when (CosTLO §5.2, §5.4, §7): pure functions.

A GET issues one request first (serving region, copy 0). If no response arrives within
``get_timeout_ms``, it issues the redundant set with probability ``get_probability``: the
rest of the serving tuple's requests and the second region's tuple. A tuple with a relay
VM costs the client one message to that region's relay, which issues the tuple's storage
requests locally (§3, Fig. 4b). A PUT is the same with the PUT tuple in the serving
region; what it does not write synchronously is propagated later (§5.4). In strong mode
(§7) every copy is written synchronously.
"""

from __future__ import annotations

from dataclasses import dataclass

from geoslo.control.costlo.types import Configuration, GetTuple
from geoslo.live.costlo._objects import SECOND, SERVING, CopyRef, object_copies

__all__ = [
    "StorageRequest",
    "ClientRequest",
    "GetPlan",
    "PutPlan",
    "get_plan",
    "quorum_get_plan",
    "put_plan",
    "propagation_targets",
    "storage_request_count",
]


@dataclass(frozen=True, order=True)
class StorageRequest:
    """One GET or PUT request to the storage service: a copy, and which of the
    ``requests_per_copy`` requests to that copy it is."""

    region: str
    copy: int
    index: int = 0

    @property
    def copy_ref(self) -> CopyRef:
        return CopyRef(self.region, self.copy)

    def __str__(self) -> str:
        return f"{self.region}/{self.copy}/{self.index}"


@dataclass(frozen=True)
class ClientRequest:
    """One message the client sends: straight to a storage server (one storage request),
    or to a region's relay VM, which issues ``storage`` to its local servers."""

    region: str
    relay: bool
    storage: tuple[StorageRequest, ...]

    def __str__(self) -> str:
        return f"{self.region}/relay" if self.relay else str(self.storage[0])


@dataclass(frozen=True)
class GetPlan:
    """``first``; after the timeout, with the probability, ``redundant``. With a zero
    timeout the two leave at once as ``together``, where a relayed tuple is one message."""

    first: ClientRequest
    redundant: tuple[ClientRequest, ...]
    together: tuple[ClientRequest, ...]

    @property
    def has_redundancy(self) -> bool:
        return bool(self.redundant)


@dataclass(frozen=True)
class PutPlan:
    """``first`` leaves at once; ``redundant`` after ``put_timeout_ms`` with
    ``put_probability``. ``requests`` (first, then redundant) is what the VM logs, and a
    request's position in it is its id in the log."""

    first: tuple[StorageRequest, ...]
    redundant: tuple[StorageRequest, ...]

    @property
    def requests(self) -> tuple[StorageRequest, ...]:
        return self.first + self.redundant


def storage_request_count(requests: tuple[ClientRequest, ...] | list[ClientRequest]) -> int:
    """Storage requests behind some client messages (a relay message holds several)."""
    return sum(len(r.storage) for r in requests)


def _tuple_requests(region: str, get: GetTuple) -> list[StorageRequest]:
    """A tuple's storage requests, copy 0's first request first."""
    return [
        StorageRequest(region, c, i)
        for i in range(get.requests_per_copy)
        for c in range(get.copies)
    ]


def _messages(region: str, relay: bool, storage: list[StorageRequest]) -> list[ClientRequest]:
    if not storage:
        return []
    if relay:
        return [ClientRequest(region, True, tuple(storage))]
    return [ClientRequest(region, False, (s,)) for s in storage]


def get_plan(configuration: Configuration) -> GetPlan:
    """The GET requests of a configuration (§5.2, "Representation of configurations")."""
    serving, second = configuration.serving, configuration.second
    serving_storage = _tuple_requests(SERVING, serving)
    second_storage = _tuple_requests(SECOND, second)
    first = _messages(SERVING, serving.relay_vm, serving_storage[:1])[0]
    rest = _messages(SERVING, serving.relay_vm, serving_storage[1:])
    remote = _messages(SECOND, second.relay_vm, second_storage)
    together = _messages(SERVING, serving.relay_vm, serving_storage) + remote
    return GetPlan(first, tuple(rest + remote), tuple(together))


def quorum_get_plan(configuration: Configuration) -> tuple[ClientRequest, ...]:
    """A strong GET (§7): one direct request to every copy of the object."""
    return tuple(
        ClientRequest(ref.region, False, (StorageRequest(ref.region, ref.copy, 0),))
        for ref in object_copies(configuration)
    )


def put_plan(configuration: Configuration, strong: bool = False) -> PutPlan:
    """The synchronous PUT requests of a configuration (§5.4; §7 when ``strong``).

    Eventual: copy 0 first, then the rest of the PUT tuple. Strong: one request to every
    copy of the object at once (all are written before L_S is released), then the PUT
    tuple's further requests per copy as the redundant set.
    """
    put = configuration.put
    tuple_storage = [
        StorageRequest(SERVING, c, i)
        for i in range(put.requests_per_copy)
        for c in range(put.copies)
    ]
    if not strong:
        return PutPlan(tuple(tuple_storage[:1]), tuple(tuple_storage[1:]))
    every_copy = tuple(StorageRequest(r.region, r.copy, 0) for r in object_copies(configuration))
    return PutPlan(every_copy, tuple(s for s in tuple_storage if s.index > 0))


def propagation_targets(
    configuration: Configuration, written: set[CopyRef] | frozenset[CopyRef]
) -> tuple[CopyRef, ...]:
    """Copies a PUT writes asynchronously under L_A: every copy no synchronous request
    wrote (§5.4: the serving region's other copies and all of the second region's)."""
    return tuple(ref for ref in object_copies(configuration) if ref not in written)
