"""Returning users: the comparison of Chowdhury & Zhou's Appendix I, measured.

    python experiments/returning_users.py                 # B = 1 … 32, T = 10⁶, 20 runs (docs/returning-users.md)
    python experiments/returning_users.py --returning 1 8 --runs 5 --horizon 100000   # a quick look

For each B it runs ``experiments/returning_users.toml`` (every user in up to B batches; each
algorithm's per-round noise solved so that such a user is (ε, δ)-DP) and prints, per algorithm, the
per-round ε the calibration solved, the composed guarantee the ledger states, and final regret
(mean ± stderr); then, paired on the same instances, Dist-RDP-SE under advanced composition minus
under RDP composition, and the ratio of their per-round noise variances (Skellam's sum has variance
1/ε_round² in reward units, so the ratio is (ε_RDP/ε_advanced)²), which App. I says grows like
log(B/δ) against the RDP route. App. I's own closed-form ε_i (made for the DRV bound) is printed
beside the ε_i the ledger's optimal composition allows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from privbandit.families.distributed_dp_mab.returning import advanced_targets, appendix_split
from privbandit.runner import run_file
from privbandit.runner.config import load
from privbandit.runner.paired import paired, read_runs

ROOT = Path(__file__).resolve().parent.parent
RDP, ADV = "Dist-RDP-SE@rdp", "Dist-RDP-SE@advanced"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--returning", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--horizon", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--ratios", type=int, nargs="*", default=[64, 256, 1024],
                    help="B at which only the calibration is compared (no runs)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "returning")
    args = ap.parse_args()
    start = time.perf_counter()
    table = {}
    for b in args.returning:
        sets = [f"returning={b}", "calibrate=true"] + ([f"horizon={args.horizon}"] if args.horizon else []) + \
               ([f"runs={args.runs}"] if args.runs else [])
        out = args.out / f"B{b}"
        summary = run_file(ROOT / "experiments" / "returning_users.toml", sets, out=out, jobs=args.jobs).summary
        eps, delta = summary["epsilon"], summary["privacy"][RDP]["delta"]
        closed, solved = appendix_split(eps, delta, b)[0], advanced_targets(eps, delta, b)[0]
        print(f"\nB = {b}  (every user (ε, δ) = ({eps:g}, {delta:.3g})-DP over her B batches; advanced route: each "
              f"release (ε_i, δ/(2B))-DP, ε_i = {solved:.4g}, App. I's closed form {closed:.4g})  "
              f"[{time.perf_counter() - start:.0f} s]")
        rows = {}
        for label, a in summary["algorithms"].items():
            p = summary["privacy"][label]
            per_round = a["parameters"]["epsilon"]
            if a["algorithm"] == "vb-sdp-ae" and b > 1:  # its counts are solved for (ε_i, δ_i) directly
                per_round = advanced_targets(eps, delta, b)[0]
            rows[label] = {"epsilon_round": per_round, "epsilon": p["epsilon_at_delta"],
                           "regret": a["regret_final_mean"], "stderr": a["regret_final_stderr"]}
            print(f"  {label:24s} ε per round {per_round:.4g}   ledger ε {p['epsilon_at_delta']:.4f} "
                  f"at δ {p['delta']:.3g}   regret {a['regret_final_mean']:9.1f} ± {a['regret_final_stderr']:.1f}")
        _, runs = read_runs(out)
        diff = paired(runs[ADV][:, -1], runs[RDP][:, -1])
        ratio = (rows[RDP]["epsilon_round"] / rows[ADV]["epsilon_round"]) ** 2 if b > 1 else 1.0
        print(f"  advanced − RDP (paired): {diff.mean_difference:+.1f} ± {diff.stderr:.1f} (t = {diff.t:.1f}; "
              f"RDP won {diff.b_won} of {diff.runs}); per-round noise variance advanced/RDP = {ratio:.2f}; "
              f"log(B/δ) = {np.log(b / delta):.1f}")
        table[b] = {"rows": rows, "advanced_minus_rdp": diff.as_dict(), "variance_ratio": ratio}
    # Beyond the runs: the per-round noise each route needs, from the calibration alone (no regret).
    print("\nper-round noise variance, advanced / RDP route, from the calibration alone:")
    for b in args.ratios:
        fam, config = load(ROOT / "experiments" / "returning_users.toml", [f"returning={b}", "calibrate=true"])
        eps = {label: fam.algorithm(config, label).epsilon for label in (RDP, ADV)}
        delta = config.delta if config.delta is not None else 1 / (10 * config.horizon)
        ratio = (eps[RDP] / eps[ADV]) ** 2
        table.setdefault("calibration_only", {})[b] = {"epsilon_round": eps, "variance_ratio": ratio}
        print(f"  B = {b:5d}: Skellam's ε per round RDP {eps[RDP]:.4g}, advanced {eps[ADV]:.4g} (each release "
              f"(ε_i, δ_i)-DP with ε_i = {advanced_targets(config.epsilon, delta, b)[0]:.4g}; App. I's closed form "
              f"{appendix_split(config.epsilon, delta, b)[0]:.4g}): variance ratio {ratio:.2f}, "
              f"log(B/δ) = {np.log(b / delta):.1f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "returning.json").write_text(json.dumps(table, indent=2) + "\n")
    print(f"\ntotal wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
