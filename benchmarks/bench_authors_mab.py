"""One MAB run in a fresh process, privbandit against the authors' code, both measured here (issue #33).

    python benchmarks/bench_authors_mab.py --authors DIR [--horizon 1000000] [--pairs 3]
        [--algorithms dist-dp-se,dist-rdp-se,dp-se]

``DIR`` holds the authors' ``MABPrivate.py`` (github.com/sayakrc/Differentially-Private-Bandits,
fetched by you, outside this repository; this script never fetches or changes it). Each
measurement is a fresh Python process of this interpreter (so the same numpy), timed from outside:
CPU seconds (user + system, ``resource.getrusage(RUSAGE_CHILDREN)``) and wall seconds.

- **authors**: their module imported (numpy, scipy.stats), then ``evaluate_one`` of one run of
  their class on a K = 10 easy instance drawn as their ``__main__`` draws run 0's (Gaussian
  rewards, sd 0.1), ε = 0.5, their parameters (δ = 0.1; DPSE dc = 2, BatchSEDistDP dc = 4,
  BatchSEDistRDP scale 10, dc = 4);
- **privbandit run**: ``python -m privbandit run FILE --jobs 1`` of a one-run experiment of the
  same instance family at preset ``paper-code`` (the authors' constants), results directory and
  plot included: what a user types;
- **privbandit task**: the same run through the Python API (``runner.tasks.execute``), no results
  directory: the run alone, in a fresh process;
- **warm**: once per algorithm, after the pairs, the same run a second time in one process (what
  the fresh process pays once, excluded), against the median of the authors' fresh runs.

The two sides alternate, pair by pair (the first side alternates too), so a load that changes
during the benchmark falls on both. Each pair prints its own ratio; the summary gives the median
and the smallest of the pairs' ratios, and the load average at the start and end of each pair.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _fresh import timed

AUTHORS = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import MABPrivate as M
classes = {"dp-se": (M.DPSE, {"crs": 1, "delta": 0.1, "dc": 2}),
           "dist-dp-se": (M.BatchSEDistDP, {"crs": 1, "delta": 0.1, "dc": 4}),
           "dist-rdp-se": (M.BatchSEDistRDP, {"crs": 1, "delta": 0.1, "scale": 10, "dc": 4})}
alg, params = classes[sys.argv[2]]
n, eps = int(sys.argv[3]), float(sys.argv[4])
np.random.seed(0)  # their __main__: run r's means from np.random.seed(r)
mu = 0.5 * np.random.rand(10) + 0.25
env = M.GaussBandit(mu, eps, seed=0)
env.reset_random()
regret, _ = M.evaluate_one(alg, params, env, n, n)
"""

TASK = r"""
import sys, time
from privbandit.runner import config as experiment_files
from privbandit.runner.tasks import Task, execute
family, config = experiment_files.load(sys.argv[1], [])
(label,) = family.labels(config)
execute(Task(family.name, config, label, (0,)))
if len(sys.argv) > 2:  # the same run again in this process, warm: its CPU seconds
    start = time.process_time()
    execute(Task(family.name, config, label, (0,)))
    print(time.process_time() - start)
"""

EXPERIMENT = """name = "authors-mab"
horizon = {horizon}
seed = 1
epsilon = {epsilon}
runs = 1
preset = "paper-code"
[environment]
kind = "uniform"
arms = 10
low = 0.25
high = 0.75
reward = "gaussian"
sd = 0.1
[algorithms.{label}]
algorithm = "{algorithm}"
{extra}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors", type=Path, required=True, help="the directory holding the authors' MABPrivate.py")
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--epsilon", type=float, default=0.5)
    ap.add_argument("--pairs", type=int, default=3, help="alternated measurements of each side")
    ap.add_argument("--algorithms", default="dist-dp-se,dist-rdp-se,dp-se")
    args = ap.parse_args()
    if not (args.authors / "MABPrivate.py").is_file():
        ap.error(f"--authors {args.authors}: no MABPrivate.py there")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()} ({sys.executable})")
    print(f"K = 10 easy, Gaussian rewards, ε = {args.epsilon}, T = {args.horizon:,}, one run per fresh process; "
          f"{args.pairs} alternated pairs")
    work = Path(tempfile.mkdtemp(prefix="bench-authors-mab-"))
    sides = ("authors", "privbandit run", "privbandit task")
    for label in args.algorithms.split(","):
        extra = "s = 10\n" if label == "dist-rdp-se" else ""
        exp = work / f"{label}.toml"
        exp.write_text(EXPERIMENT.format(horizon=args.horizon, epsilon=args.epsilon, label=label, algorithm=label,
                                         extra=extra))
        argv = {"authors": [sys.executable, "-c", AUTHORS, str(args.authors.resolve()), label, str(args.horizon),
                            str(args.epsilon)],
                "privbandit run": [sys.executable, "-m", "privbandit", "run", str(exp), "--out", str(work / label),
                                   "--jobs", "1", "--overwrite"],
                "privbandit task": [sys.executable, "-c", TASK, str(exp)]}
        got: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
        print(f"\n{label}")
        print(f"  {'pair':<5}{'load':>11}  " + "".join(f"{s + ' CPU/wall s':>28}" for s in sides)
              + f"{'× run (CPU)':>13}{'× task (CPU)':>14}")
        for pair in range(args.pairs):
            load0 = os.getloadavg()[0]
            order = sides if pair % 2 == 0 else sides[::-1]
            for side in order:
                got[side].append(timed(argv[side])[:2])
            load1 = os.getloadavg()[0]
            cells = "".join(f"{got[s][-1][0]:>19.3f} / {got[s][-1][1]:>6.2f}" for s in sides)
            a = got["authors"][-1][0]
            print(f"  {pair:<5}{load0:>5.1f}→{load1:<5.1f}{cells}{a / got['privbandit run'][-1][0]:>12.1f}×"
                  f"{a / got['privbandit task'][-1][0]:>13.1f}×", flush=True)
        warm = float(subprocess.run(argv["privbandit task"] + ["warm"], check=True, capture_output=True,
                                    text=True).stdout.split()[-1])
        authors = statistics.median(a[0] for a in got["authors"])
        print(f"  warm (second run in one process): {warm:.3f} CPU s; the authors' median {authors:.3f} s is "
              f"{authors / warm:.0f}× that")
        for side in sides[1:]:
            ratios = [a[0] / p[0] for a, p in zip(got["authors"], got[side])]
            walls = [a[1] / p[1] for a, p in zip(got["authors"], got[side])]
            print(f"  authors / {side}: CPU median {statistics.median(ratios):.1f}×, smallest {min(ratios):.1f}×; "
                  f"wall median {statistics.median(walls):.1f}×, smallest {min(walls):.1f}×")


if __name__ == "__main__":
    main()
