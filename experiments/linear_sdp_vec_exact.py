"""LinUCB-SDP-Vec under the ``exact`` preset against ``theory`` and against JDP (issue #30 item 5).

Fig. 1(b)'s setting (d = 5, K = 100, T = 20,000, B = 20) at (ε, δ) = (1, 0.1), the linear
template's guarantee. ``theory`` sizes P_Vec's noise bits b by Thm C.1's proof constant 24·10⁴;
``exact`` gives each label fair noise bits and the fewest b for which the exact accountant of the
released counts (``privacy/counts.py``) reaches the batch's (ε, δ). JDP (a Gaussian tree, central
trust) is the same under both presets. Both presets draw the instances from the same generator
("paper") and seed, so run r of every row is one instance: the comparisons are paired.

    python experiments/linear_sdp_vec_exact.py [--runs 20] [--horizon 20000] [--jobs 2]

Prints each row's b, its ledger ε at δ, bits per user and final regret, then the paired differences
(a − b, mean ± stderr, t, runs a won).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from reproduce_linear import run_suite  # noqa: E402

from privbandit.runner.paired import paired  # noqa: E402

ROWS = ["algorithms={}", "algorithms.LinUCB-SDP-Vec.algorithm='linucb-sdp-vec'",
        "algorithms.LinUCB-SDP-Vec.batch=20", "algorithms.LinUCB-JDP.algorithm='linucb-jdp'",
        "algorithms.LinUCB.algorithm='linucb'", "epsilon=1", "delta=0.1",
        "calibrate=true"]  # every private row solved to read exactly (1, 0.1) in its ledger: equal guarantees


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=20_000)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    common = ROWS + [f"runs={args.runs}", f"horizon={args.horizon}"]
    t0 = time.perf_counter()
    outcomes = run_suite([(HERE / "linear_fig1b_eps1.toml", common + [f"preset='{p}'"]) for p in ("theory", "exact")],
                         args.jobs)
    print(f"LinUCB-SDP-Vec, exact against theory, (ε, δ) = (1, 0.1), T = {args.horizon:,}, {args.runs} runs: "
          f"{time.perf_counter() - t0:.1f} s wall")
    final = {}
    for preset, (summary, found) in zip(("theory", "exact"), outcomes):
        for label, res in found.items():
            key = label if label != "LinUCB-SDP-Vec" else f"SDP-Vec@{preset}"
            if key in final:
                continue  # LinUCB and JDP are the same under both presets
            final[key] = np.concatenate([r.pseudo[:, -1] for r in res])
            p, a = summary["privacy"][label], summary["algorithms"][label]
            mech = a.get("mechanism", {})
            print(f"  {key:16s} b {mech.get('b', '-')!s:>9}  ledger ε {p.get('epsilon_at_delta')}  "
                  f"bits/user {mech.get('communication', {}).get('bits_per_user_theory', '-')}  regret {final[key].mean():.0f} ± "
                  f"{final[key].std(ddof=1) / np.sqrt(final[key].size):.0f}")
    for a, b in [("SDP-Vec@exact", "SDP-Vec@theory"), ("SDP-Vec@exact", "LinUCB-JDP"),
                 ("SDP-Vec@theory", "LinUCB-JDP"), ("SDP-Vec@exact", "LinUCB")]:
        p = paired(final[a], final[b])
        print(f"  {a} − {b}: {p.mean_difference:+.0f} ± {p.stderr:.0f} (t = {p.t:.1f}, {a} won {p.a_won}/{p.runs})")


if __name__ == "__main__":
    main()
