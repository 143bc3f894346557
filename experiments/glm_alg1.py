"""ShuffleGLM (Algorithm 1), which the paper never ran: regret against T, against ε and against the
number of 𝒫_GD gradient rounds, and what one user sends over all her rounds.

    python experiments/glm_alg1.py [--runs 3] [--jobs 1] [--eq6-only]

The base instance is experiments/glm_alg1.toml (logistic, d = 3, K = 10, S = 2, warm-up 15 % of T,
M = 3). Each sweep varies one knob of its three algorithms and prints a markdown table: the mean
pseudo-regret over the runs, its ratio to uniform play's expected regret on the same arm sets (a
non-learning baseline), ‖θ̂_1 − θ*‖ after the warm-up, and the ledger's ε at δ (or "none proven").
The last table gives eq. (6)'s B_1 per T and algorithm; where it fits in T for every run, the T
sweep's runs again with it in place of the 0.15·T stand-in, paired run by run.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from privbandit.families.glm_bandits import shuffle_glm as sg
from privbandit.families.glm_bandits import shuffle_parties as sp
from privbandit.families.glm_bandits.config import GLMExperiment
from privbandit.families.glm_bandits.family import FAMILY
from privbandit.runner.config import validate_experiment
from privbandit.runner.paired import paired
from privbandit.runner.tasks import Task, execute

HERE = Path(__file__).parent
LABELS = ["shuffle-glm", "shuffle-glm@gamma1", "shuffle-glm@gamma1-C1"]


def variant(base: GLMExperiment, horizon: int | None = None, epsilon: float | None = None,
            iterations: int | None = None, runs: int | None = None, eq6: bool = False) -> GLMExperiment:
    """``eq6``: the warm-up B_1 of eq. (6) (``warmup`` unset), else the stand-in 15 % of T."""
    T = horizon or base.horizon
    algs = {}
    for label, a in base.algorithms.items():
        upd = {"warmup": None if eq6 else int(0.15 * T)}
        if epsilon is not None:
            upd["epsilon"] = epsilon
        if iterations is not None:
            upd["max_iterations"] = iterations
        algs[label] = a.model_copy(update=upd)
    return base.model_copy(update={"horizon": T, "algorithms": algs, "runs": runs or base.runs})


def one(args) -> dict:
    config, label, run = args
    _, _, res, secs = execute(Task(FAMILY.name, config, label, (run,)))
    w = FAMILY.world(config, [run])
    uniform = float((w.best - w.means.mean(axis=-1)).sum())
    first = next((r for r in res.rounds if "theta_error" in r), None)
    return {"label": label, "regret": float(res.pseudo[0, -1]), "uniform": uniform,
            "theta1_error": None if first is None else first["theta_error"],
            "eps": res.privacy["epsilon_at_delta"], "guarantee": res.privacy["guarantee"], "secs": secs,
            "setup": sp.shuffle_setup(FAMILY.public_task(config, label, [run])).describe()}


def sweep(pool, configs: dict, labels: list[str] = LABELS) -> dict:
    jobs = [(key, (c, label, r)) for key, c in configs.items() for label in labels for r in range(c.runs)]
    out = {}
    for (key, job), res in zip(jobs, pool.map(one, [j for _, j in jobs])):
        out.setdefault((key, job[1]), []).append(res)
    return out


def table(title: str, knob: str, keys: list, results: dict) -> None:
    print(f"\n### {title}\n")
    print(f"| {knob} | algorithm | regret (mean ± se) | ÷ uniform | ‖θ̂₁ − θ*‖ | ledger ε at δ |")
    print("|---|---|---|---|---|---|")
    for key in keys:
        for label in LABELS:
            rs = results[key, label]
            reg = np.array([r["regret"] for r in rs])
            ratio = np.mean([r["regret"] / r["uniform"] for r in rs])
            err = np.mean([r["theta1_error"] for r in rs])
            eps = rs[0]["eps"]
            led = "none proven" if rs[0]["guarantee"] != "proven" else f"{eps:.3f}"
            se = reg.std(ddof=1) / np.sqrt(reg.size) if reg.size > 1 else 0.0
            print(f"| {key} | {label} | {reg.mean():.0f} ± {se:.0f} | {ratio:.2f} | {err:.2f} | {led} |")


def bytes_table(keys: list, results: dict) -> None:
    print("\n### What one user of batch k sends over all her rounds (ε = 4, T = 20000; the last batch sends nothing)\n")
    print("| max_iterations | batch | users | rounds | T_it formula | wire bytes (count-encoded) "
          "| literal bits (Alg. 4 multisets) |")
    print("|---|---|---|---|---|---|---|")
    for key in keys:
        setup = results[key, "shuffle-glm"][0]["setup"]
        for k, b in enumerate(setup["batches"][:-1]):
            print(f"| {key} | {k + 1} | {b['users']} | {b['rounds']} | {b['iterations_formula']:.3g} | "
                  f"{b['protocol_bytes_per_user']:.0f} | {b['literal_bits_per_user']:.3g} |")


def eq6_table(pool, base: GLMExperiment, Ts: list[int], by_T: dict, runs: int | None) -> None:
    """Eq. (6)'s B_1 per run (κ is the run's) against T; where it leaves room for a second batch in
    every run, the same runs again with it in place of the 15 % stand-in, paired run by run."""
    print("\n### Eq. (6)'s warm-up B_1 against T (ε = 4; the sweeps above use the stand-in 0.15·T)\n")
    print("| T | algorithm | γ | B_1 of eq. (6), min–max over runs | ÷ T | regret with it − with 0.15·T (paired) |")
    print("|---|---|---|---|---|---|")
    for T in Ts:
        config = variant(base, horizon=T, runs=runs)
        fits = []
        for label in LABELS:
            b1, gammas = [], []
            for r in range(config.runs):
                s = sp.shuffle_setup(FAMILY.public_task(config, label, [r]))
                b1.append(sg.eq6_warmup(T, config.algorithms[label].batches, s.kappa, s.S, s.d,
                                        s.consts.gamma, config.algorithms[label].schedule_exponent))
                gammas.append(s.consts.gamma)
            if max(b1) < T:
                fits.append((label, b1, gammas))
            else:
                print(f"| {T} | {label} | {np.mean(gammas):.4g} | {min(b1):.3g}–{max(b1):.3g} | "
                      f"{min(b1) / T:.3g}–{max(b1) / T:.3g} | exceeds T: the whole horizon would be the warm-up |")
        if fits:
            with_eq6 = sweep(pool, {T: variant(base, horizon=T, runs=runs, eq6=True)}, [f[0] for f in fits])
            for label, b1, gammas in fits:
                a = np.array([r["regret"] for r in with_eq6[T, label]])
                b = np.array([r["regret"] for r in by_T[T, label]])
                p = paired(a, b)
                print(f"| {T} | {label} | {np.mean(gammas):.4g} | {min(b1):.3g}–{max(b1):.3g} | "
                      f"{min(b1) / T:.3g}–{max(b1) / T:.3g} | {a.mean():.0f} vs {b.mean():.0f}: "
                      f"{p.mean_difference:+.0f} ± {p.stderr:.0f} (t = {p.t:+.2f}, {p.a_won}/{p.runs} won) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--eq6-only", action="store_true", help="only the T sweep and eq. (6)'s B_1 table")
    args = ap.parse_args()
    base = validate_experiment(GLMExperiment, HERE / "glm_alg1.toml")[0]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        Ts = [5000, 20000, 80000]
        by_T = sweep(pool, {T: variant(base, horizon=T, runs=args.runs) for T in Ts})
        if args.eq6_only:
            table("Regret against T (ε = 4, T_it ≤ 50)", "T", Ts, by_T)
            eq6_table(pool, base, Ts, by_T, args.runs)
            print(f"\nwall time {time.perf_counter() - start:.0f} s on {args.jobs} processes")
            return
        epss = [1.0, 4.0, 8.0, 16.0, 30.0]
        by_eps = sweep(pool, {e: variant(base, epsilon=e, runs=args.runs) for e in epss})
        its = [1, 5, 50, 200, 800]
        by_it = sweep(pool, {i: variant(base, iterations=i, runs=args.runs) for i in its})
        table("Regret against T (ε = 4, T_it ≤ 50)", "T", Ts, by_T)
        table("Regret against ε (T = 20000, T_it ≤ 50)", "ε", epss, by_eps)
        table("Regret against the number of gradient rounds (T = 20000, ε = 4)", "max_iterations", its, by_it)
        bytes_table(its, by_it)
        eq6_table(pool, base, Ts, by_T, args.runs)
    print(f"\nwall time {time.perf_counter() - start:.0f} s on {args.jobs} processes")


if __name__ == "__main__":
    main()
