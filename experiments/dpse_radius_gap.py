"""Why the distributed DP-SE twin trails the central one in setting 2 at ε = 0.1
(docs/private-online-learning.md, "Distributed twins").

    python experiments/dpse_radius_gap.py [--runs 100]

Runs DP-SE in setting 2 at ε = 0.1, T = 2·2^21, three ways: central (Lap(1/ε), radius with σ = 0),
distributed as built (Pólya shares; Dist-DP-SE's radius, whose σ = √2/ε covers the randomized
rounding of rewards into {0, …, g}, Chowdhury & Zhou §6, Term (ii)), and distributed with σ set to
0 for this comparison only. With Bernoulli rewards the encoding is exact (x·g is an integer), so
the rounding term is not needed here; a learner that cannot assume that must keep it. If the third
line matches the first, the whole gap is that term: wider radii, later eliminations.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from privbandit.experiment import online_family
from privbandit.protocol.mechanisms.distributed_dp_mab import PolyaSecAgg

EXPERIMENT = Path(__file__).with_name("pol_setting2.toml")


def regret(config, label: str) -> str:
    final = [online_family.execute(config, label, r)[2].pseudo_regret[-1] for r in range(config.runs)]
    return f"{np.mean(final):8,.0f} ± {np.std(final, ddof=1) / np.sqrt(len(final)):5,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    config = online_family.load(EXPERIMENT, ["epsilon=0.1", f"runs={args.runs}"])
    print(f"DP-SE, setting 2, ε = 0.1, T = {config.horizon:,}, {args.runs} runs: final pseudo-regret (mean ± s.e.)")
    print(f"central                                  {regret(config, 'dp-se')}")
    print(f"distributed, as built (σ = √2/ε)         {regret(config, 'dp-se@distributed')}")
    built = PolyaSecAgg.width_constants
    PolyaSecAgg.width_constants = lambda self, n, g: (0.0, built(self, n, g)[1])  # this comparison only
    try:
        print(f"distributed, σ = 0 (no rounding term)    {regret(config, 'dp-se@distributed')}")
    finally:
        PolyaSecAgg.width_constants = built


if __name__ == "__main__":
    main()
