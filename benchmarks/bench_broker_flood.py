"""What a flood toward a client that stopped reading costs the embedded broker (issue #20 item 10).

A subscriber connects, subscribes to every topic of the run at QoS 1 and never reads again; a
flooder publishes N messages of SIZE bytes; another client then publishes one plan and times its
delivery to a third, reading client. Printed per per-subscriber cap (``--caps``, bytes): the
broker's resident memory before and after, and that latency. The default embedded broker holds at
most 256 MiB (and 100,000 messages) per subscriber; a cap far above the flood shows the broker
holding all of it.

    .venv/bin/python benchmarks/bench_broker_flood.py [-n 10000] [--size 2048] [--caps 1048576 10737418240]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from pathlib import Path

import aiomqtt
import paho.mqtt.client as paho

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privbandit.services.embedded_broker import start_embedded_broker  # noqa: E402

RUN = "flood"


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def flood_stopped_reader(broker, run: str, n: int, size: int, deliver_timeout_s: float,
                         overall_timeout_s: float = 300) -> tuple[float, float, float]:
    """On a running embedded ``broker`` (open mode): a client subscribes to every topic of ``run``
    and stops reading; a flooder sends ``n`` reports of ``size`` bytes; then one plan is timed to
    another, reading client (at most ``deliver_timeout_s``). Returns the broker's resident MB before
    and after, and that latency in seconds (tests/services/test_acl.py asserts the bound with it)."""
    stopped = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="stopped-reader")
    stopped.connect("127.0.0.1", broker.port)
    stopped.subscribe(f"pb/{run}/#", qos=1)
    for _ in range(20):  # its SUBACK; it never reads again
        stopped.loop(0.05)
    before = rss_mb(broker.process.pid)

    async def go() -> float:
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="flooder") as f, \
                   aiomqtt.Client("127.0.0.1", broker.port, identifier="reader") as r:
            await r.subscribe(f"pb/{run}/plan", qos=1)
            for _ in range(n):
                await f.publish(f"pb/{run}/report/aggregator", b"x" * size, qos=0)
            await asyncio.sleep(2)
            sent = time.monotonic()
            await f.publish(f"pb/{run}/plan", b"plan", qos=1)
            async with asyncio.timeout(deliver_timeout_s):
                async for _ in r.messages:
                    return time.monotonic() - sent
        raise RuntimeError("the reader's subscription ended before the plan came")

    latency = asyncio.run(asyncio.wait_for(go(), overall_timeout_s))
    after = rss_mb(broker.process.pid)
    stopped.socket().close()
    return before, after, latency


def measure(n: int, size: int, cap: int) -> tuple[float, float, float]:
    with start_embedded_broker(RUN, open_mode=True, max_queued_bytes=cap) as broker:
        return flood_stopped_reader(broker, RUN, n, size, deliver_timeout_s=300)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10_000, help="flood messages")
    ap.add_argument("--size", type=int, default=2048, help="bytes per flood message")
    ap.add_argument("--caps", type=int, nargs="+", default=[2**20, 10 * 2**30], help="per-subscriber byte caps")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, python {platform.python_version()}; flood {args.n} × {args.size} B "
          f"= {args.n * args.size / 2**20:.1f} MiB toward a client that stopped reading")
    for cap in args.caps:
        before, after, latency = measure(args.n, args.size, cap)
        print(f"cap {cap:>14,} B: broker {before:6.1f} → {after:6.1f} MB resident (+{after - before:.1f}), "
              f"another client's plan delivered in {latency * 1000:.1f} ms")


if __name__ == "__main__":
    main()
