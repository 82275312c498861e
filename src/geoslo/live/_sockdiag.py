"""Bytes received and not yet read on TCP connections, by local port, from the kernel's
sock_diag netlink interface (what ``ss`` uses; linux/inet_diag.h).

One dump of the established TCP sockets of the caller's network namespace, parsed in
binary: ``/proc/net/tcp`` gives the same ``rx_queue`` as text, but the kernel formats
every socket of the namespace for it, which cost about 9 ms a read on a busy 2-core
machine, too much to sample every few milliseconds.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["SockDiag", "parse_dump"]

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_ESTABLISHED = 1
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
REQUEST = struct.Struct("=BBBxI48x")  # inet_diag_req_v2: family, protocol, ext, states, id
SPORT = struct.Struct(">H")  # inet_diag_msg: after 4 one-byte fields, the source port
SPORT_OFFSET = 4
RQUEUE = struct.Struct("=I")  # idiag_rqueue: after the 48-byte socket id and idiag_expires
RQUEUE_OFFSET = 4 + 48 + 4


def parse_dump(buffer: bytes, unread: dict[int, int]) -> bool:
    """Add each message's unread bytes to ``unread[local port]`` (ports not in it are
    skipped); True once the dump's end is in ``buffer``."""
    offset = 0
    while offset + HEADER.size <= len(buffer):
        length, kind, _flags, _seq, _pid = HEADER.unpack_from(buffer, offset)
        if kind == NLMSG_DONE:
            return True
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", buffer, offset + HEADER.size)
            raise OSError(-code, f"sock_diag dump failed: {code}")
        body = offset + HEADER.size
        (port,) = SPORT.unpack_from(buffer, body + SPORT_OFFSET)
        if port in unread:
            unread[port] += RQUEUE.unpack_from(buffer, body + RQUEUE_OFFSET)[0]
        if length < HEADER.size:
            raise OSError(0, "sock_diag: a message shorter than its header")
        offset += (length + 3) & ~3
    return False


class SockDiag:
    """A netlink socket kept open for repeated dumps (close it when done)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self.sequence = 0

    def unread_bytes(self, ports: set[int]) -> dict[int, int]:
        """Per local port in ``ports``: the unread bytes of its established connections
        (IPv4 and IPv6)."""
        unread = dict.fromkeys(ports, 0)
        for family in (socket.AF_INET, socket.AF_INET6):
            self.sequence += 1
            body = REQUEST.pack(family, socket.IPPROTO_TCP, 0, 1 << TCP_ESTABLISHED)
            flags = NLM_F_REQUEST | NLM_F_DUMP
            self.sock.send(HEADER.pack(HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, flags,
                                       self.sequence, 0) + body)  # fmt: skip
            while not parse_dump(self.sock.recv(1 << 16), unread):
                pass
        return unread

    def close(self) -> None:
        self.sock.close()
