"""Throughput of the private-online-learning family (Hu, Huang & Mehta).

    python benchmarks/bench_online.py              # T = 2·2^21, K = 5 (setting 1)
    python benchmarks/bench_online.py --horizon 1048576 --only hybrid
    python benchmarks/bench_online.py --only suite     # one run of each suite label, per setting and ε

Prints seconds per run for Anytime-Lazy-UCB, DP-SE and FTNL (central, distributed) and for
Hybrid-UCB (central) at ε ∈ {0.1, 1, 128}: the streak driver at full T, with what its time is made
of (numpy windows, rounds stepped one at a time, and the floor: drawing every round's rewards and
noise and log2 t), and the stepwise reference's µs per step on a shorter horizon, scaled to T.
``--only suite`` times one run of each label of ``experiments/pol_setting{1,2,3}.toml`` at
ε ∈ {0.1, 8, 128} through ``online_family.execute``, as the reproduction calls it: the figures the
full suite's wall-time estimate is built from.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from privbandit.experiment import online_family
from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.learners.hybrid_streaks import log2_rounds
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.online_engine import (
    OnlineRun,
    hybrid_feed,
    run_anytime_lazy_ucb,
    run_dp_se,
    run_ftnl,
    run_hybrid_ucb,
)
from privbandit.protocol.privacy import PrivacyLedger

SETTING1 = BanditInstance(np.array([0.75, 0.70, 0.70, 0.70, 0.70]), "bernoulli")


def timed(fn, *args, **kw) -> tuple[float, object]:
    start = time.perf_counter()
    res = fn(*args, **kw)
    return time.perf_counter() - start, res


def spec(horizon: int, eps: float, trust: str = "central") -> OnlineRun:
    return OnlineRun(instance=SETTING1, epsilon=eps, horizon=horizon, seed=1, prefix=(0, "bench"),
                     checkpoints=checkpoint_grid(horizon), ledger=PrivacyLedger(trust, eps, 1e-6), trust=trust)


def floor_seconds(run: OnlineRun) -> float:
    """What any exact driver pays before deciding anything: every round's rewards, noise, log2 t."""
    start = time.perf_counter()
    for t, _, xb, _ in hybrid_feed(run).blocks():
        np.sqrt(log2_rounds(t, len(xb)))
    return time.perf_counter() - start


def suite_seconds(horizon: int) -> None:
    """One run of each label of the reproduction's experiment files, per setting and ε."""
    root = Path(__file__).resolve().parent.parent
    for s in (1, 2, 3):
        for eps in (0.1, 8.0, 128.0):
            cfg = online_family.load(root / "experiments" / f"pol_setting{s}.toml",
                                     [f"horizon={horizon}", "runs=1", f"epsilon={eps}"])
            secs = {label: online_family.execute(cfg, label, 0)[3] for label in cfg.algorithms}
            print(f"setting {s} ε={eps:<5g} load {os.getloadavg()[0]:.1f}: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in secs.items()) + f"; all {sum(secs.values()):.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=2 * 2**21)
    ap.add_argument("--stepwise-horizon", type=int, default=2**19, help="the reference loop's horizon")
    ap.add_argument("--only", choices=("all", "hybrid", "others", "suite"), default="all")
    args = ap.parse_args()
    T = args.horizon
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}, T = {T:,}, K = 5" + ("" if args.only == "suite" else ", setting 1"))

    if args.only == "suite":
        suite_seconds(T)
        return
    if args.only != "hybrid":
        for name, fn in (("anytime-lazy-ucb", run_anytime_lazy_ucb), ("dp-se", run_dp_se), ("ftnl", run_ftnl)):
            for trust in ("central", "distributed"):
                best = min(timed(fn, spec(T, 1.0, trust))[0] for _ in range(2))
                print(f"{name:18s} {trust:11s} {best:7.2f} s/run   {T / best / 1e6:6.2f} M users/s")
    if args.only == "others":
        return
    first = floor_seconds(spec(T, 1.0))  # also checks numpy's log2 against math.log2, once per process
    print(f"hybrid-ucb floor (draws + log2 t, any exact driver): {floor_seconds(spec(T, 1.0)):.2f} s/run "
          f"({first:.2f} s in a process's first run, which checks numpy's log2 t against math.log2)")
    for eps in (0.1, 1.0, 128.0):
        stats: dict = {}
        secs, res = timed(run_hybrid_ucb, spec(T, eps), stats=stats)
        h = args.stepwise_horizon
        ref_secs, _ = timed(run_hybrid_ucb, spec(h, eps), stepwise=True)
        per = ref_secs / h
        print(f"hybrid-ucb ε={eps:<5g} streaks {secs:6.2f} s/run  "
              f"[{stats['windows']:,} windows, {stats['streak_rounds'] / T:.1%} of rounds in them, "
              f"{stats['speculated'] / stats['streak_rounds']:.2f}× speculated; {stats['step_rounds']:,} rounds stepped]"
              f"   stepwise {per * 1e6:5.2f} µs/step → {per * T:6.1f} s/run ({per * T / secs:4.1f}×)")


if __name__ == "__main__":
    main()
