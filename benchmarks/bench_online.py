"""Throughput of the private-online-learning family (Hu, Huang & Mehta).

    python benchmarks/bench_online.py              # T = 2·2^21, K = 5 (setting 1)
    python benchmarks/bench_online.py --horizon 1048576

Prints seconds per run for Anytime-Lazy-UCB (central, distributed), DP-SE (central, distributed),
FTNL (central, distributed), and Hybrid-UCB's per-step cost (sequential: one Python step per
round), measured on a shorter horizon and scaled to T.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.online_engine import run_anytime_lazy_ucb, run_dp_se, run_ftnl, run_hybrid_ucb
from privbandit.protocol.privacy import PrivacyLedger

SETTING1 = BanditInstance(np.array([0.75, 0.70, 0.70, 0.70, 0.70]), "bernoulli")


def timed(fn, **kw) -> tuple[float, object]:
    start = time.perf_counter()
    res = fn(**kw)
    return time.perf_counter() - start, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=2 * 2**21)
    ap.add_argument("--hybrid-horizon", type=int, default=2**19)
    args = ap.parse_args()
    T = args.horizon
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, T = {T:,}, K = 5")

    def kw(trust=None, horizon=T, eps=1.0):
        d = dict(instance=SETTING1, epsilon=eps, horizon=horizon, seed=1, prefix=(0, "bench"),
                 checkpoints=checkpoint_grid(horizon), ledger=PrivacyLedger(trust or "central", eps, 1e-6))
        if trust:
            d["trust"] = trust
        return d

    for name, fn in (("anytime-lazy-ucb", run_anytime_lazy_ucb), ("dp-se", run_dp_se), ("ftnl", run_ftnl)):
        for trust in ("central", "distributed"):
            best = min(timed(fn, **kw(trust))[0] for _ in range(2))
            print(f"{name:18s} {trust:11s} {best:7.2f} s/run   {T / best / 1e6:6.2f} M users/s")
    for eps in (0.5, 64.0):
        h = args.hybrid_horizon
        secs, _ = timed(run_hybrid_ucb, **kw(None, h, eps))
        per = secs / h
        print(f"hybrid-ucb ε={eps:<5g} central     {per * 1e6:7.2f} µs/step → {per * T:6.1f} s/run at T = {T:,}")


if __name__ == "__main__":
    main()
