"""A real shared egress link (Dürango et al., CDC 2016, §III): three TCP streams from the
sender's namespace to the receiver's over a veth shaped by HTB (``_htb.py``).

Each stream has an application backlog (bytes waiting to be sent) that ``add_arrivals``
grows; a sender thread writes it to its socket as fast as the socket takes it. The
socket's send buffer is small (64 KiB), so the shaping pushes back into the backlog,
where the controller can see it. A receiver thread per stream drains and counts what
arrives. ``measure()`` returns, per stream and since the last call: the bytes the
receiver counted (sent), the bytes added (arrived) and the backlog now (application
backlog plus what the socket holds unsent, ``SIOCOUTQ``). Everything runs in this
process; the namespaces and the qdisc are removed by ``down()``.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.errors import TestbedError
from geoslo.live._netns import RX_IP, NamespacePair, socket_in
from geoslo.live.replication._htb import destination_ports
from geoslo.live.replication._shaper import HtbShaper

__all__ = ["EgressLink", "LinkMeasurement", "DEFAULT_PORTS"]

DEFAULT_PORTS = (5001, 5002, 5003)  # application, replication, VM image
_CHUNK_BYTES = 65_536
_SEND_BUFFER_BYTES = 65_536
_ZEROS = bytes(_CHUNK_BYTES)


@dataclass(frozen=True)
class LinkMeasurement:
    """Per stream, since the previous measurement (bytes) and over ``interval_s``."""

    backlog_bytes: np.ndarray
    sent_bytes: np.ndarray
    arrived_bytes: np.ndarray
    interval_s: float


class _Stream:
    """One stream's backlog, socket and counters."""

    def __init__(self, sender: socket.socket, receiver: socket.socket) -> None:
        self.sender, self.receiver = sender, receiver
        self.backlog_bytes = 0
        self.received_bytes = 0
        self.added_bytes = 0
        self.wake = threading.Condition()
        self.stopped = False

    def add(self, nbytes: int) -> None:
        with self.wake:
            self.backlog_bytes += nbytes
            self.added_bytes += nbytes
            self.wake.notify()

    def send_loop(self) -> None:
        while True:
            with self.wake:
                while self.backlog_bytes == 0 and not self.stopped:
                    self.wake.wait(0.1)
                if self.stopped:
                    return
                n = min(self.backlog_bytes, _CHUNK_BYTES)
            try:
                sent = self.sender.send(_ZEROS[:n])
            except OSError:
                return
            with self.wake:
                self.backlog_bytes -= sent

    def receive_loop(self) -> None:
        while True:
            try:
                data = self.receiver.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            self.received_bytes += len(data)

    def unsent_in_socket(self) -> int:
        raw = fcntl.ioctl(self.sender.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
        return struct.unpack("i", raw)[0]


class EgressLink:
    """The live link: ``up``, then ``add_arrivals`` / ``set_shares`` / ``measure``, ``down``."""

    def __init__(self, pair: NamespacePair, capacity_bps: float, ports) -> None:
        self.pair = pair
        self.capacity_bps = capacity_bps
        self.ports = tuple(ports)
        self.shaper = HtbShaper(pair.tx_dev, capacity_bps, destination_ports(ports), pair.tx)
        self.streams: list[_Stream] = []
        self._threads: list[threading.Thread] = []
        self._marks = (np.zeros(3), np.zeros(3), time.monotonic())

    @classmethod
    def up(
        cls,
        state_dir: Path,
        capacity_bps: float = 20e6,
        shares=(1 / 3, 1 / 3, 1 / 3),
        ports=DEFAULT_PORTS,
        prefix: str = "geoslo",
    ) -> EgressLink:
        """Namespaces (``<prefix>-tx-<pid>``, ``<prefix>-rx-<pid>``), HTB with ``shares``,
        and the three connected streams."""
        pair = NamespacePair.create(Path(state_dir), prefix)
        link = cls(pair, capacity_bps, ports)
        try:
            link.shaper.install(shares)
            link._connect()
        except BaseException:
            link.down()
            raise
        return link

    def _connect(self) -> None:
        for port in self.ports:
            listener = socket_in(self.pair.rx)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((RX_IP, port))
            listener.listen(1)
            sender = socket_in(self.pair.tx)
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER_BYTES)
            sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sender.settimeout(5.0)
            sender.connect((RX_IP, port))
            sender.settimeout(None)
            receiver, _ = listener.accept()
            listener.close()
            stream = _Stream(sender, receiver)
            self.streams.append(stream)
            for target in (stream.send_loop, stream.receive_loop):
                thread = threading.Thread(target=target, daemon=True)
                thread.start()
                self._threads.append(thread)

    def add_arrivals(self, arrived_bytes) -> None:
        """Data that arrives now, per stream (application, replication, VM image)."""
        for stream, nbytes in zip(self.streams, arrived_bytes, strict=True):
            if nbytes < 0:
                raise TestbedError(f"arrivals must be >= 0 bytes, got {nbytes}")
            if nbytes:
                stream.add(int(nbytes))

    def set_shares(self, shares) -> None:
        """Each stream's guaranteed minimum share of the link from now on."""
        self.shaper.set_shares(shares)

    def set_priority(self, order) -> None:
        """Strict priority from now on (PRIO; ``HtbShaper.set_priority``)."""
        self.shaper.set_priority(order)

    def measure(self) -> LinkMeasurement:
        received = np.array([s.received_bytes for s in self.streams], dtype=float)
        added = np.array([s.added_bytes for s in self.streams], dtype=float)
        backlog = np.array(
            [s.backlog_bytes + s.unsent_in_socket() for s in self.streams], dtype=float
        )
        now = time.monotonic()
        last_received, last_added, last_s = self._marks
        self._marks = (received, added, now)
        return LinkMeasurement(backlog, received - last_received, added - last_added, now - last_s)

    def class_bytes(self) -> dict[str, int]:
        """HTB's own count of bytes sent per class (a cross-check)."""
        return self.shaper.class_bytes()

    def class_rates(self) -> dict[str, tuple[float, int]]:
        """The guaranteed rate (bit/s) and priority HTB holds per class now."""
        return self.shaper.class_rates()

    def threads_alive(self) -> int:
        """Sender and receiver threads still running (0 once ``down()`` has returned)."""
        return sum(thread.is_alive() for thread in self._threads)

    def down(self) -> None:
        """Stop the streams, close the sockets, delete the namespaces (and the qdisc)."""
        for stream in self.streams:
            with stream.wake:
                stream.stopped = True
                stream.wake.notify()
            for sock in (stream.sender, stream.receiver):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self.pair.delete()

    def __enter__(self) -> EgressLink:
        return self

    def __exit__(self, *exc) -> None:
        self.down()
