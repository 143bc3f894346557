"""Reproduce Chowdhury & Zhou (2023), Figs 1–4, and draw the panels the docs show.

    python experiments/reproduce.py [--figures 1,2,3,4] [--jobs N] [--out results/reproduce]
                                    [--set key=value ...]

Runs each experiment file with ``privbandit run``'s engine, writes one results directory per file
under ``--out``, then draws ``docs/figures/fig<k>.png`` (time-average pseudo-regret, mean ± stderr
over runs, as the paper plots it) and prints the wall time of the whole suite. With ``--set`` the
figures go to ``OUT/figures`` instead (``--docs`` chooses): a changed experiment never replaces
the published ones.
Figure 1's panels (a–c) are the ε = 0.1/0.5 easy and ε = 0.1 hard runs of Figs 2–3; (d–f) are the
K = 50 runs (stand-in means; see experiments/data/README.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path

import numpy as np

from privbandit.runner import run_file as run_experiment_file

HERE = Path(__file__).resolve().parent
FIGURES = {
    2: ["fig2_easy_eps0.1", "fig2_easy_eps0.5", "fig2_easy_eps1"],
    3: ["fig3_hard_eps0.1", "fig3_hard_eps0.5", "fig3_hard_eps1"],
    1: ["fig2_easy_eps0.1", "fig2_easy_eps0.5", "fig3_hard_eps0.1",
        "fig1_mslr_eps1", "fig1_mslr_eps5", "fig1_mslr_eps10"],
    4: ["fig4_trust_models"],
}


def run_file(stem: str, out: Path, jobs: int | None, overrides: list[str]) -> dict:
    # Files shared between Fig. 1 and Figs 2–3, and earlier runs of this script, reuse the tasks
    # kept in target/.tasks when the config is the same (a --set that changes it computes anew).
    target = out / stem
    t0 = time.perf_counter()
    outcome = run_experiment_file(HERE / f"{stem}.toml", overrides, out=target, jobs=jobs)
    summary, horizon = outcome.summary, outcome.config.horizon
    print(f"  {stem:<22} {time.perf_counter() - t0:7.1f} s  " + "  ".join(
        f"{k}={v['regret_final_mean'] / horizon:.4f}" for k, v in summary["algorithms"].items()))
    return summary


# What each file's panel shows, for its title (the file names say it only to whoever wrote them).
INSTANCES = {"fig2_easy": "easy instance", "fig3_hard": "hard instance",
             "fig1_mslr": "K = 50, MSLR stand-in means", "fig4_trust": "trust models compared"}


def panel_title(letter: str, stem: str, summary: dict) -> str:
    what = next((v for k, v in INSTANCES.items() if stem.startswith(k)), stem)
    return f"({letter}) {what}: ε = {summary['epsilon']:g}, T = 10$^{{{int(np.log10(summary['horizon']))}}}$, " \
           f"{summary['runs']} runs"


def draw(fig: int, stems: list[str], out: Path, dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = figure(fig, stems, out)
    dest.mkdir(parents=True, exist_ok=True)
    f.savefig(dest / f"fig{fig}.png", dpi=100)
    plt.close(f)


def figure(fig: int, stems: list[str], out: Path):
    """Fig. ``fig``'s panels, one per results directory: Reg(t)/t against log t, mean ± stderr."""
    import matplotlib.pyplot as plt

    from privbandit.runner.results import LINE_STYLES, coincident_labels

    summaries = {stem: json.loads((out / stem / "summary.json").read_text()) for stem in stems}
    # One colour and line style per algorithm over the whole figure, not per panel: DP-SE is the
    # same line in every row whichever algorithms precede it there.
    algorithms = list(dict.fromkeys(label for s in summaries.values() for label in s["algorithms"]))
    palette = plt.get_cmap("tab10").colors
    cols = min(3, len(stems))  # one experiment (Fig. 4): one panel, not a row two-thirds blank
    rows = (len(stems) + cols - 1) // cols
    f, axes = plt.subplots(rows, cols, figsize=(5 * cols + (2 if cols == 1 else 0), 3.6 * rows), squeeze=False)
    for k, (ax, stem) in enumerate(zip(axes.flat, stems)):
        summary = summaries[stem]
        with open(out / stem / "curves.csv") as fh:
            data = list(csv.reader(fh))
        header, values = data[0], np.array(data[1:], dtype=float)
        t = values[:, 0]
        means = {label: values[:, header.index(f"{label}.pseudo_mean")] / t for label in summary["algorithms"]}
        shown = coincident_labels(means)
        for label, mean in means.items():
            i = algorithms.index(label)
            color, style = palette[i % len(palette)], LINE_STYLES[i % len(LINE_STYLES)]
            se = values[:, header.index(f"{label}.pseudo_stderr")] / t
            # A line style per algorithm: curves that coincide (CDP-SE under Dist-DP-SE) stay visible.
            ax.plot(t, mean, label=shown[label], color=color, linestyle=style)
            # ± stderr as thin edges, not filled: overlapping translucent fills mix into a colour
            # no algorithm has (red over green read as a brown band).
            for edge in (mean - se, mean + se):
                ax.plot(t, edge, color=color, linewidth=0.6, alpha=0.7)
        ax.set_xscale("log")
        ax.set_title(panel_title("abcdefgh"[k], stem, summary) if len(stems) > 1 else
                     panel_title("", stem, summary).removeprefix("() "), fontsize=9)
        ax.set_xlabel("users t")
        ax.set_ylabel("Reg(t)/t")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right" if cols == 1 else "best")
    for ax in list(axes.flat)[len(stems):]:
        ax.axis("off")
    f.suptitle(f"Chowdhury & Zhou (2023), Fig. {fig}: time-average pseudo-regret, mean (thick) ± stderr (thin)",
               fontsize=11)
    f.tight_layout()
    return f


def table(out: Path, stems: list[str], dest: Path) -> None:
    """``results.md``: final time-average pseudo-regret per file and algorithm, mean ± stderr."""
    lines = ["| experiment | T | algorithm | Reg(T)/T (mean ± stderr) | a* eliminated | wrap-arounds | decode failures |",
             "|---|---|---|---|---|---|---|"]
    for stem in stems:
        s = json.loads((out / stem / "summary.json").read_text())
        for label, a in s["algorithms"].items():
            lines.append(f"| {stem} | {s['horizon']:,} | {label} | {a['regret_final_mean'] / s['horizon']:.5f} ± "
                         f"{a['regret_final_stderr'] / s['horizon']:.5f} | {a['best_arm_eliminated_runs']}/{a['runs']} | "
                         f"{a['wrap_arounds']} | {a['decode_failures']} |")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "results.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", default="2,3,1,4")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("results/reproduce"))
    ap.add_argument("--docs", type=Path, default=None,
                    help="where the figures and results.md go [default: docs/figures; with --set, OUT/figures, "
                         "so that a changed experiment never replaces the published figures]")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--table-only", action="store_true", help="only rewrite docs/figures/results.md")
    args = ap.parse_args()
    if args.docs is None:
        args.docs = args.out / "figures" if args.overrides else HERE.parent / "docs" / "figures"
    order = list(dict.fromkeys(stem for fig in (2, 3, 1, 4) for stem in FIGURES[fig]))
    if args.table_only:
        return table(args.out, [s for s in order if (args.out / s / "summary.json").exists()], args.docs)
    start = time.perf_counter()
    print(f"{os.cpu_count()} cores; writing to {args.out}/, figures to {args.docs}/")
    for fig in (int(x) for x in args.figures.split(",")):
        print(f"Fig. {fig}")
        for stem in FIGURES[fig]:
            run_file(stem, args.out, args.jobs, args.overrides)
        draw(fig, FIGURES[fig], args.out, args.docs)
    missing = [s for s in order if not (args.out / s / "summary.json").exists()]
    if missing:  # a partial run must not drop the other experiments' rows from the docs' table
        print(f"results.md not rewritten: no results yet for {', '.join(missing)}")
    else:
        table(args.out, order, args.docs)
    print(f"suite wall time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
