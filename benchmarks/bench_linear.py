"""Wall time of the full Fig. 1 suite of the shuffle-model linear bandits (5 algorithms × 3 ε × 50 runs
× T = 20000), plus compute seconds and users/s per task.

    python benchmarks/bench_linear.py [--jobs 2] [--runs 50] [--horizon 20000]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from privbandit.experiment import linear_family as lf

FILES = ["linear_fig1a_eps0.2", "linear_fig1b_eps1", "linear_fig1c_eps10"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--horizon", type=int, default=20_000)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1] / "experiments"
    configs = [lf.load(here / f"{f}.toml", [f"runs={args.runs}", f"horizon={args.horizon}"]) for f in FILES]
    t0 = time.perf_counter()
    outcomes = lf.run_suite(configs, jobs=args.jobs)
    wall = time.perf_counter() - t0
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jobs={args.jobs}")
    print(f"Fig. 1 suite: {len(configs)} ε × {len(configs[0].algorithms)} algorithms × {args.runs} runs × "
          f"T = {args.horizon}: {wall:.1f} s wall")
    for config, (_, compute, _) in zip(configs, outcomes):
        for label, secs in compute.items():
            print(f"  ε = {config.epsilon:<4g} {label:<15} {secs:6.2f} s   "
                  f"{config.horizon * config.runs / secs:12,.0f} users/s")


if __name__ == "__main__":
    main()
