"""Per-task overhead of ``privbandit sweep`` on the local process pool and on Ray.

    python benchmarks/bench_sweep.py [--tasks 200] [--jobs 2] [--ray ADDRESS|local|none] [--sessions 4]

Runs a sweep whose tasks do almost nothing (the quickstart's seven algorithms at T = 200, one task
per run and algorithm, all in one grid point, so that writing points' results directories, a plot
each, does not compete with the tasks), so the time the tasks take / tasks is what the executor
costs per task: pickling the task, scheduling, the worker's import and spine set-up, the result's
way back and its file in ``.tasks/``. With ``--ray local`` Ray starts a one-machine cluster per
sweep; the per-task figure is the difference of a sweep of N and of 2N tasks over N, so that
start-up drops out. The load average is printed: other work on the machine inflates every figure.
``--sessions N`` also times an MQTT sweep of N points of the same near-zero work (one run each), one
and two sessions at a time: what a point costs over MQTT (an embedded broker and five party
processes started, a session run, its files back).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from privbandit.runner.sweep import run_sweep

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=210)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ray", default="local", help="a cluster's HOST:PORT, 'local' (start one here) or 'none'")
    ap.add_argument("--sessions", type=int, default=0, help="also time an MQTT sweep of this many points")
    args = ap.parse_args()
    runs = max(1, args.tasks // 7)
    grid, base = ["seed=1"], ["horizon=200", f"runs={runs}"]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {7 * runs} tasks of ~0 work")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        local = run_sweep(ROOT / "experiments/quickstart.toml", grid, Path(tmp) / "local", base, jobs=args.jobs)
        wall = time.perf_counter() - t0
        print(f"local pool, {args.jobs} processes: {local['computed']} tasks, {local['elapsed_s']:.2f} s executing "
              f"({1e3 * local['elapsed_s'] / local['computed']:.1f} ms/task), {wall:.2f} s with writing")
        if args.ray != "none":
            # Each Ray sweep connects (and, with "local", starts a one-machine Ray) before its tasks:
            # two sweeps of N and 2N tasks give the per-task cost as their difference over N.
            address = None if args.ray == "local" else args.ray
            small = run_sweep(ROOT / "experiments/quickstart.toml", grid, Path(tmp) / "ray1", base, executor="ray",
                              address=address)
            large = run_sweep(ROOT / "experiments/quickstart.toml", grid, Path(tmp) / "ray2",
                              ["horizon=200", f"runs={2 * runs}"], executor="ray", address=address)
            per_task = (large["elapsed_s"] - small["elapsed_s"]) / (large["computed"] - small["computed"])
            print(f"ray ({args.ray}): {small['computed']} tasks in {small['elapsed_s']:.2f} s, {large['computed']} in "
                  f"{large['elapsed_s']:.2f} s (each with Ray's connect/start-up): {1e3 * per_task:.1f} ms/task")
        if args.sessions:
            seeds = ",".join(str(s) for s in range(args.sessions))
            for jobs in (1, 2):
                sweep = run_sweep(ROOT / "experiments/quickstart.toml", [f"seed={seeds}"], Path(tmp) / f"mqtt{jobs}",
                                  ["horizon=200", "runs=1"], jobs=jobs, transport="mqtt", timeout_s=300)
                assert not sweep["failed"], sweep["failed"]
                print(f"mqtt, {jobs} session(s) at a time: {sweep['computed']} sessions in {sweep['elapsed_s']:.2f} s "
                      f"({sweep['elapsed_s'] / sweep['computed']:.2f} s/point)")


if __name__ == "__main__":
    main()
