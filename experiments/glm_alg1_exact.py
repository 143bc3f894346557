"""ShuffleGLM (Algorithm 1) under the ``exact`` preset, at equal guarantees (ε, δ) = (1, 0.1), paired
on the same instances (issue #30 item 5):

    python experiments/glm_alg1_exact.py [--runs 4] [--jobs 1]

experiments/glm_alg1_exact.toml runs as written (preset ``exact``) and its ShuffleGLM labels again
under preset ``paper`` (eq. (127)'s 24·10⁴); Private-GLM runs once (the ``exact`` preset leaves it
as ``paper``). Uniform play is the expected regret of a uniform draw on the same arm sets. Prints
each algorithm's pseudo-regret, its ratio to uniform play, the ledger's ε at δ (the largest over the
runs) and its accountant, the noise bits b per P_Vec call (run 0, batch 1) and the CPU seconds per run
(the first exact run of a worker includes the accountant's calibration), then the paired differences
run by run.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from privbandit.families.glm_bandits import shuffle_parties as sp
from privbandit.families.glm_bandits.config import GLMExperiment
from privbandit.families.glm_bandits.family import FAMILY
from privbandit.runner.config import validate_experiment
from privbandit.runner.paired import paired
from privbandit.runner.tasks import Task, execute

HERE = Path(__file__).parent


def one(args) -> dict:
    config, label, run = args
    cpu = time.process_time()  # this worker's CPU: wall time says more about the machine's load
    _, _, res, _ = execute(Task(FAMILY.name, config, label, (run,)))
    cpu = time.process_time() - cpu
    w = FAMILY.world(config, [run])
    setup = (sp.shuffle_setup(FAMILY.public_task(config, label, [run])).describe()
             if config.algorithms[label].algorithm == "shuffle-glm" else None)
    return {"regret": float(res.pseudo[0, -1]), "uniform": float((w.best - w.means.mean(axis=-1)).sum()),
            "eps": res.privacy["epsilon_at_delta"], "guarantee": res.privacy["guarantee"],
            "basis": res.privacy.get("basis", []), "cpu": cpu, "setup": setup}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    exact = validate_experiment(GLMExperiment, HERE / "glm_alg1_exact.toml")[0]
    if args.runs:
        exact = exact.model_copy(update={"runs": args.runs})
    paper = exact.model_copy(update={"preset": "paper"})
    shuffle = [lab for lab, a in exact.algorithms.items() if a.algorithm == "shuffle-glm"]
    arms = [(f"{lab} [exact]", exact, lab) for lab in shuffle] + [(f"{lab} [paper]", paper, lab) for lab in shuffle]
    arms += [(lab, exact, lab) for lab, a in exact.algorithms.items() if a.algorithm != "shuffle-glm"]
    runs = range(exact.runs)
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        out = list(pool.map(one, [(c, lab, r) for _, c, lab in arms for r in runs]))
    res = {name: out[i * exact.runs:(i + 1) * exact.runs] for i, (name, _, _) in enumerate(arms)}
    uniform = np.array([r["uniform"] for r in res[arms[0][0]]])
    reg = {name: np.array([r["regret"] for r in rs]) for name, rs in res.items()}
    reg["uniform play"] = uniform

    print(f"\n### T = {exact.horizon}, (ε, δ) = ({exact.epsilon:g}, {exact.delta:g}), {exact.runs} paired runs\n")
    print("| algorithm | pseudo-regret (mean ± se) | ÷ uniform | ledger ε at δ | accountant "
          "| b per call (cov / grad, batch 1) | CPU s per run |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in res.items():
        r = reg[name]
        eps = "none proven" if rs[0]["guarantee"] != "proven" else f"{max(x['eps'] for x in rs):.4f}"
        acct = "exact (counts.BASIS)" if any("exact privacy" in b for b in rs[0]["basis"]) else (
            "Lemma S.1/S.2 + adv. comp." if rs[0]["setup"] else "zCDP tree + 𝒫_GD")
        bits = "—"
        if rs[0]["setup"]:
            b0 = rs[0]["setup"]["batches"][0]
            bits = f"{b0['cov_b']} / {b0['grad_b']}"
        print(f"| {name} | {r.mean():.0f} ± {r.std(ddof=1) / np.sqrt(r.size):.0f} | {np.mean(r / uniform):.3f} | "
              f"{eps} | {acct} | {bits} | {np.mean([x['cpu'] for x in rs]):.1f} |")
    print(f"| uniform play | {uniform.mean():.0f} ± {uniform.std(ddof=1) / np.sqrt(uniform.size):.0f} | 1.000 | 0 "
          "| — | — | — |")

    print("\n### Paired differences (a − b; negative: a has less regret)\n")
    print("| a | b | mean difference ± se | t | a won / runs |")
    print("|---|---|---|---|---|")
    pairs = [(f"{lab} [exact]", f"{lab} [paper]") for lab in shuffle]
    pairs += [(f"{lab} [exact]", other) for lab in shuffle for other in ("private-glm", "uniform play")
              if other in reg]
    for a, b in pairs:
        p = paired(reg[a], reg[b])
        print(f"| {a} | {b} | {p.mean_difference:+.0f} ± {p.stderr:.0f} | {p.t:+.2f} | {p.a_won}/{p.runs} |")
    print(f"\nwall time {time.perf_counter() - start:.0f} s on {args.jobs} processes")


if __name__ == "__main__":
    main()
