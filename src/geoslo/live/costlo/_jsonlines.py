"""Requests and replies as JSON lines over TCP, many in flight on one connection.

Every request carries an ``id`` that its reply repeats, so replies may come back in any
order (a lock request waits while a release on the same connection is answered). A
handler's :class:`~geoslo.errors.InputError` or :class:`~geoslo.errors.TestbedError`
becomes ``{"id": ..., "error": "..."}``; the client raises it as a TestbedError. When a
client disconnects, the server cancels its requests still in progress.

With a shared secret (:class:`Sealing`) every request is sealed as the Kurma exchange seals
its messages (``geoslo.live._exchange``: HMAC-SHA256 over an envelope with the service's
name, the time and a nonce), and the server opens each one before handling it: a request
that is not authentic, fresh, new and addressed to this service gets an ``error`` reply
naming the reason (``rejected: unauthenticated``...) and its connection is closed.
Replies are not sealed: they come back on the connection the client opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from geoslo.errors import ConfigError, InputError, TestbedError
from geoslo.live._exchange import Opener, Rejected, read_secret_file, seal
from geoslo.live._processes import is_loopback

__all__ = [
    "JsonLineClient", "Sealing", "listener_sealing", "sealing_from_file", "serve_json_lines",
    "serve_until", "run_until_sigterm",
]  # fmt: skip


@dataclass(frozen=True)
class Sealing:
    """The secret a service and its clients share, and the service's name (every request
    is addressed to it, so a request for one service is refused by another)."""

    secret: bytes = field(repr=False)
    service: str


def sealing_from_file(secret_file: str | None, service: str) -> Sealing | None:
    """The sealing of ``service`` with the secret in ``secret_file`` (None: plain)."""
    if secret_file is None:
        return None
    return Sealing(read_secret_file(Path(secret_file), "secret_file"), service)


def listener_sealing(
    host: str, secret_file: str | None, service: str, exposure: str
) -> Sealing | None:
    """The sealing a service listening on ``host`` takes requests with; ConfigError for a
    listener beyond loopback without a secret (every listener authenticated: ``exposure``
    says what anybody reaching it could do) or an unreadable secret."""
    if secret_file is None and not is_loopback(host):
        raise ConfigError("secret_file", f"a {service} on {host} needs a secret_file: {exposure}")
    return sealing_from_file(secret_file, service)


LINE_LIMIT_BYTES = 1 << 24  # a relay's reply carries a whole value

Handler = Callable[[dict], Awaitable[dict]]


class JsonLineClient:
    """One connection; :meth:`request` sends a message and waits for its reply."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        name: str,
        sealing: Sealing | None = None,
    ):
        self._reader = reader
        self._writer = writer
        self._name = name
        self._sealing = sealing
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future] = {}
        self._reading = asyncio.get_running_loop().create_task(self._read_replies())
        self.closed = False

    @classmethod
    async def open(
        cls,
        port: int,
        name: str = "service",
        timeout_s: float = 2.0,
        host: str = "127.0.0.1",
        sealing: Sealing | None = None,
    ):
        """Connect to ``host:port`` or raise TestbedError naming ``name``. The
        deadline is ``asyncio.timeout``, not ``wait_for``: Python 3.11's ``wait_for`` can
        drop a connection that completes as it is cancelled, leaving its socket unclosed
        (a ResourceWarning once in CI, with the lock service killed mid-PUT)."""
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port, limit=LINE_LIMIT_BYTES)
        except (TimeoutError, OSError) as error:
            raise TestbedError(f"cannot connect to {name} at {host}:{port}: {error}") from None
        return cls(reader, writer, name, sealing)

    async def request(self, message: dict) -> dict:
        """Send ``message`` and wait for its reply; TestbedError if it failed."""
        if self.closed:
            raise TestbedError(f"connection to {self._name} is closed")
        self._next_id += 1
        request_id = self._next_id
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        body = dict(message, id=request_id)
        if self._sealing is None:
            self._writer.write(json.dumps(body).encode() + b"\n")
        else:
            sealing = self._sealing
            self._writer.write(seal(sealing.secret, "client", sealing.service, body))
        try:
            return await future
        finally:
            self._waiting.pop(request_id, None)

    async def _read_replies(self) -> None:
        try:
            while line := await self._reader.readline():
                reply = json.loads(line)
                if reply.get("id") is None and "error" in reply:  # the service refused us
                    self._fail_all(TestbedError(f"{self._name}: {reply['error']}"))
                    return
                future = self._waiting.pop(reply.pop("id", None), None)
                if future is None or future.done():
                    continue  # its caller gave up (cancelled): the reply is discarded
                if "error" in reply:
                    future.set_exception(TestbedError(f"{self._name}: {reply['error']}"))
                else:
                    future.set_result(reply)
        except (OSError, ValueError, asyncio.LimitOverrunError):
            pass
        finally:
            self._fail_all()

    def _fail_all(self, error: TestbedError | None = None) -> None:
        self.closed = True
        error = error or TestbedError(f"connection to {self._name} lost")
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()
        self._writer.close()

    async def close(self) -> None:
        self.closed = True
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def serve_json_lines(
    handler: Handler, port: int, host: str = "127.0.0.1", sealing: Sealing | None = None
) -> asyncio.Server:
    """Serve ``handler`` on ``host:port``; each request runs in its own task. With
    ``sealing``, only sealed requests addressed to ``sealing.service`` are handled."""
    opener = None if sealing is None else Opener(sealing.secret, sealing.service)

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        tasks: set[asyncio.Task] = set()
        try:
            while line := await reader.readline():
                if opener is not None:
                    try:
                        line = json.dumps(opener.open(line).body).encode()
                    except Rejected as rejected:
                        refusal = {"id": None, "error": f"rejected: {rejected.reason}"}
                        writer.write(json.dumps(refusal).encode() + b"\n")
                        break
                task = asyncio.create_task(_answer(handler, line, writer))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except (OSError, ValueError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # the server is shutting down: end this connection quietly
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_server(on_connection, host, port, limit=LINE_LIMIT_BYTES)


async def _answer(handler: Handler, line: bytes, writer: asyncio.StreamWriter) -> None:
    try:
        message = json.loads(line)
    except ValueError:
        return
    request_id = message.pop("id", None)
    try:
        reply = await handler(message)
    except (InputError, TestbedError, KeyError, TypeError) as error:
        reply = {"error": f"{type(error).__name__}: {error}"}
    if not writer.is_closing():
        writer.write(json.dumps(dict(reply, id=request_id)).encode() + b"\n")


async def serve_until(
    handler: Handler,
    port: int,
    stop: asyncio.Event | None,
    cleanup,
    host: str = "127.0.0.1",
    sealing: Sealing | None = None,
) -> None:
    """Serve ``handler`` on ``host:port`` until ``stop`` is set; then close the server and
    await ``cleanup()`` (the service's own resources)."""
    server = await serve_json_lines(handler, port, host, sealing)
    stop = stop or asyncio.Event()
    try:
        await stop.wait()
    finally:
        server.close()
        with contextlib.suppress(asyncio.CancelledError):
            await server.wait_closed()
        await cleanup()


def run_until_sigterm(serve) -> None:
    """Run ``serve(stop)`` as a process's main coroutine; SIGTERM sets ``stop``."""

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await serve(stop)

    asyncio.run(main())
