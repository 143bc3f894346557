"""Secure aggregation on a starved machine (issue #32 item 7): Dist-DP-SE over real SecAgg and secure
Anytime-Lazy-UCB over MQTT while busy loops (``python3 -c 'while True: pass'``, two per core by
default) run beside every party; each session's results against the ideal in-process run's.

    python benchmarks/bench_secagg_starved.py [--loops 4] [--only dpse,lazy] [--broker URL]
        [--dpse-horizon 20000] [--lazy-horizon 12000] [--step-deadline 30]

It prints, per session: wall seconds, the load average before and after, whether it finished,
whether curves.csv, rounds.csv (without the graph's k and t, which only secure rounds carry) and
the ledger equal the ideal run's, the secure rounds released and aborted, how many steps waited
past their deadline for a fleet still sending chunks ("extended") and the longest such wait, the
largest round, and the refusals. The busy loops are this script's children, killed at the end.

Without ``--broker`` each session runs on a private Mosquitto on a free port (anonymous: the
session runs with ``insecure_broker``, since the benchmark is about deadlines, not ACLs).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from privbandit.runner import config as experiment_files, run_file
from privbandit.services.launcher import launch
from privbandit.services.mosquitto_process import start_on_free_port, write_open_conf

DPSE = """
name = "starved-dpse"
horizon = {horizon}
seed = 17
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
arms = 10
[algorithms.Dist-DP-SE]
intermediary = "secagg"
"""
LAZY = """
family = "private-online-learning"
name = "starved-lazy"
horizon = {horizon}
seed = 7
epsilon = 1.0
runs = 1
[environment]
setting = 2
[algorithms."anytime-lazy-ucb@secagg"]
algorithm = "anytime-lazy-ucb"
trust = "distributed"
intermediary = "secagg"
"""
SESSIONS = {"dpse": (DPSE, "Dist-DP-SE"), "lazy": (LAZY, "anytime-lazy-ucb@secagg")}
COST = re.compile(r"secagg cost: aggregator round \d+ (\w+): users (\d+)(?:.*extended_s ([\d.]+))?")


def rounds_rows(path: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("secagg_k", "secagg_t")} for row in csv.DictReader(open(path))]


def session(name: str, horizon: int, work: Path, broker: str, step_s: float) -> dict:
    text, label = SESSIONS[name]
    path = work / f"{name}.toml"
    path.write_text(text.format(horizon=horizon))
    run_file(path, [f"algorithms.{label}.intermediary=auto"], out=work / f"{name}-ideal")
    family, config = experiment_files.load(path)
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    code = launch(family, config, path, [], work / f"{name}-mqtt", broker_url=broker, shards=2, timeout_s=3600,
                  insecure_broker=True, secagg_step_s=step_s)
    wall = time.perf_counter() - start
    out, ideal = work / f"{name}-mqtt", work / f"{name}-ideal"
    log = (out / "logs" / "aggregator.log").read_text() if (out / "logs" / "aggregator.log").exists() else ""
    costs = COST.findall(log)
    row = {"session": name, "horizon": horizon, "exit": code, "wall_s": round(wall, 1),
           "load_before": round(load0, 1), "load_after": round(os.getloadavg()[0], 1),
           "released": sum(o == "released" for o, _, _ in costs), "aborted": sum(o == "aborted" for o, _, _ in costs),
           "largest_round": max((int(n) for _, n, _ in costs), default=0),
           "extended_steps": log.count("past its"),
           "longest_wait_past_deadline_s": max((float(x) for _, _, x in costs if x), default=0.0)}
    if code == 0:
        a, b = json.loads((out / "summary.json").read_text()), json.loads((ideal / "summary.json").read_text())
        row["identical"] = ((out / "curves.csv").read_bytes() == (ideal / "curves.csv").read_bytes()
                            and rounds_rows(out / "rounds.csv") == rounds_rows(ideal / "rounds.csv")
                            and a["privacy"] == b["privacy"])
        row["rejected"] = a["rejected"]
    else:
        row["failure"] = next((line for line in log.splitlines() if "aborted" in line), "")[-200:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=2 * (os.cpu_count() or 1))
    ap.add_argument("--only", default="dpse,lazy")
    ap.add_argument("--broker", default=None)
    ap.add_argument("--dpse-horizon", type=int, default=20_000)
    ap.add_argument("--lazy-horizon", type=int, default=12_000)
    ap.add_argument("--step-deadline", type=float, default=30.0)
    args = ap.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores, {args.loops} busy loops, step deadline "
          f"{args.step_deadline:g} s, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.loops)]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-starved-") as tmp:
            work = Path(tmp)
            broker = None if args.broker else start_on_free_port(lambda port: write_open_conf(work, port))
            try:
                for name in args.only.split(","):
                    horizon = args.dpse_horizon if name == "dpse" else args.lazy_horizon
                    print(json.dumps(session(name, horizon, work, args.broker or broker.url, args.step_deadline)),
                          flush=True)
            finally:
                if broker is not None:
                    broker.stop()
    finally:
        for p in loops:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
