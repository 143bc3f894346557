"""Wall time of the full Fig. 1 suite of the shuffle-model linear bandits (5 algorithms × 3 ε × 50 runs
× T = 20000), plus compute seconds and users/s per task.

    python benchmarks/bench_linear.py [--jobs 2] [--runs 50] [--horizon 20000]

Every file's tasks (one per algorithm, its runs stacked) go to one process pool, the per-round
algorithms (B = 1) first; each task's numbers are those ``privbandit run`` gives for its file.

    python benchmarks/bench_linear.py --single [--repeat 3] [--horizon 20000] [--epsilon 1]
        [--authors-code PATH]

One run of each algorithm on the authors' instance (d = 5, K = 100, T = 20000, Fig. 1(b)), one after
another in this process: seconds and rounds/s, best of ``--repeat``, and the CPU seconds of that
process over the same call (``time.process_time``, best of ``--repeat``: on a shared machine the wall
clock also counts the time other jobs held the cores). Only what this invocation measured is printed. With ``--authors-code PATH`` (``LinBanditPrivate.py`` of
github.com/sayakrc/Differentially-Private-Bandits, or the directory holding it, fetched by you
outside this repository; this script never fetches or changes it), the authors' class for each
algorithm is timed in the same process and the same repeats, alternating which side goes first:
their ``evaluate_one`` of one run on the instance their ``__main__`` draws for run 0
(``np.random.seed(2)``, Bernoulli rewards, env seed 0, their global ``d`` set as their ``__main__``
sets it) at the same ε, δ and B. Then, and only
then, the ratios are printed, from the two measured rates (×) and the two measured CPU seconds
(× cpu), and issue #33's 50× target: met when both are at least 50. Their module
imports pandas and never uses it; where pandas is not installed an empty module stands in for
that import (said in the output). The load average is printed at the start and the end.

    python benchmarks/bench_linear.py --single --fresh [--repeat 3] --authors-code PATH

The same run, each side in a fresh process of this interpreter, alternated (issue #33's "first run
in a fresh process"): the first run's CPU seconds (privbandit: ``tasks.execute`` after its imports,
numba's cached kernels loaded on first call, compiled if the cache is empty; the authors:
``evaluate_one`` after their module's import, on the same instance, passed to them in a ``.npz`` so
that their process imports nothing of privbandit), and the whole process's CPU seconds from
outside, interpreter start and imports included. Ratios of the medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from privbandit.runner import config as experiment_files
from privbandit.runner import tasks

FILES = ["linear_fig1a_eps0.2", "linear_fig1b_eps1", "linear_fig1c_eps10"]


def _execute(i: int, task: tasks.Task):
    label, _runs, _result, secs = tasks.execute(task)
    return i, label, secs


SINGLE_FILE = {0.2: "linear_fig1a_eps0.2", 1.0: "linear_fig1b_eps1", 10.0: "linear_fig1c_eps10"}
# Each label's class in the authors' LinBanditPrivate.py.
AUTHORS_CLASS = {"LinUCB": "LinUCB", "LinUCB-JDP": "JDPLinUCB", "LinUCB-LDP": "LDPLinUCB",
                 "LinUCB-SDP-Amp": "SDPLinUCBPAmp", "LinUCB-SDP-Vec": "SDPLinUCBPVec"}
TARGET = 50  # issue #33: every algorithm at least 50× the authors' code for one run (issue #14 asked 5×)


def authors_module(path: str):
    """The authors' LinBanditPrivate.py, imported from ``path`` (the file or its directory)."""
    where = Path(path)
    file = where / "LinBanditPrivate.py" if where.is_dir() else where
    if not file.is_file():
        raise SystemExit(f"--authors-code {path}: no LinBanditPrivate.py there (the file, or a directory "
                         "holding it, from github.com/sayakrc/Differentially-Private-Bandits)")
    stand_in = importlib.util.find_spec("pandas") is None
    if stand_in:  # their `import pandas as pd` is never used: an empty module lets it pass
        sys.modules["pandas"] = types.ModuleType("pandas")
    spec = importlib.util.spec_from_file_location("LinBanditPrivate", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = sorted(set(AUTHORS_CLASS.values()) - set(dir(module)))
    if missing or not hasattr(module, "evaluate_one") or not hasattr(module, "LinBandit"):
        raise SystemExit(f"--authors-code {file}: not the authors' LinBanditPrivate.py (missing "
                         f"{missing or 'evaluate_one/LinBandit'})")
    return module, stand_in


def authors_seconds(module, cls: str, config, batch: int) -> tuple[float, float]:
    """One run of the authors' ``cls`` on the instance their ``__main__`` draws for run 0: their
    ``evaluate_one`` timed alone (the instance drawn before the clock starts): (wall s, CPU s)."""
    from privbandit.families.shuffle_linear_bandits.world import instances

    d, k = config.environment.dim, config.environment.arms
    module.d = d  # four of their classes read the global `d` that their __main__ sets
    inst = instances("authors-main", k, d, 2, [0])  # their __main__'s first environment, bit for bit
    env = module.LinBandit(inst.arms[0], inst.theta[0], config.epsilon, config.delta, batch, noise="bernoulli",
                           sigma=0, seed=0)
    env.reset_random()
    start, cpu = time.perf_counter(), time.process_time()
    module.evaluate_one(getattr(module, cls), {}, env, config.horizon, 1)
    return time.perf_counter() - start, time.process_time() - cpu


# The authors' side of --fresh: their module and numpy only (argv: their directory, the .npz, class, T).
AUTHORS_FRESH = r"""
import importlib.util, sys, time, types
c0 = time.process_time()
import numpy as np
if importlib.util.find_spec("pandas") is None:
    sys.modules["pandas"] = types.ModuleType("pandas")
sys.path.insert(0, sys.argv[1])
import LinBanditPrivate as M
c1 = time.process_time()
z = np.load(sys.argv[2])
M.d = int(z["arms"].shape[1])
env = M.LinBandit(z["arms"], z["theta"], float(z["epsilon"]), float(z["delta"]), int(z["batch"]), noise="bernoulli",
                  sigma=0, seed=0)
env.reset_random()
c2 = time.process_time()
M.evaluate_one(getattr(M, sys.argv[3]), {}, env, int(sys.argv[4]), 1)
print(c1 - c0, time.process_time() - c2)
"""

# privbandit's side of --fresh (argv: the experiment file, T, label).
OURS_FRESH = r"""
import sys, time
c0 = time.process_time()
from privbandit.runner import config as experiment_files
from privbandit.runner.tasks import Task, execute
family, config = experiment_files.load(sys.argv[1], ["runs=1", f"horizon={sys.argv[2]}"])
c1 = time.process_time()
execute(Task(family.name, config, sys.argv[3], (0,)))
print(c1 - c0, time.process_time() - c1)
"""


def fresh(args, fam, config, file: Path) -> None:
    """--fresh: each side's one run in a fresh process, alternated (see the module's docstring)."""
    from _fresh import timed  # beside this script (experiments/linear_authors_paired.py imports it by path)

    from privbandit.families.shuffle_linear_bandits.world import instances

    inst = instances("authors-main", config.environment.arms, config.environment.dim, 2, [0])
    work = Path(tempfile.mkdtemp(prefix="bench-linear-fresh-"))
    print(f"  {'algorithm':<15} {'first run cpu s':>16} {'process cpu s':>14} {'authors first':>14} "
          f"{'authors process':>16} {'× first':>8} {'× process':>10} {'20× (first)':>12}")
    for label in fam.labels(config):
        batch = fam.algorithm(config, label).batch
        npz = work / f"{label}.npz"
        np.savez(npz, arms=inst.arms[0], theta=inst.theta[0], epsilon=config.epsilon, delta=config.delta, batch=batch)
        argv = {"ours": [sys.executable, "-c", OURS_FRESH, str(file), str(args.horizon), label],
                "authors": [sys.executable, "-c", AUTHORS_FRESH, str(Path(args.authors_code).resolve().parent
                            if Path(args.authors_code).is_file() else Path(args.authors_code).resolve()), str(npz),
                            AUTHORS_CLASS[label], str(args.horizon)]}
        got = {"ours": [], "authors": []}
        for r in range(args.repeat):
            for side in ("ours", "authors") if r % 2 == 0 else ("authors", "ours"):
                cpu, _wall, out = timed(argv[side])
                got[side].append((float(out.split()[-1]), cpu))
        (first, proc), (their_first, their_proc) = (tuple(map(statistics.median, zip(*got[s])))
                                                    for s in ("ours", "authors"))
        verdict = "met" if their_first >= 20 * first else "NOT met"
        print(f"  {label:<15} {first:16.3f} {proc:14.3f} {their_first:14.3f} {their_proc:16.3f} "
              f"{their_first / first:8.2f} {their_proc / proc:10.2f} {verdict:>12}", flush=True)


def ours_seconds(fam, config, label: str) -> tuple[float, float]:
    """One run of ``label`` as ``privbandit run --jobs 1`` makes it: (wall s, CPU s)."""
    cpu = time.process_time()
    secs = tasks.execute(tasks.Task(fam.name, config, label, (0,)))[3]
    return secs, time.process_time() - cpu


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def single(args) -> None:
    """One run of each algorithm in one process (tasks.execute, as ``privbandit run --jobs 1``), and
    with ``--authors-code`` the authors' code beside it, both sides measured here."""
    here = Path(__file__).resolve().parents[1] / "experiments"
    fam, config = experiment_files.load(here / f"{SINGLE_FILE[args.epsilon]}.toml",
                                        ["runs=1", f"horizon={args.horizon}"])
    authors, stand_in = authors_module(args.authors_code) if args.authors_code else (None, False)
    if args.fresh:
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; one run per fresh "
              f"process, ε = {config.epsilon:g}, d = {config.environment.dim}, K = {config.environment.arms}, "
              f"T = {args.horizon}, medians of {args.repeat}, CPU seconds; load {_load()}")
        fresh(args, fam, config, here / f"{SINGLE_FILE[args.epsilon]}.toml")
        print(f"load {_load()}")
        return
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; one run, "
          f"ε = {config.epsilon:g}, δ = {config.delta:g}, d = {config.environment.dim}, "
          f"K = {config.environment.arms}, T = {args.horizon}, best of {args.repeat}; load {_load()}")
    head = f"  {'algorithm':<15} {'s':>7} {'rounds/s':>10} {'cpu s':>7}"
    if authors is None:
        print(head)
    else:
        print(f"authors' code: {authors.__file__}" + ("  (pandas not installed: an empty module stood in "
                                                      "for its unused import)" if stand_in else ""))
        print(head + f" {'authors s':>10} {'authors r/s':>12} {'authors cpu s':>13} {'×':>7} {'× cpu':>7} "
                     f"{f'{TARGET}× target':>10}")
    for label in fam.labels(config):
        ours, theirs = [], []
        batch = fam.algorithm(config, label).batch
        for r in range(args.repeat):  # alternate which side goes first, so a changing load falls on both
            sides = [lambda: ours.append(ours_seconds(fam, config, label))]
            if authors is not None:
                sides.append(lambda: theirs.append(authors_seconds(authors, AUTHORS_CLASS[label], config, batch)))
            for side in sides if r % 2 == 0 else sides[::-1]:
                side()
        wall, cpu = (min(side) for side in zip(*ours))
        rate = args.horizon / wall
        line = f"  {label:<15} {wall:7.3f} {rate:10,.0f} {cpu:7.3f}"
        if theirs:
            their_wall, their_cpu = (min(side) for side in zip(*theirs))
            ref = args.horizon / their_wall
            by_cpu = their_cpu / cpu
            line += (f" {their_wall:10.3f} {ref:12,.0f} {their_cpu:13.3f} {rate / ref:7.2f} {by_cpu:7.2f} "
                     f"{'met' if rate >= TARGET * ref and by_cpu >= TARGET else 'NOT met':>10}")
        print(line, flush=True)
    if authors is None:
        print("the authors' code was not timed: no ratio to it is printed (give --authors-code PATH to time "
              "LinBanditPrivate.py in this run)")
    print(f"load {_load()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--horizon", type=int, default=20_000)
    ap.add_argument("--single", action="store_true", help="one run per algorithm, in this process")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=1.0, choices=sorted(SINGLE_FILE))
    ap.add_argument("--authors-code", metavar="PATH",
                    help="with --single: the authors' LinBanditPrivate.py (or its directory), timed in this run")
    ap.add_argument("--fresh", action="store_true",
                    help="with --single and --authors-code: each side's run in a fresh process")
    args = ap.parse_args()
    if args.fresh and not (args.single and args.authors_code):
        ap.error("--fresh compares fresh processes of both sides: use it with --single and --authors-code")
    if args.authors_code and not args.single:
        ap.error("--authors-code times the authors' code against one run: use it with --single")
    if args.repeat < 1:
        ap.error(f"--repeat must be ≥ 1 (got {args.repeat})")
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
