"""Regret before and after the exact grid Laplace (issue #13, item 2), paired, at one seed.

The central mechanisms (DP-SE, Anytime-Lazy-UCB's array sums, FTNL's report noisy max) used to add
floating-point Laplace noise; they now release on the grid 2⁻²⁰ with exact discrete-Laplace noise
(``privbandit/protocol/primitives/noise/grid_laplace.py``). This script runs each experiment twice
on the same instances and seeds: as shipped, and with the grid sampler swapped for the old float
Laplace of the same scale, and prints the paired difference of final pseudo-regret (grid − float).
The two draw different noise, so the difference is noise around zero if the change costs nothing.

    python experiments/grid_laplace_effect.py [--runs 20] [--horizon 200000]
"""

from __future__ import annotations

import argparse

import numpy as np

import privbandit.families.distributed_dp_mab.mechanisms as mab_mechanisms
import privbandit.families.private_online_learning.mechanisms as online_mechanisms
from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID
from privbandit.runner import config as experiment_files, tasks
from privbandit.runner.paired import paired

CASES = [  # (experiment file, algorithm labels)
    ("experiments/quickstart.toml", ["DP-SE"]),
    ("experiments/pol_setting2.toml", ["anytime-lazy-ucb", "dp-se"]),
    ("experiments/pol_ftnl.toml", ["ftnl", "ftnl@c=2"]),
]


def float_laplace(values, sensitivity, epsilon, rng, grid=LAPLACE_GRID):
    """The old behaviour: float Laplace of the same scale on the unrounded values."""
    v = np.asarray(values, dtype=np.float64)
    noise = rng.laplace(0.0, (sensitivity + grid) / epsilon, size=v.shape)
    return v + noise, noise


def final_regret(path: str, labels: list[str], horizon: int, runs: int) -> dict[str, np.ndarray]:
    family, config = experiment_files.load(path, [f"horizon={horizon}", f"runs={runs}"])
    config = config.model_copy(update={"algorithms": {k: v for k, v in config.algorithms.items() if k in labels}})
    found, _, _ = tasks.run_experiment(family, config, jobs=1)  # one process: the swap below must reach it
    return {label: np.concatenate([t.pseudo[:, -1] for t in found[label]]) for label in labels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=200_000)
    args = ap.parse_args()
    print(f"paired final pseudo-regret, grid − float, T = {args.horizon:,}, {args.runs} runs")
    for path, labels in CASES:
        grid = final_regret(path, labels, args.horizon, args.runs)
        saved = mab_mechanisms.grid_laplace, online_mechanisms.grid_laplace
        mab_mechanisms.grid_laplace = online_mechanisms.grid_laplace = float_laplace
        try:
            flt = final_regret(path, labels, args.horizon, args.runs)
        finally:
            mab_mechanisms.grid_laplace, online_mechanisms.grid_laplace = saved
        for label in labels:
            p = paired(grid[label], flt[label])
            print(f"{path:34s} {label:18s} grid {grid[label].mean():10.1f}  float {flt[label].mean():10.1f}  "
                  f"diff {p.mean_difference:+9.1f} ± {p.stderr:7.1f}  t = {p.t:+.2f}  grid won {p.a_won}, float won {p.b_won}, tied {p.ties}")


if __name__ == "__main__":
    main()
