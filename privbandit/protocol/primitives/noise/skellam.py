"""Skellam shares (Chowdhury & Zhou 2023, Definition 5 and Theorem 2).

``Sk(0, σ²)`` is ``N₁ − N₂`` with ``N₁, N₂`` i.i.d. ``Poisson(σ²/2)``; it is closed under sums, so
n shares of ``Sk(0, σ²/n)`` sum to ``Sk(0, σ²)``.
"""

from __future__ import annotations

import numpy as np


def sample_skellam(variance: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of ``Sk(0, variance)``, as int64."""
    if not (np.isfinite(variance) and variance > 0):
        raise ValueError(f"Skellam variance {variance} must be finite and > 0")
    lam = variance / 2.0
    return rng.poisson(lam, size=size).astype(np.int64) - rng.poisson(lam, size=size)


def skellam_pmf(x: np.ndarray, variance: float) -> np.ndarray:
    from scipy import stats  # here: scipy.stats takes ~1 s to import, and only tests need the pmf

    return stats.skellam.pmf(np.asarray(x), variance / 2.0, variance / 2.0)
