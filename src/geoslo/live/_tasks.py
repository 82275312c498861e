"""asyncio tasks a live component owns: cancelled together, and waited for."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: list[asyncio.Task]) -> None:
    """Cancel every task, wait until each has ended (whatever it raised), empty the list."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    tasks.clear()
