"""Throughput of the in-process engine: one run of each algorithm, K = 10 easy instance.

    python benchmarks/bench_engine.py [--horizon 10000000] [--algorithms dist-dp-se,...]

Prints seconds per run and users/s on one core (no worker processes), each algorithm's runs one
after another in this process (warm). The comparison with the authors' code is measured, both sides
in one invocation, by ``bench_authors_mab.py``.
"""

from __future__ import annotations

import argparse
import platform
import time

from privbandit import registry
from privbandit.runner.tasks import Task, execute



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=int, default=10_000_000)
    ap.add_argument("--preset", default="paper", choices=["paper", "paper-code"])
    ap.add_argument("--epsilon", type=float, default=0.5)
    ap.add_argument("--algorithms", default="dist-dp-se,dist-rdp-se,dist-cdp-se,cdp-se,ldp-se,dp-se,se")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = ap.parse_args()
    labels = args.algorithms.split(",")
    fam = registry.family("distributed-dp-mab")
    config = fam.load({"name": "bench", "horizon": args.horizon, "seed": 7, "epsilon": args.epsilon,
                       "runs": args.repeat, "preset": args.preset,
                       "algorithms": {label: {"algorithm": label} for label in labels}}, "<bench>")
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"K=10 easy, T={args.horizon:,}, ε={args.epsilon}, preset={args.preset}, one core, best of {args.repeat}")
    print(f"{'algorithm':<13}{'s/run':>9}{'users/s':>14}{'rounds':>8}")
    for label in labels:
        best = float("inf")
        for rep in range(args.repeat):
            t0 = time.perf_counter()
            _, _, result, _ = execute(Task(fam.name, config, label, (rep,)))
            best = min(best, time.perf_counter() - t0)
        rate = args.horizon / best
        print(f"{label:<13}{best:>9.2f}{rate:>14,.0f}{len(result.rounds):>8}")


if __name__ == "__main__":
    main()
