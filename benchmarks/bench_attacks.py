"""The figures of docs/attacks.md: every in-process adversary at growing attacker fractions.

    python benchmarks/bench_attacks.py [--runs 10] [--horizon 1000000] [--out results/bench-attacks]

Each line is one `privbandit attack KIND experiments/attacks.toml --fraction F [--range-check]`
(same seed, so the honest columns repeat); it prints regret (mean over runs), estimate error
(mean |R_a(b) − Σx|/n per round, rewards per user) and ε, honest → attacked.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from privbandit.experiment.attack import run_attack

EXPERIMENT = Path(__file__).resolve().parents[1] / "experiments" / "attacks.toml"
SWEEP = [
    ("max-shift", False, (0.01, 0.05, 0.1, 0.2)),
    ("max-shift", True, (0.05, 0.2)),
    ("out-of-range", False, (0.01, 0.05, 0.2)),
    ("out-of-range", True, (0.05, 0.2)),
    ("window-edge", True, (0.01, 0.05, 0.2)),
    ("colluders", False, (0.05, 0.1, 0.2)),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=Path("results/bench-attacks"))
    args = ap.parse_args()
    sets = [f"runs={args.runs}", f"horizon={args.horizon}"]
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for kind, check, fractions in SWEEP:
        for f in fractions:
            start = time.perf_counter()
            rep = run_attack(EXPERIMENT, sets, kind, f, 1.0, check, args.out / f"{kind}-{f}-{int(check)}")
            print(f"\n{kind} fraction={f} range_check={check} ({time.perf_counter() - start:.0f} s) "
                  f"rejected={rep['rejected']}")
            for label, a in rep["algorithms"].items():
                coal = "" if a["epsilon_vs_coalition"] is None else f" vs-coalition {a['epsilon_vs_coalition']:.3g}"
                print(f"  {label:18s} regret {a['regret_honest']:>9,.0f} → {a['regret_attacked']:>9,.0f}"
                      f"  est.err {a['estimate_error_honest']:.4f} → {a['estimate_error_attacked']:.4f}"
                      f"  best-arm-lost {a['best_arm_eliminated_runs'][0]}→{a['best_arm_eliminated_runs'][1]}"
                      f"  ε {a['epsilon_honest']:.3g} → {a['epsilon_attacked']:.3g}{coal}"
                      f"  check={a['range_check']}")


if __name__ == "__main__":
    main()
