"""Reproduce Chowdhury & Zhou, "Shuffle Private Linear Contextual Bandits" (ICML 2022), Figs 1 and 2,
and the regret-vs-T slope of LinUCB-SDP with B ∝ T^{3/5}.

    python experiments/reproduce_linear.py [--jobs N] [--runs 50] [--out results/reproduce-linear]
                                           [--slope-runs 10] [--slope-horizons T ...] [--set key=value ...]
                                           [--figures DIR]

Writes one results directory per experiment file under --out, docs/figures/linear_fig1.png,
linear_fig2.png and linear_slope.png, and prints the regret ordering per setting and the fitted slopes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from privbandit.analysis import rates
from privbandit.runner import config as experiment_files
from privbandit.runner import results, tasks

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs" / "figures"
FIG1 = ["linear_fig1a_eps0.2", "linear_fig1b_eps1", "linear_fig1c_eps10"]
FIG2 = ["linear_fig1b_eps1", "linear_fig2_d10_eps1", "linear_fig2_d15_eps1"]
ORDER = ["LinUCB", "LinUCB-JDP", "LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP"]
COLOURS = {"LinUCB": "black", "LinUCB-JDP": "blue", "LinUCB-SDP-Amp": "red", "LinUCB-SDP-Vec": "green",
           "LinUCB-LDP": "c"}
SLOPE_T = [2500, 5000, 10000, 20000, 40000]


def run_suite(files: list[tuple[Path, list[str]]], jobs: int | None) -> list[tuple[dict, dict]]:
    """Several experiment files in one process pool (every file's tasks at once, the longest first):
    per file, its summary and its results by label, exactly what ``privbandit run`` gives for it
    (tasks are independent)."""
    loaded = [experiment_files.load(path, overrides) for path, overrides in files]
    work = [(i, t) for i, (fam, config) in enumerate(loaded) for t in tasks.tasks_of(fam, config)]
    # Per-round algorithms (B = 1) cost most: start them first.
    work.sort(key=lambda it: loaded[it[0]][0].algorithm(loaded[it[0]][1], it[1].label).batch)
    found = [{label: [] for label in fam.labels(config)} for fam, config in loaded]
    compute = [dict.fromkeys(f, 0.0) for f in found]
    start = time.perf_counter()
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    for i, label, res, secs in tasks.completed(_execute, work, jobs):
        found[i][label].append(res)
        compute[i][label] += secs
    elapsed = time.perf_counter() - start
    out = []
    for (fam, config), f, c in zip(loaded, found, compute):
        for label in f:
            f[label].sort(key=lambda r: r.runs[0])
        out.append((results.summarize(fam, config, f, c, elapsed), f))
    return out


def _execute(i: int, task: tasks.Task):
    """One task of file i (a module-level function: the pool pickles it)."""
    label, _runs, res, secs = tasks.execute(task)
    return i, label, res, secs


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

    fig = figure(stems, out, title)
    fig.savefig(dest, dpi=110)
    plt.close(fig)


def figure(stems: list[str], out: Path, title):
    """One panel per results directory: cumulative pseudo-regret, mean ± stderr over runs."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig, axes = plt.subplots(1, len(stems), figsize=(5 * len(stems), 3.8), squeeze=False)
    for ax, stem in zip(axes[0], stems):
        data = np.genfromtxt(out / stem / "curves.csv", delimiter=",", names=True, deletechars="")
        summary = json.loads((out / stem / "summary.json").read_text())
        for label in ORDER:
            mean, se = data[f"{label}.pseudo_mean"], data[f"{label}.pseudo_stderr"]
            ax.plot(data["t"], mean, color=COLOURS[label], label=label)
            ax.fill_between(data["t"], mean - se, mean + se, color=COLOURS[label], alpha=0.2)
        ax.set_title(title(summary))
        # At most five ticks, with thousands separators: matplotlib's default put eight five-digit
        # labels (0, 2500, …, 20000) on a 5-inch axis, and they ran into each other.
        ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.set_xlabel("round t")
        ax.set_ylabel("cumulative pseudo-regret")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def slope_experiment(jobs, runs: int, overrides: list[str], slope_t: list[int]) -> dict:
    files, batches = [], []
    for T in slope_t:
        b = max(1, round(0.25 * T**0.6))
        batches.append(b)
        files.append((HERE / "linear_fig1b_eps1.toml", overrides + [
            f"horizon={T}", f"runs={runs}", f"name=linear-slope-T{T}", "algorithms={}",
            "algorithms.LinUCB-SDP-Amp.algorithm='linucb-sdp-amp'", f"algorithms.LinUCB-SDP-Amp.batch={b}",
            "algorithms.LinUCB-SDP-Vec.algorithm='linucb-sdp-vec'", f"algorithms.LinUCB-SDP-Vec.batch={b}",
            "algorithms.LinUCB-LDP.algorithm='linucb-ldp'"]))
    outcomes = run_suite(files, jobs)
    finals = {label: [summary["algorithms"][label]["regret_final_mean"] for summary, _ in outcomes]
              for label in ("LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP")}
    # The shared fitter (privbandit.analysis.rates, docs/rates.md): every run's final regret, one
    # intercept per run index (run r meets the same instance at every T), the exponent with its interval.
    fitted = {}
    for label in finals:
        R, T, G = [], [], []
        for t, (_, found) in zip(slope_t, outcomes):
            for res in found[label]:
                R += res.pseudo[:, -1].tolist()
                T += [t] * len(res.runs)
                G += list(res.runs)
        fitted[label], _ = rates.power_fit(R, T, groups=G)
    slopes = {label: a.value for label, a in fitted.items()}
    intervals = {label: [a.low, a.high] for label, a in fitted.items()}
    return {"T": slope_t, "B": batches, "final": finals, "slope": slopes, "slope_95": intervals}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--slope-runs", type=int, default=10)
    ap.add_argument("--slope-horizons", type=int, nargs="+", default=SLOPE_T, help="the T of the slope fit")
    ap.add_argument("--out", type=Path, default=Path("results/reproduce-linear"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--figures", type=Path, default=DOCS, help="where the PNGs go [default: docs/figures]")
    args = ap.parse_args()
    overrides = args.overrides + ([f"runs={args.runs}"] if args.runs else [])
    stems = list(dict.fromkeys(FIG1 + FIG2))
    t0 = time.perf_counter()
    outcomes = run_suite([(HERE / f"{s}.toml", overrides) for s in stems], args.jobs)
    print(f"Figs 1–2: {time.perf_counter() - t0:.1f} s wall")
    for stem, (summary, found) in zip(stems, outcomes):
        fam, config = experiment_files.load(HERE / f"{stem}.toml", overrides)
        results.write_results(args.out / stem, fam, config, summary, found)
        ok, text = ordering(summary)
        print(f"  {stem:<24} ordering {'holds' if ok else 'FAILS'}: {text}")
    figures = args.figures
    figures.mkdir(parents=True, exist_ok=True)
    draw(FIG1, args.out, figures / "linear_fig1.png", lambda s: f"Fig. 1: d = {s['dim']}, ε = {s['epsilon']:g}")
    draw(FIG2, args.out, figures / "linear_fig2.png", lambda s: f"Fig. 2: d = {s['dim']}, ε = {s['epsilon']:g}")
    t0 = time.perf_counter()
    slope_t = args.slope_horizons
    slope = slope_experiment(args.jobs, args.slope_runs, args.overrides, slope_t)
    (args.out / "slope.json").write_text(json.dumps(slope, indent=2) + "\n")
    print(f"slope (B = round(0.25·T^0.6) = {slope['B']}, {args.slope_runs} runs, "
          f"{time.perf_counter() - t0:.1f} s): " + "  ".join(f"{k}={v:.3f} [{lo:.3f}, {hi:.3f}]"
                    for (k, v), (lo, hi) in zip(slope["slope"].items(), slope["slope_95"].values())))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(5, 3.8))
    for label, vals in slope["final"].items():
        ax.loglog(slope_t, vals, "o-", color=COLOURS[label], label=f"{label} (slope {slope['slope'][label]:.2f})")
    ax.loglog(slope_t, [slope["final"]["LinUCB-SDP-Vec"][0] * (t / slope_t[0]) ** 0.6 for t in slope_t], "k:",
              label=r"$T^{0.6}$")
    # Ticks at the horizons run, in plain numbers: log-axis minor labels overlapped each other.
    ax.set_xticks(slope_t, [f"{t:,}" for t in slope_t], rotation=30)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("T")
    ax.set_ylabel("Reg(T)")
    ax.set_title(r"ε = 1, d = 5, B = 0.25·$T^{3/5}$ (SDP), B = 1 (LDP)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(figures / "linear_slope.png", dpi=110)


if __name__ == "__main__":
    main()
