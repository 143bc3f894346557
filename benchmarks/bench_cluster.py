"""Distributed throughput on one Mosquitto against a 3-node NATS cluster (docs/cluster.md).

    python benchmarks/bench_cluster.py [--horizon 10000000] [--fleets 1,2,4] [--brokers mosquitto,cluster]
                                       [--replicas 3]

Dist-DP-SE, K = 10, one run, every party its own process, checkpoints off. For each broker and
fleet count: a fresh broker with the project's accounts and ACLs (Mosquitto with
``write_broker_config``'s files; the cluster with the same rules translated), then one session;
prints users/s (the observer's, first plan to last truth), the session's wall time including
process start-up, the broker's start-up time and its resident memory after the session (summed over
nodes), and the load average before and after (the machine is shared: read every figure with it).
On the cluster the parties are spread over the nodes (observer, analyzer, aggregator, fleets in
turn: :func:`privbandit.services.cluster.spread`). ``--replicas``: how many nodes keep a copy of
each QoS 1 message and session (JetStream's stream replicas; 3 survives a node's loss, 1 does not).

Then the brokers' own ceiling, without the parties: QoS 1 report blocks (65,536 users' reports,
the size the sessions sent) from a ``users`` client to an ``aggregator`` client, on one Mosquitto
and across two nodes of the cluster (``bench_distributed.broker_rate``, with accounts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import tempfile
import time
from pathlib import Path

from _session import run_parties
from bench_distributed import EXPERIMENT, broker_rate
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.runner import config as experiment_files
from privbandit.services import acl
from privbandit.services.cluster import NatsCluster, spread
from privbandit.services.launcher import plan_parties
from privbandit.services.mosquitto_process import start_with_broker_config

LABEL = "Dist-DP-SE"


def _rss_mb(pids) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as fh:
            total += next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return total / 1024


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def session(kind: str, fleets: int, path: Path, tmp: Path, replicas: int = 3) -> dict:
    family, config = experiment_files.load(path)
    run_id = "b" + secrets.token_hex(4)
    out = tmp / f"{kind}-{fleets}"
    load_before = _load()
    t0 = time.perf_counter()
    if kind == "mosquitto":
        broker, files = start_with_broker_config(tmp / f"broker-{kind}-{fleets}", run_id)
        urls, pids, stop = [broker.url], lambda: [broker.proc.pid], broker.stop
        passwords = {str(a): pw for a, pw in files.passwords.items()}
    else:
        cluster = NatsCluster(tmp / f"broker-{kind}-{fleets}", run_id, 3, stream_replicas=replicas).start()
        urls, pids, stop = cluster.urls, lambda: [p.pid for p in cluster.procs.values()], cluster.stop
        passwords = {str(a): pw for a, pw in cluster.files.passwords.items()}
    started_s = time.perf_counter() - t0
    try:
        parties = plan_parties(family, config, path, [], out, urls[0], run_id, fleets, passwords,
                               observer_log=out / "observer.log", checkpoint=False, broker_acl="enforced")
        if len(urls) > 1:
            spread(parties, urls)
        t1 = time.perf_counter()
        run_parties(parties, out / "observer.log")
        wall = time.perf_counter() - t1
        rss = _rss_mb(pids())
    finally:
        stop()
    summary = json.loads((out / "summary.json").read_text())
    return {"broker": kind, "fleets": fleets, "users_per_s": summary["algorithms"][LABEL]["users_per_s"],
            "block_bytes": int(summary["communication"][LABEL]["bytes_per_user_payload"] * USER_BLOCK),
            "session_s": wall, "broker_start_s": started_s, "broker_rss_mb": rss,
            "load_before": load_before, "load_after": _load()}


def raw_rate(kind: str, block: int, tmp: Path, replicas: int, count: int = 200) -> float:
    """Report blocks per second through a fresh broker of ``kind`` (module docstring)."""
    run_id = "b" + secrets.token_hex(4)
    if kind == "mosquitto":
        broker, files = start_with_broker_config(tmp / f"raw-{kind}", run_id)
        urls, stop, pw = [broker.url, broker.url], broker.stop, files.password
    else:
        cluster = NatsCluster(tmp / f"raw-{kind}", run_id, 3, stream_replicas=replicas).start()
        urls, stop, pw = cluster.urls[1:], cluster.stop, cluster.files.password
    try:
        return asyncio.run(broker_rate(urls[0], block, count, pub_url=urls[1], topic=acl.report_topic(run_id, "aggregator"),
                                       sub_auth={"username": "aggregator", "password": pw("aggregator")},
                                       pub_auth={"username": "users", "password": pw("users")}))
    finally:
        stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--horizon", type=int, default=10_000_000)
    parser.add_argument("--fleets", default="1,2,4", help="comma-separated fleet counts")
    parser.add_argument("--brokers", default="mosquitto,cluster", help="mosquitto and/or cluster")
    parser.add_argument("--replicas", type=int, default=3, choices=(1, 2, 3),
                        help="the cluster's JetStream copies of each QoS 1 message and session")
    args = parser.parse_args()
    fleets = [int(x) for x in args.fleets.split(",")]
    brokers = args.brokers.split(",")
    if not all(b in ("mosquitto", "cluster") for b in brokers) or not all(1 <= f <= 64 for f in fleets):
        parser.error("--brokers: mosquitto and/or cluster; --fleets: integers in 1..64")
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(EXPERIMENT.format(horizon=args.horizon, label=LABEL, arms="", extra=""))
        print(f"Dist-DP-SE, K = 10, T = {args.horizon:,}, one run, checkpoints off; {os.cpu_count()} cores; "
              f"cluster: 3 nodes, {args.replicas} replica(s)")
        print(f"{'broker':<10} {'fleets':>6} {'users/s':>12} {'session s':>10} {'broker start s':>15} "
              f"{'broker RSS MB':>14}  load before → after")
        for f in fleets:
            for kind in brokers:
                r = session(kind, f, path, Path(tmp), args.replicas)
                block = r["block_bytes"]
                print(f"{r['broker']:<10} {r['fleets']:>6} {r['users_per_s']:>12,.0f} {r['session_s']:>10.1f} "
                      f"{r['broker_start_s']:>15.2f} {r['broker_rss_mb']:>14.1f}  {r['load_before']} → {r['load_after']}",
                      flush=True)
        for kind in brokers:
            load = _load()
            rate = raw_rate(kind, block, Path(tmp), args.replicas)
            print(f"raw {kind:<10} {rate:>8,.0f} report blocks/s of {block:,} B = {rate * USER_BLOCK:>13,.0f} users/s "
                  f"ceiling  load {load} → {_load()}", flush=True)


if __name__ == "__main__":
    main()
