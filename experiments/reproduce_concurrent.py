"""The concurrent-shuffle counter's scaling claims (Tenenbaum, Kaplan, Mansour & Stemmer, ICML 2023),
spec §6 R1–R5, with the vectorized counter (the same numbers ``privbandit run`` gives per run).

    python experiments/reproduce_concurrent.py [--runs 20] [--epsilon 1] [--out results/reproduce-concurrent]
                                               [--figures docs/figures] [--only R1 R2 ...] [--max-n 10000000]
                                               [--r6-n 2000 8000 32000] [--r6-c1-n 128000] [--r6-exact-n 8000 32000 128000]
                                               [--r6-runs 10] [--jobs 2]
                                               [--replot results/reproduce-concurrent/summary.json]

- R1: max_t |Ŝ_t − S_t| against n for k = 1…5 at exact trees n = d_low^{2k+1} (d = d_low²; the spec's
  configurations plus larger d_low for k = 4, 5 so every k has ≥ 2 points), with the fitted log-log
  slope (least squares over every run, ± 2 standard errors) beside Thm 3.4's 1/(2k+1).
- R2: error against k at fixed n = 2^14, with Alg. 2 (binary tree, k = log n − 1), the central tree
  and the local counter; then k = 1…4 at n = 10⁵, 10⁶ (4 runs) and 10⁷ (2 runs), where k > 1 wins.
- R3: §2.5's bad baselines (the k lowest / k highest binary levels) against Alg. 3 at the same k.
- R4: per-node noise variance against the protocol's law; per-time variance against |V_t|·V_node.
- R5: the hard inputs Δ_{n,k} against i.i.d. and all-ones streams.
- R6: Algorithm 4's regret against n for k = 1, 2, 3 (:mod:`~privbandit.families.concurrent_shuffle.linucb`)
  beside LinUCB, LinUCB-JDP, LinUCB-LDP and the single-shuffler LinUCB-SDP-Vec (experiments/cs_r6_baselines.toml)
  on the same instances and users, at equal (ε, δ) by each ledger; paired differences; slopes beside
  (k+1)/(2k+1); the same at P_Vec's C = 1 (NOT the theorem's constant, ledgers "none proven"); and under
  the preset ``exact`` (every node's P_Vec from the exact count accountant, proven), beside a random arm.

R1–R5: δ = 1/(10n) (R6: δ = 0.1, the linear family's template). The summation protocol inside a
shuffler is ``split-mix`` (Pólya-noised bits through split-and-mix shares: Lap_Z(k/ε) per node,
(ε/k, (1 + e^{ε/k})η) proven), the family's default; ``--protocol bin-a`` runs the binomial-bits baseline.
Writes summary.json under --out and concurrent_r1.png, concurrent_r2.png, concurrent_r6.png under --figures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from privbandit.analysis import rates
from privbandit.families.concurrent_shuffle import counter as cnt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # R6 runs the linear baselines with reproduce_linear.run_suite
R1_CONFIGS = {1: [10, 20, 40], 2: [4, 6, 9], 3: [3, 4, 5], 4: [2, 3, 4], 5: [2, 3]}  # d_low; n = d_low^(2k+1)
PROTOCOL = {"protocol": "split-mix"}  # --protocol sets it


def errors(mode: str, n: int, k, eps: float, runs: int, kind: str = "iid", seed: int = 1, **kw) -> tuple:
    spec = cnt.counter_spec(mode, n, k, eps, 1 / (10 * n), **{**PROTOCOL, **kw})
    bits = cnt.stream_bits(kind, 0.5, spec, seed, list(range(runs)))
    keys = list(range(1000, 1000 + runs)) if mode == "central_tree" else None
    run = cnt.simulate(spec, bits, seed, f"{mode}-{k}", list(range(runs)), keys=keys)
    return spec, run, cnt.metrics(run)


def fit(ns: list[int], errs: list[list[float]], scale: list[float] | None = None) -> dict:
    """log(err/scale) = a + slope·log n over every run's point, by the shared fitter
    (privbandit.analysis.rates.power_fit, one intercept: runs at one n are independent; the n's share
    nothing but the seed's layout); the slope's standard error from the residuals."""
    n = np.concatenate([[float(n)] * len(e) for n, e in zip(ns, errs)])
    y = np.concatenate([np.asarray(e) / c for e, c in zip(errs, scale or [1.0] * len(errs))])
    a, _ = rates.power_fit(y, n)
    return {"slope": a.value, "stderr": a.stderr}


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


R6_BASELINES = ["LinUCB", "LinUCB-JDP", "LinUCB-LDP", "LinUCB-SDP-Vec"]
R6_C1 = "SDP-Vec-C1"  # the linear family's SDP-Vec at P_Vec's C = 1 (NOT the theorem's): cs_r6_baselines.toml


def r6(args) -> dict:
    """Algorithm 4 against n for k = 1, 2, 3 beside the linear family's baselines, paired.

    Every algorithm's run r faces the same θ*, arms (``(seed, "linear-instance", r)``, generator
    ``paper``) and users U_t (``(seed, "linear-users", r)``, which Alg. 4's users draw too), so the
    differences are paired (:func:`privbandit.runner.paired.paired`). Theory constants everywhere
    (P_Vec's 24·10⁴, Alg. 4's λ = 2σ̃√d, the linear preset ``theory``); the linear baselines'
    nominal ε is solved so that their ledgers read Alg. 4's (ε, δ) (``calibrate``). SDP-Vec's batch
    is Alg. 4's s_1 at k = 1 (⌈n^{1/3}⌉: the same batches). Then the same at P_Vec's C = 1 ("C1":
    NOT the theorem's constant; ledgers "none proven"), where learning shows at these n. Also the
    same trees with exact sums (Alg. 4's learner without privacy), and a uniformly random arm's
    regret. Slopes: least squares over every run, ± 2 se, beside (k+1)/(2k+1)."""
    import dataclasses

    from privbandit.families.concurrent_shuffle import linucb
    from privbandit.families.shuffle_linear_bandits.world import instances
    from privbandit.runner.paired import paired
    from reproduce_linear import run_suite

    ns, runs, seed, arms, d, delta = args.r6_n, list(range(args.r6_runs)), 1, 100, 5, 0.1
    c1_only = [n for n in args.r6_c1_n if n not in ns]  # larger n for the C = 1 rows only (cost)
    exact_only = [n for n in args.r6_exact_n if n not in ns + c1_only]  # the exact rows' horizons beyond
    eps = args.epsilon
    final: dict[str, list[np.ndarray]] = {}
    ns_of: dict[str, list[int]] = {}
    ledgers: dict[str, dict] = {}
    consts: dict[str, list] = {}

    def keep(label: str, n: int, values, ledger: dict | None = None) -> None:
        final.setdefault(label, []).append(np.asarray(values, dtype=np.float64))
        ns_of.setdefault(label, []).append(n)
        if ledger is not None:
            ledgers.setdefault(label, ledger)

    def brief(s: dict) -> dict:
        return {key: s.get(key) for key in ("guarantee", "trust_model", "epsilon_at_delta", "delta",
                                             "delta_from_theorems", "epsilon_target")}

    t_alg4 = time.perf_counter()
    inst = instances("paper", arms, d, seed, runs)
    gap = inst.means.max(axis=1) - inst.means.mean(axis=1)  # a uniformly random arm's regret per user
    for n in sorted(ns + c1_only + exact_only):
        keep("random arm", n, n * gap)
        for k in (1, 2, 3):
            for tag, scale, preset in (("", None, "theory"), (" C1", 1.0, "theory"), (" exact", None, "exact")):
                if (tag == "" and n not in ns) or (tag == " C1" and n not in ns + c1_only) or (
                        tag == " exact" and n not in args.r6_exact_n):
                    continue
                a = linucb.alg4(n, k, d, eps, delta, vec_scale=scale, preset=preset)
                out = linucb.run(a, arms, seed, runs, f"r6-{k}{tag}")
                keep(f"Alg4 k={k}{tag}", n, out["final_regret"], brief(a.ledger().summary()))
                consts.setdefault(f"Alg4 k={k}{tag}", []).append(
                    {"n": n, "s_1": a.tree.sizes[0], "sigma_tilde": a.sigma_tilde, "lambda": a.lam})
            if n in ns or n in args.r6_exact_n:
                e = dataclasses.replace(linucb.alg4(n, k, d, eps, delta), private=False, lam=1.0, sigma_tilde=0.0)
                keep(f"exact k={k}", n, linucb.run(e, arms, seed, runs, f"r6-{k}")["final_regret"])
    t_alg4 = time.perf_counter() - t_alg4
    t_lin = time.perf_counter()
    files, horizons = [], sorted(ns + c1_only)
    for n in horizons:
        b = linucb.alg4(n, 1, d, eps, delta).tree.sizes[0]
        only = [] if n in ns else ["algorithms={}", "algorithms.LinUCB.algorithm='linucb'",
                                   f"algorithms.{R6_C1}.algorithm='linucb-sdp-vec'", f"algorithms.{R6_C1}.vec_scale=1.0"]
        files.append((HERE / "cs_r6_baselines.toml", only + [
            "calibrate=true", f"horizon={n}", f"runs={args.r6_runs}", f"seed={seed}", f"epsilon={eps}", f"delta={delta}",
            f"algorithms.{R6_C1}.batch={b}", f"algorithms.{R6_C1}.epsilon={eps}", f"name=cs-r6-baselines-n{n}"]
            + ([f"algorithms.LinUCB-SDP-Vec.batch={b}"] if n in ns else [])))
    for n, (summary, found) in zip(horizons, run_suite(files, args.jobs)):
        for label in found:
            p = summary["privacy"][label]
            keep(label, n, np.concatenate([r.pseudo[:, -1] for r in found[label]]),
                 {**brief(p), "nominal_epsilon": summary["algorithms"][label]["parameters"].get("epsilon")})
    t_lin = time.perf_counter() - t_lin
    fits, rows = {}, {}
    for label, per_n in final.items():
        f = fit(ns_of[label], [np.maximum(v, 1e-9).tolist() for v in per_n])
        k = int(label.split("k=")[1][0]) if label.startswith("Alg4") else None
        if k is not None:
            f["theory"] = (k + 1) / (2 * k + 1)
            f["within_2se"] = abs(f["slope"] - f["theory"]) <= 2 * f["stderr"]
        fits[label] = f
        rows[label] = {"n": ns_of[label], "regret_mean": [float(v.mean()) for v in per_n],
                       "regret_stderr": [float(v.std(ddof=1) / math.sqrt(v.size)) for v in per_n]}
    pairs = {}
    for n in horizons:
        at = {}
        for tag, base in (("", R6_BASELINES), (" C1", ["LinUCB", R6_C1])):
            for k in (1, 2, 3):
                a = f"Alg4 k={k}{tag}"
                for b in base + ([f"Alg4 k=1{tag}"] if k > 1 else []):
                    if n in ns_of[a] and n in ns_of[b]:
                        at[f"{a} − {b}"] = paired(final[a][ns_of[a].index(n)], final[b][ns_of[b].index(n)]).as_dict()
        pairs[n] = at
    for label in final:
        r, f = rows[label], fits[label]
        extra = f" vs (k+1)/(2k+1) = {f['theory']:.2f}" if "theory" in f else ""
        led = ledgers.get(label)
        eps_txt = "" if led is None else (f"  [{led['guarantee']}, {led['trust_model']}, ε at δ: {led['epsilon_at_delta']}"
                                          + (f", nominal ε {led['nominal_epsilon']:.3f}" if led.get("nominal_epsilon") else "")
                                          + "]")
        print(f"R6 {label:16s} " + ", ".join(f"n={n}: {m:.0f}±{s:.0f}" for n, m, s in
                                             zip(ns_of[label], r["regret_mean"], r["regret_stderr"]))
              + f"; slope {f['slope']:.2f} ± {2 * f['stderr']:.2f}{extra}{eps_txt}")
    for n in sorted(set(args.r6_exact_n)):  # the exact preset against a random arm and the exact sums
        at = pairs.setdefault(n, {})
        for k in (1, 2, 3):
            a = f"Alg4 k={k} exact"
            for b in ["random arm", f"exact k={k}"] + ([f"Alg4 k=1 exact"] if k > 1 else []):
                if n in ns_of.get(a, []) and n in ns_of.get(b, []):
                    at[f"{a} − {b}"] = paired(final[a][ns_of[a].index(n)], final[b][ns_of[b].index(n)]).as_dict()
    for big in dict.fromkeys([ns[-1], horizons[-1], *args.r6_exact_n]):
        print(f"R6 paired at n = {big} (a − b: mean ± se, t, runs a won / {len(runs)}):")
        for key, p in pairs[big].items():
            print(f"   {key:34s} {p['mean_difference']:+8.0f} ± {p['stderr']:5.0f}  t = {p['t']:+6.1f}  {p['a_won']}")
    for label, c in consts.items():
        print(f"R6 {label} constants: " + ", ".join(f"n={x['n']}: s_1={x['s_1']}, σ̃={x['sigma_tilde']:.0f}, "
                                                        f"λ={x['lambda']:.0f}" for x in c))
    print(f"R6 wall: Alg. 4 (+ exact, C1) {t_alg4:.0f} s, linear baselines {t_lin:.0f} s")
    return {"n": ns, "c1_only_n": c1_only, "exact_n": sorted(set(args.r6_exact_n)), "runs": len(runs), "seed": seed, "arms": arms, "d": d, "delta": delta,
            "final_regret": {label: [v.tolist() for v in per_n] for label, per_n in final.items()},
            "summary": rows, "fit": fits, "ledger": ledgers, "paired": pairs, "constants": consts,
            "seconds": {"alg4": round(t_alg4, 1), "linear": round(t_lin, 1)}}


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
        ax.set_xlabel(r"users n (complete trees: $n = d_{\mathrm{low}}^{\,2k+1}$)")
        # Mathtext, not the ASCII of the source: the hat and the subscripts as the paper writes them.
        ax.set_ylabel(r"largest prefix-sum error $\max_t\,|\hat S_t - S_t|$" + "\n(mean ± se over runs)")
        ax.set_title(f"R1, ε = {res['epsilon']}, δ = 1/(10n), {res['runs']} runs; {res['protocol']} in each shuffler",
                     fontsize=9)
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
        ax.set_ylabel(r"largest prefix-sum error $\max_t\,|\hat S_t - S_t|$ (mean)")
        ax.set_title(f"R2: error against k, ε = {res['epsilon']} ($n = 2^{{14}}$: {res['runs']} runs; {res['protocol']})",
                     fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(figures / "concurrent_r2.png", dpi=120)
        plt.close(fig)
    if "R6" in res:
        plot_r6({**res["R6"], "epsilon": res["epsilon"]}, figures / "concurrent_r6.png")


def plot_r6(r: dict, dest: Path) -> None:
    """Final pseudo-regret against n, log-log (mean ± se over the paired runs): theory constants
    left, P_Vec's C = 1 (NOT the theorem's) in the middle, the exact count accountant (proven)
    right; a uniformly random arm's regret for scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns, summ, fits = r["n"], r["summary"], r["fit"]
    colours = {"LinUCB": "black", "LinUCB-JDP": "blue", "LinUCB-LDP": "c", "LinUCB-SDP-Vec": "green",
               R6_C1: "green", "Alg4 k=1": "red", "Alg4 k=2": "darkorange", "Alg4 k=3": "purple"}
    panels = ((f"theory constants, ledgers at ε = {r['epsilon']:g}, δ = {r['delta']:g}",
               ["Alg4 k=1", "Alg4 k=2", "Alg4 k=3"] + R6_BASELINES + ["exact k=1", "exact k=3"]),
              ("P_Vec C = 1: NOT the theorem's (ledgers: none proven)",
               ["Alg4 k=1 C1", "Alg4 k=2 C1", "Alg4 k=3 C1", R6_C1, "LinUCB"]),
              (f"preset exact: the count accountant, ledgers at ε = {r['epsilon']:g}, δ = {r['delta']:g}",
               ["Alg4 k=1 exact", "Alg4 k=2 exact", "Alg4 k=3 exact", "exact k=1", "exact k=3"]))
    panels = [(title, [label for label in labels if label in summ]) for title, labels in panels]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), sharey=True)
    for ax, (title, labels) in zip(axes, panels):
        for label in labels + ["random arm"]:
            m, se, f = np.array(summ[label]["regret_mean"]), np.array(summ[label]["regret_stderr"]), fits[label]
            at = summ[label].get("n", ns)
            base = label.replace(" C1", "").replace(" exact", "").replace("exact", "Alg4")  # exact sums: dotted
            style = dict(color=colours.get(base, "grey"), marker="o", capsize=3,
                         ls=":" if label.startswith(("exact", "random")) else "-")
            theory = f", (k+1)/(2k+1) = {f['theory']:.2f}" if "theory" in f else ""
            ax.errorbar(at, m, yerr=se, label=f"{label}: slope {f['slope']:.2f}±{2 * f['stderr']:.2f}{theory}", **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted(set(ns) | set(r.get("c1_only_n", [])) | set(r.get("exact_n", [])))
        ax.set_xticks(ticks, [f"{n:,}" for n in ticks])
        ax.minorticks_off()
        ax.set_xlabel("n (users = rounds)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6.5, loc="upper left")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(f"final pseudo-regret (mean ± se, {r['runs']} paired runs)")
    fig.suptitle(f"R6: Algorithm 4 and baselines, K = {r['arms']}, d = {r['d']}, same θ*, arms and users per run",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(dest, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("results/reproduce-concurrent"))
    ap.add_argument("--figures", type=Path, default=HERE.parent / "docs" / "figures")
    ap.add_argument("--only", nargs="*", default=["R1", "R2", "R3", "R4", "R5", "R6"])
    ap.add_argument("--max-n", type=int, default=10**7, help="largest n of R2's larger-n sweep")
    ap.add_argument("--r6-n", type=int, nargs="+", default=[2000, 8000, 32000], help="R6's horizons")
    ap.add_argument("--r6-runs", type=int, default=10, help="R6's paired runs")
    ap.add_argument("--r6-c1-n", type=int, nargs="*", default=[128000],
                    help="R6's extra horizons for the C = 1 rows only (Alg. 4, SDP-Vec-C1, LinUCB)")
    ap.add_argument("--r6-exact-n", type=int, nargs="*", default=[8000, 32000, 128000],
                    help="R6's horizons for Algorithm 4 under the preset exact (the exact count accountant)")
    ap.add_argument("--protocol", choices=["split-mix", "bin-a"], default="split-mix",
                    help="R1–R5's summation inside each shuffler")
    ap.add_argument("--jobs", type=int, default=2, help="processes for R6's linear baselines")
    ap.add_argument("--replot", type=Path, default=None,
                    help="redraw the figures from this summary.json (a finished run's) and stop")
    args = ap.parse_args()
    if args.replot is not None:
        plots(json.loads(args.replot.read_text()), args.figures)
        return
    start = time.perf_counter()
    PROTOCOL["protocol"] = args.protocol
    res = {"epsilon": args.epsilon, "runs": args.runs, "protocol": args.protocol}
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
