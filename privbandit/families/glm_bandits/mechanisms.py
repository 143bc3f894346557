"""The GLM family's privacy mechanisms (Sarmasarkar): the Gaussian binary trees of Algorithm 2
(Sec. 6, App. I.1), and the two private optimizers Algorithm 2 calls:

- :class:`GridGaussianTree`: prefix sums of symmetric d×d leaves through the binary-tree
  mechanism, each node carrying App. I.1's symmetric Gaussian noise Z = (Z′ + Z′ᵀ)/2 (diagonal
  variance σ², off-diagonal σ²/2) as *exact* discrete Gaussians on a fixed grid (leaves are rounded
  to the grid), calibrated by zCDP on the leaves' Frobenius distance (:class:`TreeCalibration`).
  Noise is fixed per node (one draw), so every release is consistent.
- :func:`projected_gd_pvec` (the paper's 𝒫_GD, App. T Algorithm 7): projected full-batch gradient
  descent whose every gradient sum goes through the shuffle vector-sum protocol P_Vec (reused from
  the linear family, App. S Algorithms 4–6), each iteration at (ε/(2√(2T log(1/δ))), δ/(T+1)).
- :func:`dp_sgd` (the authors' code, Remark A.1): DP-SGD with per-sample clipping, sampling
  without replacement and noise calibrated by dp-accounting's RDP accountant, per Rényi order the
  smaller of the subsampled bound (Wang, Balle & Kasiviswanathan 2019) and the unamplified
  Gaussian's (:func:`sgd_rdp_curves`; issue #31), with the Gaussian replaced by the exact discrete
  Gaussian on a grid (its Rényi divergences are at most the Gaussian's, and the subsampling bound
  is monotone in them).

Both optimizers minimize the average of the GLM loss ℓ(θ; x, r) = ∫₀^{⟨x,θ⟩} μ − r⟨x,θ⟩ (Sec. 4)
plus (λ/2n)‖θ‖², whose per-sample gradient is (μ(⟨x,θ⟩) − r)·x (norm ≤ R = 1); the regularizer's
gradient is data-independent and added by the server (spec §12 item 30).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from privbandit.families.glm_bandits.world import mu
from privbandit.families.shuffle_linear_bandits.mechanisms import (
    BitSumAnalyzer,
    BitSumRandomizer,
    VecParams,
    from_upper,
    n_entries,
    to_upper,
)
from privbandit.protocol.primitives.noise.discrete_gaussian import sample_discrete_gaussian
from privbandit.protocol.privacy import counts
from privbandit.protocol.privacy.amplification import zcdp_rho  # re-exported: the tree calibration
from privbandit.protocol.privacy.events import ORDERS as EVENT_ORDERS

# The fixed grid of the trees' and DP-SGD's noise: 2⁻⁸. Leaves and clipped gradients are rounded
# to it, which adds at most grid·√D to a neighbour's ℓ2 distance; that is charged in the sensitivity.
GRID = 2.0**-8
VEC_CONSTANT = 24e4  # eq. (127)'s constant in b
# Rényi orders of the DP-SGD noise search (a short list: the accountant's WOR bound is slow).
SGD_ORDERS = (1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128, 256)
# The amplified bound's orders tried first: 128 and 256 are 85 % of a sampled-without-replacement
# evaluation (an O(α²) pure-Python sum each; docs/performance.md, "GLM family against the authors'
# code"). :func:`sgd_epsilon` adds them only when the optimum sits at the edge of these.
SGD_LOW_ORDERS = tuple(o for o in SGD_ORDERS if o <= 64)


def tree_levels(horizon: int) -> int:
    """m: how many dyadic nodes hold one leaf in a tree over ``horizon`` leaves (⌊log₂ T⌋ + 1)."""
    return max(1, int(horizon).bit_length())


@dataclass(frozen=True)
class TreeCalibration:
    """One tree's node noise (App. I.1): σ (on the real scale) of the *diagonal* entries, its grid,
    and the zCDP ρ it gives per user (m nodes hold a leaf; a neighbour moves a leaf by at most
    ``sensitivity`` in Frobenius norm before rounding).

    App. I.1 adds Z = (Z′ + Z′ᵀ)/2 with Z′ i.i.d. N(0, σ²): Z_ii ~ N(0, σ²), Z_ij = Z_ji ~ N(0, σ²/2),
    independent over i ≤ j. Here each node draws, in grid units, the diagonal from N_Z(0, s²) and
    each upper off-diagonal entry from N_Z(0, s²/2), independently, with s²/2 = ⌈(σ/grid)²/2⌉ an
    integer (so the off-diagonal parameter is *exactly* half the diagonal one, and s ≥ σ/grid). This
    is the discrete analogue of App. I.1's Z, not Z itself: (Z′ + Z′ᵀ)/2 of grid-valued Z′ would fall
    on the half-grid and not be a discrete Gaussian. Its variances are App. I.1's to within the
    discrete Gaussian's deficit (Var N_Z(0, s²) ≤ s², short by less than 10⁻¹⁰⁰·s² at s ≥ 10, i.e.
    σ ≥ 0.04; the experiments' σ are above 1).

    Privacy (Canonne, Kamath & Steinke 2020, one coordinate, then zCDP composition over independent ones):
    integer shifts Δ_ij of N_Z(0, s_ij²) per coordinate are Σ Δ_ij²/(2 s_ij²)-zCDP, i.e.
    ‖D‖_F²/(2 s²) for the symmetric difference D of two rounded leaves, since an off-diagonal entry
    appears twice in ‖D‖_F² and carries half the variance. Rounding moves each entry by ≤ ½ grid, so
    ‖D‖_F ≤ Δ/grid + d in grid units (the all-ones d×d matrix has Frobenius norm d). App. I.1 states
    its calibration for Δ = the operator norm of a leaf's change; a Gaussian on a matrix is private
    for its Frobenius norm (≥ the operator norm; a replace-one V leaf moves by up to √2 in both
    ℓ2-of-the-upper-triangle and Frobenius), so the caller passes a Frobenius bound."""

    sigma: float
    sensitivity: float
    levels: int
    d: int
    grid: float = GRID

    @property
    def sensitivity_on_grid(self) -> float:
        """Frobenius distance of two rounded leaves, in grid units: Δ/grid + d."""
        return self.sensitivity / self.grid + self.d

    @property
    def off_diagonal_on_grid_squared(self) -> Fraction:
        """s²/2 = ⌈(σ/grid)²/2⌉: an integer, so the exact sampler's coins are small rationals (a
        float's exact square has a ~2¹⁰⁰ denominator and makes them ~30× slower); the noise only
        grows, so the ρ below (computed from it) still holds."""
        return Fraction(math.ceil((self.sigma / self.grid) ** 2 / 2))

    @property
    def sigma_on_grid_squared(self) -> Fraction:
        """s², the diagonal entries' parameter in grid units: exactly twice the off-diagonal one."""
        return 2 * self.off_diagonal_on_grid_squared

    @property
    def rho(self) -> float:
        """Per-user zCDP of the whole tree: m nodes, each ‖D‖_F²/(2s²) at the rounded Frobenius bound."""
        return self.levels * self.sensitivity_on_grid**2 / (2 * float(self.sigma_on_grid_squared))

    def sample_nodes(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` nodes' noise as upper-triangle grid integers (count, d(d+1)/2), in
        ``to_upper``'s order: diagonal N_Z(0, s²), off-diagonal N_Z(0, s²/2), all independent."""
        iu, ju = np.triu_indices(self.d)
        diag = iu == ju
        out = np.empty((count, iu.size), dtype=np.int64)
        out[:, diag] = sample_discrete_gaussian(self.sigma_on_grid_squared, count * self.d, rng).reshape(count, -1)
        off = sample_discrete_gaussian(self.off_diagonal_on_grid_squared, count * int((~diag).sum()), rng)
        out[:, ~diag] = off.reshape(count, -1)
        return out


def calibrate_tree(rho: float, sensitivity: float, horizon: int, d: int, levels: int | None = None) -> TreeCalibration:
    """The σ giving a tree ``rho``-zCDP per user: ρ_node = ρ/m and σ_grid = Δ_grid/√(2ρ_node), with m the
    nodes holding one leaf (``levels``; default the dyadic tree's ⌊log₂ T⌋ + 1) and Δ_grid the rounded
    Frobenius bound (``sensitivity`` a Frobenius bound of a neighbour's leaf move)."""
    m = tree_levels(horizon) if levels is None else levels
    probe = TreeCalibration(1.0, sensitivity, m, d)
    sigma = probe.sensitivity_on_grid * GRID / math.sqrt(2 * rho / m)
    return TreeCalibration(sigma, sensitivity, m, d)


class GridGaussianTree:
    """Prefix sums of T symmetric leaves (R runs stacked) by the binary-tree mechanism (App. I.1).

    Leaf t (1-based) completes exactly one dyadic node, at level tz(t) (the trailing zeros of t),
    so node noise is drawn once per run up front: row t − 1 of a (T, D) pool of grid-integers from
    that run's own generator (:meth:`TreeCalibration.sample_nodes`: App. I.1's symmetric noise,
    diagonal σ², off-diagonal σ²/2). The released prefix sum after t leaves is the sum of the noisy
    nodes of t's binary representation, mirrored into an exactly symmetric matrix.
    """

    def __init__(self, cal: TreeCalibration, horizon: int, rngs: list[np.random.Generator]):
        self.cal = cal
        self.d = cal.d
        D = self.d * (self.d + 1) // 2
        self.noise = np.stack([cal.sample_nodes(horizon, rng) for rng in rngs])
        self.levels = tree_levels(horizon) + 1
        R = len(rngs)
        self.raw = np.zeros((R, self.levels, D), dtype=np.int64)    # exact node sums, grid units
        self.noisy = np.zeros((R, self.levels, D), dtype=np.int64)  # node sums + node noise
        self.t = 0

    def insert(self, leaves: np.ndarray) -> None:
        """Leaf t + 1 of every run: (R, d, d) symmetric matrices, rounded to the grid."""
        self.t += 1
        t = self.t
        level = (t & -t).bit_length() - 1
        q = np.rint(to_upper(leaves) / self.cal.grid).astype(np.int64)
        node = q + self.raw[:, :level].sum(axis=1)  # the node's children are the lower levels' nodes
        self.raw[:, :level] = 0
        self.noisy[:, :level] = 0
        self.raw[:, level] = node
        self.noisy[:, level] = node + self.noise[:, t - 1]

    def prefix(self) -> np.ndarray:
        """The released noisy sum of leaves 1..t: (R, d, d), exactly symmetric."""
        return from_upper(self.noisy.sum(axis=1).astype(np.float64) * self.cal.grid, self.d)

    def true_prefix(self) -> np.ndarray:
        """The rounded leaves' exact sum (diagnostics only; never released)."""
        return from_upper(self.raw.sum(axis=1).astype(np.float64) * self.cal.grid, self.d)


class BuggyHeapTreeDefect:
    """**A defect, reproduced only to measure it** (``tree_query = "paper-code-buggy-tree"``): the
    authors' initial commit's binary tree (spec §9.2), whose query returns 2, 3, 5, 5, 9, 9, … for unit
    leaves. Their tree is a heap (root 1, children 2i and 2i + 1) over 2^{h−1} ≥ T leaves, h =
    ⌈log₂ T⌉ + 1; every node holds the running sum of the leaves inserted under it plus one noise
    draw fixed up front; the query walks from leaf t to the root and adds node i − 1 whenever i is
    *even* (a left child, where a prefix needs a right child's left sibling), then leaf t itself.
    In the left half it adds the root (everything so far) on top; in the right half it drops the
    left half: the value swings between 2× and a tenth of the prefix. Released values are sums of
    noisy nodes, each leaf in h of them (post-processing): calibrated with ``levels`` = h, the zCDP
    ρ still holds (:func:`buggy_tree_levels`)."""

    def __init__(self, cal: TreeCalibration, horizon: int, rngs: list[np.random.Generator]):
        self.cal, self.d, self.T = cal, cal.d, horizon
        D = self.d * (self.d + 1) // 2
        self.h = buggy_tree_levels(horizon)
        nodes = 2**self.h
        # the repository symmetrizes its node noise as App. I.1 does: the same law as ours
        self.noise = np.stack([cal.sample_nodes(nodes, rng) for rng in rngs])
        self.cum = np.zeros((len(rngs), horizon + 1, D), dtype=np.int64)  # prefix sums of the rounded leaves
        self.t = 0

    def insert(self, leaves: np.ndarray) -> None:
        self.t += 1
        q = np.rint(to_upper(leaves) / self.cal.grid).astype(np.int64)
        self.cum[:, self.t] = self.cum[:, self.t - 1] + q

    def nodes(self, count: int) -> list[int]:
        """The heap nodes the defective query adds after ``count`` leaves."""
        leaf = count + 2 ** (self.h - 1) - 1
        out, cur = [], leaf
        while cur > 0:
            if cur % 2 == 0:
                out.append(cur - 1)
            cur //= 2
        return out + [leaf]

    def prefix(self) -> np.ndarray:
        total = np.zeros(self.cum.shape[::2], dtype=np.int64)
        if self.t == 0:
            return from_upper(total.astype(np.float64), self.d)
        for j in self.nodes(self.t):
            level = j.bit_length() - 1
            span = 2 ** (self.h - 1 - level)
            lo = (j - 2**level) * span  # the node's leaves, 0-based: [lo, lo + span)
            hi = min(lo + span, self.t)
            part = self.cum[:, hi] - self.cum[:, lo] if hi > lo else 0
            total += part + self.noise[:, j]
        return from_upper(total.astype(np.float64) * self.cal.grid, self.d)

    def true_prefix(self) -> np.ndarray:
        return from_upper(self.cum[:, self.t].astype(np.float64) * self.cal.grid, self.d)


def buggy_tree_levels(horizon: int) -> int:
    """h = ⌈log₂ T⌉ + 1: the nodes on a leaf's path to the root of the authors' heap tree."""
    return math.ceil(math.log2(max(horizon, 2))) + 1


# --- the GLM loss ---------------------------------------------------------------------------

def per_sample_gradients(link: str, theta: np.ndarray, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(μ(⟨x,θ⟩) − r)·x for every sample: x (n, d), r (n,), θ (d,)."""
    return (mu(link, x @ theta) - r)[:, None] * x


def project_ball(theta: np.ndarray, radius: float) -> np.ndarray:
    n = np.linalg.norm(theta)
    return theta if n <= radius else theta * (radius / n)


# --- the paper's optimizer: 𝒫_GD through P_Vec (App. T, Algorithm 7) --------------------------

@dataclass(frozen=True)
class PGDPlan:
    """Algorithm 7's schedule for n points at (ε, δ): T_it, η, and each iteration's P_Vec."""

    iterations: int
    iterations_formula: float
    step: float
    eps_iter: float
    delta_iter: float
    vec: VecParams


def pgd_plan(n: int, d: int, epsilon: float, delta: float, radius: float, lipschitz: float,
             max_iterations: int, vec_constant: float = VEC_CONSTANT, exact: bool = False) -> PGDPlan:
    """T_it = ε²n²/(d log³(nd/δ)) (floored at 1, capped at ``max_iterations``; spec §12 item 6),
    η = 2D/(L√T_it) with D = 2S the ball's diameter; per iteration (ε/(2√(2T log(1/δ))), δ/(T+1))
    and P_Vec with Δ = 1 (a per-sample gradient (μ − r)x has norm ≤ R‖x‖ ≤ 1), eq. (127)'s g, b,
    p = 1/4, encoding the shifted range [0, 2Δ] (spec §12 item 8).

    ``exact`` (the ``exact`` preset): the same T_it and η, but no per-iteration split: b is the fewest
    fair noise bits for which the T_it rounds' d·T_it counts, composed exactly (privacy-loss
    distributions, :func:`exact_pvec_params`), are (ε, δ)-DP; ``eps_iter`` and ``delta_iter`` are then
    one round's exact ε at the whole δ, and δ."""
    formula = epsilon**2 * n**2 / (d * math.log(n * d / delta) ** 3)
    T = int(min(max(1, math.floor(formula)), max_iterations))
    step = 2 * (2 * radius) / (lipschitz * math.sqrt(T))
    if exact:
        vec = exact_pvec_params(n, d, d * T, epsilon, delta, 1.0)
        return PGDPlan(T, formula, step, counts.count_epsilon(n * vec.b, vec.g, d, delta), delta, vec)
    eps_it = epsilon / (2 * math.sqrt(2 * T * math.log(1 / delta)))
    delta_it = delta / (T + 1)
    vec = pvec_params(n, d, eps_it, delta_it, 1.0, vec_constant)
    return PGDPlan(T, formula, step, eps_it, delta_it, vec)


def pvec_g(n: int, d: int) -> int:
    """eq. (127)'s accuracy g = max{2√n, d, 4} (rounded up: a count of bits)."""
    return math.ceil(max(2 * math.sqrt(n), d, 4))


def pvec_params(n: int, d: int, epsilon: float, delta: float, shift: float, vec_constant: float = VEC_CONSTANT
                ) -> VecParams:
    """P_Vec for n users at (ε, δ) (App. S): eq. (127)'s g = max{2√n, d, 4}, b = C·g²·log²(4(d²+1)/δ)/(ε²n),
    p = 1/4; entries in [−Δ, Δ] shifted by Δ and encoded on [0, 2Δ] (spec §12 item 8)."""
    g = pvec_g(n, d)
    b = vec_constant * g**2 * math.log(4 * (d**2 + 1) / delta) ** 2 / (epsilon**2 * n)
    return VecParams(g=g, b=max(1, math.ceil(b)), p=0.25, shift=shift, span=2 * shift)


def exact_pvec_params(n: int, d: int, labels: int, epsilon: float, delta: float, shift: float) -> VecParams:
    """P_Vec under the ``exact`` preset (issue #30 item 4): eq. (127)'s g and the encoding of [0, 2Δ]
    (a user moves each label's count by at most g), fair noise bits (p = ½) and the fewest b for which
    ``labels`` released counts, composed by the exact accountant
    (:func:`privbandit.protocol.privacy.counts.fewest_noise_bits`), are (ε, δ)-DP: no eq. (127)
    constant. A covariance round releases d(d+1)/2 counts; 𝒫_GD's T_it gradient rounds d·T_it."""
    g = pvec_g(n, d)
    return VecParams(g=g, b=counts.fewest_noise_bits(n, g, labels, epsilon, delta), p=0.5, shift=shift,
                     span=2 * shift)


def exact_noise_sd(n: int, d: int, epsilon: float, delta: float, shift: float) -> float:
    """sd of one entry of a covariance round's error under the ``exact`` preset, the analogue of
    :func:`~.shuffle_glm.noise_sd` (randomized rounding ignored): (2Δ/g)·√(n·b/4), b from
    :func:`exact_pvec_params` with d(d+1)/2 labels. Nearly independent of n (n·b/g² is, up to rounding)."""
    vec = exact_pvec_params(n, d, n_upper(d), epsilon, delta, shift)
    return vec.scale * math.sqrt(n * vec.b * vec.p * (1 - vec.p))


def projected_gd_pvec(link: str, x: np.ndarray, r: np.ndarray, reg: float, radius: float, plan: PGDPlan,
                      rng: np.random.Generator, center: np.ndarray | None = None) -> np.ndarray:
    """Algorithm 7: θ₀ = 0 (or ``center``), T_it steps θ ← Π(θ − η(ḡ + (reg/n)θ)) where ḡ is the
    P_Vec estimate of the mean per-sample gradient; returns the average of θ₀ … θ_{T−1}."""
    n, d = x.shape
    randomizer, analyzer = BitSumRandomizer(plan.vec), BitSumAnalyzer(plan.vec)
    theta = np.zeros(d) if center is None else center.copy()
    total = np.zeros(d)
    for _ in range(plan.iterations):
        total += theta
        counts = randomizer.randomize(per_sample_gradients(link, theta, x, r), rng)  # R1, one per user
        g = analyzer.analyze(counts.sum(axis=0), n) / n  # S1 (label totals) then A1
        theta = pgd_step(theta, g, plan, reg, n, radius)
    return total / plan.iterations


def pgd_step(theta: np.ndarray, mean_gradient: np.ndarray, plan: PGDPlan, reg: float, n: int, radius: float
             ) -> np.ndarray:
    """Algorithm 7 line 4: θ ← Π_Θ(θ − η(ḡ + (reg/n)·θ)), the regularizer's gradient (data-independent)
    added by the server; θ (..., d), ḡ the decoded mean per-sample gradient."""
    step = theta - plan.step * (mean_gradient + reg / n * theta)
    norm = np.linalg.norm(step, axis=-1, keepdims=True)
    return step * np.minimum(1.0, radius / np.maximum(norm, 1e-300))


# --- the authors' optimizer: DP-SGD with an RDP accountant (Remark A.1) -----------------------

def _sgd_orders() -> np.ndarray:
    """The Rényi orders of the DP-SGD bound: the amplified bound's short list and the ledger's
    :data:`~privbandit.protocol.privacy.events.ORDERS` (every integer to 128, a geometric tail to
    4096), where the unamplified Gaussian curve is closed-form and cheap: a small ε at a large σ
    needs an order above 256."""
    return np.unique(np.concatenate([np.array(SGD_ORDERS, dtype=np.float64), EVENT_ORDERS]))


def sgd_rdp_curves(n: int, batch: int, steps: int, noise_multiplier: float,
                   amplified_orders: tuple = SGD_ORDERS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(orders, amplified, unamplified): two valid Rényi curves of ``steps`` DP-SGD steps, each a
    Gaussian of noise multiplier z on a replace-one-sensitivity-Δ sum over ``batch`` of n examples
    drawn without replacement, afresh at every step (:func:`dp_sgd`), both by dp-accounting's
    public API (:class:`RdpAccountant`, its ``rdp`` property):

    - amplified: ``steps`` × Wang, Balle & Kasiviswanathan (2019) Thm 27 (sampling without
      replacement, replace-one), at ``amplified_orders`` only (default :data:`SGD_ORDERS`; inf
      elsewhere, which only loosens the minimum below; it is O(α²) per order).
      It is loose at large z (measured: ε at δ = 10⁻⁶ floors near 0.31 for 30 steps of 2048 of 2100,
      0.19 for 45 steps of 2048 of 5000, however large z) and, for q = batch/n near 1, above the
      unamplified curve at every z;
    - unamplified: ``steps`` × α/(2z²), the Gaussian mechanism composed ``steps`` times. It holds
      whatever the sampling: a step whose batch misses the replaced example releases the same law,
      and one whose batch holds it moves the sum by at most Δ. The discrete Gaussian on the grid
      (integer shifts of ℓ2 norm ≤ Δ/grid, parameter ≥ (zΔ/grid)²) has Rényi divergences at most
      this (Canonne, Kamath & Steinke 2020: an integer shift μ of N_Z(0, σ²) is ½(μ/σ)²-zCDP, and
      independent coordinates add).

    Both bound the same Rényi divergence of the same composed mechanism at every order, so their
    elementwise minimum is a valid curve too: never looser than the smaller of the two ε's (on every
    setting the tests try, equal to it)."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    orders = _sgd_orders()
    gauss = RdpAccountant(list(orders), dp_accounting.NeighboringRelation.REPLACE_ONE)
    gauss.compose(dp_accounting.GaussianDpEvent(noise_multiplier), steps)
    unamplified = gauss.rdp
    if batch >= n:
        return orders, unamplified.copy(), unamplified  # q = 1: no amplification to claim
    wor = RdpAccountant(list(amplified_orders), dp_accounting.NeighboringRelation.REPLACE_ONE)
    wor.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, batch, dp_accounting.GaussianDpEvent(
        noise_multiplier)), steps)
    amplified = np.full(orders.shape, np.inf)
    amplified[np.searchsorted(orders, np.array(amplified_orders, dtype=np.float64))] = wor.rdp
    return orders, amplified, unamplified


@lru_cache(maxsize=4096)
def sgd_epsilon(n: int, batch: int, steps: int, noise_multiplier: float, delta: float,
                bound: str = "min") -> float:
    """ε at δ of ``steps`` DP-SGD steps (:func:`sgd_rdp_curves`), replace-one neighbours, converted by
    dp-accounting's :func:`compute_epsilon` (Canonne et al. 2020 / Asoodeh et al. 2020 conversion).
    ``bound``: "min" (the calibration's and the ledger's: the per-order minimum of the two curves),
    "amplified" or "unamplified" (each curve alone, for comparison).

    "min" first takes the amplified curve at :data:`SGD_LOW_ORDERS` only, and all of :data:`SGD_ORDERS`
    only when the optimal order is 64 or above: the curve without the two costly orders is pointwise
    no lower, so the ε it gives is never below the full one (never understated)."""
    from dp_accounting.rdp import compute_epsilon

    if bound not in ("min", "amplified", "unamplified"):
        raise ValueError(f"bound must be one of ['amplified', 'min', 'unamplified']; got {bound!r}")
    if bound == "min":
        orders, amplified, unamplified = sgd_rdp_curves(n, batch, steps, noise_multiplier, SGD_LOW_ORDERS)
        eps, order = compute_epsilon(orders, np.minimum(amplified, unamplified), delta)
        if order < SGD_LOW_ORDERS[-1]:
            return float(eps)
    orders, amplified, unamplified = sgd_rdp_curves(n, batch, steps, noise_multiplier)
    curves = {"min": np.minimum(amplified, unamplified), "amplified": amplified, "unamplified": unamplified}
    return float(compute_epsilon(orders, curves[bound], delta)[0])


@lru_cache(maxsize=4096)
def sgd_noise_multiplier(n: int, batch: int, steps: int, epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to 1%) meeting (ε, δ), by bisection on the accountant."""
    lo, hi = 0.05, 1.0
    while sgd_epsilon(n, batch, steps, hi, delta) > epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e7:
            raise ValueError(f"no noise multiplier reaches ε={epsilon} at δ={delta} in {steps} steps")
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if sgd_epsilon(n, batch, steps, mid, delta) > epsilon else (lo, mid)
    return hi


@dataclass(frozen=True)
class SGDSettings:
    """The authors' DP-SGD: clip 0.2, lr_t = lr/√t, batches of 2048, a fixed number of epochs,
    the average of the iterates after ``burn_in`` epochs."""

    clip: float = 0.2
    lr: float = 10.0
    batch: int = 2048
    epochs: int = 15
    burn_in: int = 10


def dp_sgd(link: str, x: np.ndarray, r: np.ndarray, reg: float, radius: float, epsilon: float, delta: float,
           s: SGDSettings, rng: np.random.Generator, start: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """DP-SGD on n points from ``start`` (default 0; a released θ keeps it post-processing); returns
    (θ̂, the noise multiplier). Noise per step on the clipped, grid-rounded gradient sum:
    grid·N_Z(0, (z·Δ/grid)²), Δ = 2·clip + grid·√d (replace-one)."""
    n, d = x.shape
    batch = min(s.batch, n)
    per_epoch = math.ceil(n / batch)
    steps = s.epochs * per_epoch
    # rounded *down* to 12 digits (cache hits for budgets equal up to float noise): the noise then
    # meets at least the ε the ledger states
    z = sgd_noise_multiplier(n, batch, steps, math.floor(epsilon * 1e12) / 1e12, delta)
    sens = 2 * s.clip + GRID * math.sqrt(d)
    s2 = Fraction(math.ceil((z * sens / GRID) ** 2))  # rounded up: small-rational coins, only more noise
    noise = sample_discrete_gaussian(s2, steps * d, rng).reshape(steps, d) * GRID
    theta = np.zeros(d) if start is None else project_ball(np.asarray(start, dtype=np.float64), radius)
    avg, kept = np.zeros(d), 0
    burn = min(s.burn_in, s.epochs - 1) * per_epoch
    for k in range(steps):
        idx = rng.choice(n, batch, replace=False)
        g = per_sample_gradients(link, theta, x[idx], r[idx])
        norms = np.linalg.norm(g, axis=1, keepdims=True)
        g = g * np.minimum(1.0, s.clip / np.maximum(norms, 1e-300))
        g_sum = np.rint(g / GRID).sum(axis=0) * GRID + noise[k]
        theta = project_ball(theta - s.lr / math.sqrt(k + 1) * (g_sum / batch + reg / n * theta), radius)
        if k >= burn:
            avg += theta
            kept += 1
    return avg / kept, z


def per_call_budget(epsilon: float, delta: float, calls: int) -> tuple[float, float]:
    """The authors' ``per_step_budget_auto``: naive composition for ≤ 10 calls, else advanced
    composition (Dwork–Roth Thm 3.20) solved for ε₀: ε₀√(2k ln(1/δ')) + kε₀(e^{ε₀} − 1) = ε, with
    δ' = δ/2 and δ₀ = δ/(2k)."""
    k = max(1, calls)
    if k <= 10:
        return epsilon / k, delta / k
    dp = delta / 2
    lo, hi = 0.0, epsilon
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid * math.sqrt(2 * k * math.log(1 / dp)) + k * mid * math.expm1(mid) > epsilon:
            hi = mid
        else:
            lo = mid
    return lo, delta / (2 * k)


def n_upper(d: int) -> int:
    return d * (d + 1) // 2


__all__ = ["GRID", "GridGaussianTree", "PGDPlan", "SGDSettings", "TreeCalibration", "calibrate_tree", "dp_sgd",
           "exact_noise_sd", "exact_pvec_params", "n_entries", "per_call_budget", "pgd_plan", "pgd_step",
           "projected_gd_pvec", "pvec_params", "sgd_epsilon", "sgd_noise_multiplier", "sgd_rdp_curves", "tree_levels",
           "zcdp_rho"]
