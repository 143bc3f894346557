"""Peak memory and CPU of one in-process run against the horizon T (issue #33).

    python benchmarks/bench_memory.py [--horizons 1e6,1e7,1e8] [--algorithms dp-se,dist-dp-se]

Each (algorithm, T) runs in a fresh process (``tasks.execute``, as ``privbandit run --jobs 1``
runs a task), which prints its own peak resident set (``resource.getrusage``: ``ru_maxrss``) and
CPU seconds, user and system, of the task alone (after a run at T = 10⁴ has paid what a process
pays once: lazy imports, caches) and of the whole process. The CPU exponent is the slope of
log(task CPU) against log T between consecutive horizons: 1 is linear. K = 10 easy instance,
ε = 0.5, preset ``paper``, one run, as ``bench_engine.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
r0 = resource.getrusage(resource.RUSAGE_SELF)
from privbandit import registry
from privbandit.runner.tasks import Task, execute
label, horizon, preset = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = registry.family("distributed-dp-mab")
config = fam.load({"name": "bench", "horizon": horizon, "seed": 7, "epsilon": 0.5, "runs": 1, "preset": preset,
                   "algorithms": {label: {"algorithm": label}}}, "<bench>")
# A short run first: what the first run of a process pays once (lazy imports, caches) is not T's.
execute(Task(fam.name, fam.load({**config.model_dump(mode="json", exclude_none=True), "horizon": 10_000}, "<bench>"),
             label, (0,)))
before = resource.getrusage(resource.RUSAGE_SELF)
rss_before = before.ru_maxrss
t0 = time.perf_counter()
_, _, result, _ = execute(Task(fam.name, config, label, (0,)))
wall = time.perf_counter() - t0
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"rss_mb": after.ru_maxrss / 1024, "rss_before_mb": rss_before / 1024, "wall": wall,
                  "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
                  "process_cpu": after.ru_utime + after.ru_stime, "minflt": after.ru_minflt - before.ru_minflt,
                  "rounds": len(result.rounds)}))
"""


def measure(label: str, horizon: int, preset: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, label, str(horizon), preset], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizons", default="1e6,1e7,1e8")
    ap.add_argument("--algorithms", default="dp-se,dist-dp-se")
    ap.add_argument("--preset", default="paper", choices=["paper", "paper-code"])
    args = ap.parse_args()
    horizons = [int(float(h)) for h in args.horizons.split(",")]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}")
    print(f"K=10 easy, ε=0.5, preset={args.preset}, one run per process")
    print(f"{'algorithm':<12}{'T':>13}{'peak RSS':>10}{'at start':>10}{'task CPU':>10}{'of it sys':>10}"
          f"{'minor faults':>14}{'process CPU':>13}")
    for label in args.algorithms.split(","):
        cpu = {}
        for horizon in horizons:
            m = measure(label, horizon, args.preset)
            cpu[horizon] = m["user"] + m["sys"]
            print(f"{label:<12}{horizon:>13,}{m['rss_mb']:>8.0f}MB{m['rss_before_mb']:>8.0f}MB{cpu[horizon]:>9.2f}s"
                  f"{m['sys']:>9.2f}s{m['minflt']:>14,}{m['process_cpu']:>12.2f}s", flush=True)
        for lo, hi in zip(horizons, horizons[1:]):
            slope = math.log(cpu[hi] / cpu[lo]) / math.log(hi / lo)
            print(f"{label:<12} CPU exponent {slope:.3f} (T = {lo:,} → {hi:,})")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
