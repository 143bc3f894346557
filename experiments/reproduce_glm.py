"""Sarmasarkar ("Shuffle and joint differential privacy for generalized linear contextual bandits"):
Table 2, Figure 1 and the paper's claims as paired verdicts, with the paper's numbers beside ours.

    python experiments/reproduce_glm.py [table2] [fig1] [claims] [gap] [baselines-gap] [rs-gap] [rs-replay]
                                        [--jobs 1] [--runs 10]
                                        [--out results/glm]

- ``table2``: experiments/glm_table2_S{2,25,3}.toml (probit, d = 3, T = 5000), the paper's numbers
  beside ours. The paper's numbers (spec §9.1; they equal the authors' regret_output_table_probit.txt,
  added in their initial commit, whose binary-tree prefix sums were wrong) are cumulative
  pseudo-regret at T = 5000, mean of 10 runs.
- ``fig1``: experiments/glm_fig1a.toml (logistic, d = 5, S = 3.5, T = 15000) and glm_fig1b.toml
  (probit, d = 5, S = 3, T = 5000); draws docs/figures/glm_fig1a.png and glm_fig1b.png. The paper
  prints no numbers for Fig. 1; beside ours are the values read off the authors' repository plots
  (spec §9.2, "unknown whether identical to the paper's Fig. 1").
- ``gap``: Fig. 1(a)'s Private-GLM at ``--gap-eps`` with one ingredient of the authors' repository
  switched on (``GAP_VARIANTS``: their HEAD's DP-SGD schedule and Criterion II, and two named
  defects, their initial commit's tree query and their trees' add/remove noise), paired run by run
  against the unchanged one (docs/glm-bandits.md, "Figure 1").
- ``baselines-gap``: Table 2's GLOC and GLM-UCB (``--baselines-file``, default S = 2) as preset
  paper-code makes them and with one difference from the authors' code switched (``BASELINE_VARIANTS``:
  our earlier widths, λ = 1, and each of the authors' five GLOC defects), paired run by run against
  the preset's; with ``--authors`` also the authors' own classes (imported by path from their
  checkout, never copied) on the same runs, paired (docs/glm-bandits.md, "Table 2's GLM-UCB and GLOC").
- ``rs-gap``: Table 2's RS-GLinUCB (``--baselines-file``, default S = 2) as preset paper-code makes it and
  with one of the authors' ingredients switched (``RS_VARIANTS``: each constant off, each defect on),
  paired run by run; with ``--rs-authors`` their own RS_GLinUCB at each given commit on the same runs
  (docs/glm-bandits.md, "Table 2's RS-GLinUCB").
- ``rs-replay``: their RS_GLinUCB on *their* Table 2 instance and reward stream (their environment.py),
  beside the paper's row.
- ``claims``: "stable in κ" (Table 2 across S) and "the gap to RS-GLinUCB narrows as ε grows"
  (Table 2 and Fig. 1) as paired comparisons (mean difference, its standard error, t, runs won;
  ``privbandit.runner.paired``), at nominal ε and at equal guarantees: each Private-GLM's nominal ε
  solved so that its ledger reads the target ε at the experiment's δ (:func:`equal_guarantee`).
  Needs the results of ``table2`` and ``fig1`` (run them first, or together).

Run r of every algorithm of one file shares its instance (under ``paper-code`` every run faces the
same θ* and arm sequence: runs differ in reward uniforms and the analyzer's noise). Across the three
Table 2 files, run r shares the arm sequence, θ*'s direction and the reward uniforms; only ‖θ*‖ = S
differs, so "stable in κ" is paired too.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from privbandit.families.glm_bandits import parties as glm_parties
from privbandit.families.glm_bandits.learners import GLOC_DEFECTS, RS_CONSTANTS, RS_DEFECTS
from privbandit.runner import config as experiment_files
from privbandit.runner import run_file
from privbandit.runner.paired import paired, read_runs
from privbandit.runner.tasks import Task, execute

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent / "docs" / "figures"
PAPER = {  # S: {label: regret}
    2.0: {"glm-ucb": 1399.07, "gloc": 384.33, "private-glm@eps4": 369.53, "private-glm@eps6": 289.67,
          "private-glm@eps8": 300.32, "rs-glinucb": 295.27},
    2.5: {"glm-ucb": 1942.18, "gloc": 627.62, "private-glm@eps4": 382.25, "private-glm@eps6": 299.33,
          "private-glm@eps8": 295.49, "rs-glinucb": 168.83},
    3.0: {"glm-ucb": 2322.53, "gloc": 1352.05, "private-glm@eps4": 384.91, "private-glm@eps6": 296.41,
          "private-glm@eps8": 301.73, "rs-glinucb": 194.53},
}
PAPER_KAPPA = {2.0: 18.39, 2.5: 56.44, 3.0: 222.15}
ROWS = ["glm-ucb", "gloc", "private-glm@eps4", "private-glm@eps6", "private-glm@eps8", "rs-glinucb"]
TABLE2 = {2.0: "glm_table2_S2", 2.5: "glm_table2_S25", 3.0: "glm_table2_S3"}
FIG1 = {"a": "glm_fig1a", "b": "glm_fig1b"}
# Read off the authors' HEAD plots Results/{Logistic,Probit}_Regret.png at T (spec §9.2).
FIG1_READ_OFF = {
    "a": {"gloc": 1460, "private-glm@eps2": 1220, "ecolog": 560, "private-glm@eps4": 545, "rs-glinucb": 535,
          "private-glm@eps8": 430},
    "b": {"glm-ucb": 2220, "gloc": 1360, "private-glm@eps2": 510, "rs-glinucb": 380, "private-glm@eps4": 350,
          "private-glm@eps8": 275},
}
COLOURS = {"private-glm@eps2": "tab:red", "private-glm@eps4": "tab:orange", "private-glm@eps6": "tab:olive",
           "private-glm@eps8": "tab:green", "rs-glinucb": "black", "glm-ucb": "tab:purple", "gloc": "tab:blue",
           "ecolog": "tab:brown"}


def private_labels(summary: dict) -> list[str]:
    return [k for k, v in summary["algorithms"].items() if v["parameters"]["algorithm"] == "private-glm"]


def run_one(stem: str, out: Path, jobs: int, runs: int | None) -> tuple[dict, float]:
    start = time.perf_counter()
    overrides = [] if runs is None else [f"runs={runs}"]
    summary = run_file(HERE / f"{stem}.toml", out=out / stem, jobs=jobs, overrides=overrides).summary
    return summary, time.perf_counter() - start


def table2(out: Path, jobs: int, runs: int | None) -> None:
    ours, kappa, secs, ledger = {}, {}, {}, {}
    for S, stem in TABLE2.items():
        res, secs[S] = run_one(stem, out, jobs, runs)
        ours[S] = {k: (v["regret_final_mean"], v["regret_final_stderr"]) for k, v in res["algorithms"].items()}
        kappa[S] = res["algorithms"]["private-glm@eps6"]["setup"]["kappa"][0]
        ledger[S] = {k: res["privacy"][k]["epsilon_at_delta"] for k in private_labels(res)}
    print(f"{'algorithm':<18}" + "".join(f"{f'S={S} κ≈{PAPER_KAPPA[S]} (ours κ={kappa[S]:.2f})':>38}" for S in PAPER))
    print(f"{'':<18}" + "".join(f"{'paper':>12}{'ours (± se)':>26}" for _ in PAPER))
    for row in ROWS:
        line = f"{row:<18}"
        for S in PAPER:
            mine = ours[S].get(row)
            line += f"{PAPER[S][row]:>12.2f}" + (f"{mine[0]:>18.2f} ± {mine[1]:<6.2f}" if mine else f"{'not built':>26}")
        print(line)
    print("ledger ε at δ: " + "; ".join(f"S={S}: " + ", ".join(f"{k.split('@')[1]} {v:.3f}" for k, v in ledger[S].items())
                                        for S in ledger))
    print("wall time: " + ", ".join(f"S={S}: {secs[S]:.0f} s" for S in secs) + f"; total {sum(secs.values()):.0f} s")


def fig1(out: Path, jobs: int, runs: int | None, figures: Path, panels: str = "ab") -> None:
    for panel, stem in FIG1.items():
        if panel not in panels:
            continue
        summary, secs = run_one(stem, out, jobs, runs)
        algs = summary["algorithms"]
        print(f"\nFig. 1({panel}) {stem}: {summary['runs']} runs, {secs:.0f} s wall; "
              f"κ = {next(iter(algs.values()))['setup']['kappa'][0]:.2f}, "
              f"κ* = {next(iter(algs.values()))['setup']['kappa_star'][0]:.3g}")
        print(f"  {'algorithm':<18} {'ours (mean ± se)':>20} {'authors plot ≈':>15} {'ledger ε at δ':>14}")
        for label, a in algs.items():
            led = summary["privacy"][label]
            eps = f"{led['epsilon_at_delta']:.3f}" if led["guarantee"] == "proven" else led["guarantee"]
            ref = FIG1_READ_OFF[panel].get(label)
            print(f"  {label:<18} {a['regret_final_mean']:>12.1f} ± {a['regret_final_stderr']:<6.1f} "
                  f"{'' if ref is None else ref:>15} {eps:>14}")
        missing = sorted(set(FIG1_READ_OFF[panel]) - set(algs))
        if missing:
            print(f"  not run: {', '.join(missing)} (authors' plot ≈ "
                  + ", ".join(str(FIG1_READ_OFF[panel][m]) for m in missing) + ")")
        draw_fig1(out / stem, panel, summary, figures / f"glm_fig1{panel}.png")


def draw_fig1(results: Path, panel: str, summary: dict, dest: Path) -> None:
    """Cumulative pseudo-regret, mean ± stderr over the runs, one line style per algorithm; the
    authors' plot's values at T as hollow markers; the legend beside the axes, never over a curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privbandit.runner.results import LINE_STYLES, coincident_labels

    data = np.genfromtxt(results / "curves.csv", delimiter=",", names=True, deletechars="")
    t = data["t"]
    labels = list(summary["algorithms"])
    shown = coincident_labels({label: data[f"{label}.pseudo_mean"] for label in labels})
    fig, ax = plt.subplots(figsize=(8.6, 4.2))
    for i, label in enumerate(labels):
        mean, se = data[f"{label}.pseudo_mean"], data[f"{label}.pseudo_stderr"]
        led = summary["privacy"][label]
        tag = f" (ledger ε {led['epsilon_at_delta']:.2f})" if led["guarantee"] == "proven" else ""
        ax.plot(t, mean, color=COLOURS[label], linestyle=LINE_STYLES[i % len(LINE_STYLES)], label=shown[label] + tag)
        ax.fill_between(t, mean - se, mean + se, color=COLOURS[label], alpha=0.2)
    T = t[-1]
    # Read-offs within 10 % of each other are staggered to the right, so each stays visible.
    shift, last = 0, None
    for label, value in sorted(FIG1_READ_OFF[panel].items(), key=lambda kv: kv[1]):
        shift = shift + 1 if last is not None and value < 1.10 * last else 0
        last = value
        ax.plot([T * (1 + 0.015 * shift)], [value], marker="o", markerfacecolor="none",
                markeredgecolor=COLOURS[label], markersize=8, linestyle="none", clip_on=False)
    missing = ", ".join(sorted(set(FIG1_READ_OFF[panel]) - set(labels)))
    ecolog = f"; not run: {missing}" if missing else ""
    ax.plot([], [], marker="o", markerfacecolor="none", markeredgecolor="grey", linestyle="none",
            label=f"authors' plot at T (read off{ecolog})")
    kappa = summary["algorithms"][labels[0]]["setup"]["kappa"][0]
    ax.set_title(f"Fig. 1({panel}): {summary['link']}, d = {summary['dim']}, K = {summary['arms']}, "
                 f"S = {summary['norm']:g}, κ = {kappa:.1f}, δ = {summary['delta']:g}; {summary['runs']} runs, "
                 "mean ± se", fontsize=10)
    ax.set_xlabel("round t")
    ax.set_ylabel("cumulative pseudo-regret")
    ax.set_xlim(0, T * 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)
    plt.close(fig)


# --- equal guarantees ----------------------------------------------------------------------------

def ledger_epsilon(fam, public: dict, epsilon: float, count1: int, count2: int) -> float:
    """The ledger's ε at δ of a Private-GLM task at nominal ``epsilon`` after ``count1`` θ̂_o and
    ``count2`` θ̂_τ calls (its most-calling runs'), as :class:`GLMServer` would record it."""
    pub = {**public, "algorithm": {**public["algorithm"], "epsilon": epsilon}}
    ledger = fam.ledger(pub)
    glm_parties.record_private_glm(glm_parties.setup(pub), ledger, count1, count2)
    return ledger.summary()["epsilon_at_delta"]


def solve_nominal(fam, public: dict, target: float, count1: int, count2: int) -> float:
    """The largest nominal ε whose ledger reads at most ``target`` with these calls (the ledger is
    increasing in the nominal ε: every part's budget is a fixed share of it)."""
    lo, hi = 1e-3, 100.0
    if ledger_epsilon(fam, public, lo, count1, count2) > target:
        raise ValueError(f"no nominal ε ≥ {lo} reaches a ledger of {target}")
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if ledger_epsilon(fam, public, mid, count1, count2) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def counts(learner: list[dict]) -> tuple[int, int]:
    return max(r["count1"] for r in learner), max(r["count2"] for r in learner)


def equal_guarantee(stem: str, label: str, target: float, nominal: dict, runs: int | None, cache: Path) -> dict:
    """Private-GLM ``label`` of ``stem`` with its nominal ε solved so that its ledger reads at most
    ``target``, and within 3 % of it, at the file's δ, on the same runs (same label: the same
    analyzer keys). The number of θ̂_o/θ̂_τ calls depends on the data and on ε (λ does), so the
    ledger is not a smooth function of the nominal ε. First (at most 4 runs): take the calls of the
    last run (the nominal run's to start), solve for the target, run. Then (at most 4 more runs):
    bisect between the largest nominal ε read below the target and the smallest one above it.
    Else the closest run below the target is kept, and the table says how close. Cached in
    ``cache`` (a JSON per stem and label; an unconverged entry resumes its search)."""
    path = cache / f"{stem}@{label}@{target:g}.json"
    cached = json.loads(path.read_text()) if path.exists() else None
    if cached is not None and (0.97 * target <= cached["ledger"] <= target or cached.get("searched")):
        return cached
    fam, config = experiment_files.load(HERE / f"{stem}.toml", [] if runs is None else [f"runs={runs}"])
    runs_ = list(range(config.runs))
    public = fam.public_task(config, label, runs_)
    tried = [] if cached is None else cached["tried"]
    best = None if cached is None else (cached["nominal"], cached["ledger"], np.array(cached["final"]))

    def run(eps: float) -> float:
        nonlocal best
        alg = config.algorithms[label].model_copy(update={"epsilon": eps})
        cfg = config.model_copy(update={"algorithms": {**config.algorithms, label: alg}})
        start = time.perf_counter()
        _, _, res, _ = execute(Task(fam.name, cfg, label, tuple(runs_)))
        got = res.privacy["epsilon_at_delta"]
        c1, c2 = counts(res.learner)
        tried.append({"nominal": eps, "ledger": got, "count1": c1, "count2": c2,
                      "secs": round(time.perf_counter() - start, 1)})
        if got <= target and (best is None or got > best[1]):
            best = (eps, got, res.pseudo[:, -1])
        return got

    done = lambda: best is not None and best[1] >= 0.97 * target  # noqa: E731
    c1, c2 = counts(nominal["learner"]) if not tried else (tried[-1]["count1"], tried[-1]["count2"])
    while len(tried) < 4 and not done():
        # a hair below the target: the ledger's float sum may land 1 ulp above what was solved
        eps = solve_nominal(fam, public, target * (1 - 1e-9), c1, c2)
        if any(t["nominal"] == eps for t in tried):
            break  # the same nominal ε runs to the same calls (same keys): nothing new to learn
        run(eps)
        c1, c2 = tried[-1]["count1"], tried[-1]["count2"]
    for _ in range(4):
        if done():
            break
        below = [t["nominal"] for t in tried if t["ledger"] is not None and t["ledger"] <= target]
        above = [t["nominal"] for t in tried if t["ledger"] is None or t["ledger"] > target]
        lo = max(below, default=None)
        hi = min((e for e in above if lo is None or e > lo), default=None)
        if lo is None or hi is None:
            break
        run(math.sqrt(lo * hi))
    if best is None:
        raise RuntimeError(f"{stem} {label}: no nominal ε gave a ledger ≤ {target}: {tried}")
    eps, got, final = best
    out = {"stem": stem, "label": label, "target": target, "nominal": eps, "ledger": got, "tried": tried,
           "searched": True, "final": np.asarray(final).tolist()}
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return out


# --- the claims ----------------------------------------------------------------------------------

def finals(results: Path) -> dict[str, np.ndarray]:
    _, curves = read_runs(results)
    return {label: c[:, -1] for label, c in curves.items()}


def line(name: str, p, note: str = "") -> str:
    return (f"| {name} | {p.mean_difference:+.1f} | {p.stderr:.1f} | {p.t:+.2f} | {p.a_won}/{p.b_won} of {p.runs} |"
            f" {note} |")


HEAD = "| comparison (a − b) | mean a − b | se | t | runs a won / b won | note |\n|---|---|---|---|---|---|"


def claims(out: Path, runs: int | None) -> None:
    cache = out / "equal"
    nominal, equal, ledgers = {}, {}, {}
    for stem in list(TABLE2.values()) + list(FIG1.values()):
        summary = json.loads((out / stem / "summary.json").read_text())
        nominal[stem] = finals(out / stem)
        for label in private_labels(summary):
            target = summary["algorithms"][label]["parameters"]["epsilon"]
            e = equal_guarantee(stem, label, target, summary["algorithms"][label], runs, cache)
            equal[stem, label] = np.array(e["final"])
            ledgers[stem, label] = (summary["privacy"][label]["epsilon_at_delta"], e["nominal"], e["ledger"],
                                    len(e["tried"]), sum(t["secs"] for t in e["tried"]))
    print("\n### Equal guarantees: each Private-GLM's nominal ε solved so that its ledger reads the target\n")
    print("| file | algorithm | ledger ε at nominal ε | solved nominal ε | its ledger ε | runs to solve (their time) |")
    print("|---|---|---|---|---|---|")
    for (stem, label), (at_nominal, eps, got, n, secs) in ledgers.items():
        print(f"| {stem} | {label} | {at_nominal:.3f} | {eps:.3f} | {got:.3f} | {n} ({secs:.0f} s) |")

    def both(stem: str, label: str) -> dict[str, np.ndarray]:
        return {"nominal ε": nominal[stem][label], "equal guarantee": equal[stem, label]}

    print("\n### Claim 1: stable in κ (Table 2, S = 2 → 3; a = S = 3, b = S = 2, same runs)\n")
    print(HEAD)
    s2, s3 = TABLE2[2.0], TABLE2[3.0]
    growth = {}
    for label in ROWS:
        growth[label] = nominal[s3][label] - nominal[s2][label]
        ratio = nominal[s3][label].mean() / nominal[s2][label].mean()
        print(line(f"{label}: Reg(S=3) − Reg(S=2)", paired(nominal[s3][label], nominal[s2][label]),
                   f"×{ratio:.2f}; nominal ε" if label.startswith("private") else f"×{ratio:.2f}"))
        if label.startswith("private"):
            eq = equal[s3, label] - equal[s2, label]
            growth[label + " (equal)"] = eq
            print(line(f"{label}: Reg(S=3) − Reg(S=2)", paired(equal[s3, label], equal[s2, label]),
                       f"×{equal[s3, label].mean() / equal[s2, label].mean():.2f}; equal guarantee"))
    print("\nPrivate-GLM's growth against the κ-dependent baselines' (a = Private-GLM's growth, b = the baseline's):\n")
    print(HEAD)
    for label in [r for r in growth if r.startswith("private")]:
        for base in ("gloc", "glm-ucb", "rs-glinucb"):
            print(line(f"Δ {label} − Δ {base}", paired(growth[label], growth[base])))

    print("\n### Claim 2: the gap to RS-GLinUCB narrows as ε grows (a = the smaller ε, b = the larger; "
          "gap(ε) = Reg(Private-GLM@ε) − Reg(RS-GLinUCB) per run, so a − b = Reg@ε₁ − Reg@ε₂)\n")
    print(HEAD)
    for stem in list(TABLE2.values()) + list(FIG1.values()):
        labels = [k for k in nominal[stem] if k.startswith("private-glm")]
        for kind in ("nominal ε", "equal guarantee"):
            for lo, hi in zip(labels, labels[1:]):
                p = paired(both(stem, lo)[kind], both(stem, hi)[kind])
                print(line(f"{stem}: {lo.split('@')[1]} vs {hi.split('@')[1]}", p, kind))
    print("\nThe gap itself (a = Private-GLM, b = RS-GLinUCB):\n")
    print(HEAD)
    for stem in list(TABLE2.values()) + list(FIG1.values()):
        for label in [k for k in nominal[stem] if k.startswith("private-glm")]:
            for kind in ("nominal ε", "equal guarantee"):
                p = paired(both(stem, label)[kind], nominal[stem]["rs-glinucb"])
                print(line(f"{stem}: {label.split('@')[1]} − RS-GLinUCB", p,
                           f"{kind}; ratio {both(stem, label)[kind].mean() / nominal[stem]['rs-glinucb'].mean():.2f}"))


# --- the Figure 1 gap -----------------------------------------------------------------------------

# Private-GLM variants, one ingredient of the authors' repository each (docs/glm-bandits.md, "Figure 1"):
# their HEAD's DP-SGD schedule (epochs by the per-call ε₀, warm start), their HEAD's Criterion II (PSD
# dominance), both, and the DEFECT of their initial commit's tree query (never a default).
GAP_VARIANTS = {
    "": {},
    "head-sgd": {"sgd_schedule": "head"},
    "psd": {"criterion2": "psd-dominance"},
    "head": {"sgd_schedule": "head", "criterion2": "psd-dominance"},
    "buggy-tree": {"tree_query": "paper-code-buggy-tree"},
    "tree-noise": {"tree_noise": "paper-code-add-remove-defect"},
    "tree-noise-head": {"tree_noise": "paper-code-add-remove-defect", "sgd_schedule": "head",
                        "criterion2": "psd-dominance"},
    # not the repository's: the paper's UCB centre θ̂_τ (eq. 18) in place of (θ̂_o + θ̂_τ)/2
    "ucb-tau": {"ucb_theta": "tau"},
}


def run_variants(stem: str, suffix: str, tables: list[str], out: Path, jobs: int, overrides: list[str],
                 name: str | None = None) -> tuple[dict, float, dict[str, np.ndarray], str]:
    """``stem``'s file (its settings, renamed ``<stem>-<suffix>``) with ``tables`` as its algorithms,
    written to ``out`` and run there: (summary, wall s, each label's final regrets per run, the
    results' name under ``out``)."""
    head = (HERE / f"{stem}.toml").read_text().split("[algorithms.")[0]
    head = "\n".join(f'name = "{stem}-{suffix}"' if ln.startswith("name = ") else ln for ln in head.splitlines()) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    name = name or f"{stem}_{suffix.replace('-', '_')}"
    path = out / f"{name}.toml"
    path.write_text(head + "\n".join(tables))
    start = time.perf_counter()
    summary = run_file(path, out=out / name, jobs=jobs, overrides=overrides).summary
    return summary, time.perf_counter() - start, finals(out / name), name


def gap(out: Path, jobs: int, runs: int | None, epsilons: list[float], variants: list[str],
        stem: str = "glm_fig1a", seed: int | None = None) -> None:
    """Private-GLM of ``stem`` (a Fig. 1 or Table 2 file) as it is and with one repository ingredient
    switched, same file, same runs (rewards and instance shared run by run), paired against the
    unchanged one; beside it the authors' value (their plot's read-off, or the paper's Table 2)."""
    panels = {v: k for k, v in FIG1.items()}
    refs = FIG1_READ_OFF[panels[stem]] if stem in panels else PAPER[{v: k for k, v in TABLE2.items()}[stem]]
    tables, labels = [], {}
    for eps in epsilons:
        for v in variants:
            label = f"private-glm@eps{eps:g}" + (f"-{v}" if v else "")
            labels[label] = (eps, v)
            fields = "".join(f'{k} = "{val}"\n' for k, val in GAP_VARIANTS[v].items())
            tables.append(f'[algorithms."{label}"]\nalgorithm = "private-glm"\nepsilon = {eps}\n{fields}')
    tables.append("[algorithms.rs-glinucb]\n")
    overrides = ([] if runs is None else [f"runs={runs}"]) + ([] if seed is None else [f"seed={seed}"])
    summary, secs, fin, name = run_variants(stem, "gap", tables, out, jobs, overrides,
                                      f"{stem}_gap" + ("" if seed is None else f"_seed{seed}"))
    algs = summary["algorithms"]
    kappa = algs["rs-glinucb"]["setup"]["kappa"][0]
    print(f"\n{name}: κ = {kappa:.1f}, {summary['runs']} runs, T = {summary['horizon']}, {secs:.0f} s wall; RS-GLinUCB "
          f"{algs['rs-glinucb']['regret_final_mean']:.0f} ± {algs['rs-glinucb']['regret_final_stderr']:.0f}")
    print("| label | regret (mean ± se) | authors' value | switches, θ̂_o calls (mean) | a − unchanged (paired) "
          "| share of the gap to the authors' |\n|---|---|---|---|---|---|")
    for label, (eps, v) in labels.items():
        a = algs[label]
        base = f"private-glm@eps{eps:g}"
        ref = refs.get(base)
        learner = a.get("learner", [])
        sw = np.mean([r["switches"] for r in learner]) if learner else float("nan")
        c1 = np.mean([r["count1"] for r in learner]) if learner else float("nan")
        if v:
            p = paired(fin[label], fin[base])
            share = (-p.mean_difference / (fin[base].mean() - ref)) if ref else float("nan")
            cmp = f"{p.mean_difference:+.0f} ± {p.stderr:.0f} (t = {p.t:+.1f}, won {p.a_won}/{p.runs})"
            share = f"{100 * share:.0f} %"
        else:
            cmp, share = "", ""
        print(f"| {label} | {a['regret_final_mean']:.0f} ± {a['regret_final_stderr']:.0f} | {ref or ''} | "
              f"{sw:.1f}, {c1:.1f} | {cmp} | {share} |")


# --- Table 2's baselines: GLOC and GLM-UCB, one difference from the authors' code at a time ------------

# label suffix: (algorithm, fields). "" is the algorithm under paper-code (the published width, λ = d);
# "previous" is privbandit's constants before issue #31 (the `paper` preset's: our width, λ = 1).
BASELINE_VARIANTS = {
    "gloc": {
        "": {},
        "previous": {"baseline_width": "ours", "baseline_lambda": 1.0},
        "ours-width": {"baseline_width": "ours"},
        "lambda-1": {"baseline_lambda": 1.0},
        **{d.removeprefix("gloc-"): {"code_defects": [d]} for d in GLOC_DEFECTS},
        "all-defects": {"code_defects": list(GLOC_DEFECTS)},
    },
    "glm-ucb": {
        "": {},
        "previous": {"baseline_width": "ours", "baseline_lambda": 1.0},
        "ours-width": {"baseline_width": "ours"},
        "lambda-1": {"baseline_lambda": 1.0},
    },
}


def _toml_value(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(f'"{x}"' for x in v) + "]"
    return f'"{v}"' if isinstance(v, str) else repr(v)


def _authors_world(authors: Path, stem: str, runs: int | None, run: int):
    """The authors' checkout on the import path (imported by path, never copied) and privbandit's run
    ``run`` of ``stem`` they play: (config, world, κ, T, S, their model's name)."""
    import sys

    if str(authors) not in sys.path:
        sys.path.insert(0, str(authors))
    fam, config = experiment_files.load(HERE / f"{stem}.toml", [] if runs is None else [f"runs={runs}"])
    w = fam.world(config, [run])
    return (config, w, w.kappas(0).kappa, config.horizon, config.environment.norm,
            {"probit": "Probit", "logistic": "Logistic"}[w.link])


def authors_run(authors: Path, kind: str, stem: str, runs: int | None, run: int) -> float:
    """One run of the authors' own GLOC or GLM-UCB (their repository at ``authors``, imported by path,
    never copied) on privbandit's run ``run`` of ``stem``: the same arms, θ*, κ and reward uniforms
    (user t's reward is 1[u_t < μ(⟨x_t, θ*⟩)]), so it pairs with privbandit's run. Their classes get
    what their driver gives them (simulation_utils.simulate_with_epsilon: κ = env.kappa, R = 1, S,
    the model, T, δ = ζ = 0.02) and a generator seeded by the run (GLM-UCB draws its start θ from it)."""
    config, w, kappa, T, S, model = _authors_world(authors, stem, runs, run)
    from glmbanditexp.algorithms.glm_ucb import GlmUCB  # the authors' code, outside this repository
    from glmbanditexp.algorithms.gloc import Gloc

    first, rng = list(w.arms[0, 0]), np.random.default_rng(run)
    algo = (Gloc(first, kappa, 1.0, S, model, config.zeta, rng=rng) if kind == "gloc"
            else GlmUCB(first, kappa, 1.0, S, model, T, config.zeta, rng=rng))
    best, total = w.best[0], 0.0
    for t in range(T):
        a = algo.play_arm()
        mean = w.means[0, t, a]
        total += best[t] - mean
        algo.update(float(w.uniforms[0, t] < mean), best[t] - mean, list(w.arms[0, (t + 1) % T]))
    return total


def authors_cached(authors: Path, kind: str, stem: str, runs: int | None, run: int, out: Path) -> tuple[float, float]:
    """:func:`authors_run`, cached per run in ``out`` (the authors' code does not change with ours;
    delete the file to rerun it): (regret, seconds it took)."""
    cache = out / "authors" / f"{stem}_{kind}_run{run}.json"
    if cache.exists():
        got = json.loads(cache.read_text())
        return got["regret"], got["secs"]
    t0 = time.perf_counter()
    regret = authors_run(authors, kind, stem, runs, run)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"regret": regret, "secs": time.perf_counter() - t0}) + "\n")
    return regret, time.perf_counter() - t0


def baselines_gap(out: Path, jobs: int, runs: int | None, stem: str, kinds: list[str], authors: Path | None) -> None:
    """GLOC and GLM-UCB of ``stem`` (a Table 2 file, preset paper-code) as the preset makes them and
    with one difference from the authors' code switched (:data:`BASELINE_VARIANTS`), same runs, paired
    against the preset's; with ``authors`` also the authors' own classes on the same runs, paired."""
    from multiprocessing import Pool

    tables = []
    for kind in kinds:
        for v, fields in BASELINE_VARIANTS[kind].items():
            body = "".join(f"{k} = {_toml_value(val)}\n" for k, val in fields.items())
            tables.append(f'[algorithms."{kind}{"@" + v if v else ""}"]\nalgorithm = "{kind}"\n{body}')
    summary, secs, fin, name = run_variants(stem, "baselines-gap", tables, out, jobs, [] if runs is None else [f"runs={runs}"])
    n = summary["runs"]
    theirs, their_secs = {}, {}
    if authors is not None:
        for kind in kinds:
            t0 = time.perf_counter()
            with Pool(max(1, jobs)) as pool:
                got = pool.starmap(authors_cached, [(authors, kind, stem, runs, r, out) for r in range(n)])
            theirs[kind] = np.array([g[0] for g in got])
            their_secs[kind] = sum(g[1] for g in got)
    S = summary["norm"]
    print(f"\n{name}: S = {S:g}, κ = {summary['algorithms'][kinds[0]]['setup']['kappa'][0]:.2f}, {n} runs, "
          f"{secs:.0f} s wall (privbandit)" + "".join(f", {their_secs[k]:.0f} s summed over runs ({k}, authors' "
                                                       "code)" for k in theirs))
    print("| label | regret (mean ± se) | paper | a − preset's (paired: mean ± se, t, runs a won) | "
          "a − authors' code (paired) |\n|---|---|---|---|---|")
    for kind in kinds:
        base = fin[kind]
        rows = [(f"{kind}@{v}" if v else kind, fin[f"{kind}@{v}" if v else kind]) for v in BASELINE_VARIANTS[kind]]
        if kind in theirs:
            rows.append((f"{kind} (authors' code)", theirs[kind]))
        for label, x in rows:
            se = x.std(ddof=1) / math.sqrt(x.size)
            vs = "" if label == kind else _paired_cell(paired(x, base))
            vt = _paired_cell(paired(x, theirs[kind])) if kind in theirs and not label.endswith("code)") else ""
            print(f"| {label} | {x.mean():.1f} ± {se:.1f} | {PAPER[S][kind]} | {vs} | {vt} |")


# --- Table 2's RS-GLinUCB: the authors' code at both commits, and one of its ingredients at a time ------

# label suffix: rs_code. "" is the preset's (paper-code: every constant of theirs, learners.RS_CONSTANTS);
# "previous" is privbandit's RS-GLinUCB before issue #31 (our constants, θ̂_τ alone on the unexplored rounds).
RS_VARIANTS = {
    "": None,
    "previous": {"rs_code": [], "ucb_theta": "tau", "tau_data": "unexplored"},
    **{f"without-{c.removeprefix('rs-')}": {"rs_code": [x for x in RS_CONSTANTS if x != c]} for c in RS_CONSTANTS},
    "without-average": {"ucb_theta": "tau"},
    "without-all-data": {"tau_data": "unexplored"},
    **{d.removeprefix("rs-"): {"rs_code": [*RS_CONSTANTS, d]} for d in RS_DEFECTS},
    "all-defects": {"rs_code": [*RS_CONSTANTS, *RS_DEFECTS]},
    "head-all-defects": {"rs_code": [c for c in RS_CONSTANTS if c != "rs-tiny-regulariser"] + ["rs-head-regulariser",
                                                                                              *RS_DEFECTS]},
}


def authors_rs_run(authors: Path, stem: str, runs: int | None, run: int) -> dict:
    """One run of the authors' own RS_GLinUCB (their checkout at ``authors``, one commit, imported by path,
    never copied; call it in a fresh process per commit, the two commits' packages share one name) on
    privbandit's run ``run`` of ``stem``, as :func:`authors_run` drives their GLOC: the same arms, θ*, κ and
    reward uniforms. Their driver's arguments (simulation_utils.simulate_with_epsilon: R = 1, S, the model,
    T, δ = ζ; at HEAD use_sgd_optimizer = False and use_max_det_switch = False, its default). Their prints
    are dropped. Returns the regret, their warm-up rounds and, at HEAD, their switch count."""
    import contextlib
    import inspect
    import io
    config, w, kappa, T, S, model = _authors_world(authors, stem, runs, run)
    from glmbanditexp.algorithms.rs_glinucb import RS_GLinUCB  # the authors' code, outside this repository

    head = {"use_sgd_optimizer": False, "use_max_det_switch": False}
    extra = head if "use_max_det_switch" in inspect.signature(RS_GLinUCB).parameters else {}
    best, total = w.best[0], 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        algo = RS_GLinUCB(list(w.arms[0, 0]), kappa, 1.0, S, model, T, config.zeta,
                          rng=np.random.default_rng(run), **extra)
        for t in range(T):
            a = algo.play_arm()
            mean = w.means[0, t, a]
            total += best[t] - mean
            algo.update(float(w.uniforms[0, t] < mean), best[t] - mean, list(w.arms[0, (t + 1) % T]))
    return {"regret": total, "warmup": len(algo.warm_up_X), "switches": getattr(algo, "counter2", None),
            "theta_tau_norm": float(np.linalg.norm(algo.theta_hat_tau)),
            "theta_w_norm": float(np.linalg.norm(algo.theta_hat_w))}


def _authors_rs_cached(authors: Path, stem: str, runs: int | None, run: int, out: Path) -> dict:
    """:func:`authors_rs_run`, cached per commit and run in ``out`` (delete the file to rerun it), with
    the seconds it took."""
    cache = out / "authors" / f"{stem}_rs-glinucb_{authors.name}_run{run}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    t0 = time.perf_counter()
    got = authors_rs_run(authors, stem, runs, run)
    got["secs"] = time.perf_counter() - t0
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(got) + "\n")
    return got


def authors_rs_replay(authors: Path, S: float, trials: int, others: int = 5, max_det: bool = False) -> list[float]:
    """The authors' RS_GLinUCB (their checkout at ``authors``, imported by path; call it in a fresh process)
    on *their* Table 2 instance: their environment.py at the notebook's config (probit, seed 109832, d = 3,
    K = 20, T = 5000, ‖θ*‖ = S), ``trials`` trials in a row as their driver runs them. Their driver steps
    one environment for all algorithms; RS_GLinUCB is the first of six (RS-GLinUCB, GLM-UCB or ECOLog,
    GLOC, Private-GLM at ε = 4, 6, 8), and every probit reward is one normal draw from the environment's
    generator whatever the arm, so stepping it with RS_GLinUCB's arm and ``others`` placeholder arms
    replays the rewards RS_GLinUCB got there without running the others. At HEAD the driver rewinds the
    generator first (env.reset(reseed=True)); ``max_det`` runs HEAD's class with its own default
    use_max_det_switch = True (switching on the running log-determinants) in the place of the driver's
    False. Returns each trial's cumulative pseudo-regret."""
    import contextlib
    import inspect
    import io
    import sys

    if str(authors) not in sys.path:
        sys.path.insert(0, str(authors))
    try:
        import tqdm  # noqa: F401  (their environment.py's progress bars; not a dependency of ours)
    except ImportError:
        import types

        sys.modules["tqdm"] = types.SimpleNamespace(tqdm=lambda it, *a, **k: it)
    from environment import GLMBandit  # the authors' code, outside this repository
    from glmbanditexp.algorithms.rs_glinucb import RS_GLinUCB

    head = "use_max_det_switch" in inspect.signature(RS_GLinUCB).parameters
    if max_det and not head:
        raise ValueError(f"{authors}: use_max_det_switch exists at HEAD (d9c93e1) only")
    extra = {"use_sgd_optimizer": False, "use_max_det_switch": max_det} if head else {}
    config = {"full_norm": True, "seed": 109832, "model": "Probit", "theta_dim": 3, "num_arms": 20,
              "theta_norm": S, "horizon_length": 5000}
    out = []
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        env = GLMBandit(config=config)
        if head:
            env.reset(reseed=True)
        for _ in range(trials):
            algo = RS_GLinUCB(env.get_first_action_set(), env.kappa, env.R, env.S, env.model, env.T, 0.02,
                              rng=np.random.default_rng(0), **extra)
            for _t in range(env.T):
                rewards, regrets, arms = env.step([algo.play_arm()] + [0] * others)
                algo.update(rewards[0], regrets[0], arms)
            out.append(float(np.sum(algo.regret_arr)))
            env.reset()
    return out


def _authors_rs_replay_cached(authors: Path, S: float, trials: int, out: Path,
                              max_det: bool = False) -> tuple[list[float], float]:
    tag = "_max-det" if max_det else ""
    cache = out / "authors" / f"replay_rs-glinucb_{authors.name}{tag}_S{S:g}_{trials}trials.json"
    if cache.exists():
        got = json.loads(cache.read_text())
        return got["regret"], got["secs"]
    t0 = time.perf_counter()
    regret = authors_rs_replay(authors, S, trials, max_det=max_det)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"regret": regret, "secs": time.perf_counter() - t0}) + "\n")
    return regret, time.perf_counter() - t0


def rs_replay(out: Path, jobs: int, authors: list[Path], S_values: list[float], max_det: bool = False) -> None:
    """:func:`authors_rs_replay` at each checkout and S: 10 trials, 5 at S = 3 (the initial commit's
    notebook's counts), beside the paper's Table 2."""
    from multiprocessing import Pool

    cells = [(a, S, 5 if S == 3.0 else 10) for a in authors for S in S_values]
    with Pool(max(1, jobs), maxtasksperchild=1) as pool:
        got = pool.starmap(_authors_rs_replay_cached, [(a, S, n, out, max_det) for a, S, n in cells])
    print("| commit | S | trials | RS-GLinUCB (mean ± se over trials) | paper | per trial | seconds |\n"
          "|---|---|---|---|---|---|---|")
    for (a, S, n), (regret, secs) in zip(cells, got):
        x = np.array(regret)
        print(f"| {a.name} | {S:g} | {n} | {x.mean():.2f} ± {x.std(ddof=1) / math.sqrt(n):.1f} | "
              f"{PAPER[S]['rs-glinucb']} | "
              f"{', '.join(f'{v:.0f}' for v in x)} | {secs:.0f} |")


def rs_gap(out: Path, jobs: int, runs: int | None, stem: str, authors: list[Path], variants: list[str]) -> None:
    """RS-GLinUCB of ``stem`` (a Table 2 file, preset paper-code) as the preset makes it and with one
    ingredient switched (:data:`RS_VARIANTS`), same runs, paired against the preset's; beside it the
    authors' own RS_GLinUCB at each checkout in ``authors`` (one per commit) on the same runs, paired."""
    from multiprocessing import Pool

    tables = []
    for v in variants:
        body = "".join(f"{k} = {_toml_value(val) if val else '[]'}\n" for k, val in (RS_VARIANTS[v] or {}).items())
        tables.append(f'[algorithms."rs-glinucb{"@" + v if v else ""}"]\nalgorithm = "rs-glinucb"\n{body}')
    summary, secs, fin, name = run_variants(stem, "rs-gap", tables, out, jobs, [] if runs is None else [f"runs={runs}"])
    n, S = summary["runs"], summary["norm"]
    theirs, notes = {}, []
    for checkout in authors:
        # one process per run: the two commits' packages have one name (glmbanditexp)
        with Pool(max(1, jobs), maxtasksperchild=1) as pool:
            got = pool.starmap(_authors_rs_cached, [(checkout, stem, runs, r, out) for r in range(n)])
        label = f"RS-GLinUCB, the authors' code at {checkout.name}"
        theirs[label] = np.array([g["regret"] for g in got])
        notes.append(f"{checkout.name}: {sum(g['secs'] for g in got):.0f} s summed over runs; warm-up rounds "
                     f"{[g['warmup'] for g in got]}; switches {[g['switches'] for g in got]}; ‖θ̂_τ‖ "
                     f"{[round(g['theta_tau_norm'], 1) for g in got]}")
    learner = {k: v.get("learner", []) for k, v in summary["algorithms"].items()}
    print(f"\n{name}: S = {S:g}, κ = {summary['algorithms']['rs-glinucb']['setup']['kappa'][0]:.2f}, {n} runs, "
          f"{secs:.0f} s wall (privbandit)\n" + "\n".join(notes))
    base = fin["rs-glinucb"]
    cols = list(theirs)
    print("| label | regret (mean ± se) | switches, explored (mean) | "
          "a − preset's (paired: mean ± se, t, runs a won) | "
          + "".join(f"a − {c.split(' at ')[1]} (paired) | " for c in cols) + "\n|" + "---|" * (4 + len(cols)))
    rows = [(f"rs-glinucb@{v}" if v else "rs-glinucb", fin[f"rs-glinucb@{v}" if v else "rs-glinucb"]) for v in variants]
    for label, x in rows + list(theirs.items()):
        se = x.std(ddof=1) / math.sqrt(x.size)
        lr = learner.get(label, [])
        sw = f"{np.mean([r['switches'] for r in lr]):.1f}, {np.mean([r['explored'] for r in lr]):.1f}" if lr else ""
        vs = "" if label == "rs-glinucb" else _paired_cell(paired(x, base))
        vt = "".join(("" if label == c else _paired_cell(paired(x, theirs[c]))) + " | " for c in cols)
        print(f"| {label} | {x.mean():.1f} ± {se:.1f} | {sw} | {vs} | {vt}")
    print(f"paper: {PAPER[S]['rs-glinucb']}")


def _paired_cell(p) -> str:
    return f"{p.mean_difference:+.1f} ± {p.stderr:.1f}, t = {p.t:+.1f}, {p.a_won}/{p.runs}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", choices=["table2", "fig1", "claims", "gap", "baselines-gap", "rs-gap",
                                                 "rs-replay"],
                    default=["table2"])
    ap.add_argument("--gap-eps", type=float, nargs="+", default=[2.0, 8.0], help="gap: the nominal ε's")
    ap.add_argument("--gap-seed", type=int, default=None, help="gap: another instance (the file's seed otherwise)")
    ap.add_argument("--gap-file", default="glm_fig1a", choices=[*FIG1.values(), *TABLE2.values()],
                    help="gap: the experiment file [default: glm_fig1a]")
    ap.add_argument("--gap-variants", nargs="+", default=list(GAP_VARIANTS), choices=list(GAP_VARIANTS),
                    help="gap: the variants ('' is Fig. 1's Private-GLM, always included)")
    ap.add_argument("--baselines", nargs="+", default=["gloc", "glm-ucb"], choices=list(BASELINE_VARIANTS),
                    help="baselines-gap: which baselines [default: both]")
    ap.add_argument("--baselines-file", default="glm_table2_S2", choices=list(TABLE2.values()),
                    help="baselines-gap: the Table 2 file [default: glm_table2_S2]")
    ap.add_argument("--authors", type=Path, default=None,
                    help="baselines-gap: a checkout of the authors' repository (Sahasrajit123/Shuffle_joint_dp_"
                         "generalized_linear_contextual_bandits), to run their GLOC and GLM-UCB on the same runs")
    ap.add_argument("--rs-authors", type=Path, nargs="+", default=[],
                    help="rs-gap: checkouts of the authors' repository, one per commit (a directory named by its "
                         "commit, e.g. ab8fd16 and d9c93e1), to run their RS_GLinUCB on the same runs")
    ap.add_argument("--rs-variants", nargs="+", default=list(RS_VARIANTS), choices=list(RS_VARIANTS),
                    help="rs-gap: the variants ('' is the preset's, always included)")
    ap.add_argument("--rs-replay-s", type=float, nargs="+", default=list(PAPER), choices=list(PAPER),
                    help="rs-replay: the S values [default: 2 2.5 3]")
    ap.add_argument("--rs-max-det", action="store_true",
                    help="rs-replay: HEAD's class default use_max_det_switch = True, not its driver's False")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("results/glm"))
    ap.add_argument("--figures", type=Path, default=FIGURES, help="where the PNGs go [default: docs/figures]")
    ap.add_argument("--panels", default="ab", choices=["ab", "a", "b"], help="fig1: which panels [default: ab]")
    args = ap.parse_args()
    start = time.perf_counter()
    if "table2" in args.parts:
        table2(args.out, args.jobs, args.runs)
    if "fig1" in args.parts:
        args.figures.mkdir(parents=True, exist_ok=True)
        fig1(args.out, args.jobs, args.runs, args.figures, args.panels)
    if "claims" in args.parts:
        claims(args.out, args.runs)
    if "gap" in args.parts:
        gap(args.out, args.jobs, args.runs, args.gap_eps, [""] + [v for v in args.gap_variants if v], args.gap_file,
            args.gap_seed)
    if "baselines-gap" in args.parts:
        if args.authors is not None and not (args.authors / "glmbanditexp" / "algorithms" / "gloc.py").is_file():
            ap.error(f"--authors {args.authors}: no glmbanditexp/algorithms/gloc.py there (a checkout of the "
                     "authors' repository is expected)")
        baselines_gap(args.out, args.jobs, args.runs, args.baselines_file, args.baselines, args.authors)
    if "rs-gap" in args.parts or "rs-replay" in args.parts:
        for checkout in args.rs_authors:
            if not (checkout / "glmbanditexp" / "algorithms" / "rs_glinucb.py").is_file():
                ap.error(f"--rs-authors {checkout}: no glmbanditexp/algorithms/rs_glinucb.py there (a checkout of the "
                         "authors' repository is expected)")
    if "rs-gap" in args.parts:
        rs_gap(args.out, args.jobs, args.runs, args.baselines_file, args.rs_authors,
               [""] + [v for v in args.rs_variants if v])
    if "rs-replay" in args.parts:
        rs_replay(args.out, args.jobs, args.rs_authors, args.rs_replay_s, args.rs_max_det)
    print(f"\ntotal wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
