"""Regret before and after the exact grid noise (issue #13, item 2), paired, at one seed.

The central mechanisms (DP-SE, Anytime-Lazy-UCB's array sums, FTNL's report noisy max, Hybrid-UCB's
tree and array sums) used to add floating-point Laplace noise; they now release on a grid with
exact discrete-Laplace noise (``privbandit/protocol/primitives/noise/grid_laplace.py``). The linear
family's Gaussian randomizer and JDP tree used to add floating-point N(0, σ²); they now release on
the same grid with the discrete Gaussian (``grid_gaussian.py``). This script runs each experiment
twice on the same instances and seeds: as shipped, and with the grid samplers swapped for the old
float noise of the same scale on unrounded values, and prints the paired difference of final
pseudo-regret (grid − float). The two draw different noise, so the difference is noise around zero
if the change costs nothing.

    python experiments/grid_noise_effect.py [--runs 20] [--horizon 200000] [--only LABEL]

The linear cases run at the file's own horizon (T = 20,000, the authors' Fig. 1(b)) and
``--runs`` runs.
"""

from __future__ import annotations

import argparse

import numpy as np

import privbandit.families.distributed_dp_mab.mechanisms as mab_mechanisms
import privbandit.families.shuffle_linear_bandits.lookahead as linear_lookahead
import privbandit.families.shuffle_linear_bandits.mechanisms as linear_mechanisms
import privbandit.families.shuffle_linear_bandits.parties as linear_parties
import privbandit.families.private_online_learning.mechanisms as online_mechanisms
import privbandit.families.private_online_learning.parties as online_parties
from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID
from privbandit.runner import config as experiment_files, tasks
from privbandit.runner.paired import paired

CASES = [  # (experiment file, algorithm labels, horizon or None for --horizon)
    ("experiments/quickstart.toml", ["DP-SE"], None),
    ("experiments/pol_setting2.toml", ["anytime-lazy-ucb", "dp-se"], None),
    ("experiments/pol_ftnl.toml", ["ftnl", "ftnl@c=2"], None),
    ("experiments/pol_setting2.toml", ["hybrid-ucb"], None),
    ("experiments/linear_fig1b_eps1.toml", ["LinUCB-JDP", "LinUCB-SDP-Amp", "LinUCB-LDP"], 20_000),
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


def float_gaussian(sigma, shape, rng):
    """The linear family's old draws: float N(0, σ²), added to unrounded entries."""
    return rng.normal(0.0, sigma, size=shape)


def unrounded(values):
    return np.asarray(values, dtype=np.float64)


# (module, attribute, the old behaviour) for every grid sampler the families call. SDP-Amp's in-process
# look-ahead rests on exact sums of grid values, which float noise breaks: it is switched off for the
# float runs (the plain one-plan-per-batch path, which is what the look-ahead reproduces).
SWAPS = [(mab_mechanisms, "grid_laplace", float_laplace), (online_mechanisms, "grid_laplace", float_laplace),
         (online_parties, "sample_grid_steps", float_steps), (linear_mechanisms, "grid_gaussian_noise", float_gaussian),
         (linear_mechanisms, "to_grid", unrounded), (linear_lookahead, "to_grid", unrounded),
         (linear_parties, "to_grid", unrounded), (linear_parties, "BATCH_AHEAD", ())]


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
    print(f"paired final pseudo-regret, grid − float, T = {args.horizon:,} (linear: 20,000), {args.runs} runs")
    for path, labels, horizon in CASES:
        labels = [x for x in labels if args.only in (None, x)]
        if not labels:
            continue
        horizon = horizon or args.horizon
        grid = final_regret(path, labels, horizon, args.runs)
        saved = [getattr(module, name) for module, name, _ in SWAPS]
        for module, name, old in SWAPS:
            setattr(module, name, old)
        try:
            flt = final_regret(path, labels, horizon, args.runs)
        finally:
            for (module, name, _), value in zip(SWAPS, saved):
                setattr(module, name, value)
        for label in labels:
            p = paired(grid[label], flt[label])
            print(f"{path:34s} {label:18s} grid {grid[label].mean():10.1f}  float {flt[label].mean():10.1f}  "
                  f"diff {p.mean_difference:+9.1f} ± {p.stderr:7.1f}  t = {p.t:+.2f}  grid won {p.a_won}, float won {p.b_won}, tied {p.ties}")


if __name__ == "__main__":
    main()
