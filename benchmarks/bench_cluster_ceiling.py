"""The brokers' own ceiling for report blocks, by configuration and by number of publishers
(docs/cluster.md, "What it costs"): which NATS setting costs, whether the cluster's ceiling grows
with concurrent publishers, where the nodes spend their CPU, and how RabbitMQ compares.

    python benchmarks/bench_cluster_ceiling.py [--configs mosquitto,r3,r3+shm,...] [--publishers 1,2,4]
                                               [--blocks 240] [--block-bytes 915735] [--repeat 1]
                                               [--clean] [--perf]

A config is ``mosquitto``; a 3-node NATS cluster written as ``+``-joined tokens: ``r1``/``r2``/``r3``
(JetStream stream replicas, default r3), ``shm`` (JetStream stores on tmpfs, /dev/shm, instead of
the disk), ``memcons`` (``consumer_memory_storage: true``: the MQTT subscriptions' consumer state in
memory), ``cr1`` (``consumer_replicas: 1``), ``mapN`` (``max_ack_pending: N``); or ``rabbitmq``
(one RabbitMQ 3.10 node with its MQTT plugin), ``rabbitmqN`` (N joined nodes), ``+quorum`` (the QoS
1 subscriptions' durable queues are quorum queues, a member on every node, instead of classic
queues on one node): ``rabbitmq_node.py``, accounts with every permission, no ACL. Mosquitto and NATS
get the project's accounts and ACLs.

Each row is a fresh broker: QoS 1 messages of ``--block-bytes`` (one report block of 65,536 users
at T = 10^7) from ``users`` clients to one ``aggregator`` client, ``--blocks`` in all shared among
the publishers, every client with a persistent session as the parties' bus connects (``--clean``:
clean sessions, as ``bench_cluster.py``'s ceiling); every publisher awaits each PUBACK before its
next message, as a fleet's bus does. The subscriber is on the last node and the publishers on the
nodes in turn (NATS: n0, n1, n2, n0, …, where ``spread`` puts the aggregator and 4 fleets). Configs
alternate within each publisher count (the machine is shared).

Prints blocks/s, MB/s, users/s, and the CPU each broker process used over the row (utime + stime
from /proc, connect and subscribe included) as a share of the row's wall time (100 % = one core),
with this process's own (the clients') share and the load average; and the brokers' CPU per block
(all processes, ms): on a shared machine the rate moves with the neighbours' load, the CPU a
message costs much less. ``--perf``: ``perf record`` the NATS nodes during each cluster row and
print the functions they spend in (``goprofile.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench_distributed import broker_rate, report_route
from goprofile import top_functions
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.services.cluster import NatsCluster, nats_binary
from privbandit.services.mosquitto_process import start_with_broker_config
from rabbitmq_node import rabbit_cluster

BLOCK_BYTES = 915_735  # one report block as the T = 10^7 sessions sent it (bench_cluster.py prints it)
TMPFS = Path("/dev/shm")
RABBIT = r"rabbitmq([1-3]?)(\+quorum)?"
QUORUM = "mqtt.durable_queue_type = quorum\n"  # persistent sessions' queues replicated on every node


def cluster_options(config: str) -> dict:
    """NatsCluster keyword arguments for a config string (module docstring); ValueError if unknown."""
    out: dict = {"stream_replicas": 3, "mqtt_options": {}}
    for token in config.split("+"):
        if m := re.fullmatch(r"r([123])", token):
            out["stream_replicas"] = int(m[1])
        elif token == "shm":
            out["store"] = TMPFS / f"pb-bench-{secrets.token_hex(4)}"
        elif token == "memcons":
            out["mqtt_options"]["consumer_memory_storage"] = True
        elif token == "cr1":
            out["mqtt_options"]["consumer_replicas"] = 1
        elif m := re.fullmatch(r"map(\d+)", token):
            out["mqtt_options"]["max_ack_pending"] = int(m[1])
        else:
            raise ValueError(f"config {config!r}: unknown token {token!r}")
    return out


@contextlib.contextmanager
def started_cluster(directory: Path, run_id: str, config: str):
    """A started 3-node :class:`NatsCluster` for ``config``, stopped on exit (its tmpfs store, if
    ``shm``, removed: /dev/shm is memory)."""
    options = cluster_options(config)
    cluster = NatsCluster(directory, run_id, 3, **options)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        if "store" in options:
            shutil.rmtree(options["store"], ignore_errors=True)


def cpu_s(pids) -> dict[int, float]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def ceiling(config: str, publishers: int, blocks: int, block_bytes: int, tmp: Path, persistent: bool = True,
            perf: bool = False) -> dict:
    run_id = "b" + secrets.token_hex(4)
    with contextlib.ExitStack() as stack:
        if config == "mosquitto":
            broker, files = start_with_broker_config(tmp / f"{run_id}-mosquitto", run_id)
            stack.callback(broker.stop)
            sub_url, pub_urls, pids, pw = broker.url, [broker.url] * publishers, [broker.proc.pid], files.password
        elif m := re.fullmatch(RABBIT, config):
            nodes = stack.enter_context(rabbit_cluster(tmp / f"{run_id}-rabbitmq", int(m[1] or 1),
                                                       QUORUM if m[2] else ""))
            secret = {a: secrets.token_hex(8) for a in ("users", "aggregator")}
            for account, password in secret.items():
                nodes[0].add_user(account, password)
            urls = [n.url for n in nodes]
            sub_url, pub_urls = urls[-1], [urls[i % len(urls)] for i in range(publishers)]
            pids, pw = [n.pid() for n in nodes], secret.__getitem__
        else:
            cluster = stack.enter_context(started_cluster(tmp / f"{run_id}-cluster", run_id, config))
            urls = cluster.urls
            sub_url, pub_urls = urls[2], [urls[i % 3] for i in range(publishers)]
            pids, pw = [p.pid for p in cluster.procs.values()], cluster.files.password
        load = os.getloadavg()[0]
        recorder = None
        if perf and config not in ("mosquitto",) and not config.startswith("rabbitmq"):
            recorder = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-o", str(tmp / "perf.data"),
                                         "-p", ",".join(map(str, pids))],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)  # perf attaches
        before, own_before, t0 = cpu_s(pids), os.times(), time.perf_counter()
        rate = asyncio.run(broker_rate(sub_url, block_bytes, blocks, pub_urls=pub_urls,
                                       **report_route(run_id, pw), persistent=persistent))
        wall, after, own_after = time.perf_counter() - t0, cpu_s(pids), os.times()
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            # perf record -p ends on SIGINT, writing its file; it may report the signal as its status
            if recorder.wait(60) not in (0, -signal.SIGINT) or not (tmp / "perf.data").stat().st_size:
                raise RuntimeError(f"perf record exited with {recorder.returncode}")
    own = (own_after.user + own_after.system - own_before.user - own_before.system) / wall
    return {"rate": rate, "broker_cpu": [(after[p] - before[p]) / wall for p in pids], "client_cpu": own,
            "load": (load, os.getloadavg()[0]), "profile": tmp / "perf.data" if recorder else None}


def print_profile(perf_data: Path) -> None:
    total, own, inside = top_functions(perf_data, nats_binary())
    print(f"  perf, all nodes: {total} samples at 499 Hz; self time:")
    for name, share in own[:12]:
        print(f"    {share:6.1%}  {name}")
    print("  inclusive (the function and what it calls):")
    for name, share in inside[:30]:
        print(f"    {share:6.1%}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="mosquitto,r3,r3+shm,r3+shm+memcons,r1+shm+memcons")
    parser.add_argument("--publishers", default="1,2,4", help="comma-separated publisher counts")
    parser.add_argument("--blocks", type=int, default=240, help="messages per row, shared among the publishers")
    parser.add_argument("--block-bytes", type=int, default=BLOCK_BYTES)
    parser.add_argument("--perf", action="store_true",
                        help="profile the NATS nodes with perf during each cluster row (goprofile.py) "
                             "and print where they spend")
    parser.add_argument("--clean", action="store_true", help="clean sessions instead of persistent ones")
    parser.add_argument("--repeat", type=int, default=1, help="rows per config and publisher count, alternating")
    args = parser.parse_args()
    configs = args.configs.split(",")
    publishers = [int(x) for x in args.publishers.split(",")]
    for c in configs:
        if c != "mosquitto" and not re.fullmatch(RABBIT, c):
            try:
                cluster_options(c)
            except ValueError as exc:
                parser.error(str(exc))
    print(f"QoS 1 blocks of {args.block_bytes:,} B, {args.blocks} per row, {'clean' if args.clean else 'persistent'} "
          f"sessions; {os.cpu_count()} cores; "
          f"broker CPU in % of one core per process (cluster: n0/n1/n2, subscriber on n2)")
    print(f"{'config':<22} {'pubs':>4} {'blocks/s':>9} {'MB/s':>7} {'users/s':>12}  {'broker CPU %':<18} "
          f"{'client CPU %':>12} {'CPU ms/block':>12}  load before → after")
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as tmp:
        for p in publishers:
            for _ in range(args.repeat):
                for c in configs:
                    r = ceiling(c, p, args.blocks, args.block_bytes, Path(tmp), not args.clean, args.perf)
                    cpu = "/".join(f"{x * 100:.0f}" for x in r["broker_cpu"])
                    print(f"{c:<22} {p:>4} {r['rate']:>9.1f} {r['rate'] * args.block_bytes / 1e6:>7.1f} "
                          f"{r['rate'] * USER_BLOCK:>12,.0f}  {cpu:<18} {r['client_cpu'] * 100:>12.0f} "
                          f"{sum(r['broker_cpu']) / r['rate'] * 1e3:>12.1f}  "
                          f"{r['load'][0]:.2f} → {r['load'][1]:.2f}", flush=True)
                    if r["profile"] is not None:
                        print_profile(r["profile"])


if __name__ == "__main__":
    main()
