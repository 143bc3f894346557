"""Wall time of the full Fig. 1 suite of the shuffle-model linear bandits (5 algorithms × 3 ε × 50 runs
× T = 20000), plus compute seconds and users/s per task.

    python benchmarks/bench_linear.py [--jobs 2] [--runs 50] [--horizon 20000]

Every file's tasks (one per algorithm, its runs stacked) go to one process pool, the per-round
algorithms (B = 1) first; each task's numbers are those ``privbandit run`` gives for its file.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--horizon", type=int, default=20_000)
    args = ap.parse_args()
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
