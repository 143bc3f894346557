"""One message's trip through a broker, as a sequential algorithm's plan → report → release chain
pays it at every hop.

Three clients built like the parties' (``BusSettings.client``), with the run's accounts: the users
publish a 200-byte report at QoS 1, the aggregator receives it and publishes it as a release at
QoS 1, the analyzer receives that. The figure is the time from the users' publish to the
analyzer's receipt (two hops), median and 90th percentile of N, one message in flight at a time.
Each broker is measured with the sockets as the parties build them (``TCP_NODELAY``) and with
Nagle's algorithm left on (paho's default, what every party had before), to show what it buys:

- ``embedded``: the embedded amqtt broker (asyncio sets ``TCP_NODELAY`` on the broker's side);
- ``mosquitto``: a Mosquitto from the generated config (``set_tcp_nodelay true``);
- ``--url URL``: any other broker, anonymous, e.g. the system Mosquitto at mqtt://127.0.0.1:1883,
  whose default config leaves Nagle on at the broker's end too.

    .venv/bin/python benchmarks/bench_latency.py [-n 200] [--url mqtt://127.0.0.1:1883]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privbandit.services import acl  # noqa: E402
from privbandit.services.acl import Role  # noqa: E402
from privbandit.services.bus import BusSettings  # noqa: E402
from privbandit.services.embedded_broker import start_embedded_broker  # noqa: E402
from privbandit.services.mosquitto_process import start_with_broker_config  # noqa: E402

RUN = "latency"


async def trips(settings: dict[Role, BusSettings], n: int, nagle: bool) -> np.ndarray:
    """``n`` sequential trips users → aggregator → analyzer, in seconds."""
    extra = {"socket_options": ()} if nagle else {}
    report, release = acl.report_topic(RUN, Role.AGGREGATOR), acl.release_topic(RUN, Role.AGGREGATOR)
    users, box, analyzer = (settings[r].client(f"latency-{r.value}", True, **extra)
                            for r in (Role.USERS, Role.AGGREGATOR, Role.ANALYZER))
    async with users, box, analyzer:
        await box.subscribe(report, qos=1)
        await analyzer.subscribe(release, qos=1)

        async def relay():
            relayed = 0
            async for m in box.messages:
                await box.publish(release, m.payload, qos=1)
                relayed += 1
                if relayed == n + 5:  # ends by itself: a client cancelled mid-iteration hangs aiomqtt's exit
                    return

        relaying = asyncio.create_task(relay())
        arrivals = analyzer.messages.__aiter__()
        out = np.empty(n + 5)
        for i in range(n + 5):  # the first five warm the path up and are dropped
            start = time.perf_counter()
            await users.publish(report, b"x" * 200, qos=1)
            await arrivals.__anext__()
            out[i] = time.perf_counter() - start
        await relaying
    return out[5:]


def measure(name: str, settings: dict[Role, BusSettings], n: int) -> None:
    for nagle in (False, True):
        t = asyncio.run(trips(settings, n, nagle)) * 1e3
        how = "Nagle on (paho's default)" if nagle else "TCP_NODELAY (the parties)"
        print(f"{name:<30} {how:<27} median {np.median(t):7.2f} ms   p90 {np.percentile(t, 90):7.2f} ms", flush=True)


def accounts(url: str, password) -> dict[Role, BusSettings]:
    return {r: BusSettings(broker_url=url, username=r.value, password=password(r), run_id=RUN)
            for r in (Role.USERS, Role.AGGREGATOR, Role.ANALYZER)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="trips per measurement (default 200)")
    parser.add_argument("--url", help="also measure this anonymous broker, e.g. mqtt://127.0.0.1:1883")
    args = parser.parse_args()
    if args.n < 1:
        parser.error(f"-n {args.n}: must be at least 1")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; 200-byte messages, QoS 1, two hops")
    broker = start_embedded_broker(RUN)
    try:
        measure("embedded amqtt", accounts(f"mqtt://127.0.0.1:{broker.port}", broker.password), args.n)
    finally:
        broker.stop()
    with tempfile.TemporaryDirectory() as tmp:
        mosquitto, files = start_with_broker_config(Path(tmp), RUN)
        try:
            measure("mosquitto, generated config", accounts(mosquitto.url, files.password), args.n)
        finally:
            mosquitto.stop()
    if args.url:
        measure(args.url, {r: BusSettings(broker_url=args.url, run_id=RUN) for r in Role}, args.n)


if __name__ == "__main__":
    main()
