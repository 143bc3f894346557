"""The Laplace mechanism on a fixed grid, for the central-model releases of real-valued sums.

Floating-point Laplace noise (``numpy``'s ``rng.laplace``) is not ε-DP: the set of doubles a noisy
value can take depends on the true value, and Mironov (CCS 2012) recovers inputs from the low
bits. privbandit's central mechanisms therefore release on the grid γℤ, γ = :data:`LAPLACE_GRID`:

    M(S) = ⌊S⌉_γ + γ · Lap_ℤ((Δ + γ) / (γ ε)),

where ⌊S⌉_γ rounds S to the nearest multiple of γ and Lap_ℤ is the exact discrete Laplace
(:func:`~privbandit.protocol.primitives.noise.polya.sample_discrete_laplace`, integers). If
|S − S'| ≤ Δ then |⌊S⌉_γ − ⌊S'⌉_γ| ≤ Δ + γ, a multiple of γ when Δ is one; the integer noise's
ratio at points k apart is e^{−k γ ε/(Δ + γ)}, so the release is exactly ε-DP with no floating-point
caveat. The price is the widened sensitivity (Δ + γ instead of Δ: the noise scale grows by a
factor 1 + 2⁻²⁰ at Δ = 1) and a rounding error of at most γ/2 ≈ 4.8·10⁻⁷ per release; both far
below anything a regret curve shows. Sums stay exact in float64 as long as |S|/γ < 2⁵³, i.e.
|S| < 2³³; :func:`grid_laplace` refuses larger ones.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.protocol.primitives.noise.polya import sample_discrete_laplace

LAPLACE_GRID = 2.0 ** -20
_EXACT_LIMIT = 2.0 ** 33


def grid_laplace_scale(sensitivity: float, epsilon: float, grid: float = LAPLACE_GRID) -> float:
    """The discrete-Laplace scale, in grid steps, that makes :func:`grid_laplace` ε-DP."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon={epsilon} must be finite and > 0")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"sensitivity={sensitivity} must be finite and > 0")
    if sensitivity / grid != round(sensitivity / grid):
        raise ValueError(f"sensitivity={sensitivity} must be a multiple of the grid {grid}")
    return (sensitivity + grid) / (grid * epsilon)


def grid_laplace(values, sensitivity: float, epsilon: float, rng: np.random.Generator,
                 grid: float = LAPLACE_GRID) -> tuple[np.ndarray, np.ndarray]:
    """(release, noise): ``values`` rounded to the grid plus γ·Lap_ℤ((Δ + γ)/(γε)) each, and the
    noise added (for metrics). Both lie on the grid."""
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)) or np.any(np.abs(v) >= _EXACT_LIMIT):
        raise ValueError(f"grid Laplace takes finite values below 2^33 in magnitude, got {v.ravel()[:4]}")
    steps = sample_discrete_laplace(grid_laplace_scale(sensitivity, epsilon, grid), v.size, rng).reshape(v.shape)
    noise = steps * grid
    return np.rint(v / grid) * grid + noise, noise


# --- Laplace releases whose noise is drawn before its scale is known ----------------------------
#
# Hybrid-UCB draws its noise per round, in blocks, before it knows which tree (hence which scale)
# a draw will serve. It draws unit steps L ~ Lap_Z(1/γ) and releases value v at scale b as
#
#     (⌊v/g⌉ + L) · g,   g = b′γ,   b′ = b / (1 − bγ).
#
# Between neighbours (|v − v′| ≤ Δ = 1) the rounded integers differ by at most 1/g + 1, and L's
# ratio at points k apart is e^{kγ}: the loss is (1/g + 1)γ = 1/b′ + γ = 1/b, exactly the ε of the
# continuous Laplace of scale b. The release is a function of the integer ⌊v/g⌉ + L only, so the
# floating-point product adds nothing. The noise is larger by the factor 1/(1 − bγ) (1 + 10⁻³ at
# b = 1,000), and b must stay below 1/γ = 2²⁰.


def sample_grid_steps(shape, rng: np.random.Generator) -> np.ndarray:
    """Unit steps ``L ~ Lap_Z(1/γ)`` as float64 integers, for :func:`grid_step`-scaled releases."""
    size = int(np.prod(shape))
    return sample_discrete_laplace(1.0 / LAPLACE_GRID, size, rng).reshape(shape).astype(np.float64)


def grid_step(scale: float, grid: float = LAPLACE_GRID) -> float:
    """g = b′γ for the Laplace scale b (sensitivity 1): ``(round(v / g) + L) * g`` with unit steps
    L from :func:`sample_grid_steps` is exactly (1/b)-DP (see above)."""
    if not (math.isfinite(scale) and 0 < scale < 1.0 / grid):
        raise ValueError(f"Laplace scale {scale} must lie in (0, {1.0 / grid:g}) for the grid {grid}: "
                         f"epsilon is too small for an exact grid release")
    return scale / (1.0 - scale * grid) * grid
