"""Reproduce Chowdhury & Zhou, "Shuffle Private Linear Contextual Bandits" (ICML 2022), Figs 1 and 2,
and the regret-vs-T slope of LinUCB-SDP with B ∝ T^{3/5}.

    python experiments/reproduce_linear.py [--jobs N] [--runs 50] [--out results/reproduce-linear]
                                           [--slope-runs 10] [--set key=value ...]

Writes one results directory per experiment file under --out, docs/figures/linear_fig1.png,
linear_fig2.png and linear_slope.png, and prints the regret ordering per setting and the fitted slopes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from privbandit.experiment import linear_family as lf

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs" / "figures"
FIG1 = ["linear_fig1a_eps0.2", "linear_fig1b_eps1", "linear_fig1c_eps10"]
FIG2 = ["linear_fig1b_eps1", "linear_fig2_d10_eps1", "linear_fig2_d15_eps1"]
ORDER = ["LinUCB", "LinUCB-JDP", "LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP"]
COLOURS = {"LinUCB": "black", "LinUCB-JDP": "blue", "LinUCB-SDP-Amp": "red", "LinUCB-SDP-Vec": "green",
           "LinUCB-LDP": "c"}
SLOPE_T = [2500, 5000, 10000, 20000, 40000]


def ordering(summary: dict) -> tuple[bool, str]:
    """LinUCB ≤ JDP ≤ SDP-{Amp,Vec} ≤ LDP on mean final pseudo-regret."""
    r = {k: v["regret_final_mean"] for k, v in summary["algorithms"].items()}
    sdp = (r["LinUCB-SDP-Amp"], r["LinUCB-SDP-Vec"])
    ok = r["LinUCB"] <= r["LinUCB-JDP"] <= min(sdp) and max(sdp) <= r["LinUCB-LDP"]
    return ok, "  ".join(f"{k}={r[k]:.0f}" for k in ORDER)


def draw(stems: list[str], out: Path, dest: Path, title) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(stems), figsize=(5 * len(stems), 3.8), squeeze=False)
    for ax, stem in zip(axes[0], stems):
        data = np.genfromtxt(out / stem / "curves.csv", delimiter=",", names=True, deletechars="")
        summary = json.loads((out / stem / "summary.json").read_text())
        for label in ORDER:
            mean, se = data[f"{label}.pseudo_mean"], data[f"{label}.pseudo_stderr"]
            ax.plot(data["t"], mean, color=COLOURS[label], label=label)
            ax.fill_between(data["t"], mean - se, mean + se, color=COLOURS[label], alpha=0.2)
        ax.set_title(title(summary))
        ax.set_xlabel("round")
        ax.set_ylabel("cumulative pseudo-regret")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)
    plt.close(fig)


def slope_experiment(jobs, runs: int, overrides: list[str]) -> dict:
    configs = []
    for T in SLOPE_T:
        b = max(1, round(0.25 * T**0.6))
        configs.append(lf.load(HERE / "linear_fig1b_eps1.toml", overrides + [
            f"horizon={T}", f"runs={runs}", f"name=linear-slope-T{T}", "algorithms={}",
            "algorithms.LinUCB-SDP-Amp.algorithm='linucb-sdp-amp'", f"algorithms.LinUCB-SDP-Amp.batch={b}",
            "algorithms.LinUCB-SDP-Vec.algorithm='linucb-sdp-vec'", f"algorithms.LinUCB-SDP-Vec.batch={b}",
            "algorithms.LinUCB-LDP.algorithm='linucb-ldp'"]))
    outcomes = lf.run_suite(configs, jobs=jobs)
    finals = {label: [float(o[0][label]["pseudo"][:, -1].mean()) for o in outcomes]
              for label in ("LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP")}
    slopes = {label: float(np.polyfit(np.log(SLOPE_T), np.log(v), 1)[0]) for label, v in finals.items()}
    return {"T": SLOPE_T, "B": [c.algorithms["LinUCB-SDP-Amp"].batch for c in configs], "final": finals,
            "slope": slopes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--slope-runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("results/reproduce-linear"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    overrides = args.overrides + ([f"runs={args.runs}"] if args.runs else [])
    stems = list(dict.fromkeys(FIG1 + FIG2))
    configs = [lf.load(HERE / f"{s}.toml", overrides) for s in stems]
    t0 = time.perf_counter()
    outcomes = lf.run_suite(configs, jobs=args.jobs)
    print(f"Figs 1–2: {time.perf_counter() - t0:.1f} s wall")
    for stem, config, outcome in zip(stems, configs, outcomes):
        summary = lf.write(args.out / stem, config, outcome)
        ok, text = ordering(summary)
        print(f"  {stem:<24} ordering {'holds' if ok else 'FAILS'}: {text}")
    DOCS.mkdir(parents=True, exist_ok=True)
    draw(FIG1, args.out, DOCS / "linear_fig1.png", lambda s: f"Fig. 1: d = {s['dim']}, ε = {s['epsilon']:g}")
    draw(FIG2, args.out, DOCS / "linear_fig2.png", lambda s: f"Fig. 2: d = {s['dim']}, ε = {s['epsilon']:g}")
    t0 = time.perf_counter()
    slope = slope_experiment(args.jobs, args.slope_runs, args.overrides)
    (args.out / "slope.json").write_text(json.dumps(slope, indent=2) + "\n")
    print(f"slope (B = round(0.25·T^0.6) = {slope['B']}, {args.slope_runs} runs, "
          f"{time.perf_counter() - t0:.1f} s): " + "  ".join(f"{k}={v:.3f}" for k, v in slope["slope"].items()))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.8))
    for label, vals in slope["final"].items():
        ax.loglog(SLOPE_T, vals, "o-", color=COLOURS[label], label=f"{label} (slope {slope['slope'][label]:.2f})")
    ax.loglog(SLOPE_T, [slope["final"]["LinUCB-SDP-Vec"][0] * (t / SLOPE_T[0]) ** 0.6 for t in SLOPE_T], "k:",
              label="T^0.6")
    ax.set_xlabel("T")
    ax.set_ylabel("Reg(T)")
    ax.set_title("ε = 1, d = 5, B = 0.25·T^{3/5} (SDP), B = 1 (LDP)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(DOCS / "linear_slope.png", dpi=110)


if __name__ == "__main__":
    main()
