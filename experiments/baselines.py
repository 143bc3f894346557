"""The standard baselines beside the papers' algorithms, paired on the same instances, at the
paper's nominal ε and at equal guarantees.

    python experiments/baselines.py                       # both families, every ε (docs/baselines.md)
    python experiments/baselines.py --family mab --epsilons 0.5 --runs 4 --horizon 100000   # a quick look
    python experiments/baselines.py --family mab --labels DP-UCB DP-UCB-Bound --pair DP-UCB DP-UCB-Bound
        # some labels only (the reference always runs; a label's runs do not depend on the others),
        # and one more paired difference, A − B

MAB (``experiments/baselines_mab.toml``: the paper's easy instance, T = 10⁶, 20 runs) at
ε = 0.1, 0.5, 1; online experts variant (``experiments/baselines_online.toml``: T = 2²⁰, 15 runs)
at ε = 0.1, 0.5, 1, 8. Per ε it prints every algorithm's final regret (mean ± stderr), its ledger,
and each algorithm minus the reference (Dist-DP-SE; FTNL), paired over runs. At equal guarantees
(``calibrate = true``) every user is (ε, δ)-DP by the ledger: only the algorithms whose nominal ε
spends more or less than that change their noise (Dist-RDP-SE, FTNL at c = 1); the others are pure
ε-DP, or calibrated by construction (VB-SDP-AE's counts), and are not run twice: the same seed and
label give the same runs, so the calibrated table reuses them (the script says which it re-ran).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

from privbandit import registry
from privbandit.runner import run
from privbandit.runner.config import load_data
from privbandit.runner.paired import paired, read_runs

ROOT = Path(__file__).resolve().parent.parent
CASES = {"mab": ("baselines_mab.toml", "Dist-DP-SE", (0.1, 0.5, 1.0)),
         "online": ("baselines_online.toml", "ftnl", (0.1, 0.5, 1.0, 8.0))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(CASES), nargs="+", default=sorted(CASES))
    ap.add_argument("--epsilons", type=float, nargs="+", default=None)
    ap.add_argument("--horizon", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "baselines")
    ap.add_argument("--labels", nargs="+", default=None, help="run only these labels (and the reference)")
    ap.add_argument("--pair", nargs=2, metavar=("A", "B"), default=None, help="also print A − B, paired")
    args = ap.parse_args()
    start, table = time.perf_counter(), {}
    for case in args.family:
        name, reference, epsilons = CASES[case]
        base = tomllib.loads((ROOT / "experiments" / name).read_text())
        base.setdefault("family", "distributed-dp-mab")
        base.update({k: v for k, v in (("horizon", args.horizon), ("runs", args.runs)) if v})
        if args.labels:
            unknown = sorted(set(args.labels) - set(base["algorithms"]))
            if unknown:
                ap.error(f"--labels: {', '.join(unknown)} not in {name}'s algorithms ({', '.join(base['algorithms'])})")
            keep = {reference, *args.labels}
            base["algorithms"] = {k: v for k, v in base["algorithms"].items() if k in keep}
        for eps in args.epsilons or epsilons:
            nominal = {**base, "epsilon": eps}
            out = args.out / case / f"eps{eps:g}"
            first = run(nominal, out=out, jobs=args.jobs, overwrite=True, resume=True).summary
            table[f"{case} ε={eps:g} nominal"] = report(first, out, reference, {})
            if args.pair and set(args.pair) <= set(base["algorithms"]):
                a, b = args.pair
                _, runs = read_runs(out)
                d = paired(runs[a][:, -1], runs[b][:, -1])
                table[f"{case} ε={eps:g} {a} − {b}"] = d.as_dict()
                print(f"  {a} − {b}, paired: {d.mean_difference:+.1f} ± {d.stderr:.1f} (t = {d.t:.1f}; "
                      f"{a} won {d.a_won}/{d.runs})")
            # Equal guarantees: re-run only the labels whose calibrated ε differs from the nominal one.
            calibrated = {**nominal, "calibrate": True}
            fam, config = load_data(calibrated)
            _, plain = load_data(nominal)
            changed = [label for label in config.algorithms
                       if fam.algorithm(config, label).epsilon != fam.algorithm(plain, label).epsilon]
            print(f"  equal guarantees: re-run {', '.join(changed) or 'none'} (the others' noise is unchanged)")
            if changed:
                tables = {k: v for k, v in calibrated["algorithms"].items() if k in changed}
                again = {**calibrated, "algorithms": tables}
                out_c = args.out / case / f"eps{eps:g}-calibrated"
                run(again, out=out_c, jobs=args.jobs, overwrite=True, resume=True)
                table[f"{case} ε={eps:g} equal"] = report(first, out, reference, {"dir": out_c, "labels": changed})
            print(f"  [{time.perf_counter() - start:.0f} s]", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "baselines.json").write_text(json.dumps(table, indent=2) + "\n")
    print(f"total wall time {time.perf_counter() - start:.1f} s")
    return 0


def report(s: dict, out: Path, reference: str, replaced: dict) -> dict:
    """Print and return one table: per label of the nominal run (summary ``s``, runs in ``out``) its
    final regret, ledger and paired difference from the reference; ``replaced``: the calibrated
    re-runs of some labels (their results directory), which take those labels' places."""
    t, runs = read_runs(out)
    privacy, algos = dict(s["privacy"]), dict(s["algorithms"])
    if replaced:
        _, again = read_runs(replaced["dir"])
        runs = {**runs, **again}
        calibrated = json.loads((replaced["dir"] / "summary.json").read_text())
        privacy.update(calibrated["privacy"])
        algos.update(calibrated["algorithms"])
    title = "equal guarantees" if replaced else "nominal ε"
    print(f"\n{s['experiment']} ε = {s['epsilon']:g}, T = {s['horizon']:,}, {s['runs']} runs ({title}):")
    rows = {}
    for label in algos:
        final = runs[label][:, -1]
        p = privacy[label]
        spent = ("non-private" if p["guarantee"] == "non-private" else
                 f"{p['epsilon_pure']:.3g} pure" if p.get("epsilon_pure") is not None else
                 f"{p['epsilon_at_delta']:.3g} at δ={p['delta']:.1g}")
        d = paired(final, runs[reference][:, -1])
        rows[label] = {"regret": float(final.mean()), "stderr": float(final.std(ddof=1) / len(final) ** 0.5),
                       "privacy": spent, "epsilon": algos[label]["parameters"].get("epsilon"),
                       "minus_reference": d.as_dict()}
        print(f"  {label:24s} {final.mean():10.1f} ± {rows[label]['stderr']:7.1f}  {spent:22s} "
              f"− {reference}: {d.mean_difference:+10.1f} ± {d.stderr:7.1f} (t = {d.t:6.1f}; won {d.a_won}/{d.runs})")
    return rows


if __name__ == "__main__":
    sys.exit(main())
