"""Per-task overhead of ``privbandit sweep`` on the local process pool and on Ray.

    python benchmarks/bench_sweep.py [--tasks 200] [--jobs 2] [--ray ADDRESS|local|none]

Runs a sweep whose tasks do almost nothing (the quickstart's seven algorithms at T = 200, one run,
over a grid of seeds), so wall time / tasks is what the executor costs per task: pickling the
task, scheduling, the worker's import and spine set-up, and the result's way back. With ``--ray
local`` Ray starts a one-machine cluster (its start-up is not counted).
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
    args = ap.parse_args()
    seeds = ",".join(str(s) for s in range(max(1, args.tasks // 7)))
    grid, base = [f"seed={seeds}"], ["horizon=200", "runs=1"]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {args.tasks} tasks of ~0 work")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        local = run_sweep(ROOT / "experiments/quickstart.toml", grid, Path(tmp) / "local", base, jobs=args.jobs)
        wall = time.perf_counter() - t0
        print(f"local pool, {args.jobs} processes: {local['computed']} tasks, {local['elapsed_s']:.2f} s executing "
              f"({1e3 * local['elapsed_s'] / local['computed']:.1f} ms/task), {wall:.2f} s with writing")
        if args.ray != "none":
            import ray

            ray.init(address=None if args.ray == "local" else args.ray, include_dashboard=False,
                     log_to_driver=False, num_cpus=args.jobs if args.ray == "local" else None)
            address = ray.get_runtime_context().gcs_address
            ray.shutdown()
            remote = run_sweep(ROOT / "experiments/quickstart.toml", grid, Path(tmp) / "ray", base, executor="ray",
                               address=address)
            print(f"ray ({args.ray}): {remote['computed']} tasks, {remote['elapsed_s']:.2f} s executing "
                  f"({1e3 * remote['elapsed_s'] / remote['computed']:.1f} ms/task, ray.init included)")


if __name__ == "__main__":
    main()
