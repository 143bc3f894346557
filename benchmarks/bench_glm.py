"""Table 2's GLM algorithms, one trial each, privbandit against the authors' code, both measured here (issue #33).

    python benchmarks/bench_glm.py [--authors DIR] [--horizon 5000] [--pairs 1] [--timeout 420]
        [--algorithms glm-ucb,gloc,rs-glinucb,private-glm@eps4,private-glm@eps6,private-glm@eps8]
        [--file experiments/glm_table2_S2.toml] [--stack 1]

``DIR`` is a checkout of github.com/Sahasrajit123/Shuffle_joint_dp_generalized_linear_contextual_bandits
(fetched by you, outside this repository; this script imports it by path in a child process and
never copies or changes it). Without ``--authors`` only privbandit's side is measured and printed,
and no ratio.

The instance is Table 2's S = 2 file (probit, d = 3, K = 20, δ = ζ = 0.02, preset ``paper-code``),
run 0, at ``--horizon`` T (the file's 5000 by default; a shorter T is the same file with
``horizon = T``). Each measurement is a fresh Python process of this interpreter:

- **authors**: the file's world for run 0 is built (not timed), then the CPU time (``time.process_time``)
  of constructing the authors' class and playing T rounds on those arms, θ* and reward uniforms,
  with what their driver (``simulation_utils.simulate_with_epsilon``) gives the class: κ and κ* of
  the instance, R = 1, S, ``Probit``, T, ζ = δ = 0.02, RS-GLinUCB with the exact MLE and their
  legacy determinant switch. A trial stops once it has spent ``--timeout`` CPU seconds; the ratio
  is then a lower bound (``≥``), and the rounds it finished are printed. ``--wall-timeout`` kills a
  trial that a loaded machine starves (the CPU of its last progress line is the bound then).
- **privbandit**: ``runner.tasks.execute`` of the same label, run 0, one run: its CPU time, world
  included (which the authors' side does not pay). ``--stack R``: runs 0 … R−1 stacked in one task,
  as ``privbandit run`` executes Table 2's ten runs, and its CPU time divided by R (per run; the
  authors' side still plays run 0 once, their driver's trials being sequential).

The two sides alternate within each pair, the first side alternating too, so a load that changes
during the benchmark falls on both. Ratio = authors CPU s / privbandit CPU s of the same pair; the
issue's goal is ≥ 50× for every algorithm. Regret (run 0's cumulative pseudo-regret at T) is
printed beside each side to show both played the same instance. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE2 = ROOT / "experiments" / "glm_table2_S2.toml"
ALGORITHMS = ("glm-ucb", "gloc", "rs-glinucb", "private-glm@eps4", "private-glm@eps6", "private-glm@eps8")
GOAL = 50.0
AUTHORS_MARKER = Path("glmbanditexp") / "algorithms" / "private_rs_glinucb.py"

# One trial in a fresh process. argv: side, file, T, label, CPU budget (s), then the authors' checkout
# (authors) or the runs stacked (privbandit).
# Lines "PROGRESS t cpu" and one "RESULT {json}" on stdout; the authors' classes print to it too.
CHILD = r"""
import json, sys, time
side, path, horizon, label, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
from privbandit.runner import config as experiment_files
stack = int(sys.argv[6]) if side == "privbandit" else 1
fam, config = experiment_files.load(path, [f"horizon={horizon}", f"runs={stack}"])
if side == "privbandit":
    from privbandit.runner.tasks import Task, execute
    start = time.process_time()
    _, _, result, _ = execute(Task(fam.name, config, label, tuple(range(stack))))
    cpu = (time.process_time() - start) / stack
    print("RESULT " + json.dumps({"cpu": cpu, "rounds": horizon, "regret": float(result.pseudo[0, -1])}), flush=True)
    raise SystemExit(0)
sys.path.insert(0, sys.argv[6])
from glmbanditexp.algorithms.glm_ucb import GlmUCB
from glmbanditexp.algorithms.gloc import Gloc
from glmbanditexp.algorithms.private_rs_glinucb import Private_RS_GLinUCB
from glmbanditexp.algorithms.rs_glinucb import RS_GLinUCB
import numpy as np
w = fam.world(config, [0])
k = w.kappas(0)
T, S, zeta = config.horizon, config.environment.norm, config.zeta
model = {"probit": "Probit", "logistic": "Logistic"}[w.link]
algorithm = config.algorithms[label].algorithm
arms = [list(w.arms[0, t]) for t in range(T)]
means, best, uniforms = w.means[0], w.best[0], w.uniforms[0]
rng = np.random.default_rng(0)
start = time.process_time()
if algorithm == "glm-ucb":
    algo = GlmUCB(arms[0], k.kappa, 1.0, S, model, T, zeta, rng=rng)
elif algorithm == "gloc":
    algo = Gloc(arms[0], k.kappa, 1.0, S, model, zeta, rng=rng)
elif algorithm == "rs-glinucb":  # their driver's: exact MLE, legacy determinant switch
    algo = RS_GLinUCB(arms[0], k.kappa, 1.0, S, model, T, zeta, rng=rng, use_sgd_optimizer=False,
                      use_max_det_switch=False)
elif algorithm == "private-glm":  # their positional (…, T, zeta, epsilon, delta) as their driver passes it
    algo = Private_RS_GLinUCB(arms[0], k.kappa, k.kappa_star, 1.0, S, model, T, zeta, config.algorithms[label].epsilon,
                              config.delta, rng=rng, save_privacy_search_log="on_failure")
else:
    raise SystemExit(f"no class of the authors' for {algorithm}")
total, done, mark = 0.0, 0, start
for t in range(T):
    a = algo.play_arm()
    total += best[t] - means[t, a]
    algo.update(float(uniforms[t] < means[t, a]), best[t] - means[t, a], arms[(t + 1) % T])
    done = t + 1
    now = time.process_time()
    if now - mark >= 1.0:
        print(f"PROGRESS {done} {now - start}", flush=True)
        mark = now
    if now - start >= budget:
        break
print("RESULT " + json.dumps({"cpu": time.process_time() - start, "rounds": done, "regret": total}), flush=True)
"""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors", type=Path, default=None,
                    help="a checkout of the authors' repository (Sahasrajit123/Shuffle_joint_dp_generalized_linear_"
                         "contextual_bandits); without it, privbandit's side only")
    ap.add_argument("--file", type=Path, default=TABLE2, help="the Table 2 file [default: glm_table2_S2.toml]")
    ap.add_argument("--horizon", type=int, default=5000, help="T of every trial, 10 to 5000 [default: 5000]")
    ap.add_argument("--pairs", type=int, default=1, help="alternated pairs per algorithm, 1 to 20 [default: 1]")
    ap.add_argument("--timeout", type=float, default=420.0,
                    help="CPU seconds an authors' trial may spend before it stops, 1 to 86400 (then the ratio is a "
                         "lower bound) [default: 420]")
    ap.add_argument("--wall-timeout", type=float, default=None,
                    help="wall seconds after which a trial is killed, ≥ --timeout [default: none]")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"comma-separated, of {', '.join(ALGORITHMS)}")
    ap.add_argument("--stack", type=int, default=1,
                    help="privbandit: runs stacked in its task, 1 to 10, its CPU per run reported [default: 1]")
    args = ap.parse_args(argv)
    if not 10 <= args.horizon <= 5000:
        ap.error(f"--horizon {args.horizon}: T must be 10 to 5000 (Table 2's T is 5000)")
    if not 1 <= args.stack <= 10:
        ap.error(f"--stack {args.stack}: 1 to 10 runs")
    if not 1 <= args.pairs <= 20:
        ap.error(f"--pairs {args.pairs}: 1 to 20")
    if not 1.0 <= args.timeout <= 86400.0:
        ap.error(f"--timeout {args.timeout:g}: 1 to 86400 CPU seconds")
    if args.wall_timeout is not None and args.wall_timeout < args.timeout:
        ap.error(f"--wall-timeout {args.wall_timeout:g}: at least --timeout ({args.timeout:g})")
    args.algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = [a for a in args.algorithms if a not in ALGORITHMS]
    if unknown or not args.algorithms:
        ap.error(f"--algorithms {','.join(unknown) or '(none)'}: each one of {', '.join(ALGORITHMS)}")
    if not args.file.is_file():
        ap.error(f"--file {args.file}: no such file")
    if args.authors is not None:
        if not (args.authors / AUTHORS_MARKER).is_file():
            ap.error(f"--authors {args.authors}: no {AUTHORS_MARKER} there (a checkout of the authors' repository "
                     "is expected)")
        args.authors = args.authors.resolve()
    return args


def trial(side: str, args: argparse.Namespace, label: str, work: Path) -> dict:
    """One fresh process's trial: {"cpu", "rounds", "regret", "finished"}; a trial killed at
    ``--wall-timeout`` reports its last progress line (rounds, CPU) and no regret."""
    argv = [sys.executable, "-c", CHILD, side, str(args.file.resolve()), str(args.horizon), label, str(args.timeout)]
    argv.append(str(args.authors) if side == "authors" else str(args.stack))
    # The authors' DP-SGD writes a logs/ directory into the working directory: a scratch one.
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=args.wall_timeout)
        killed = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        killed = True
    lines = out.splitlines()
    results = [json.loads(ln[7:]) for ln in lines if ln.startswith("RESULT ")]
    if results:
        got = results[-1]
        got["finished"] = got["rounds"] == args.horizon
        return got
    if not killed:
        raise RuntimeError(f"{side} {label}: exit {proc.returncode}\n{err[-3000:]}")
    progress = [ln.split() for ln in lines if ln.startswith("PROGRESS ")]
    rounds, cpu = (int(progress[-1][1]), float(progress[-1][2])) if progress else (0, 0.0)
    return {"cpu": cpu, "rounds": rounds, "regret": None, "finished": False}


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                model = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy

    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {numpy.__version__}"


def _cpus(trials: list[dict]) -> str:
    return " / ".join(f"{g['cpu']:.3f}" for g in trials)


def _regret(got: dict) -> str:
    return "—" if got["regret"] is None else f"{got['regret']:.1f}"


def measure(args: argparse.Namespace, sides: tuple[str, ...], label: str, work: Path) -> tuple:
    """``--pairs`` alternated pairs of ``label``'s trials: (label, trials per side, loads per pair)."""
    got: dict[str, list[dict]] = {s: [] for s in sides}
    loads = []
    for pair in range(args.pairs):
        load0 = os.getloadavg()[0]
        for side in (sides if pair % 2 == 0 else sides[::-1]):
            print(f"[bench_glm] {label} pair {pair + 1}/{args.pairs}: {side} (load {os.getloadavg()[0]:.1f}) …",
                  file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            got[side].append(trial(side, args, label, work))
            g = got[side][-1]
            print(f"[bench_glm]   {g['cpu']:.2f} CPU s, {g['rounds']:,} rounds, {time.perf_counter() - t0:.1f} wall s",
                  file=sys.stderr, flush=True)
        loads.append((load0, os.getloadavg()[0]))
    return label, got, loads


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    sides = ("authors", "privbandit") if args.authors is not None else ("privbandit",)
    print(f"machine: {machine()}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}; "
          f"{args.file.name}, run 0, T = {args.horizon:,}, {args.pairs} pair(s), one trial per fresh process, CPU s"
          + (f"; privbandit: runs 0–{args.stack - 1} stacked in one task, CPU s per run" if args.stack > 1 else ""))
    if args.authors is None:
        print("no --authors: privbandit's side only, no ratio (the authors' code was not run)")
    else:
        print(f"authors' code: {args.authors}; an authors' trial stops at {args.timeout:g} CPU s"
              + (f" or {args.wall_timeout:g} wall s" if args.wall_timeout else ""))
    summary = []
    with tempfile.TemporaryDirectory(prefix="bench-glm-") as scratch:
        for label in args.algorithms:
            summary.append(measure(args, sides, label, Path(scratch)))
    print()
    if args.authors is None:
        print("| algorithm | privbandit CPU s (per pair) | privbandit users/s | regret at T | load |")
        print("|---|---|---|---|---|")
        for label, got, loads in summary:
            ours = got["privbandit"]
            print(f"| {label} | {_cpus(ours)} | "
                  f"{args.horizon / statistics.median(g['cpu'] for g in ours):,.0f} | {_regret(ours[0])} | "
                  f"{' / '.join(f'{a:.1f}→{b:.1f}' for a, b in loads)} |")
        return
    print("| algorithm | authors CPU s (rounds done) | privbandit CPU s | ratio per pair | privbandit users/s | "
          f"regret at T, authors / privbandit | load | ≥ {GOAL:g}× |")
    print("|---|---|---|---|---|---|---|---|")
    for label, got, loads in summary:
        theirs, ours = got["authors"], got["privbandit"]
        ratios = [(a["cpu"] / p["cpu"], a["finished"]) for a, p in zip(theirs, ours)]
        cells = " / ".join(f"{'' if done else '≥ '}{r:.1f}×" for r, done in ratios)
        lowest = min(r for r, _ in ratios)
        if lowest >= GOAL:
            verdict = "yes"
        elif all(done for _, done in ratios):
            verdict = "no"
        else:  # a stopped trial's ratio is only a lower bound below the goal
            verdict = "undecided (a trial stopped below the goal)"
        a_cells = " / ".join(f"{a['cpu']:.2f}" + ("" if a["finished"] else f" (stopped at {a['rounds']:,})")
                             for a in theirs)
        print(f"| {label} | {a_cells} | {_cpus(ours)} | {cells} | "
              f"{args.horizon / statistics.median(p['cpu'] for p in ours):,.0f} | "
              f"{_regret(theirs[0])} / {_regret(ours[0])} | {' / '.join(f'{a:.1f}→{b:.1f}' for a, b in loads)} | "
              f"{verdict} |")
        for a in theirs:
            if not a["finished"] and a["rounds"]:
                print(f"  {label}: the authors' trial stopped after {a['rounds']:,} of {args.horizon:,} rounds in "
                      f"{a['cpu']:.1f} CPU s; at that pace T would take about {a['cpu'] * args.horizon / a['rounds']:.0f} s "
                      "(a linear extrapolation, not a bound)")
    print(f"\nend {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
