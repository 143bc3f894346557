"""The tests' own reader of a session's messages loses none (tests/services/readers.py)."""

from __future__ import annotations

import asyncio
import threading

import aiomqtt

from tests.services.readers import read_until


def test_a_reader_stopped_by_another_thread_hands_over_every_message(mosquitto_url):
    """2,000 QoS 1 messages published while the reader polls its stop flag every millisecond (the
    polling that, as ``wait_for(anext(...), timeout)``, dropped a message whenever the timeout and
    the message met in one turn of the loop) all reach the handler, in order."""
    host, port = mosquitto_url.removeprefix("mqtt://").split(":")
    stop, got = threading.Event(), []
    n = 2000

    async def main() -> None:
        async with aiomqtt.Client(host, int(port), identifier="reader-test") as reader, \
                aiomqtt.Client(host, int(port), identifier="writer-test") as writer:
            await reader.subscribe("readers/test", qos=1)

            def handle(message: aiomqtt.Message) -> None:
                got.append(int(message.payload))
                if len(got) == n:
                    stop.set()

            async def write() -> None:
                for i in range(n):
                    await writer.publish("readers/test", str(i).encode(), qos=1)

            writing = asyncio.create_task(write())
            await asyncio.wait_for(read_until(reader, stop, handle, poll_s=0.001), 60)
            await writing

    asyncio.run(main())
    assert got == list(range(n))
