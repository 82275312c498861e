"""Authenticated exchange messages between site agents: what is let in, what is dropped and
under which reason (geoslo.live._exchange)."""

from __future__ import annotations

import json
import os

import pytest

from geoslo.errors import ConfigError
from geoslo.live._exchange import (
    MAX_MESSAGE_BYTES,
    REJECT_REASONS,
    Opener,
    Rejected,
    create_secret_file,
    read_secret_file,
    seal,
)

SECRET = b"k" * 32
OTHER_SECRET = b"x" * 32
NOW_S = 1_700_000_000.0
WINDOW_S = 30.0
PROBE = {"type": "probe", "id": 7}


def opener(me: str = "London") -> Opener:
    return Opener(SECRET, me, WINDOW_S, clock=lambda: NOW_S)


def sealed(body=PROBE, *, secret=SECRET, src="Ireland", dst="London", sent_s=NOW_S) -> bytes:
    return seal(secret, src, dst, body, sent_s)


def resealed(envelope_edit) -> bytes:
    """A validly MACed line whose envelope was changed by ``envelope_edit``."""
    import hashlib
    import hmac

    data = json.loads(sealed().split(b" ", 1)[1])
    data = envelope_edit(data)
    raw = json.dumps(data).encode()
    return hmac.new(SECRET, raw, hashlib.sha256).hexdigest().encode() + b" " + raw + b"\n"


def test_a_sealed_message_opens_to_what_was_sent():
    envelope = opener().open(sealed())
    assert (envelope.src, envelope.dst, envelope.body) == ("Ireland", "London", PROBE)
    assert envelope.sent_unix_s == NOW_S and len(envelope.nonce) == 32


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (sealed(secret=OTHER_SECRET), "unauthenticated"),  # a peer with the wrong secret
        (sealed()[:-1], "truncated"),  # the connection ended mid-line
        (sealed()[:40], "truncated"),
        (sealed()[:90] + b"\n", "unauthenticated"),  # cut, then a newline: the MAC fails
        (b"x" * (MAX_MESSAGE_BYTES + 1) + b"\n", "oversized"),
        (b"\n", "malformed"),
        (b"hello\n", "malformed"),
        (json.dumps({"type": "probe", "id": 1}).encode() + b"\n", "malformed"),  # no MAC
        (b"0" * 64 + b"\n", "malformed"),  # a MAC, nothing after it
        (b"0" * 64 + b" {}\n", "unauthenticated"),
        (sealed().replace(b'"id":7', b'"id":8'), "unauthenticated"),  # body changed
        (sealed().replace(b"Ireland", b"Irelanx"), "unauthenticated"),  # sender changed
        (resealed(lambda d: "not an object"), "malformed"),
        (resealed(lambda d: {**d, "extra": 1}), "malformed"),
        (resealed(lambda d: {k: v for k, v in d.items() if k != "nonce"}), "malformed"),
        (resealed(lambda d: {**d, "sent_unix_s": "now"}), "malformed"),
        (resealed(lambda d: {**d, "sent_unix_s": True}), "malformed"),
        (resealed(lambda d: {**d, "body": [1, 2]}), "malformed"),
        (sealed(sent_s=NOW_S - WINDOW_S - 1), "expired"),
        (sealed(sent_s=NOW_S + WINDOW_S + 1), "expired"),
        (sealed(dst="Frankfurt"), "misaddressed"),
    ],
    ids=lambda value: value if isinstance(value, str) else "line",  # a nonce in each line
)
def test_bad_lines_are_rejected_with_their_reason(line, reason):
    with pytest.raises(Rejected) as caught:
        opener().open(line)
    assert caught.value.reason == reason
    assert reason in REJECT_REASONS


def test_a_replayed_message_is_rejected_and_a_fresh_one_from_the_same_peer_is_not():
    o = opener()
    line = sealed()
    o.open(line)
    with pytest.raises(Rejected) as caught:
        o.open(line)
    assert caught.value.reason == "replayed"
    o.open(sealed())  # same body, new nonce


def test_nonces_are_forgotten_only_once_their_message_has_expired():
    clock = [NOW_S]
    o = Opener(SECRET, "London", WINDOW_S, clock=lambda: clock[0])
    line = sealed(sent_s=NOW_S + WINDOW_S)  # the sender's clock a whole window ahead
    o.open(line)
    for later_s, reason in [(WINDOW_S, "replayed"), (2 * WINDOW_S, "replayed")]:
        clock[0] = NOW_S + later_s
        with pytest.raises(Rejected) as caught:
            o.open(line)
        assert caught.value.reason == reason
    clock[0] = NOW_S + 2 * WINDOW_S + 1
    with pytest.raises(Rejected) as caught:
        o.open(line)
    assert caught.value.reason == "expired"
    assert not o._seen  # forgotten: memory holds one window of messages


def test_an_echo_is_opened_for_the_peer_it_was_sent_to():
    line = sealed(src="London", dst="Ireland")
    assert opener().open(line, dst="Ireland").src == "London"


def test_a_created_secret_is_private_kept_and_read(tmp_path):
    path = create_secret_file(tmp_path / "key")
    first = read_secret_file(path)
    assert len(first) >= 32 and os.stat(path).st_mode & 0o777 == 0o600
    create_secret_file(path)  # a second instance starting: the same secret
    assert read_secret_file(path) == first


@pytest.mark.parametrize(
    ("content", "mode", "match"),
    [
        (b"k" * 64, 0o644, "chmod 600"),
        (b"short\n", 0o600, "at least 32"),
        (None, None, "cannot read"),
    ],
)
def test_a_bad_secret_file_is_refused_naming_the_field(tmp_path, content, mode, match):
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
        path.chmod(mode)
    with pytest.raises(ConfigError, match=match) as caught:
        read_secret_file(path)
    assert caught.value.field == "exchange_secret_file"
