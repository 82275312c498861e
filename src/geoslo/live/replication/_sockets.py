"""What the kernel holds and has delivered for each stream (Dürango et al., CDC 2016, §III:
a stream's backlog includes what waits in its sockets): ``ss -tin`` on the sending host,
per established TCP socket, the bytes not yet acknowledged (Send-Q) and the bytes the
receiver acknowledged (``bytes_acked``). Only sockets whose peer is another host count:
a connection inside the sending host (loopback, or to its own address) does not cross
the link."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from geoslo.live._netns import run_in
from geoslo.live._processes import find_program
from geoslo.live.replication._htb import PortMatch, in_prefixes

__all__ = ["TcpSocket", "parse_ss", "read_sockets", "AckedBytes", "stream_of", "crosses"]

_SOCKET = re.compile(r"^(\d+)\s+(\d+)\s+(\S+):(\d+)\s+(\S+):(\d+)")
_ACKED = re.compile(r"\bbytes_acked:(\d+)")
_LOOPBACK = ("127.0.0.0/8", "::1/128")


@dataclass(frozen=True)
class TcpSocket:
    """One established socket: its ends, bytes waiting in it and bytes acknowledged."""

    local_ip: str
    local_port: int
    peer_ip: str
    peer_port: int
    send_queue_bytes: int
    acked_bytes: int

    @property
    def crosses(self) -> bool:
        return crosses(self.local_ip, self.peer_ip)


def crosses(local_ip: str, peer_ip: str) -> bool:
    """Whether a connection's peer is another host (not loopback, IPv4 or IPv6, not this
    host's own address): only then does its traffic cross the link."""
    return not (in_prefixes(peer_ip, _LOOPBACK) or peer_ip == local_ip)


def address_ip(text: str) -> str:
    """The IP of ``ip``, ``[ip6]`` or an IPv4-mapped ``::ffff:ip``."""
    return text.strip("[]").removeprefix("::ffff:")


def parse_ss(text: str) -> list[TcpSocket]:
    """The sockets of ``ss -tinH state established`` (a socket's line, then its details)."""
    sockets: list[TcpSocket] = []
    for line in text.splitlines():
        if match := _SOCKET.match(line):
            _, send_q, lip, lport, pip, pport = match.groups()
            sockets.append(
                TcpSocket(address_ip(lip), int(lport), address_ip(pip), int(pport), int(send_q), 0)
            )
        elif sockets and (acked := _ACKED.search(line)):
            last = sockets[-1]
            sockets[-1] = TcpSocket(
                last.local_ip, last.local_port, last.peer_ip, last.peer_port,
                last.send_queue_bytes, int(acked.group(1)),
            )  # fmt: skip
    return sockets


def stream_of(sock: TcpSocket, matches: tuple[PortMatch, ...]) -> int | None:
    """The stream whose match the socket meets (as the HTB filters classify: port and,
    where the match names one, destination), or None."""
    for i, match in enumerate(matches):
        if match.meets(sock.local_port, sock.peer_ip, sock.peer_port):
            return i
    return None


def read_sockets(namespace: str | None) -> list[TcpSocket]:
    """The host's (or the namespace's) established TCP sockets that cross the link."""
    ss = find_program("ss", "iproute2")
    text = run_in(namespace, [ss, "-tinH", "state", "established"])
    return [s for s in parse_ss(text) if s.crosses]


class AckedBytes:
    """Bytes acknowledged per stream since this began, over sockets that come and go: a
    socket seen again adds what it acknowledged since; a new one (or one whose count went
    back, a new connection on the same ports) adds all it acknowledged."""

    def __init__(self, streams: int = 3) -> None:
        self.total_bytes = np.zeros(streams)
        self._seen: dict[tuple, int] = {}

    def update(self, sockets: list[TcpSocket], matches: tuple[PortMatch, ...]) -> np.ndarray:
        seen: dict[tuple, int] = {}
        for sock in sockets:
            stream = stream_of(sock, matches)
            if stream is None:
                continue
            key = (stream, sock.local_ip, sock.local_port, sock.peer_ip, sock.peer_port)
            before = self._seen.get(key, 0)
            gained = sock.acked_bytes - before if sock.acked_bytes >= before else sock.acked_bytes
            self.total_bytes[stream] += gained
            seen[key] = sock.acked_bytes
        self._seen = seen
        return self.total_bytes.copy()
