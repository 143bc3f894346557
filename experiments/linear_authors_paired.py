"""privbandit's ``paper-code`` beside the authors' own code, paired on the authors' instances (issue #31).

    python experiments/linear_authors_paired.py --authors-code PATH [--runs 20] [--jobs 2] [--horizon 20000]
        [--fresh-tree]

Fig. 1(b) of Chowdhury & Zhou (ICML 2022): d = 5, K = 100, ε = 1, δ = 0.1, B = 20, Bernoulli rewards
(``experiments/linear_fig1b_eps1.toml``). Instance r is the r-th environment the authors' ``__main__``
draws after ``np.random.seed(2)`` (privbandit's generator ``authors-main``, identical bit for bit), for
r < ``--runs``. On each, every algorithm runs twice:

- privbandit, preset ``paper-code``, its own users and noise (seed 2), all runs stacked in one task;
- the authors' class (``LinBanditPrivate.py`` of github.com/sayakrc/Differentially-Private-Bandits,
  fetched by you outside this repository; this script never fetches or changes it), through their
  ``evaluate_one`` on their ``LinBandit`` built as their ``__main__`` builds it (``seed = r``, their
  global ``d`` set), with ``np.random.seed(r)`` first so that their algorithms' noise (drawn from
  numpy's global generator) is the same whichever process runs it. LinUCB, JDP and LDP get
  ``BatchSize`` 1, as privbandit's; their ``__main__`` gives every class B = 20, which only the two
  shuffle classes read. Their module is loaded by ``benchmarks/bench_linear.py``'s ``authors_module``.

Printed per algorithm, for final pseudo-regret (Σ μ* − μ_a; the authors' side summed from their
``env.pregret`` beside their ``env.regret``) and final realized regret (their metric; privbandit's
rewards are common random numbers, theirs independent per arm, so realized regret pairs less
tightly): both means ± standard error, the paired difference privbandit − authors (mean ± se, t,
runs each side had less regret) and that difference relative to the authors' mean. Costs: the
authors' code serves ~10⁴ rounds/s, so 20 instances × 5 algorithms × T = 20000 is several
CPU-minutes; privbandit's side is seconds.

Row ``LinUCB-JDP+reuse``: privbandit's JDP with ``tree_noise = "authors-reused"`` (their ⌊ln(1 + t)⌋ + 1
draws made once and reused, :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.ReusedTreeNoise`;
its ledger says none proven) against the same authors' JDP runs; then privbandit's fresh tree − that
row, paired: the regret the fresh tree's noise costs (seconds more of privbandit's side).

``--fresh-tree``: the paired switch for JDP's gap. Their ``JDPLinUCB`` runs a third time with one
fresh noise per node of the binary tree (:func:`fresh_tree`) in place of their reused draws, and is
paired with their code and with privbandit's (about a third more of the authors' CPU time).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from privbandit.families.shuffle_linear_bandits.world import instances
from privbandit.runner import config as experiment_files
from privbandit.runner import tasks
from privbandit.runner.paired import paired

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "linear_fig1b_eps1.toml"
MAX_RUNS = 50  # the authors' __main__ draws 50 environments (num_runs)
METRICS = ("pseudo", "realized")


def _bench():
    """``benchmarks/bench_linear.py``, which holds the loader of the authors' module and their class names."""
    if "bench_linear" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_linear", ROOT / "benchmarks" / "bench_linear.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_linear"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_linear"]


# Their module, imported once by main() and inherited by the forked workers: authors_module cannot
# run twice in a process without pandas (find_spec raises on its own stand-in, which has no __spec__).
_AUTHORS: dict[str, object] = {}


def fresh_tree(module):
    """Their ``JDPLinUCB`` with one fresh noise per node of the binary tree (Chan et al. 2010), as
    privbandit's :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.TreeAggregator` draws
    it, in place of their ⌊ln(1 + t)⌋ + 1 draws made once and reused (``LinBanditPrivate.py`` lines
    194–196 and 213–216). Everything else is theirs: the node sd (their ``noise``), their (N + Nᵀ)/2,
    Λ, width and arm choice; their ``get_arm`` reads the tree's noise from column 0 of their arrays."""

    class FreshTreeJDPLinUCB(module.JDPLinUCB):
        def __init__(self, env, n, params):
            super().__init__(env, n, params)
            self.nodes = {}

        def get_arm(self, t):
            vec, mat = np.zeros(self.d), np.zeros((self.d, self.d))
            for j in range(t.bit_length()):  # the prefix of t observations: a node per one-bit of t
                if t >> j & 1:
                    if (j, t >> j) not in self.nodes:
                        self.nodes[j, t >> j] = (np.random.normal(0, self.noise, self.d),
                                                 np.random.normal(0, self.noise, (self.d, self.d)))
                    vec += self.nodes[j, t >> j][0]
                    mat += self.nodes[j, t >> j][1]
            self.noiseVecAll = np.zeros_like(self.noiseVecAll)
            self.noiseMatAll = np.zeros_like(self.noiseMatAll)
            self.noiseVecAll[:, 0], self.noiseMatAll[:, :, 0] = vec, mat
            return super().get_arm(t)

    return FreshTreeJDPLinUCB


def authors_run(path: str, label: str, run: int, x: np.ndarray, theta: np.ndarray, epsilon: float, delta: float,
                batch: int, horizon: int, switched: bool = False) -> tuple:
    """One run of the authors' class for ``label`` on instance (x, θ) (``switched``: JDP with
    :func:`fresh_tree`): (label, run, pseudo, realized, seconds, "fresh tree" if switched else None)."""
    if path not in _AUTHORS:
        _AUTHORS[path] = _bench().authors_module(path)[0]
    module = _AUTHORS[path]
    module.d = x.shape[1]  # four of their classes read the global `d` their __main__ sets

    class Counting(module.LinBandit):
        """Their environment, also summing their own expected regret of each arm played."""

        pseudo = 0.0

        def regret(self, arm):
            self.pseudo += self.pregret(arm)
            return super().regret(arm)

    env = Counting(x, theta, epsilon, delta, batch, noise="bernoulli", sigma=0, seed=run)
    env.reset_random()
    np.random.seed(run)
    start = time.perf_counter()
    cls = fresh_tree(module) if switched else getattr(module, _bench().AUTHORS_CLASS[label])
    regret, _ = module.evaluate_one(cls, {}, env, horizon, 1)
    side = "fresh tree" if switched else None
    return label, run, float(env.pseudo), float(np.sum(regret)), time.perf_counter() - start, side


def privbandit_run(task: tasks.Task, side: str | None = None) -> tuple:
    """All runs of one algorithm, stacked: (label, None, pseudo (R,), realized (R,), seconds, side)."""
    label, _runs, result, secs = tasks.execute(task)
    return label, None, result.pseudo[:, -1], result.realized[:, -1], secs, side


def _call(fn, *args):
    return fn(*args)


def table(labels: list[str], ours: dict, theirs: dict, names: tuple[str, str] = ("privbandit", "authors")) -> list[str]:
    """The side-by-side lines: ``ours[label][metric]`` and ``theirs[label][metric]`` are per-run
    final regrets in run order; ``names`` says whose they are."""
    lines = []
    won = f"won ({names[0][:2]}/{names[1][:2]})"
    for metric in METRICS:
        lines.append(f"final {metric} regret: {names[0]} − {names[1]}, paired by instance")
        lines.append(f"  {'algorithm':<16} {names[0]:>15} {names[1]:>15} {'difference':>16} {'t':>6} "
                     f"{won:>11} {'relative':>9}")
        for label in labels:
            a, b = np.asarray(ours[label][metric]), np.asarray(theirs[label][metric])
            p = paired(a, b)
            se = [float(v.std(ddof=1) / np.sqrt(v.size)) for v in (a, b)]
            lines.append(f"  {label:<16} {a.mean():8.1f} ± {se[0]:4.1f} {b.mean():8.1f} ± {se[1]:4.1f} "
                         f"{p.mean_difference:+8.1f} ± {p.stderr:5.1f} {p.t:6.2f} {p.a_won:>5}/{p.b_won:<5} "
                         f"{100 * p.mean_difference / b.mean():+8.1f}%")
    return lines


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors-code", metavar="PATH", required=True,
                    help="the authors' LinBanditPrivate.py, or the directory holding it")
    ap.add_argument("--runs", type=int, default=20, help=f"the first RUNS of their instances, 2 … {MAX_RUNS}")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--horizon", type=int, default=20_000)
    ap.add_argument("--fresh-tree", action="store_true",
                    help="also run their JDP with a fresh noise per tree node, paired with both sides")
    args = ap.parse_args(argv)
    if not 2 <= args.runs <= MAX_RUNS:
        ap.error(f"--runs must be in [2, {MAX_RUNS}] (paired needs 2; their __main__ draws {MAX_RUNS}); "
                 f"got {args.runs}")
    if args.jobs < 1:
        ap.error(f"--jobs must be ≥ 1 (got {args.jobs})")
    if args.horizon < 1:
        ap.error(f"--horizon must be ≥ 1 (got {args.horizon})")
    module, stand_in = _bench().authors_module(args.authors_code)  # loud if PATH is not their module
    _AUTHORS[args.authors_code] = module
    fam, config = experiment_files.load(EXPERIMENT, [f"runs={args.runs}", f"horizon={args.horizon}",
                                                     'environment.generator="authors-main"'])
    env = config.environment
    world = instances(config.generator, env.arms, env.dim, config.seed, list(range(config.runs)))
    labels = fam.labels(config)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jobs {args.jobs}; "
          f"load {_load()}")
    print(f"authors' code: {module.__file__}" + ("  (pandas not installed: an empty module stood in for its "
                                                 "unused import)" if stand_in else ""))
    print(f"{config.runs} of the authors' instances (their __main__'s draw, np.random.seed({config.seed})), "
          f"d = {env.dim}, K = {env.arms}, T = {config.horizon}, ε = {config.epsilon:g}, δ = {config.delta:g}, "
          f"preset {config.preset}", flush=True)
    work = [(privbandit_run, tasks.Task(fam.name, config, label, tuple(range(config.runs)))) for label in labels]
    for label in labels:
        batch = fam.algorithm(config, label).batch
        work += [(authors_run, args.authors_code, label, r, world.arms[r], world.theta[r], config.epsilon,
                  config.delta, batch, config.horizon) for r in range(config.runs)]
    jdp, reuse = "LinUCB-JDP", "LinUCB-JDP+reuse"
    _, reused_config = experiment_files.load(EXPERIMENT, [f"runs={args.runs}", f"horizon={args.horizon}",
                                                          'environment.generator="authors-main"',
                                                          f'algorithms.{jdp}.tree_noise="authors-reused"'])
    work.append((privbandit_run, tasks.Task(fam.name, reused_config, jdp, tuple(range(config.runs))), reuse))
    if args.fresh_tree:
        work += [(authors_run, args.authors_code, jdp, r, world.arms[r], world.theta[r], config.epsilon,
                  config.delta, fam.algorithm(config, jdp).batch, config.horizon, True) for r in range(config.runs)]
    switched = {jdp: {m: np.full(config.runs, np.nan) for m in METRICS}}
    ours = {label: {} for label in labels}
    theirs = {label: {m: np.full(config.runs, np.nan) for m in METRICS} for label in labels}
    secs = {side: dict.fromkeys(labels, 0.0) for side in ("privbandit", "authors", "fresh tree", reuse)}
    start = time.perf_counter()
    for label, run, pseudo, realized, s, side in tasks.completed(_call, work, args.jobs):
        if run is None:
            ours[side or label] = {"pseudo": pseudo, "realized": realized}
            secs[side or "privbandit"][label] += s
        else:
            got = switched if side else theirs
            got[label]["pseudo"][run], got[label]["realized"][run] = pseudo, realized
            secs[side or "authors"][label] += s
    wall = time.perf_counter() - start
    print("\n".join(table(labels + [reuse], ours, {**theirs, reuse: theirs[jdp]})))
    print(f"{reuse}: privbandit's {jdp} with tree_noise = \"authors-reused\" (their reused draws; ledger: none "
          f"proven), against the same runs of their code ({secs[reuse][jdp]:.1f} s); the regret of the fresh "
          f"tree's noise, privbandit against privbandit:")
    print("\n".join(table([jdp], ours, {jdp: ours[reuse]}, ("fresh", "reused"))))
    if args.fresh_tree:
        print(f"{jdp}: the authors' code with a fresh noise per tree node ('fresh tree', their reused "
              f"draws replaced; {secs['fresh tree'][jdp]:.1f} s)")
        print("\n".join(table([jdp], switched, theirs, ("fresh tree", "authors"))))
        print("\n".join(table([jdp], ours, switched, ("privbandit", "fresh tree"))))
    print("seconds per side, summed over its tasks (wall in the worker; privbandit / authors): " + ", ".join(
        f"{label} {secs['privbandit'][label]:.1f} / {secs['authors'][label]:.1f}" for label in labels))
    print(f"wall {wall:.1f} s; load {_load()}")


if __name__ == "__main__":
    main()
