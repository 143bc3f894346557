"""Regret before and after the exact grid Laplace (issue #13, item 2), paired, at one seed.

The central mechanisms (DP-SE, Anytime-Lazy-UCB's array sums, FTNL's report noisy max, Hybrid-UCB's
tree and array sums) used to add floating-point Laplace noise; they now release on a grid with
exact discrete-Laplace noise (``privbandit/protocol/primitives/noise/grid_laplace.py``). This script runs each experiment twice
on the same instances and seeds: as shipped, and with the grid sampler swapped for the old float
Laplace of the same scale, and prints the paired difference of final pseudo-regret (grid − float).
The two draw different noise, so the difference is noise around zero if the change costs nothing.

    python experiments/grid_laplace_effect.py [--runs 20] [--horizon 200000] [--only hybrid-ucb]
"""

from __future__ import annotations

import argparse

import numpy as np

import privbandit.families.distributed_dp_mab.mechanisms as mab_mechanisms
import privbandit.families.private_online_learning.mechanisms as online_mechanisms
import privbandit.families.private_online_learning.parties as online_parties
from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID
from privbandit.runner import config as experiment_files, tasks
from privbandit.runner.paired import paired

CASES = [  # (experiment file, algorithm labels)
    ("experiments/quickstart.toml", ["DP-SE"]),
    ("experiments/pol_setting2.toml", ["anytime-lazy-ucb", "dp-se"]),
    ("experiments/pol_ftnl.toml", ["ftnl", "ftnl@c=2"]),
    ("experiments/pol_setting2.toml", ["hybrid-ucb"]),
]


def float_laplace(values, sensitivity, epsilon, rng, grid=LAPLACE_GRID):
    """The old behaviour: float Laplace of the same scale on the unrounded values."""
    v = np.asarray(values, dtype=np.float64)
    noise = rng.laplace(0.0, (sensitivity + grid) / epsilon, size=v.shape)
    return v + noise, noise


def float_steps(shape, rng):
    """Hybrid-UCB's old draws in grid-step units: (⌊v/g⌉ + Lap(1)/γ)·g is the rounded sum plus
    float Laplace of scale b′ (the grid scale), i.e. the old release up to half a grid step."""
    return rng.laplace(0.0, 1.0, size=shape) / LAPLACE_GRID


def final_regret(path: str, labels: list[str], horizon: int, runs: int) -> dict[str, np.ndarray]:
    family, config = experiment_files.load(path, [f"horizon={horizon}", f"runs={runs}"])
    config = config.model_copy(update={"algorithms": {k: v for k, v in config.algorithms.items() if k in labels}})
    found, _, _ = tasks.run_experiment(family, config, jobs=1)  # one process: the swap below must reach it
    return {label: np.concatenate([t.pseudo[:, -1] for t in found[label]]) for label in labels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=200_000)
    ap.add_argument("--only", default=None, help="one algorithm label (e.g. hybrid-ucb)")
    args = ap.parse_args()
    print(f"paired final pseudo-regret, grid − float, T = {args.horizon:,}, {args.runs} runs")
    for path, labels in CASES:
        labels = [x for x in labels if args.only in (None, x)]
        if not labels:
            continue
        grid = final_regret(path, labels, args.horizon, args.runs)
        saved = mab_mechanisms.grid_laplace, online_mechanisms.grid_laplace, online_parties.sample_grid_steps
        mab_mechanisms.grid_laplace = online_mechanisms.grid_laplace = float_laplace
        online_parties.sample_grid_steps = float_steps
        try:
            flt = final_regret(path, labels, args.horizon, args.runs)
        finally:
            mab_mechanisms.grid_laplace, online_mechanisms.grid_laplace, online_parties.sample_grid_steps = saved
        for label in labels:
            p = paired(grid[label], flt[label])
            print(f"{path:34s} {label:18s} grid {grid[label].mean():10.1f}  float {flt[label].mean():10.1f}  "
                  f"diff {p.mean_difference:+9.1f} ± {p.stderr:7.1f}  t = {p.t:+.2f}  grid won {p.a_won}, float won {p.b_won}, tied {p.ties}")


if __name__ == "__main__":
    main()
