"""Noise-share samplers: draws per second on one core, 10⁶ draws per call, best of 3.

    python benchmarks/bench_samplers.py [--only SUBSTRING]
"""

from __future__ import annotations

import platform
import time
from fractions import Fraction

import numpy as np

from privbandit.protocol.primitives.noise import sample_discrete_laplace, sample_polya_shares, sample_skellam
from privbandit.protocol.primitives.noise.discrete_gaussian import _discrete_laplace as exact_discrete_laplace
from privbandit.protocol.primitives.noise.discrete_gaussian import sample_discrete_gaussian
from privbandit.protocol.primitives.noise.grid_gaussian import GAUSSIAN_GRID, sample_discrete_gaussian_fast

# The linear family's grid Gaussian: σ = 1.9 (LDP's paper-code σ at ε = 1, d = 5) in steps of γ = 2⁻²⁰.
GRID_SIGMA = 1.9 / GAUSSIAN_GRID

N = 1_000_000


def rate(fn, n: int = N) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the samplers whose name contains this")
    only = ap.parse_args().only
    rng = np.random.default_rng(0)
    print(f"machine: {platform.machine()}, python {platform.python_version()}, numpy {np.__version__}")
    # name: (draw n, n); the exact samplers at large scales draw 10⁴ (they run at ~10⁴–10⁵ per second)
    cases = {
        "Pólya share (n = 2¹⁶, b = 512)": (lambda n: sample_polya_shares(2**16, 512.0, n, rng), N),
        "Pólya share (n = 2, b = 2)": (lambda n: sample_polya_shares(2, 2.0, n, rng), N),
        "discrete Laplace (b = 64)": (lambda n: sample_discrete_laplace(64.0, n, rng), N),
        # the grid Laplace's scale at Δ = 1, ε = 1 (2²⁰ + 1 steps), numpy's geometrics
        "discrete Laplace (b = 2²⁰ + 1)": (lambda n: sample_discrete_laplace(2.0**20 + 1, n, rng), N),
        # the same law from the rational coins (CKS Alg. 2, integer scale): what an exact grid Laplace costs
        "discrete Laplace, exact (t = 2²⁰ + 1)": (lambda n: exact_discrete_laplace(2**20 + 1, n, rng), 10_000),
        "Skellam share (σ² = 100)": (lambda n: sample_skellam(100.0, n, rng), N),
        "discrete Gaussian, exact (σ² = 100)": (lambda n: sample_discrete_gaussian(Fraction(100), n, rng), N),
        "discrete Gaussian, exact (σ² = 10⁴)": (lambda n: sample_discrete_gaussian(Fraction(10**4), n, rng), N),
        "discrete Gaussian, exact (σ² = 1/4)": (lambda n: sample_discrete_gaussian(Fraction(1, 4), n, rng), N),
        "discrete Gaussian, exact (σ = 2·10⁶)": (
            lambda n: sample_discrete_gaussian(Fraction(GRID_SIGMA**2), n, rng), N),
        "discrete Gaussian, double coins (σ = 2·10⁶)": (lambda n: sample_discrete_gaussian_fast(GRID_SIGMA, n, rng), N),
        "discrete Gaussian, double coins (σ = 2)": (lambda n: sample_discrete_gaussian_fast(2.0, n, rng), N),
        "float normal (numpy, no guarantee)": (lambda n: rng.normal(0.0, 1.0, n), N),
    }
    for name, (fn, n) in cases.items():
        if only not in name:
            continue
        print(f"{name:<40}{rate(fn, n):>14,.0f} draws/s  ({n:,} per call)")


if __name__ == "__main__":
    main()
