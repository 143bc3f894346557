"""The concurrent-shuffle counter's scaling claims (Tenenbaum, Kaplan, Mansour & Stemmer, ICML 2023),
spec §6 R1–R5, with the vectorized counter (the same numbers ``privbandit run`` gives per run).

    python experiments/reproduce_concurrent.py [--runs 20] [--epsilon 1] [--out results/reproduce-concurrent]
                                               [--figures docs/figures] [--only R1 R2 ...] [--max-n 10000000]

- R1: max_t |Ŝ_t − S_t| against n for k = 1…5 at exact trees n = d_low^{2k+1} (d = d_low²; the spec's
  configurations plus larger d_low for k = 4, 5 so every k has ≥ 2 points), with the fitted log-log
  slope (least squares over every run, ± 2 standard errors) beside Thm 3.4's 1/(2k+1).
- R2: error against k at fixed n = 2^14, with Alg. 2 (binary tree, k = log n − 1), the central tree
  and the local counter; then k = 1…4 at n = 10⁵, 10⁶ (4 runs) and 10⁷ (2 runs), where k > 1 wins.
- R3: §2.5's bad baselines (the k lowest / k highest binary levels) against Alg. 3 at the same k.
- R4: per-node noise variance against the protocol's law; per-time variance against |V_t|·V_node.
- R5: the hard inputs Δ_{n,k} against i.i.d. and all-ones streams.
- R6: Algorithm 4's regret against n for k = 1, 2, 3 (5 runs; :mod:`~privbandit.families.concurrent_shuffle.linucb`).

δ = 1/(10n). The summation protocol is ``bin-a``: a *stand-in* for Tenenbaum et al. 2021's Alg. 3
(spec §2.2.1 option A), calibrated by exact privacy accounting; every figure says so.
Writes summary.json under --out and concurrent_r1.png, concurrent_r2.png under --figures.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from privbandit.families.concurrent_shuffle import counter as cnt

HERE = Path(__file__).resolve().parent
R1_CONFIGS = {1: [10, 20, 40], 2: [4, 6, 9], 3: [3, 4, 5], 4: [2, 3, 4], 5: [2, 3]}  # d_low; n = d_low^(2k+1)
STAND_IN = "bin-a: stand-in for M^sum_bin (Tenenbaum et al. 2021 Alg. 3 not obtained), spec option A"


def errors(mode: str, n: int, k, eps: float, runs: int, kind: str = "iid", seed: int = 1, **kw) -> tuple:
    spec = cnt.counter_spec(mode, n, k, eps, 1 / (10 * n), **kw)
    bits = cnt.stream_bits(kind, 0.5, spec, seed, list(range(runs)))
    keys = list(range(1000, 1000 + runs)) if mode == "central_tree" else None
    run = cnt.simulate(spec, bits, seed, f"{mode}-{k}", list(range(runs)), keys=keys)
    return spec, run, cnt.metrics(run)


def fit(ns: list[int], errs: list[list[float]], scale: list[float] | None = None) -> dict:
    """log(err/scale) = a + slope·log n over every run's point; the slope's standard error from the
    residuals (runs at one n are independent; the n's share nothing but the seed's layout)."""
    x = np.concatenate([[math.log(n)] * len(e) for n, e in zip(ns, errs)])
    y = np.log(np.concatenate([np.asarray(e) / (1.0 if scale is None else c) for e, c in
                               zip(errs, scale or [1.0] * len(errs))]))
    A = np.vstack([np.ones_like(x), x]).T
    coef, res, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    s2 = resid @ resid / max(1, len(x) - 2)
    se = math.sqrt(s2 * np.linalg.inv(A.T @ A)[1, 1])
    return {"slope": float(coef[1]), "stderr": se}


def r1(args) -> dict:
    out = {}
    for k, lows in R1_CONFIGS.items():
        ns, errs, rows, scale = [], [], [], []
        for low in lows:
            n = low ** (2 * k + 1)
            spec, _, m = errors("csta_k", n, k, args.epsilon, args.runs, d_low=low)
            e = [x["max_abs_error"] for x in m]
            ns.append(n)
            errs.append(e)
            # Thm 3.4's α without its n^{1/(2k+1)}: √(V_node·k)·√(log n), V_node the calibrated
            # protocol's exact per-node variance (it grows with log(k/δ), δ = 1/(10n)).
            scale.append(math.sqrt(max(mm.variance() for mm in spec.mechanisms) * k * math.log(n)))
            rows.append({"n": n, "d_low": low, "D_tree": low * low, "max_abs_error_mean": float(np.mean(e)),
                         "stderr": float(np.std(e, ddof=1) / math.sqrt(len(e))),
                         "max_intra_bias_mean": float(np.mean([x["max_intra_bias"] for x in m]))})
        f = fit(ns, errs)
        g = fit(ns, errs, scale)
        theory = 1 / (2 * k + 1)
        f.update(theory=theory, within_2se=abs(f["slope"] - theory) <= 2 * f["stderr"],
                 corrected_slope=g["slope"], corrected_stderr=g["stderr"],
                 corrected_within_2se=abs(g["slope"] - theory) <= 2 * g["stderr"])
        out[k] = {"points": rows, "fit": f}
        print(f"R1 k={k}: slope {f['slope']:.3f} ± {2 * f['stderr']:.3f} (2 se), log-corrected "
              f"{g['slope']:.3f} ± {2 * g['stderr']:.3f}, vs 1/(2k+1) = {theory:.3f}; "
              + ", ".join(f"n={r['n']}: {r['max_abs_error_mean']:.1f}" for r in rows))
    return out


def r2(args) -> dict:
    n = 2**14
    out = {}
    for k in range(1, 8):
        _, _, m = errors("csta_k", n, k, args.epsilon, args.runs)
        out[f"csta_k@{k}"] = float(np.mean([x["max_abs_error"] for x in m]))
    spec, _, m = errors("csta_binary", n, None, args.epsilon, args.runs)
    out[f"csta_binary@{spec.k}"] = float(np.mean([x["max_abs_error"] for x in m]))
    for mode in ("central_tree", "ldp"):
        _, _, m = errors(mode, n, None, args.epsilon, args.runs)
        out[mode] = float(np.mean([x["max_abs_error"] for x in m]))
    print("R2 n=2^14: " + ", ".join(f"{key}: {v:.1f}" for key, v in out.items()))
    large = {}
    for big, runs in ((10**5, 4), (10**6, 4), (10**7, 2)):  # where Alg. 3 with k > 1 starts to win
        if big > args.max_n:
            continue
        large[big] = {"runs": runs}
        for k in (1, 2, 3, 4):
            _, _, m = errors("csta_k", big, k, args.epsilon, runs)
            large[big][k] = float(np.mean([x["max_abs_error"] for x in m]))
        print(f"R2 n={big:,} ({runs} runs): " + ", ".join(f"k={k}: {large[big][k]:.0f}" for k in (1, 2, 3, 4)))
    return {"n": n, "max_abs_error_mean": out, "larger_n": large}


def r3(args) -> dict:
    n = 2**14
    out = {}
    for k in (2, 3, 4, 5):
        row = {}
        for mode in ("csta_k", "lowest_k_binary", "highest_k_binary"):
            _, _, m = errors(mode, n, k, args.epsilon, args.runs)
            row[mode] = float(np.mean([x["max_abs_error"] for x in m]))
        out[k] = row
        print(f"R3 n=2^14 k={k}: " + ", ".join(f"{key}: {v:.1f}" for key, v in row.items()))
    return {"n": n, "max_abs_error_mean": out}


def r4(args) -> dict:
    """Node noise against the law; Var(Ŝ_t − S_{t0}) over runs against |V_t|·V_node at a few t0."""
    n, k = 3**7, 3
    spec, run, _ = errors("csta_k", n, k, args.epsilon, max(args.runs, 1000))
    nodes = cnt.node_noise_variance(run)
    truth = np.cumsum(run.bits, axis=1)
    s1 = spec.tree.sizes[0]
    t0 = np.array([s1, 10 * s1, n // 3 // s1 * s1, n // s1 * s1 - s1, n // s1 * s1])
    noise = run.estimates[:, t0 // s1 - 1] - truth[:, t0 - 1]
    law = np.zeros(t0.size)
    for level in range(1, spec.k + 1):
        lo, hi = spec.tree.digits(t0, level)
        law += (hi - lo) * spec.mechanisms[level - 1].variance()
    per_time = [{"t0": int(t), "nodes": int(spec.tree.node_count(np.array([t]))[0]), "empirical": float(v),
                 "law": float(w)} for t, v, w in zip(t0, noise.var(axis=0, ddof=1), law)]
    print(f"R4 n={n} k={k}, {run.bits.shape[0]} runs: per node " + ", ".join(
        f"level {x['level']}: {x['empirical']:.1f} vs {x['law']:.1f}" for x in nodes))
    print("R4 per time: " + ", ".join(f"t0={x['t0']} |V|={x['nodes']}: {x['empirical']:.0f} vs {x['law']:.0f}"
                                      for x in per_time))
    return {"n": n, "k": k, "runs": int(run.bits.shape[0]), "per_node": nodes, "per_time": per_time}


def r5(args) -> dict:
    out = {}
    for k, low in ((1, 20), (2, 6), (3, 4)):
        n = low ** (2 * k + 1)
        row = {}
        for kind in ("iid", "ones", "hard"):
            _, _, m = errors("csta_k", n, k, args.epsilon, args.runs, kind=kind, d_low=low)
            row[kind] = {"max_abs_error": float(np.mean([x["max_abs_error"] for x in m])),
                         "max_intra_bias": float(np.mean([x["max_intra_bias"] for x in m]))}
        out[k] = {"n": n, **row}
        print(f"R5 k={k} n={n}: " + ", ".join(f"{key}: {v['max_abs_error']:.1f} (bias {v['max_intra_bias']:.0f})"
                                               for key, v in row.items()))
    return out


def r6(args) -> dict:
    """Algorithm 4 (theory constants: P_Vec b with 24·10⁴, λ = 2σ̃√d) against n, k = 1, 2, 3, and the
    same batches with exact sums (non-private): final pseudo-regret, 5 runs, 100 arms, d = 5, δ = 0.1
    (the linear family's template), with the log-log slope beside (k+1)/(2k+1)."""
    import dataclasses

    from privbandit.families.concurrent_shuffle import linucb

    ns = [2000, 8000, 32000]
    runs = list(range(5))
    out = {}
    for k in (1, 2, 3):
        errs, exact = [], []
        for n in ns:
            a = linucb.alg4(n, k, 5, args.epsilon, 0.1)
            errs.append(linucb.run(a, 100, 1, runs, f"r6-{k}")["final_regret"].tolist())
            e = dataclasses.replace(a, private=False, lam=1.0, sigma_tilde=0.0)
            exact.append(linucb.run(e, 100, 1, runs, f"r6-{k}")["final_regret"].tolist())
        f = fit(ns, errs)
        out[k] = {"n": ns, "regret_mean": [float(np.mean(e)) for e in errs],
                  "exact_regret_mean": [float(np.mean(e)) for e in exact], "fit": f,
                  "theory": (k + 1) / (2 * k + 1)}
        print(f"R6 k={k}: regret " + ", ".join(f"n={n}: {np.mean(e):.0f} (exact sums {np.mean(x):.0f})"
                                             for n, e, x in zip(ns, errs, exact))
              + f"; slope {f['slope']:.2f} ± {2 * f['stderr']:.2f} vs (k+1)/(2k+1) = {(k + 1) / (2 * k + 1):.2f}")
    return out


def plots(res: dict, figures: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    if "R1" in res:
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        for k, r in res["R1"].items():
            ns = [p["n"] for p in r["points"]]
            e = [p["max_abs_error_mean"] for p in r["points"]]
            se = [p["stderr"] for p in r["points"]]
            f = r["fit"]
            ax.errorbar(ns, e, yerr=se, marker="o", capsize=3,
                        label=f"k={k}: slope {f['slope']:.2f}±{2 * f['stderr']:.2f}, corrected "
                              f"{f['corrected_slope']:.2f}±{2 * f['corrected_stderr']:.2f} (1/(2k+1)={f['theory']:.2f})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (exact trees n = d_low^(2k+1))")
        ax.set_ylabel("max_t |Ŝ_t − S_t| (mean ± se)")
        ax.set_title(f"R1, ε = {res['epsilon']}, δ = 1/(10n), {res['runs']} runs; {STAND_IN[:5]} stand-in", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(figures / "concurrent_r1.png", dpi=120)
        plt.close(fig)
    if "R2" in res:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        d = res["R2"]["max_abs_error_mean"]
        ks = [int(key.split("@")[1]) for key in d if key.startswith("csta_k@")]
        ax.plot(ks, [d[f"csta_k@{k}"] for k in ks], "o-", label="Alg. 3 (csta_k)")
        for key, style in (("central_tree", "--"), ("ldp", ":")):
            ax.axhline(d[key], ls=style, color="grey", label=key)
        b = next(key for key in d if key.startswith("csta_binary"))
        ax.plot([int(b.split("@")[1])], [d[b]], "s", label=f"Alg. 2 (k = log n − 1 = {b.split('@')[1]})")
        for big, row in res["R2"].get("larger_n", {}).items():
            ax.plot([1, 2, 3, 4], [row[k] for k in (1, 2, 3, 4)], "^-", alpha=0.7,
                    label=f"Alg. 3, n = {int(big):,} ({row['runs']} runs)")
        ax.set_yscale("log")
        ax.set_xlabel("k shufflers")
        ax.set_ylabel("max_t |Ŝ_t − S_t| (mean)")
        ax.set_title(f"R2: error against k, ε = {res['epsilon']} (n = 2^14: {res['runs']} runs; bin-a stand-in)",
                     fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(figures / "concurrent_r2.png", dpi=120)
        plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("results/reproduce-concurrent"))
    ap.add_argument("--figures", type=Path, default=HERE.parent / "docs" / "figures")
    ap.add_argument("--only", nargs="*", default=["R1", "R2", "R3", "R4", "R5", "R6"])
    ap.add_argument("--max-n", type=int, default=10**7, help="largest n of R2's larger-n sweep")
    args = ap.parse_args()
    start = time.perf_counter()
    res = {"epsilon": args.epsilon, "runs": args.runs, "protocol": STAND_IN}
    for name, fn in (("R1", r1), ("R2", r2), ("R3", r3), ("R4", r4), ("R5", r5), ("R6", r6)):
        if name in args.only:
            t = time.perf_counter()
            res[name] = fn(args)
            res[f"{name}_seconds"] = round(time.perf_counter() - t, 2)
    res["elapsed_s"] = round(time.perf_counter() - start, 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(res, indent=2, default=float) + "\n")
    plots(res, args.figures)
    print(f"done in {res['elapsed_s']} s; {args.out / 'summary.json'}, figures in {args.figures}")


if __name__ == "__main__":
    main()
