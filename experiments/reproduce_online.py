"""Reproduce Hu, Huang & Mehta §6 / Appendix I: settings 1–3, every ε, central and distributed.

    python experiments/reproduce_online.py                       # the paper's T = 2·2^21, 15 runs
    python experiments/reproduce_online.py --horizon 524288 --runs 5 --jobs 2   # what docs/ shows

    python experiments/reproduce_online.py --replot              # redraw the figures from results/online

Writes one results directory per (setting, ε) under ``results/online/`` and the figures
``docs/figures/pol_final_regret_setting{s}.png`` (final regret vs ε, Figs. 5, 10, 12a),
``docs/figures/pol_regret_setting{s}.png`` (regret vs t at ε = 0.5, 8, 64, the paper's panels;
Figs. 1–4, 6–8, 12) and ``docs/figures/pol_regret_setting{s}_more_eps.png`` (regret vs t at the
other ε the runs cover, 0.1, 0.25, 1 and 128: panels the paper does not draw). ``--replot`` reads
every (setting, ε)'s ``curves.csv`` and ``summary.json`` back instead of running anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from privbandit.runner import run_file
from privbandit.runner.results import coincident_labels, per_run

ROOT = Path(__file__).resolve().parent.parent
EPSILONS = (0.1, 0.25, 0.5, 1.0, 8.0, 64.0, 128.0)
SHOWN = (0.5, 8.0, 64.0)  # the ε of the paper's regret-against-t figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--horizon", type=int, default=2 * 2**21)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--settings", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "online")
    ap.add_argument("--figures", type=Path, default=ROOT / "docs" / "figures")
    ap.add_argument("--replot", action="store_true", help="redraw the figures from the results under --out")
    args = ap.parse_args()
    args.figures.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    table = {}
    for s in args.settings:
        finals: dict[str, list[tuple[float, float, float]]] = {}
        curves = {}
        for eps in args.epsilons:
            out = args.out / f"setting{s}" / f"eps{eps:g}"
            if args.replot:  # the title's T and runs are those the results were run with
                summary, curves[eps] = read_back(out)
                args.horizon, args.runs = summary["horizon"], summary["runs"]
            else:
                outcome = run_file(ROOT / "experiments" / f"pol_setting{s}.toml",
                                   [f"horizon={args.horizon}", f"runs={args.runs}", f"epsilon={eps}"],
                                   out=out, jobs=args.jobs)
                summary = outcome.summary
                curves[eps] = {label: (tasks[0].checkpoints, per_run(tasks)[0].mean(axis=0))
                               for label, tasks in outcome.results.items()}
            for label, a in summary["algorithms"].items():
                finals.setdefault(label, []).append((eps, a["regret_final_mean"], a["regret_final_stderr"]))
            print(f"setting {s} ε={eps:g}: " + ", ".join(f"{k} {v['regret_final_mean']:.0f}"
                  for k, v in summary["algorithms"].items()) + f"  [{time.perf_counter() - start:.0f} s]",
                  flush=True)
        table[s] = finals
        plot_final(args.figures / f"pol_final_regret_setting{s}.png", s, finals, args)
        plot_curves(args.figures / f"pol_regret_setting{s}.png", s, curves, [e for e in SHOWN if e in curves])
        more = [e for e in curves if e not in SHOWN]
        if more:
            plot_curves(args.figures / f"pol_regret_setting{s}_more_eps.png", s, curves, more)
    (args.out / "final_regret.json").write_text(json.dumps(table, indent=2) + "\n")
    print(f"total wall time {time.perf_counter() - start:.1f} s")
    return 0


def read_back(out: Path) -> tuple[dict, dict]:
    """A (setting, ε)'s summary and mean pseudo-regret curves, from the files a run wrote."""
    summary = json.loads((out / "summary.json").read_text())
    table = np.genfromtxt(out / "curves.csv", delimiter=",", names=True, deletechars="")
    return summary, {label: (table["t"], table[f"{label}.pseudo_mean"]) for label in summary["algorithms"]}


def _style(label: str) -> dict:
    # A distributed twin is dashed with hollow markers, so it shows where it lies on its central one.
    if "distributed" in label:
        return {"linestyle": "--", "marker": "s", "markevery": 0.1, "markerfacecolor": "none"}
    return {"linestyle": "-", "marker": "o", "markevery": (0.05, 0.1), "markersize": 4}


def plot_final(path: Path, s: int, finals: dict, args) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    shown = coincident_labels({label: np.log([m for _, m, _ in pts]) for label, pts in finals.items()})
    for label, pts in finals.items():
        e, m, se = map(np.array, zip(*pts))
        ax.errorbar(e, m, yerr=se, capsize=3, label=shown[label], **{**_style(label), "markevery": None})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("final pseudo-regret at T")
    ax.set_title(f"setting {s}: T = {args.horizon:,}, {args.runs} runs, mean ± se")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(path: Path, s: int, curves: dict, epsilons: list[float]) -> None:
    """One panel of mean pseudo-regret against t per ε, every algorithm of the setting."""
    epsilons = epsilons or list(curves)[:3]
    fig, axes = plt.subplots(1, len(epsilons), figsize=(5 * len(epsilons), 3.8), squeeze=False)
    for ax, eps in zip(axes[0], epsilons):
        shown = coincident_labels({label: reg for label, (_, reg) in curves[eps].items()})
        for label, (t, reg) in curves[eps].items():
            ax.plot(t, reg, label=shown[label], **_style(label))
        ax.set_title(f"setting {s}, ε = {eps:g}")
        ax.set_xlabel("t")
        ax.set_ylabel("pseudo-regret")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)  # per panel: which curves lie on which differs with ε
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
