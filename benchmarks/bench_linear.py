"""Wall time of the full Fig. 1 suite of the shuffle-model linear bandits (5 algorithms × 3 ε × 50 runs
× T = 20000), plus compute seconds and users/s per task.

    python benchmarks/bench_linear.py [--jobs 2] [--runs 50] [--horizon 20000]

Every file's tasks (one per algorithm, its runs stacked) go to one process pool, the per-round
algorithms (B = 1) first; each task's numbers are those ``privbandit run`` gives for its file.

    python benchmarks/bench_linear.py --single [--repeat 3] [--horizon 20000] [--epsilon 1]

One run of each algorithm on the authors' instance (d = 5, K = 100, T = 20000, Fig. 1(b)), one after
another in this process: rounds/s (best of ``--repeat``) against the authors' code's single-run
figures and the 5× target of issue #14.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from privbandit.runner import config as experiment_files
from privbandit.runner import tasks

FILES = ["linear_fig1a_eps0.2", "linear_fig1b_eps1", "linear_fig1c_eps10"]


def _execute(i: int, task: tasks.Task):
    label, _runs, _result, secs = tasks.execute(task)
    return i, label, secs


# The authors' code, one run on their instance (d = 5, K = 100, T = 20000), rounds/s (issue #14).
AUTHORS = {"LinUCB": 50_000, "LinUCB-JDP": 25_000, "LinUCB-LDP": 33_000, "LinUCB-SDP-Amp": 93_000,
           "LinUCB-SDP-Vec": 17_000}
SINGLE_FILE = {0.2: "linear_fig1a_eps0.2", 1.0: "linear_fig1b_eps1", 10.0: "linear_fig1c_eps10"}


def single(args) -> None:
    """One run of each algorithm in one process (tasks.execute, as ``privbandit run --jobs 1``)."""
    here = Path(__file__).resolve().parents[1] / "experiments"
    fam, config = experiment_files.load(here / f"{SINGLE_FILE[args.epsilon]}.toml",
                                        ["runs=1", f"horizon={args.horizon}"])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; one run, "
          f"ε = {config.epsilon:g}, d = {config.environment.dim}, K = {config.environment.arms}, "
          f"T = {args.horizon}, best of {args.repeat}")
    print(f"  {'algorithm':<15} {'s':>7} {'rounds/s':>10} {'authors':>9} {'×':>6} {'5× target':>10}")
    for label in fam.labels(config):
        best = min(tasks.execute(tasks.Task(fam.name, config, label, (0,)))[3] for _ in range(args.repeat))
        rate, ref = args.horizon / best, AUTHORS.get(label)
        tail = "" if ref is None else (f" {ref:9,} {rate / ref:6.2f} {'met' if rate >= 5 * ref else 'NOT met':>10}")
        print(f"  {label:<15} {best:7.3f} {rate:10,.0f}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--horizon", type=int, default=20_000)
    ap.add_argument("--single", action="store_true", help="one run per algorithm, in this process")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=1.0, choices=sorted(SINGLE_FILE))
    args = ap.parse_args()
    if args.single:
        single(args)
        return
    here = Path(__file__).resolve().parents[1] / "experiments"
    overrides = [f"runs={args.runs}", f"horizon={args.horizon}"]
    loaded = [experiment_files.load(here / f"{f}.toml", overrides) for f in FILES]
    work = [(i, t) for i, (fam, config) in enumerate(loaded) for t in tasks.tasks_of(fam, config)]
    work.sort(key=lambda it: loaded[it[0]][0].algorithm(loaded[it[0]][1], it[1].label).batch)
    compute = [{} for _ in loaded]
    t0 = time.perf_counter()
    for i, label, secs in tasks.completed(_execute, work, max(1, args.jobs)):
        compute[i][label] = compute[i].get(label, 0.0) + secs
    wall = time.perf_counter() - t0
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jobs={args.jobs}")
    print(f"Fig. 1 suite: {len(loaded)} ε × {len(loaded[0][1].algorithms)} algorithms × {args.runs} runs × "
          f"T = {args.horizon}: {wall:.1f} s wall")
    for (fam, config), secs_of in zip(loaded, compute):
        for label in fam.labels(config):
            secs = secs_of[label]
            print(f"  ε = {config.epsilon:<4g} {label:<15} {secs:6.2f} s   "
                  f"{config.horizon * config.runs / secs:12,.0f} users/s")


if __name__ == "__main__":
    main()
