"""What a caller's loop costs: :class:`privbandit.Policy` against ``privbandit.run`` on the same work.

    python benchmarks/bench_policy.py [--horizon 1000000] [--repeats 3]

Dist-DP-SE (Pólya shares, split-and-mix shuffler) on 10 arms with means 0.25 … 0.75 and clipped
Gaussian rewards (sd 0.1), seed 3, one run: the policy fed by a loop that hands out up to n arms per
``next`` (n = 65,536, one block; and n = 1,000) and draws their rewards with numpy, against
``privbandit.run`` of the same experiment (its own simulated world; no results directory). Both are
warmed up first (imports, calibration caches); the best of ``--repeats`` is printed with the load
average: other work on the machine inflates every figure.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import privbandit


def experiment(horizon: int) -> dict:
    return {"family": "distributed-dp-mab", "name": "bench-policy", "horizon": horizon, "seed": 3, "runs": 1,
            "environment": {"kind": "means", "means": np.linspace(0.25, 0.75, 10).tolist()},
            "algorithms": {"dist-dp-se": {"algorithm": "dist-dp-se", "epsilon": 1.0}}}


def policy_loop(horizon: int, n: int) -> tuple[float, int]:
    start = time.perf_counter()
    policy = privbandit.Policy(experiment(horizon))
    rng, means, calls = np.random.default_rng(0), np.linspace(0.25, 0.75, 10), 0
    while not policy.done:
        arms = policy.next(n)
        policy.update(np.clip(rng.normal(means[arms], 0.1), 0.0, 1.0))
        calls += 1
    return time.perf_counter() - start, calls


def run_once(horizon: int) -> float:
    start = time.perf_counter()
    privbandit.run(experiment(horizon))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    policy_loop(1_000, 1 << 16), run_once(1_000)  # warm-up
    for n in (1 << 16, 1_000):
        best = min(policy_loop(args.horizon, n) for _ in range(args.repeats))
        print(f"policy, next({n:,}): {best[0]:.3f} s for T = {args.horizon:,} ({best[1]:,} next/update pairs)")
    print(f"privbandit.run:        {min(run_once(args.horizon) for _ in range(args.repeats)):.3f} s")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
