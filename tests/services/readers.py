"""Reading a session's messages from a test's own thread without losing any.

``asyncio.wait_for(anext(client.messages), timeout)`` in a polling loop loses messages: aiomqtt's
``__anext__`` takes the next message in a task of its own, and when the timeout and the message come
in the same turn of the event loop, the cancel arrives after the task has taken the message, which
is then dropped (a restart test's watcher missed a release and a "ready" that way, CI 2026-11-29).
:func:`read_until` instead reads in one task and cancels it only when the test says stop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import aiomqtt


async def read_until(client: aiomqtt.Client, stop: threading.Event,
                     handle: Callable[[aiomqtt.Message], Awaitable[None] | None], poll_s: float = 0.05) -> None:
    """Hand every message ``client`` receives to ``handle`` (a function or coroutine function) until
    ``stop`` is set; a failure of ``handle`` or of the connection is raised here."""

    async def read() -> None:
        async for message in client.messages:
            result = handle(message)
            if asyncio.iscoroutine(result):
                await result

    reader = asyncio.create_task(read())
    try:
        while not stop.is_set() and not reader.done():
            await asyncio.sleep(poll_s)
        if reader.done():
            reader.result()  # it ended on its own: a failure, raised
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
