"""privbandit's ``paper-code`` beside the authors' own code, paired on the authors' instances (issue #31).

    python experiments/linear_authors_paired.py --authors-code PATH [--runs 20] [--jobs 2] [--horizon 20000]
        [--only LABEL ...] [--switch NAME ...] [--fresh-tree] [--privbandit-set OVERRIDE ...] [--per-run]

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

Row ``LinUCB-JDP+reuse`` (whenever JDP runs): privbandit's JDP with ``tree_noise = "authors-reused"`` (their ⌊ln(1 + t)⌋ + 1
draws made once and reused, :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.ReusedTreeNoise`;
its ledger says none proven) against the same authors' JDP runs; then privbandit's fresh tree − that
row, paired: the regret the fresh tree's noise costs (seconds more of privbandit's side).

``--switch NAME`` (repeatable): one difference switched on THEIR side at run time (a subclass of
their class; their file is never changed), the algorithm run a third time on every instance and
paired with their code and with privbandit's (:data:`SWITCHES`):

- ``fresh-tree`` (JDP; also ``--fresh-tree``): one fresh noise per node of the binary tree
  (:func:`fresh_tree`) in place of their reused draws (about a third more of the authors' CPU time);
- ``integer-b`` (SDP-Vec): the analyzer's b made the number of noise bits their randomizer draws
  (:func:`integer_b`: their float b drifts every estimate);
- ``ceil-gb`` (SDP-Vec): privbandit's integers g = ⌈g⌉, b = ⌈b⌉ (:func:`ceil_gb`).

``--privbandit-set OVERRIDE`` (repeatable): privbandit once more with these experiment-file
overrides (``KEY=VALUE``, as ``--set`` takes them), for each selected algorithm an override names
(``algorithms.<label>.…``; every selected one if none does), printed as row ``<label>+set`` and
paired with the authors' runs and with privbandit's own: a privbandit switch measured the way
``LinUCB-JDP+reuse`` measures ``tree_noise`` (an override of a field this checkout lacks fails
loudly, as ``--set`` does).

``--only LABEL`` (repeatable): those algorithms only (the reused-draws row needs ``LinUCB-JDP``).
Every SDP-Vec side also prints how many of its batches left V_m = λI + Σ Ṽ below privbandit's
eigenvalue floor Γ (= λ/2, where privbandit clips) and not positive definite at all (where their
widths are NaN: "invalid value encountered in sqrt", their line 313): privbandit's from its
learner's counts, theirs computed beside their run (:func:`watch_vm`, no randomness drawn).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.families.shuffle_linear_bandits.world import instances
from privbandit.runner import config as experiment_files
from privbandit.runner import tasks
from privbandit.runner.paired import paired

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "linear_fig1b_eps1.toml"
MAX_RUNS = 50  # the authors' __main__ draws 50 environments (num_runs)
METRICS = ("pseudo", "realized")
JDP, VEC = "LinUCB-JDP", "LinUCB-SDP-Vec"


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


def integer_b(module):
    """Their ``SDPLinUCBPVec`` with b = ⌊b⌋, the number of noise bits their randomizer draws.

    Their b = g²·ln²(d/δ)/(ε²B) (Thm 3.5's form with their constant 1, ``LinBanditPrivate.py`` line
    273) is a float: 61.22 at Fig. 1(b), g = max(2√B, d, 4) = 8.94 also a float. numpy's legacy
    ``binomial`` truncates n to an integer, so each label's R1d (line 320) draws Bin(61, ¼) bits,
    while A1d (line 325) subtracts p·b·B with b = 61.22 (Algorithm 7's debiasing): every released
    entry of Σφy and Σφφᵀ (the matrix mirrored, so all d² entries) drifts by −(L/g)·p·(b − ⌊b⌋)·B per
    batch, −0.171 at Fig. 1(b) (L = √2), −171 after 1000 batches, whatever the data. The switch sets
    b = ⌊b⌋ after their ``__init__`` and changes nothing else: the same bits are drawn from the same
    generator (n = 61.22 and n = 61 give numpy's binomial the same stream), only the analyzer's
    subtraction moves."""

    class IntegerBPVec(module.SDPLinUCBPVec):
        def __init__(self, env, n, params):
            super().__init__(env, n, params)
            self.b = math.floor(self.b)

    return IntegerBPVec


def ceil_gb(module):
    """Their ``SDPLinUCBPVec`` with privbandit's ``paper-code`` P_Vec integers: g = ⌈max(2√B, d, 4)⌉
    and b = ⌈g²·ln²(d/δ)/(ε²B)⌉ (9 and 62 at Fig. 1(b)), from
    :func:`privbandit.families.shuffle_linear_bandits.params.vec_params` itself. Their randomizer
    then draws all b bits the analyzer subtracts (no drift), at privbandit's resolution L/g."""

    class CeilGBPVec(module.SDPLinUCBPVec):
        def __init__(self, env, n, params):
            super().__init__(env, n, params)
            vec = lp.vec_params("paper-code", lp.batch_budget(self.epsilon, self.delta, 1), self.BatchSize,
                                self.d, self.L, self.L, None, "delta")
            self.g, self.b = vec.g, vec.b

    return CeilGBPVec


def watch_vm(cls):
    """``cls`` (their ``SDPLinUCBPVec`` or a switch of it) also counting, at each release (t a
    positive multiple of B, where their ``get_arm`` adds the batch), the batches whose V_m = Gram + ΛI
    (their Λ = 2Γ) has λ_min below Γ (privbandit's floor: it would clip) and ≤ 0 (their widths NaN)."""

    class Watched(cls):
        below_floor = not_pd = 0

        def get_arm(self, t):
            arm = super().get_arm(t)
            if t and t % self.BatchSize == 0:
                low = np.linalg.eigvalsh(self.Gram + 2 * self.Gamma * np.eye(self.d))[0]
                self.below_floor += int(low < self.Gamma)
                self.not_pd += int(low <= 0)
            return arm

    return Watched


# name → (the algorithm it switches, the subclass factory, what it changes on their side)
SWITCHES = {
    "fresh-tree": (JDP, fresh_tree, "one fresh noise per tree node in place of their reused draws"),
    "integer-b": (VEC, integer_b, "b = ⌊b⌋, the bits their randomizer draws (their float b drifts every estimate)"),
    "ceil-gb": (VEC, ceil_gb, "privbandit's integers g = ⌈g⌉, b = ⌈b⌉"),
}


def authors_run(path: str, label: str, run: int, x: np.ndarray, theta: np.ndarray, epsilon: float, delta: float,
                batch: int, horizon: int, switch: str | None = None) -> tuple:
    """One run of the authors' class for ``label`` on instance (x, θ), with ``switch`` (a name of
    :data:`SWITCHES`) applied: (label, run, pseudo, realized, seconds, switch, V_m counts or None)."""
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
    cls = SWITCHES[switch][1](module) if switch else getattr(module, _bench().AUTHORS_CLASS[label])
    if label == VEC:
        cls = watch_vm(cls)
    regret, alg = module.evaluate_one(cls, {}, env, horizon, 1)
    counts = (alg.below_floor, alg.not_pd) if hasattr(alg, "not_pd") else None
    return label, run, float(env.pseudo), float(np.sum(regret)), time.perf_counter() - start, switch, counts


def privbandit_run(task: tasks.Task, side: str | None = None) -> tuple:
    """All runs of one algorithm, stacked: (label, None, pseudo (R,), realized (R,), seconds, side,
    per run (batches its learner clipped, batches not PD))."""
    label, _runs, result, secs = tasks.execute(task)
    counts = [(x["batches_clipped"], x["batches_not_pd"]) for x in result.learner]
    return label, None, result.pseudo[:, -1], result.realized[:, -1], secs, side, counts


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


def vm_line(side: str, counts: list) -> str:
    """How many of a side's SDP-Vec batches had V_m below the floor Γ, and not PD, over its runs."""
    below, not_pd = (np.array([c[i] for c in counts]) for i in (0, 1))
    return (f"  {side:<18} λ_min(V_m) < Γ in {below.sum()} batches ({(below > 0).sum()} of {below.size} runs); "
            f"not PD in {not_pd.sum()} ({(not_pd > 0).sum()} runs)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--authors-code", metavar="PATH", required=True,
                    help="the authors' LinBanditPrivate.py, or the directory holding it")
    ap.add_argument("--runs", type=int, default=20, help=f"the first RUNS of their instances, 2 … {MAX_RUNS}")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--horizon", type=int, default=20_000)
    ap.add_argument("--only", metavar="LABEL", action="append",
                    help="run only this algorithm (repeatable; default: all five)")
    ap.add_argument("--switch", metavar="NAME", action="append", default=[], choices=sorted(SWITCHES),
                    help="also run their algorithm with this one difference switched, paired with both sides "
                         "(repeatable): " + "; ".join(f"{k} ({v[0]}): {v[2]}" for k, v in SWITCHES.items()))
    ap.add_argument("--fresh-tree", action="store_true", help="the same as --switch fresh-tree")
    ap.add_argument("--privbandit-set", metavar="OVERRIDE", action="append", default=[],
                    help="also run privbandit with this experiment-file override (KEY=VALUE, repeatable), "
                         "row '<label>+set', paired with the authors' and with privbandit's")
    ap.add_argument("--per-run", action="store_true",
                    help="also print each instance's final pseudo-regret of every switched algorithm, per side")
    args = ap.parse_args(argv)
    if not 2 <= args.runs <= MAX_RUNS:
        ap.error(f"--runs must be in [2, {MAX_RUNS}] (paired needs 2; their __main__ draws {MAX_RUNS}); "
                 f"got {args.runs}")
    if args.jobs < 1:
        ap.error(f"--jobs must be ≥ 1 (got {args.jobs})")
    if args.horizon < 1:
        ap.error(f"--horizon must be ≥ 1 (got {args.horizon})")
    switches = list(dict.fromkeys(args.switch + (["fresh-tree"] if args.fresh_tree else [])))
    module, stand_in = _bench().authors_module(args.authors_code)  # loud if PATH is not their module
    _AUTHORS[args.authors_code] = module
    fam, config = experiment_files.load(EXPERIMENT, [f"runs={args.runs}", f"horizon={args.horizon}",
                                                     'environment.generator="authors-main"'])
    env = config.environment
    world = instances(config.generator, env.arms, env.dim, config.seed, list(range(config.runs)))
    labels = fam.labels(config)
    if args.only:
        unknown = sorted(set(args.only) - set(labels))
        if unknown:
            ap.error(f"--only: {', '.join(unknown)} is not one of {', '.join(labels)}")
        labels = [label for label in labels if label in args.only]
    for name in switches:
        if SWITCHES[name][0] not in labels:
            ap.error(f"--switch {name} switches {SWITCHES[name][0]}, which --only leaves out")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jobs {args.jobs}; "
          f"load {_load()}")
    print(f"authors' code: {module.__file__}" + ("  (pandas not installed: an empty module stood in for its "
                                                 "unused import)" if stand_in else ""))
    print(f"{config.runs} of the authors' instances (their __main__'s draw, np.random.seed({config.seed})), "
          f"d = {env.dim}, K = {env.arms}, T = {config.horizon}, ε = {config.epsilon:g}, δ = {config.delta:g}, "
          f"preset {config.preset}", flush=True)

    def theirs_on_every_instance(label, switch=None):
        batch = fam.algorithm(config, label).batch
        return [(authors_run, args.authors_code, label, r, world.arms[r], world.theta[r], config.epsilon,
                 config.delta, batch, config.horizon, switch) for r in range(config.runs)]

    work = [(privbandit_run, tasks.Task(fam.name, config, label, tuple(range(config.runs)))) for label in labels]
    for label in labels:
        work += theirs_on_every_instance(label)
    reuse = "LinUCB-JDP+reuse" if JDP in labels else None
    if reuse:
        _, reused_config = experiment_files.load(EXPERIMENT, [f"runs={args.runs}", f"horizon={args.horizon}",
                                                              'environment.generator="authors-main"',
                                                              f'algorithms.{JDP}.tree_noise="authors-reused"'])
        work.append((privbandit_run, tasks.Task(fam.name, reused_config, JDP, tuple(range(config.runs))), reuse))
    for name in switches:
        work += theirs_on_every_instance(SWITCHES[name][0], name)
    varied = []
    if args.privbandit_set:
        _, set_config = experiment_files.load(EXPERIMENT, [f"runs={args.runs}", f"horizon={args.horizon}",
                                                           'environment.generator="authors-main"',
                                                           *args.privbandit_set])
        named = [label for label in labels if any(o.startswith(f"algorithms.{label}.") for o in args.privbandit_set)]
        varied = named or labels
        work += [(privbandit_run, tasks.Task(fam.name, set_config, label, tuple(range(config.runs))), f"{label}+set")
                 for label in varied]
    ours = {label: {} for label in labels}
    theirs = {side: {label: {m: np.full(config.runs, np.nan) for m in METRICS} for label in labels}
              for side in [None, *switches]}
    vm = {side: [None] * config.runs for side in ["authors", *switches]}
    secs = {side: dict.fromkeys(labels, 0.0) for side in ("privbandit", "authors", *switches, reuse,
                                                           *(f"{label}+set" for label in varied))}
    start = time.perf_counter()
    for label, run, pseudo, realized, s, side, counts in tasks.completed(_call, work, args.jobs):
        if run is None:
            ours[side or label] = {"pseudo": pseudo, "realized": realized}
            secs[side or "privbandit"][label] += s
            if label == VEC:
                vm[side or "privbandit"] = counts
        else:
            theirs[side][label]["pseudo"][run], theirs[side][label]["realized"][run] = pseudo, realized
            secs[side or "authors"][label] += s
            if label == VEC:
                vm[side or "authors"][run] = counts
    wall = time.perf_counter() - start
    print("\n".join(table(labels + ([reuse] if reuse else []), ours,
                          {**theirs[None], **({reuse: theirs[None][JDP]} if reuse else {})})))
    if reuse:
        print(f"{reuse}: privbandit's {JDP} with tree_noise = \"authors-reused\" (their reused draws; ledger: "
              f"none proven), against the same runs of their code ({secs[reuse][JDP]:.1f} s); the regret of the "
              f"fresh tree's noise, privbandit against privbandit:")
        print("\n".join(table([JDP], ours, {JDP: ours[reuse]}, ("fresh", "reused"))))
    if varied:
        print(f"privbandit with {' '.join(args.privbandit_set)} (rows '+set'): against the authors' code, then "
              f"privbandit − '+set' (" + ", ".join(f"{label} {secs[label + '+set'][label]:.1f} s" for label in varied)
              + ")")
        print("\n".join(table([f"{label}+set" for label in varied], ours,
                              {f"{label}+set": theirs[None][label] for label in varied})))
        print("\n".join(table(varied, ours, {label: ours[f"{label}+set"] for label in varied},
                              ("privbandit", "+set"))))
    for name in switches:
        label = SWITCHES[name][0]
        print(f"{label}: the authors' code switched, {name}: {SWITCHES[name][2]} ({secs[name][label]:.1f} s)")
        print("\n".join(table([label], theirs[name], theirs[None], (name, "authors"))))
        print("\n".join(table([label], ours, theirs[name], ("privbandit", name))))
    if VEC in labels and None not in vm["authors"]:
        print(f"{VEC}: batches whose V_m had λ_min below Γ = λ/2 (privbandit's floor: it clips there) and ≤ 0 "
              f"(their widths NaN)")
        sides = ["privbandit", *([VEC + "+set"] if VEC in varied else []), "authors",
                 *(name for name in switches if SWITCHES[name][0] == VEC)]
        print("\n".join(vm_line(side, vm[side]) for side in sides))
    if args.per_run:
        for label in dict.fromkeys([*(SWITCHES[name][0] for name in switches), *varied]):
            ours_sides = ["privbandit", *([f"{label}+set"] if label in varied else [])]
            their_sides = ["authors", *(n for n in switches if SWITCHES[n][0] == label)]
            print(f"{label}: final pseudo-regret per instance ({', '.join(ours_sides + their_sides)})"
                  + ("; [batches with λ_min(V_m) < Γ, not PD] beside each" if label == VEC else ""))
            for r in range(config.runs):
                cells = []
                for side in ours_sides + their_sides:
                    regret = (ours[label if side == "privbandit" else side] if side in ours_sides
                              else theirs[None if side == "authors" else side][label])["pseudo"][r]
                    count = vm.get(side)[r] if label == VEC and vm.get(side) else None
                    cells.append(f"{regret:8.1f}" + (f" {list(count)}" if count is not None else ""))
                print(f"  {r:3d} " + "  ".join(cells))
    print("seconds per side, summed over its tasks (wall in the worker; privbandit / authors): " + ", ".join(
        f"{label} {secs['privbandit'][label]:.1f} / {secs['authors'][label]:.1f}" for label in labels))
    print(f"wall {wall:.1f} s; load {_load()}")


if __name__ == "__main__":
    main()
