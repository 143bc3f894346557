"""The Laplace mechanism on a fixed grid, for the central-model releases of real-valued sums.

Floating-point Laplace noise (``numpy``'s ``rng.laplace``) is not ε-DP: the set of doubles a noisy
value can take depends on the true value, and Mironov (CCS 2012) recovers inputs from the low
bits. privbandit's central mechanisms therefore release on the grid γℤ, γ = :data:`LAPLACE_GRID`:

    M(S) = ⌊S⌉_γ + γ · Lap_ℤ((Δ + γ) / (γ ε)),

where ⌊S⌉_γ rounds S to the nearest multiple of γ and Lap_ℤ is the discrete Laplace (Chowdhury &
Zhou 2023, Definition 4), drawn by
:func:`~privbandit.protocol.primitives.noise.polya.sample_discrete_laplace` as integers. If
|S − S'| ≤ Δ then |⌊S⌉_γ − ⌊S'⌉_γ| ≤ Δ + γ, a multiple of γ when Δ is one; the ideal Lap_ℤ's ratio
at points k apart is e^{−k γ ε/(Δ + γ)}, so with it the release would be exactly ε-DP, and every
output is on the grid whatever the input (which is what Mironov's attack needs broken).

**What the sampler gives is (ε, δ)-DP, not pure ε-DP.** It draws Lap_ℤ as a difference of numpy's
double-precision geometrics, whose support is capped at about 44.4 scales (|L| ≤
:func:`~.sampler_bounds.discrete_laplace_cap`: 46,592,385 grid steps at Δ = 1, ε = 1): an output
beyond one neighbour's cap has probability 0 under it and > 0 under the other. Its law is within
total variation τ ≤ :func:`~.sampler_bounds.discrete_laplace_tv_bound` of Lap_ℤ, so the release is
(ε, (1 + e^ε)·τ)-DP, :func:`grid_laplace_delta`: 2.8·10⁻⁸ at Δ = 1, ε = 1 (b ≈ 10⁶ steps), 1.6·10⁻⁷
at ε = 0.1; an upper bound from the doubles' lattice (:mod:`.sampler_bounds`), the true distance
is likely far smaller. The ledgers of the families that use it record ``PureDP(ε)``: that is the
ideal noise's guarantee, and this δ is not added to it.

The price of the grid is the widened sensitivity (Δ + γ instead of Δ: the noise scale grows by a
factor 1 + 2⁻²⁰ at Δ = 1) and a rounding error of at most γ/2 ≈ 4.8·10⁻⁷ per release; both far
below anything a regret curve shows. Sums stay exact in float64 as long as |S|/γ < 2⁵³, i.e.
|S| < 2³³; :func:`grid_laplace` refuses larger ones.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.protocol.primitives.noise.polya import sample_discrete_laplace
from privbandit.protocol.primitives.noise.sampler_bounds import approx_dp_delta, discrete_laplace_tv_bound

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


def grid_laplace_delta(sensitivity: float, epsilon: float, grid: float = LAPLACE_GRID) -> float:
    """δ such that :func:`grid_laplace` at these parameters is (ε, δ)-DP with the sampler it uses:
    (1 + e^ε)·τ, τ the sampler's total-variation bound at its scale (module docstring)."""
    return approx_dp_delta(epsilon, discrete_laplace_tv_bound(grid_laplace_scale(sensitivity, epsilon, grid)))


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
# b = 1,000), and b must stay below 1/γ = 2²⁰. As above, that is the ideal unit steps' guarantee;
# the sampler's (Lap_ℤ(2²⁰) within total variation 7.5·10⁻⁹) makes it (1/b, (1 + e^{1/b})·7.5·10⁻⁹)-DP
# (grid_step_delta).


def sample_grid_steps(shape, rng: np.random.Generator) -> np.ndarray:
    """Unit steps ``L ~ Lap_Z(1/γ)`` as float64 integers, for :func:`grid_step`-scaled releases."""
    size = int(np.prod(shape))
    return sample_discrete_laplace(1.0 / LAPLACE_GRID, size, rng).reshape(shape).astype(np.float64)


def grid_step(scale: float, grid: float = LAPLACE_GRID) -> float:
    """g = b′γ for the Laplace scale b (sensitivity 1): ``(round(v / g) + L) * g`` with unit steps
    L from :func:`sample_grid_steps` is (1/b)-DP with the ideal steps, (1/b, :func:`grid_step_delta`)-DP
    with the sampler's (see above)."""
    if not (math.isfinite(scale) and 0 < scale < 1.0 / grid):
        raise ValueError(f"Laplace scale {scale} must lie in (0, {1.0 / grid:g}) for the grid {grid}: "
                         f"epsilon is too small for an exact grid release")
    return scale / (1.0 - scale * grid) * grid


def grid_step_delta(scale: float, grid: float = LAPLACE_GRID) -> float:
    """δ such that a :func:`grid_step` release at Laplace scale b is (1/b, δ)-DP with the unit steps
    :func:`sample_grid_steps` draws (their law within total variation τ of Lap_ℤ(1/γ))."""
    grid_step(scale, grid)  # the same refusals
    return approx_dp_delta(1.0 / scale, discrete_laplace_tv_bound(1.0 / grid))
