"""The Gaussian mechanism on a fixed grid, for releases of real-valued vectors.

Floating-point Gaussian noise (``rng.normal``) has the floating-point Laplace's defect (Mironov,
CCS 2012): which doubles a noisy value can take depends on the true value. privbandit's Gaussian
releases (the linear family's local randomizer R_Amp and its JDP tree) are therefore on the grid
γℤ, γ = :data:`GAUSSIAN_GRID`, entry by entry:

    M(x) = ⌊x⌉_γ + γ · N_ℤ(0, (σ/γ)²),

⌊x⌉_γ the nearest multiple of γ and N_ℤ the discrete Gaussian on the integers (Canonne, Kamath &
Steinke 2020, "CKS"). If ‖x − x'‖₂ ≤ Δ for D-entry vectors, the rounded integer vectors differ by at
most Δ/γ + √D (each entry's rounding moves it by ≤ ½), and CKS Thm 14 (the multivariate discrete
Gaussian) makes the release ρ-zCDP with

    ρ = (Δ + √D·γ)² / (2σ²),

the continuous Gaussian's ρ at the widened sensitivity :func:`grid_sensitivity`: far below
anything a ledger prints (√D·γ < 10⁻⁴ for D < 10⁴). No (ε, δ) curve tighter than zCDP's is
claimed for the multivariate discrete Gaussian (the analytic curve of Balle & Wang is the continuous
mechanism's), so the ledger converts ρ with dp-accounting's Rényi conversion.

Sampling (:func:`sample_discrete_gaussian_fast`, compiled): CKS Algorithm 3, rejection from the
discrete Laplace Lap_ℤ(t), t = ⌊σ⌋ + 1. The proposal is the difference of two geometrics ⌊t·E⌋
from double exponentials E, and the acceptance coin exp(−(|y| − σ²/t)²/(2σ²)) is a third double
exponential compared with (|y| − σ²/t)²/(2σ²); all draws come from the caller's numpy Generator.
Every output is an integer whatever the input, which is what Mironov's attack needs broken. The
exponentials are a lattice of doubles (numpy's ziggurat, reproduced by numba bit for bit), so the
law is the discrete Gaussian's only to within total variation
:func:`~.sampler_bounds.discrete_gaussian_fast_tv_bound` per draw: ≤ 1.9·10⁻⁸ at σ/γ ≈ 2·10⁶ (an
upper bound; it grows with σ/γ), and the proposal is capped at ≈ 44.4·t. The ledger's ρ-zCDP is
the ideal discrete Gaussian's; the sampler's distance is reported beside it
(``mechanism.sampler_tv_per_entry`` in the linear family's summary), not added to δ. The fully exact
sampler (:func:`~.discrete_gaussian.sample_discrete_gaussian`, rational coins in Python integers)
ran at 3.3·10⁴ draws/s at the σ/γ ~ 10⁶ this grid needs; this one at about 3·10⁷ per second
(numpy's geometrics and uniforms before it: 1.0–1.4·10⁷; ``benchmarks/bench_samplers.py --only
Gaussian``), and the linear family draws ~10⁸ entries per figure.

Sums of grid values stay exact in float64 while they are below 2³³ in magnitude.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID

# One grid for every central and local real-valued release: 2⁻²⁰.
GAUSSIAN_GRID = LAPLACE_GRID
# σ/γ above this would let draws and their squares leave the doubles' exact integers.
_MAX_STEPS = 2.0 ** 40


def sample_discrete_gaussian_fast(sigma: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` integers from N_ℤ(0, σ²), σ ≥ 1 in integer units (CKS Alg. 3; see the module
    docstring for the coins). int64."""
    if not (math.isfinite(sigma) and 1.0 <= sigma <= _MAX_STEPS):
        raise ValueError(f"discrete Gaussian σ={sigma} (in grid steps) must lie in [1, 2^40]")
    if size < 0:
        raise ValueError(f"size must be a non-negative integer, got {size!r}")
    out = np.empty(size, dtype=np.int64)
    _cks(float(sigma), rng, out)
    return out


@njit(cache=True)
def _cks(sigma, rng, out):
    """CKS Algorithm 3 into ``out``. The proposal Lap_ℤ(t), t = ⌊σ⌋ + 1, is the difference of two
    geometrics ⌊t·E⌋ (E ~ Exp(1), so P(⌊t·E⌋ ≥ k) = e^{−k/t}), accepted with probability
    exp(−(|y| − σ²/t)²/(2σ²)): an exponential E' exceeding (|y| − σ²/t)²/(2σ²)."""
    t = math.floor(sigma) + 1.0
    two_s2 = 2.0 * sigma * sigma
    center = sigma * sigma / t
    i = 0
    while i < out.size:
        y = math.floor(t * rng.standard_exponential()) - math.floor(t * rng.standard_exponential())
        x = abs(y) - center
        if rng.standard_exponential() * two_s2 <= x * x:
            continue
        out[i] = np.int64(y)
        i += 1


def grid_sensitivity(sensitivity: float, entries: int, grid: float = GAUSSIAN_GRID) -> float:
    """Δ + √D·γ: the ℓ2 distance of two D-entry vectors at distance ≤ Δ after rounding to the grid."""
    return sensitivity + math.sqrt(entries) * grid


def grid_gaussian_noise(sigma: float, shape, rng: np.random.Generator, grid: float = GAUSSIAN_GRID) -> np.ndarray:
    """γ·N_ℤ(0, (σ/γ)²) per entry, as float64 multiples of the grid (exact)."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"Gaussian σ={sigma} must be finite and > 0")
    shape = tuple(shape)
    steps = sample_discrete_gaussian_fast(sigma / grid, int(np.prod(shape)), rng)
    return steps.reshape(shape).astype(np.float64) * grid


def to_grid(values: np.ndarray, grid: float = GAUSSIAN_GRID) -> np.ndarray:
    """⌊x⌉_γ, refusing values whose grid sums would not be exact in float64."""
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.abs(v) < 2.0 ** 33):  # also refuses NaN
        raise ValueError(f"grid Gaussian takes finite values below 2^33 in magnitude, got {v.ravel()[:4]}")
    return np.rint(v / grid) * grid
