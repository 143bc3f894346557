"""Messages/s through the embedded amqtt broker: 1 KB payloads, QoS 1, ACLs on.

One publisher (the ``users`` role) sends N messages to ``pb/<run>/report/aggregator``; one
subscriber (the ``aggregator`` role) receives them. The figure is N divided by the time from the
first publish to the last message received. Publishes are pipelined (up to ``--window`` awaiting
their PUBACK at once), as a user fleet would send them. ``--broker mosquitto`` runs the same
measurement against a Mosquitto started from the generated config, for comparison.

    .venv/bin/python benchmarks/bench_embedded_broker.py [-n 5000] [--size 1024] [--broker amqtt|mosquitto|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import aiomqtt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privbandit.services import acl  # noqa: E402
from privbandit.services.acl import Role  # noqa: E402
from privbandit.services.embedded_broker import start_embedded_broker  # noqa: E402
from privbandit.services.mosquitto_process import start_with_broker_config  # noqa: E402

RUN = "bench"


async def measure(port: int, passwords: dict, n: int, size: int, window: int) -> tuple[float, float]:
    topic = acl.report_topic(RUN, Role.AGGREGATOR)
    payload = b"x" * size
    async with (
        aiomqtt.Client("127.0.0.1", port, username="aggregator", password=passwords[Role.AGGREGATOR],
                       identifier="bench-sub", max_queued_incoming_messages=0) as sub,
        aiomqtt.Client("127.0.0.1", port, username="users", password=passwords[Role.USERS],
                       identifier="bench-pub", max_inflight_messages=window) as pub,
    ):
        pub.pending_calls_threshold = window + 1  # pipelining is the point: no warning per publish
        await sub.subscribe(topic, qos=1)
        # one round trip first: connection + publish/subscribe work, and its latency
        t0 = time.perf_counter()
        await pub.publish(topic, b"ping", qos=1)
        async for _ in sub.messages:
            break
        rtt = time.perf_counter() - t0

        received = 0
        done = asyncio.Event()

        async def consume():
            nonlocal received
            async for _ in sub.messages:
                received += 1
                if received == n:
                    done.set()
                    return

        consumer = asyncio.create_task(consume())
        sem = asyncio.Semaphore(window)

        async def send():
            async with sem:
                await pub.publish(topic, payload, qos=1)

        start = time.perf_counter()
        await asyncio.gather(*(send() for _ in range(n)))
        await asyncio.wait_for(done.wait(), timeout=300)
        elapsed = time.perf_counter() - start
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    return n / elapsed, rtt


@contextlib.contextmanager
def mosquitto_broker():
    with tempfile.TemporaryDirectory() as tmp:
        mosquitto, files = start_with_broker_config(Path(tmp), RUN)
        with mosquitto:
            yield mosquitto.port, files.passwords


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="messages (default 5000)")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes (default 1024)")
    parser.add_argument("--window", type=int, default=100, help="publishes in flight (default 100)")
    parser.add_argument("--broker", choices=["amqtt", "mosquitto", "both"], default="amqtt")
    args = parser.parse_args()

    brokers = ["amqtt", "mosquitto"] if args.broker == "both" else [args.broker]
    for name in brokers:
        if name == "amqtt":
            t0 = time.perf_counter()
            cm = start_embedded_broker(RUN)
            broker = cm.__enter__()
            print(f"embedded amqtt broker up at {broker.url} in {time.perf_counter() - t0:.2f} s")
            port, passwords, stop = broker.port, broker.passwords, cm.__exit__
        else:
            cm = mosquitto_broker()
            port, passwords = cm.__enter__()
            stop = cm.__exit__
        try:
            rate, rtt = asyncio.run(measure(port, passwords, args.n, args.size, args.window))
        finally:
            stop(None, None, None)
        print(f"{name:9s}: round trip {rtt * 1e3:.1f} ms; {args.n} x {args.size} B at QoS 1: "
              f"{rate:,.0f} messages/s ({rate * args.size / 1e6:.2f} MB/s)")


if __name__ == "__main__":
    main()
