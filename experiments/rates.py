"""Regret rates of Chowdhury & Zhou (ICLR 2023), Thms 1, 2, 4, 5, 6: each theorem's experiment file
run over a grid of T and ε, its form fitted, and a verdict (privbandit.analysis.rates; docs/rates.md).

    python experiments/rates.py [--jobs 1] [--horizons T ...] [--epsilons ε ...] [--runs N]
                                [--only thm1 ...] [--out results/rates] [--figures docs/figures]

Each experiment file (experiments/rates_mab_thm*.toml) is swept over horizon × epsilon with the
project's sweep (privbandit.runner.sweep.run_sweep, the API ``privbandit sweep`` calls), kept under
``--out/<thm>`` so a second call reuses every finished task. Prints, per theorem, the mean final
regret at each (T, ε), the verdict with its fitted elasticities and constants, and writes
``--out/rates-mab.json`` and ``--figures/rates_mab.png`` (regret against T, one panel per theorem,
with Shariff & Sheffet's central pure-DP lower bound drawn with constant 1).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from privbandit.analysis import rates
from privbandit.runner import config as experiment_files
from privbandit.runner.sweep import run_sweep

HERE = Path(__file__).resolve().parent
HORIZONS = [10_000, 100_000, 1_000_000, 10_000_000]
# 10⁸ only where the regret is still leaving its exploration phase at 10⁷ (LDP-SE); elsewhere it
# costs minutes for a point on a plateau (docs/rates.md, "Cost").
HORIZONS_OF = {"thm6": HORIZONS + [100_000_000]}
EPSILONS = [0.2, 0.4, 0.8]  # inside Thms 4–6's ε ∈ (0, 1)
COLOURS = {0.2: "tab:red", 0.4: "tab:orange", 0.8: "tab:blue"}


def gaps_and_arms(path: Path) -> tuple[float, int, dict, float]:
    """Σ_a 1/Δ_a over the suboptimal arms, K, the algorithm's table and the mean gap (the regret per
    user while every arm is pulled alike), read from the file's instance."""
    fam, config = experiment_files.load(path)
    if config.environment.kind != "means":
        raise ValueError(f"{path.name}: environment.kind = {config.environment.kind!r}; a rate is fitted on one "
                         f"instance, so set kind = 'means'")
    mu = np.asarray(config.environment.means, float)
    gaps = mu.max() - mu
    (label,) = config.algorithms
    return float(np.sum(1 / gaps[gaps > 0])), len(mu), fam.algorithm(config, label), float(gaps.mean())


def forms(path: Path) -> dict[str, rates.Form]:
    """The theorems' forms on the file's instance (the paper's statements; docs/rates.md)."""
    inv_gaps, K, algo, _ = gaps_and_arms(path)
    gaps = rates.Term("Σ ln T/Δ", 1, 0, inv_gaps)
    s = getattr(algo, "s", None) or 1
    return {
        "thm1": rates.Form("Σ_a ln T/Δ_a + K ln T/ε", (gaps, rates.Term("K ln T/ε", 1, 1, K))),
        "thm2": rates.Form("Σ_a ln T/Δ_a + K √ln T/ε + K ln T/(sε)",
                           (gaps, rates.Term("K √ln T/ε", 0.5, 1, K), rates.Term("K ln T/(sε)", 1, 1, K / s))),
        "thm4": rates.Form("Σ_a ln T/Δ_a + K √ln T/ε", (gaps, rates.Term("K √ln T/ε", 0.5, 1, K))),
        "thm5": rates.Form("Σ_a ln T/Δ_a + K ln T/ε", (gaps, rates.Term("K ln T/ε", 1, 1, K))),
        "thm6": rates.Form("Σ_a ln T/(ε² Δ_a)", (rates.Term("Σ ln T/(ε²Δ)", 1, 2, inv_gaps),)),
    }


THEOREMS = {  # key: (what, the Shariff–Sheffet bound is a valid lower bound for it)
    "thm1": ("Thm 1, Dist-DP-SE (distributed pure DP)", True),
    "thm2": ("Thm 2, Dist-RDP-SE (RDP, s = 10)", False),
    "thm4": ("Thm 4, Dist-CDP-SE (CDP, s = 10)", False),
    "thm5": ("Thm 5, CDP-SE (central pure DP)", True),
    "thm6": ("Thm 6, LDP-SE (local pure DP)", True),
}


def lower_bound(T, eps, inv_gaps: float, K: int):
    """Shariff & Sheffet (2018)'s Ω(Σ_a ln T/Δ_a + K ln T/ε) for central ε-DP, its constant
    unspecified by the bound and drawn as 1."""
    return inv_gaps * np.log(T) + K * np.log(T) / eps


def final_regrets(out: Path, points: dict) -> tuple[np.ndarray, ...]:
    """Every run's final pseudo-regret at every point of a sweep: (regret, T, ε, run)."""
    R, T, E, G = [], [], [], []
    for name, summary in points.items():
        horizon, eps = summary["horizon"], summary["epsilon"]
        with open(out / name / "runs.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if int(float(r["t"])) == horizon]
        if len(rows) != summary["runs"] * len(summary["algorithms"]):
            raise RuntimeError(f"{out / name}/runs.csv: {len(rows)} rows at t = {horizon}, expected "
                               f"{summary['runs']} runs × {len(summary['algorithms'])} algorithms")
        for r in rows:
            R.append(float(r["pseudo"]))
            T.append(horizon)
            E.append(eps)
            G.append(int(r["run"]))
    return tuple(np.asarray(v) for v in (R, T, E, G))


def draw(found: dict, dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(found))
    rows = -(-len(found) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(found):]:
        ax.set_visible(False)
    for ax, (key, f) in zip(axes.flat, found.items()):
        R, T, E = (np.asarray(f[k]) for k in ("regret", "T", "eps"))
        Ts = np.unique(T)
        grid = np.geomspace(Ts.min(), Ts.max(), 50)
        for i, eps in enumerate(np.unique(E)):
            colour = COLOURS.get(float(eps))
            mean = [R[(T == t) & (E == eps)].mean() for t in Ts]
            # Shrinking markers: where the ε's regrets coincide (exploration, plateaus) each stays visible.
            ax.loglog(Ts, mean, "o-", color=colour, ms=8 - 2.5 * i, lw=2.2 - 0.6 * i, label=f"ε = {eps:g}")
            ax.loglog(grid, lower_bound(grid, eps, f["inv_gaps"], f["arms"]), "--", color=colour, lw=1)
        # Regret while no arm has left yet: where a point sits on this line it is still exploring.
        ax.loglog(grid, f["mean_gap"] * grid, ":", color="grey", lw=1, label="T · mean gap")
        # The axis spans the data and the bound; the exploration line is cut where it leaves them.
        ax.set_ylim(0.7 * lower_bound(Ts.min(), E.max(), f["inv_gaps"], f["arms"]), 1.6 * R.max())
        what, applies = THEOREMS[key]
        v = f["verdict"]
        ax.set_title(f"{what}\n{v['word']}: γ = {v['gamma'][0]:.2f} [{v['gamma'][1]:.2f}, {v['gamma'][2]:.2f}]",
                     fontsize=8)
        ax.set_xlabel("T")
        ax.grid(alpha=0.3, which="both")
        if not applies:
            ax.text(0.02, 0.02, "dashed: a pure-DP bound,\nnot a bound for this privacy", transform=ax.transAxes,
                    fontsize=7)
    for row in axes:
        row[0].set_ylabel("final pseudo-regret (mean of runs)")
    axes[0][0].legend(fontsize=7, title="solid: measured\ndashed: Ω(Σ ln T/Δ + K ln T/ε), c = 1",
                      title_fontsize=6)
    fig.tight_layout()
    fig.savefig(dest, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1, help="worker processes [default 1: the cores are shared]")
    ap.add_argument("--horizons", type=int, nargs="+", default=None,
                    help="the T of every theorem [default: 10⁴…10⁷ by decades, and 10⁸ for thm6]")
    ap.add_argument("--epsilons", type=float, nargs="+", default=EPSILONS)
    ap.add_argument("--runs", type=int, default=None, help="runs per point [default: the file's]")
    ap.add_argument("--only", nargs="+", choices=list(THEOREMS), default=list(THEOREMS))
    ap.add_argument("--out", type=Path, default=Path("results/rates"))
    ap.add_argument("--figures", type=Path, default=HERE.parent / "docs" / "figures")
    args = ap.parse_args()
    overrides = [f"runs={args.runs}"] if args.runs else []
    found = {}
    for key in args.only:
        path = HERE / f"rates_mab_{key}.toml"
        form = forms(path)[key]
        horizons = args.horizons or HORIZONS_OF.get(key, HORIZONS)
        grids = ["horizon=" + ",".join(map(str, horizons)), "epsilon=" + ",".join(f"{e:g}" for e in args.epsilons)]
        t0 = time.perf_counter()
        swept = run_sweep(path, grids, args.out / key, overrides, jobs=args.jobs, resume=True)
        R, T, E, G = final_regrets(args.out / key, swept["points"])
        v = rates.check(R, T, E, G, form)
        inv_gaps, K, _, mean_gap = gaps_and_arms(path)
        print(f"{THEOREMS[key][0]}: E[Reg(T)] = O({form.name})  [{swept['computed']} tasks computed, "
              f"{swept['reused']} reused, {time.perf_counter() - t0:.1f} s]")
        for eps in np.unique(E):
            cells = "  ".join(f"T={t:.0e}: {R[(T == t) & (E == eps)].mean():,.0f}" for t in np.unique(T))
            print(f"  ε = {eps:g}: {cells}")
        print(f"  verdict: {v.text()}")
        found[key] = {
            "form": form.name, "regret": R.tolist(), "T": T.tolist(), "eps": E.tolist(), "run": G.tolist(),
            "inv_gaps": inv_gaps, "arms": K, "mean_gap": mean_gap,
            "verdict": {"word": v.word, "reasons": v.reasons, "n": v.n, "note": v.note,
                        "gamma": [v.gamma.value, v.gamma.low, v.gamma.high], "gamma_max": form.gamma_max,
                        "nu": None if v.nu is None else [v.nu.value, v.nu.low, v.nu.high], "nu_max": form.nu_max,
                        "power": [v.power.value, v.power.low, v.power.high],
                        "coefficients": {k: [c.value, c.stderr] for k, c in v.coefficients.items()}},
        }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rates-mab.json").write_text(json.dumps(found, indent=1) + "\n")
    args.figures.mkdir(parents=True, exist_ok=True)
    draw(found, args.figures / "rates_mab.png")
    print(f"wrote {args.out / 'rates-mab.json'} and {args.figures / 'rates_mab.png'}")


if __name__ == "__main__":
    main()
