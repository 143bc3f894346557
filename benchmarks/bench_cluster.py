"""Distributed throughput on one Mosquitto against a 3-node broker cluster (docs/cluster.md).

    python benchmarks/bench_cluster.py [--horizon 10000000] [--fleets 1,2,4] [--brokers mosquitto,cluster]
                                       [--replicas 3]
    python benchmarks/bench_cluster.py --fleets 4 --brokers mosquitto,r3+cr1,r1   # cluster settings
    python benchmarks/bench_cluster.py --fleets 4 --repeat 2 --no-raw --pin       # the broker on a core of its own

Dist-DP-SE, K = 10, one run, every party its own process, checkpoints off. For each broker and fleet
count: a fresh broker with the project's accounts and ACLs (Mosquitto with ``write_broker_config``'s
files; the cluster with the same rules translated), then one session; prints users/s (the observer's
task time: announced to scored, about first plan to last truth), the session's wall time including
process start-up, the broker's start-up time, its resident memory after the session (summed over
nodes), the CPU seconds (user + system) each broker process used during the session (per node on the
cluster: n0/n1/n2), how busy the machine's cores were meanwhile (every process's, from /proc/stat:
near 100 %, the parties and the broker compete for the CPU), and the load average before and after
(the machine is shared: read every figure with it). On the cluster the parties are spread over the
nodes (observer, analyzer, aggregator, fleets in turn: :func:`privbandit.services.cluster.spread`).
``--replicas``: how many nodes keep a copy of each QoS 1 message and session (JetStream's stream
replicas; 3 survives a node's loss, 1 does not). A broker may also be a cluster configuration as
``bench_cluster_ceiling.py`` writes them (``r3+cr1``, ``r1+shm``: replicas and NATS settings;
``cluster`` is ``r<--replicas>``), or RabbitMQ (``rabbitmq``, ``rabbitmq3+quorum``:
``rabbitmq_node.py``) for timing only: its accounts have every permission (no ACL; the summary
records ``"acl": "insecure"``). ``--pin``: the broker's processes (every thread) on CPU 1, this
process and the parties it starts on CPU 0, the nearest this machine comes to a broker on a host of
its own (other processes still run on both).

Then the brokers' own ceiling, without the parties: QoS 1 report blocks (65,536 users' reports,
the size the sessions sent) from a ``users`` client to an ``aggregator`` client, on one Mosquitto
and across two nodes of the cluster (``bench_distributed.broker_rate``, with accounts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import tempfile
import time
from pathlib import Path

from _session import run_parties
from bench_cluster_ceiling import QUORUM, RABBIT, cluster_options, cpu_s, started_cluster
from bench_distributed import EXPERIMENT, broker_rate, report_route
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.runner import config as experiment_files
from privbandit.services import acl
from privbandit.services.acl.broker_files import check_passwords
from privbandit.services.cluster import spread
from privbandit.services.launcher import plan_parties
from privbandit.services.mosquitto_process import start_with_broker_config
from rabbitmq_node import rabbit_cluster

LABEL = "Dist-DP-SE"


def _rss_mb(pids) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as fh:
            total += next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return total / 1024


def _machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat's first line)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _cluster(directory: Path, run_id: str, kind: str, replicas: int):
    """A started 3-node cluster for broker ``kind`` (``cluster`` or a configuration string), a
    context manager."""
    return started_cluster(directory, run_id, f"r{replicas}" if kind == "cluster" else kind)


def _broker(stack: contextlib.ExitStack, kind: str, directory: Path, run_id: str, replicas: int):
    """Start broker ``kind`` (stopped when ``stack`` closes): its URLs, process ids and passwords."""
    if kind == "mosquitto":
        broker, files = start_with_broker_config(directory, run_id)
        stack.callback(broker.stop)
        return [broker.url], [broker.proc.pid], files.passwords
    if m := re.fullmatch(RABBIT, kind):  # every account, every permission: no ACL (module docstring)
        nodes = stack.enter_context(rabbit_cluster(directory, int(m[1] or 1), QUORUM if m[2] else ""))
        passwords = check_passwords({r: secrets.token_hex(16) for r in acl.Role})  # rabbitmqctl reads "-…" as an option
        for account, password in passwords.items():
            nodes[0].add_user(str(account), password)
        return [n.url for n in nodes], [n.pid() for n in nodes], passwords
    cluster = stack.enter_context(_cluster(directory, run_id, kind, replicas))
    return cluster.urls, [p.pid for p in cluster.procs.values()], cluster.files.passwords


def pin(pids, cpus: set[int]) -> None:
    """Every thread of the processes ``pids`` onto ``cpus`` (threads they start later inherit it)."""
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), cpus)


def session(kind: str, fleets: int, path: Path, tmp: Path, replicas: int = 3, pinned: bool = False) -> dict:
    family, config = experiment_files.load(path)
    run_id = "b" + secrets.token_hex(4)
    out = tmp / f"{kind}-{fleets}"
    load_before = _load()
    with contextlib.ExitStack() as stack:
        t0 = time.perf_counter()
        urls, pids, passwords = _broker(stack, kind, tmp / f"broker-{kind}-{fleets}", run_id, replicas)
        started_s = time.perf_counter() - t0
        if pinned:  # the broker on CPU 1; this process, and so the parties it starts, on CPU 0 (main)
            pin(pids, {1})
        parties = plan_parties(family, config, path, [], out, urls[0], run_id, fleets,
                               {str(a): pw for a, pw in passwords.items()},
                               observer_log=out / "observer.log", checkpoint=False,
                               broker_acl="insecure" if kind.startswith("rabbitmq") else "enforced")
        if len(urls) > 1:
            spread(parties, urls)
        t1, cpu_before, machine_before = time.perf_counter(), cpu_s(pids), _machine_cpu()
        run_parties(parties, out / "observer.log")
        wall, cpu_after, machine_after = time.perf_counter() - t1, cpu_s(pids), _machine_cpu()
        rss = _rss_mb(pids)
    summary = json.loads((out / "summary.json").read_text())
    return {"broker": kind, "fleets": fleets, "users_per_s": summary["algorithms"][LABEL]["users_per_s"],
            "block_bytes": int(summary["communication"][LABEL]["bytes_per_user_payload"] * USER_BLOCK),
            "session_s": wall, "broker_start_s": started_s, "broker_rss_mb": rss,
            "broker_cpu_s": [cpu_after[p] - cpu_before[p] for p in pids],
            "machine_busy": (machine_after[0] - machine_before[0]) / (machine_after[1] - machine_before[1]),
            "load_before": load_before, "load_after": _load()}


def raw_rate(kind: str, block: int, tmp: Path, replicas: int, count: int = 200) -> float:
    """Report blocks per second through a fresh broker of ``kind`` (module docstring)."""
    run_id = "b" + secrets.token_hex(4)
    with contextlib.ExitStack() as stack:
        urls, _, passwords = _broker(stack, kind, tmp / f"raw-{kind}", run_id, replicas)
        pw = {str(a): p for a, p in passwords.items()}
        sub_url, pub_url = (urls[0], urls[0]) if len(urls) == 1 else (urls[1], urls[2])
        return asyncio.run(broker_rate(sub_url, block, count, pub_urls=[pub_url],
                                       **report_route(run_id, pw.__getitem__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--horizon", type=int, default=10_000_000)
    parser.add_argument("--fleets", default="1,2,4", help="comma-separated fleet counts")
    parser.add_argument("--brokers", default="mosquitto,cluster",
                        help="mosquitto, cluster, NATS configurations (r3+cr1, r1+shm) or RabbitMQ "
                             "(rabbitmq3+quorum, no ACL): bench_cluster_ceiling.py's names")
    parser.add_argument("--replicas", type=int, default=3, choices=(1, 2, 3),
                        help="the cluster's JetStream copies of each QoS 1 message and session")
    parser.add_argument("--repeat", type=int, default=1,
                        help="sessions per broker and fleet count, brokers alternating")
    parser.add_argument("--pin", action="store_true",
                        help="the broker's processes on CPU 1, the parties on CPU 0: "
                             "as if the broker had a host of its own")
    parser.add_argument("--no-raw", action="store_true", help="skip the brokers' ceilings after the sessions")
    args = parser.parse_args()
    fleets = [int(x) for x in args.fleets.split(",")]
    brokers = args.brokers.split(",")
    if not all(1 <= f <= 64 for f in fleets):
        parser.error("--fleets: integers in 1..64")
    for b in brokers:
        try:
            b in ("mosquitto", "cluster") or re.fullmatch(RABBIT, b) or cluster_options(b)
        except ValueError as exc:
            parser.error(f"--brokers: {exc}")
    if args.pin:
        if os.cpu_count() < 2:
            parser.error("--pin needs 2 CPUs")
        os.sched_setaffinity(0, {0})
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(EXPERIMENT.format(horizon=args.horizon, label=LABEL, arms="", extra=""))
        print(f"Dist-DP-SE, K = 10, T = {args.horizon:,}, one run, checkpoints off; {os.cpu_count()} cores; "
              f"cluster: 3 nodes, {args.replicas} replica(s)"
              + ("; pinned: broker on CPU 1, parties on CPU 0" if args.pin else ""))
        print(f"{'broker':<14} {'fleets':>6} {'users/s':>12} {'session s':>10} {'broker start s':>15} "
              f"{'broker RSS MB':>14} {'broker CPU s':>16} {'busy':>5}  load before → after")
        for f, _, kind in ((f, i, k) for f in fleets for i in range(args.repeat) for k in brokers):
            r = session(kind, f, path, Path(tmp), args.replicas, args.pin)
            block = r["block_bytes"]
            cpu = "/".join(f"{c:.1f}" for c in r["broker_cpu_s"])
            print(f"{r['broker']:<14} {r['fleets']:>6} {r['users_per_s']:>12,.0f} {r['session_s']:>10.1f} "
                  f"{r['broker_start_s']:>15.2f} {r['broker_rss_mb']:>14.1f} {cpu:>16} {r['machine_busy']:>5.0%}  "
                  f"{r['load_before']} → {r['load_after']}",
                  flush=True)
        for kind in [] if args.no_raw else brokers:
            load = _load()
            rate = raw_rate(kind, block, Path(tmp), args.replicas)
            print(f"raw {kind:<14} {rate:>8,.0f} report blocks/s of {block:,} B = {rate * USER_BLOCK:>13,.0f} users/s "
                  f"ceiling  load {load} → {_load()}", flush=True)


if __name__ == "__main__":
    main()
