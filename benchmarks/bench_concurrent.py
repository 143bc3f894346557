"""Wall time of one concurrent-shuffle counter run (Alg. 3) at n = 10⁶, k = 4 (issue #15's target: 2 s).

    python benchmarks/bench_concurrent.py [--n 1000000] [--k 4] [--runs 1] [--protocol split-mix] [--repeat 3]

Times separately: the counter's set-up (split-mix's shares from the closeness bound, or the bin-a
baseline's calibration by exact privacy accounting; cached per (m, ε, δ) in a process), the users'
bits, and the run itself (:func:`privbandit.families.concurrent_shuffle.counter.simulate`: every
user's report to each of the k shufflers, the node totals, the deterministic server's Ŝ at every
t0), and the metrics. The vectorized run sums split-mix's residues (what the shares add up to): the
shares themselves are drawn only by the spine's users.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from privbandit.families.concurrent_shuffle import counter as cnt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--protocol", default="split-mix", choices=("split-mix", "bin-a", "pvec"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs = list(range(args.runs))
    start = time.perf_counter()
    spec = cnt.counter_spec("csta_k", args.n, args.k, 1.0, 1 / (10 * args.n), args.protocol)
    setup = time.perf_counter() - start
    start = time.perf_counter()
    bits = cnt.stream_bits("iid", 0.5, spec, 1, runs)
    world = time.perf_counter() - start
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        run = cnt.simulate(spec, bits, 1, "bench", runs)
        best = min(best, time.perf_counter() - start)
    start = time.perf_counter()
    m = cnt.metrics(run)
    metrics = time.perf_counter() - start
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy run on 1 core")
    print(f"counter csta_k n={args.n:,} k={args.k} sizes={spec.tree.sizes} protocol={args.protocol} runs={args.runs}")
    print(f"  set-up (calibration) {setup:.3f} s, bits {world:.3f} s, metrics {metrics:.3f} s")
    print(f"  counter run (best of {args.repeat}): {best:.3f} s  ->  {args.n * args.runs / best:,.0f} users/s")
    print(f"  max_t |err| = {m[0]['max_abs_error']:.1f}, RMSE = {m[0]['rmse']:.1f}")


if __name__ == "__main__":
    main()
