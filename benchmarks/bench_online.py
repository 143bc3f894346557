"""Throughput of the private-online-learning family (Hu, Huang & Mehta), in-process.

    python benchmarks/bench_online.py              # T = 2·2^21, K = 5 (setting 1)
    python benchmarks/bench_online.py --horizon 1048576 --only hybrid
    python benchmarks/bench_online.py --only suite     # one run of each suite label, per setting and ε

Prints seconds per run (best of two) for Anytime-Lazy-UCB, DP-SE and FTNL, central and distributed,
through the spine's engine as ``privbandit run`` calls it; and for Hybrid-UCB (central) at
ε ∈ {0.1, 1, 128}: the look-ahead analyzer (streaks of the leader as numpy windows) at full T, with
its window statistics, and the one-user-per-plan analyzer (what it does over MQTT) in µs per user on
a shorter horizon, scaled to T. ``--only suite`` times one run of each label of
``experiments/pol_setting{1,2,3}.toml`` at ε ∈ {0.1, 8, 128}.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from privbandit import registry
from privbandit.protocol.spine import engine
from privbandit.runner import config as experiment_files
from privbandit.runner.tasks import Task, execute, parties

FAMILY = registry.family("private-online-learning")
ROOT = Path(__file__).resolve().parent.parent


def config_of(horizon: int, eps: float, algorithms: dict):
    return FAMILY.load({"family": FAMILY.name, "name": "bench", "horizon": horizon, "seed": 1, "epsilon": eps,
                        "environment": {"setting": 1, "reward": "bernoulli"}, "algorithms": algorithms}, "<bench>")


def seconds(config, label: str) -> float:
    return execute(Task(FAMILY.name, config, label, (0,)))[3]


def hybrid(horizon: int, eps: float, oracle: bool) -> tuple[float, dict]:
    config = config_of(horizon, eps, {"h": {"algorithm": "hybrid-ucb"}})
    start = time.perf_counter()
    _, analyzer, users, boxes, observer = parties(FAMILY, config, "h", [0], oracle=oracle)
    engine.run(analyzer, users, boxes, observer)
    observer.result([0], analyzer.ledger.summary(), analyzer.logic.summary(), FAMILY.row_maker(config, "h"))
    return time.perf_counter() - start, analyzer.logic.streaks.stats


def suite_seconds(horizon: int) -> None:
    for s in (1, 2, 3):
        for eps in (0.1, 8.0, 128.0):
            _, cfg = experiment_files.load(ROOT / "experiments" / f"pol_setting{s}.toml",
                                           [f"horizon={horizon}", "runs=1", f"epsilon={eps}"])
            secs = {label: seconds(cfg, label) for label in FAMILY.labels(cfg)}
            print(f"setting {s} ε={eps:<5g} load {os.getloadavg()[0]:.1f}: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in secs.items()) + f"; all {sum(secs.values()):.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=2 * 2**21)
    ap.add_argument("--per-user-horizon", type=int, default=2**15, help="the one-user-per-plan analyzer's horizon")
    ap.add_argument("--only", choices=("all", "hybrid", "others", "suite"), default="all")
    args = ap.parse_args()
    T = args.horizon
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}, T = {T:,}, K = 5"
          + ("" if args.only == "suite" else ", setting 1"))
    if args.only == "suite":
        suite_seconds(T)
        return
    if args.only != "hybrid":
        for name in ("anytime-lazy-ucb", "dp-se", "ftnl"):
            for trust in ("central", "distributed"):
                config = config_of(T, 1.0, {"x": {"algorithm": name, "trust": trust}})
                best = min(seconds(config, "x") for _ in range(2))
                print(f"{name:18s} {trust:11s} {best:7.2f} s/run   {T / best / 1e6:6.2f} M users/s")
    if args.only == "others":
        return
    for eps in (0.1, 1.0, 128.0):
        secs, stats = hybrid(T, eps, oracle=True)
        h = args.per_user_horizon
        per = hybrid(h, eps, oracle=False)[0] / h
        print(f"hybrid-ucb ε={eps:<5g} look-ahead {secs:6.2f} s/run  [{stats['windows']:,} windows, "
              f"{stats['streak_rounds'] / T:.1%} of rounds in them; {stats['step_rounds']:,} rounds stepped]   "
              f"one user per plan {per * 1e6:6.1f} µs/user → {per * T:7.1f} s/run")


if __name__ == "__main__":
    main()
