"""Authenticated messages between site agents (issue 16: "nobody gets in who does not belong").

One message is one line: the hex HMAC-SHA256 of the envelope, a space, the envelope (JSON:
``src`` and ``dst`` agent names, ``sent_unix_s``, a random ``nonce``, the ``body``), and a
newline. Every agent of a deployment holds the same secret. :class:`Opener` checks a line
in this order and names the first failure (the label of ``geoslo_exchange_rejected_total``):

* ``truncated``: the connection ended mid-line; ``oversized``: longer than the limit;
* ``malformed``: not ``<64 hex> <json>``, or an envelope without its fields;
* ``unauthenticated``: the MAC does not match (compared in constant time, before parsing);
* ``expired``: sent more than the replay window away from now (clocks are synchronised
  anyway: Kurma's rounds need them, §6); ``replayed``: a nonce already seen in the window;
* ``misaddressed``: for another agent (a message reflected or delivered elsewhere).

HMAC over TLS: the exchanged state is not secret, only its origin and freshness matter;
a shared key needs no certificates to issue, rotate or expire, and costs microseconds per
probe, which matters because probes measure RTTs (§6).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import ConfigError

__all__ = [
    "REJECT_REASONS",
    "Envelope",
    "Opener",
    "Rejected",
    "create_secret_file",
    "read_secret_file",
    "seal",
]

MAX_MESSAGE_BYTES = 64 * 1024  # a Kurma state of 3 sites is ~400 bytes
REPLAY_WINDOW_S = 30.0  # accepted clock difference; nonces are remembered this long
MIN_SECRET_BYTES = 32  # 256 bits, the HMAC-SHA256 key size
REJECT_REASONS = (
    "truncated",
    "oversized",
    "malformed",
    "unauthenticated",
    "expired",
    "replayed",
    "misaddressed",
)
_MAC_HEX = 64


class Rejected(Exception):
    """A message dropped, and why (one of :data:`REJECT_REASONS`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Envelope:
    src: str
    dst: str
    sent_unix_s: float
    nonce: str
    body: dict


def seal(secret: bytes, src: str, dst: str, body: dict, now_unix_s: float | None = None) -> bytes:
    """The line carrying ``body`` from agent ``src`` to agent ``dst``."""
    envelope = {
        "src": src,
        "dst": dst,
        "sent_unix_s": time.time() if now_unix_s is None else now_unix_s,
        "nonce": secrets.token_hex(16),
        "body": body,
    }
    data = json.dumps(envelope, separators=(",", ":"), allow_nan=False).encode()
    return _mac(secret, data).encode() + b" " + data + b"\n"


class Opener:
    """Checks lines for agent ``me``; remembers nonces for the replay window (memory: the
    authenticated messages of one window)."""

    def __init__(
        self,
        secret: bytes,
        me: str,
        window_s: float = REPLAY_WINDOW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret, self.me, self._window_s, self._clock = secret, me, window_s, clock
        self._seen: set[str] = set()
        self._expiry: deque[tuple[float, str]] = deque()  # (forget at unix s, nonce)

    def open(self, line: bytes, *, dst: str | None = None) -> Envelope:
        """The envelope of ``line`` if it passes every check (addressed to ``dst``, by
        default to ``me``); raises :class:`Rejected` otherwise."""
        if len(line) > MAX_MESSAGE_BYTES:
            raise Rejected("oversized")
        if not line.endswith(b"\n"):
            raise Rejected("truncated")
        mac, sep, data = line[:-1].partition(b" ")
        if not sep or len(mac) != _MAC_HEX:
            raise Rejected("malformed")
        if not hmac.compare_digest(mac, _mac(self._secret, data).encode()):
            raise Rejected("unauthenticated")
        envelope = _parse(data)
        now = self._clock()
        self._forget(now)
        if abs(now - envelope.sent_unix_s) > self._window_s:
            raise Rejected("expired")
        if envelope.nonce in self._seen:
            raise Rejected("replayed")
        if envelope.dst != (self.me if dst is None else dst):
            raise Rejected("misaddressed")
        self._seen.add(envelope.nonce)
        self._expiry.append((now + 2 * self._window_s, envelope.nonce))
        return envelope

    def _forget(self, now: float) -> None:
        # a nonce is kept until its message would be expired anyway, wherever its clock was
        while self._expiry and self._expiry[0][0] < now:
            self._seen.discard(self._expiry.popleft()[1])


def _mac(secret: bytes, data: bytes) -> str:
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def _parse(data: bytes) -> Envelope:
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise Rejected("malformed") from None
    fields = {"src": str, "dst": str, "sent_unix_s": (int, float), "nonce": str, "body": dict}
    if not isinstance(raw, dict) or set(raw) != set(fields):
        raise Rejected("malformed")
    for key, kind in fields.items():
        if isinstance(raw[key], bool) or not isinstance(raw[key], kind):
            raise Rejected("malformed")
    return Envelope(raw["src"], raw["dst"], float(raw["sent_unix_s"]), raw["nonce"], raw["body"])


# --- the secret ---------------------------------------------------------------------------------
def create_secret_file(path: Path) -> Path:
    """A new random secret at ``path``, readable by its owner only; an existing one is kept."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_hex(MIN_SECRET_BYTES) + "\n")
    return path


def read_secret_file(path: Path, field: str = "exchange_secret_file") -> bytes:
    """The shared secret in ``path``: at least 32 bytes, not readable by group or others."""
    try:
        mode = path.stat().st_mode
        secret = path.read_bytes().strip()
    except OSError as error:
        raise ConfigError(field, f"cannot read the secret {path}: {error.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(field, f"{path} is readable by others; chmod 600 {path}")
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(
            field, f"{path} holds {len(secret)} bytes; use at least {MIN_SECRET_BYTES}, "
            "e.g. python -c 'import secrets; print(secrets.token_hex(32))'",
        )  # fmt: skip
    return secret
