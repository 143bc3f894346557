"""Privacy events: what one release guarantees, as data (in the manner of Google's dp-accounting).

Each mechanism declares one event per release; the :class:`~privbandit.protocol.privacy.ledger.Ledger`
composes them and nobody recomputes ε by hand elsewhere. An event answers, against neighbouring
data sets that differ in one user's data:

- ``pure_epsilon``: ε of (ε, 0)-DP, or ``inf``;
- ``rdp(orders)``: a Rényi curve ε(α) at the given integer orders α ≥ 2 (``inf`` where none holds);
- ``cdp_epsilon``: ε̂ of ½ε̂²-CDP (zero-concentrated DP with ρ = ε̂²/2), or ``None``;
- ``approx``: an (ε, δ) pair proven by a theorem that gives no curve (amplification by shuffling,
  P_Vec's bound), or ``None``; :class:`AdvancedComposition` rounds compose in their ledger group by
  the advanced composition theorem instead of basic composition;
- ``status``: ``"proven"``, ``"none proven"`` (the release has no guarantee anyone has proven, e.g.
  the residues of a secure-aggregation protocol shown to a shuffler), or ``"non-private"``.

Standard conversions are dp-accounting's (:func:`dp_accounting.rdp.compute_epsilon`); the project's
own mathematics is kept only where no library has it: Skellam's RDP bound, the discrete Gaussian
sum's CDP bound and the pure ε of Pólya noise whose shares partly arrived
(:func:`polya_sum_epsilon`), each checked against a brute-force computation in the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

Status = Literal["proven", "none proven", "non-private"]

# Integer Rényi orders. The (ε, δ) optimum sits near α ≈ 1 + sqrt(log(1/δ)/ρ); for ρ = ε²/2 with
# ε = 0.01 and δ = 1e-12 that is α ≈ 740, so every integer to 128 and a geometric tail to 4096
# (ratio ≤ 1.06, so the optimum is missed by at most a rounding of α) cover every setting we run.
ORDERS = np.unique(np.concatenate([np.arange(2, 129), np.round(np.geomspace(128, 4096, 60))])).astype(np.float64)
REPORTED_ORDERS = (2, 3, 4, 5, 8, 16, 32, 64, 128)
EXACT_XI_TERMS = 2**20


@dataclass(frozen=True)
class PureDP:
    """(ε, 0)-DP, e.g. the discrete Laplace mechanism at sensitivity/scale = ε. ``basis``, if given,
    names the argument (the ledger lists it), as the (ε, δ) events' does."""

    epsilon: float
    status: Status = "proven"
    basis: str = ""

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        # ε-DP bounds every Rényi divergence by ε and implies ½ε²-zCDP (Bun & Steinke 2016,
        # Prop. 3.3; the paper's Lemma 10), i.e. ε(α) ≤ αε²/2. Both hold; take the min.
        return np.minimum(self.epsilon, 0.5 * self.epsilon**2 * orders)

    @property
    def cdp_epsilon(self) -> float:
        return self.epsilon

    approx = None


@dataclass(frozen=True)
class SkellamRDP:
    """Skellam noise ``Sk(0, variance)`` on a sensitivity-Δ integer sum.

    Lemma 3 (Agarwal et al. 2021, Thm 3.5), integer α > 1:
    ``ε(α) ≤ αΔ²/(2σ²) + min{((2α−1)Δ² + 6Δ)/(4σ⁴), 3Δ/(2σ²)}``.
    Evaluated at the round's actual Δ = g and σ² = Σ of the shares' variances rather than
    Theorem 2's closed form ε̂(α), whose last term has a misprinted power of ε (spec §9 item 6).
    """

    sensitivity: float
    variance: float
    status: Status = "proven"
    pure_epsilon = math.inf
    cdp_epsilon = None
    approx = None

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        d, v = self.sensitivity, self.variance
        gaussian = orders * d**2 / (2 * v)
        correction = np.minimum(((2 * orders - 1) * d**2 + 6 * d) / (4 * v**2), 3 * d / (2 * v))
        return gaussian + correction


@dataclass(frozen=True)
class DiscreteGaussianSumCDP:
    """A sum of n i.i.d. ``N_Z(0, σ²)`` shares on a sensitivity-Δ query.

    Lemma 4 (Kairouz et al. 2021a, Prop. 13), valid for σ ≥ 1/2: ½ε̂²-CDP with
    ``ε̂ = min{ sqrt(Δ²/(nσ²) + ξ/2), Δ/(√n σ) + ξ }``, ``ξ = 10 Σ_{k=1}^{n−1} e^{−2π²σ²·k/(k+1)}``.
    """

    sensitivity: float
    share_variance: float
    n: int
    status: Status = "proven"
    pure_epsilon = math.inf
    approx = None

    def __post_init__(self) -> None:
        if self.share_variance < 0.25:
            raise ValueError(f"Lemma 4 needs share σ ≥ 1/2; got σ² = {self.share_variance:.4g}")

    @property
    def xi(self) -> float:
        """``ξ = 10 Σ_{k=1}^{n−1} e^{−c·k/(k+1)}``, c = 2π²σ². Terms fall from e^{−c/2} to e^{−c}.

        Summed exactly for k < 2²⁰; beyond that each term is bounded by its value at k = 2²⁰, so for
        huge cohorts ξ is a (tight) upper bound, which keeps ε̂ an upper bound.
        """
        c = 2 * math.pi**2 * self.share_variance
        if -c / 2 + math.log(10 * self.n) < -745:  # every term underflows: ξ is 0 in float64
            return 0.0
        k = np.arange(1, min(self.n, EXACT_XI_TERMS), dtype=np.float64)
        head = float(np.exp(-c * k / (k + 1)).sum())
        rest = max(0, self.n - EXACT_XI_TERMS)
        return 10.0 * (head + rest * math.exp(-c * EXACT_XI_TERMS / (EXACT_XI_TERMS + 1)))

    @property
    def cdp_epsilon(self) -> float:
        d, s2, n, xi = self.sensitivity, self.share_variance, self.n, self.xi
        return min(math.sqrt(d**2 / (n * s2) + xi / 2), d / (math.sqrt(n * s2)) + xi)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return 0.5 * self.cdp_epsilon**2 * orders


@dataclass(frozen=True)
class ZCDP:
    """ρ-zCDP (Bun & Steinke 2016), e.g. the Gaussian mechanism with ρ = Δ²/(2σ²)."""

    rho: float
    status: Status = "proven"
    pure_epsilon = math.inf
    approx = None

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return self.rho * orders

    @property
    def cdp_epsilon(self) -> float:
        return math.sqrt(2 * self.rho)


@dataclass(frozen=True)
class ApproxDP:
    """(ε, δ)-DP from a theorem that gives no Rényi curve (amplification by shuffling, P_Vec's
    bound). ``basis`` names the theorem, so a reader can check the claim."""

    epsilon: float
    delta: float
    basis: str = ""
    status: Status = "proven"
    pure_epsilon = math.inf
    cdp_epsilon = None

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.full_like(orders, math.inf, dtype=np.float64)

    @property
    def approx(self) -> tuple[float, float]:
        return (self.epsilon, self.delta)


@dataclass(frozen=True)
class AdvancedComposition:
    """One of several adaptively composed (ε₀, δ₀)-DP releases to the same users, whose ledger group
    composes them by the advanced composition theorem with slack δ′ (Dwork, Rothblum & Vadhan 2010;
    Dwork & Roth Thm 3.20), as 𝒫_GD's calibration assumes (Cheu et al. 2021 Lemma B.4; Sarmasarkar
    Lemma T.2): each round is (ε/(2√(2T log(1/δ))), δ/(T+1)).

    A group holding k of these (same ε₀, δ₀, δ′) is charged :func:`advanced_epsilon`'s ε at δ =
    kδ₀ + δ′: the optimal composition (Kairouz, Oh & Viswanath 2015, Thm 3.3, dp-accounting's
    ``advanced_composition``), never more than the DRV closed form nor basic composition kε₀ (at
    δ = kδ₀). Counting rounds as they arrive means the ledger states what the releases so far
    cost, never the whole plan ahead of time. On its own (a record's ε) a round is (ε₀, δ₀)."""

    epsilon: float
    delta: float
    slack: float
    basis: str = ""
    status: Status = "proven"
    pure_epsilon = math.inf
    cdp_epsilon = None

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and 0 <= self.delta < 1 and 0 < self.slack < 1):
            raise ValueError(f"advanced composition needs ε₀ > 0, δ₀ in [0, 1), δ′ in (0, 1); got "
                             f"({self.epsilon}, {self.delta}, {self.slack})")

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.full_like(orders, math.inf, dtype=np.float64)

    @property
    def approx(self) -> tuple[float, float]:
        return (self.epsilon, self.delta)

    def composed(self, k: int) -> tuple[float, float]:
        """(ε, δ) of k such rounds."""
        return advanced_epsilon(self.epsilon, self.delta, k, self.slack)


# The optimal composition's sum has O(k²) terms (and binomials that overflow past k ≈ 1000): beyond
# this many rounds the DRV closed form alone is used (it is never smaller).
OPTIMAL_COMPOSITION_MAX_K = 1000


def drv_epsilon(epsilon: float, k: int, slack: float) -> float:
    """Dwork–Rothblum–Vadhan: k (ε₀, δ₀)-DP releases are (√(2k ln(1/δ′))ε₀ + kε₀(e^{ε₀} − 1), kδ₀ + δ′)-DP."""
    return math.sqrt(2 * k * math.log(1 / slack)) * epsilon + k * epsilon * math.expm1(epsilon)


def advanced_epsilon(epsilon: float, delta: float, k: int, slack: float) -> tuple[float, float]:
    """(ε, δ) of k adaptively composed (ε₀, δ₀)-DP releases: the smaller of basic composition
    (kε₀, kδ₀) and the optimal composition at δ = kδ₀ + δ′ (KOV Thm 3.3 through dp-accounting,
    capped by the DRV bound, which it never exceeds)."""
    if k <= 0:
        return 0.0, 0.0
    basic = k * epsilon
    adv = drv_epsilon(epsilon, k, slack)
    total_delta = k * delta + slack
    if k <= OPTIMAL_COMPOSITION_MAX_K:
        opt = _kov_epsilon(epsilon, delta, k, total_delta)
        if opt is not None and math.isfinite(opt):
            adv = min(adv, opt)
    return (basic, k * delta) if basic <= adv else (adv, total_delta)


@lru_cache(maxsize=4096)
def _kov_epsilon(epsilon: float, delta: float, k: int, total_delta: float) -> float | None:
    from dp_accounting.pld import accountant, common

    try:
        return accountant.advanced_composition(common.DifferentialPrivacyParameters(epsilon, delta), k, total_delta)
    except OverflowError:
        return None


@dataclass(frozen=True)
class NoneProven:
    """A release nobody has proven private, e.g. every user's residue ``(x̂ + η) mod m`` behind a
    shuffler, where the shares were calibrated for secure aggregation (issue #13). The ledger
    prints ``"guarantee": "none proven"`` and no ε, never the ε the calibration intended."""

    reason: str
    status: Status = "none proven"
    pure_epsilon = math.inf
    cdp_epsilon = None
    approx = None

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.full_like(orders, math.inf, dtype=np.float64)


@dataclass(frozen=True)
class NonPrivate:
    """Raw data, by design (the non-private baselines)."""

    status: Status = "non-private"
    pure_epsilon = math.inf
    cdp_epsilon = None
    approx = None

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        return np.full_like(orders, math.inf, dtype=np.float64)


PrivacyEvent = (PureDP | SkellamRDP | DiscreteGaussianSumCDP | ZCDP | ApproxDP | AdvancedComposition | NoneProven
                | NonPrivate)

NEAR_SUM_BASIS = ("split-and-mix through a shuffler (Ishai et al. 2006): the shuffled shares are within statistical "
                  "distance η of a simulation from the secure sum (privbandit's Lemma 1, docs/shuffle-summation.md), so "
                  "(ε, δ_sum + (1 + e^ε)η)-DP for the sum's (ε, δ_sum)")


def _secure_sum_part(inner: PrivacyEvent, delta: float) -> tuple[float, float]:
    """(ε, δ_sum) of the secure sum itself: its pure ε with δ_sum = 0; an (ε, δ) statement as it is;
    a curve read at δ/2."""
    eps = inner.pure_epsilon
    if math.isfinite(eps):
        return float(eps), 0.0
    if inner.approx is not None:
        return float(inner.approx[0]), float(inner.approx[1])
    from privbandit.protocol.privacy.ledger import rdp_to_dp

    return rdp_to_dp(np.asarray(inner.rdp(ORDERS), dtype=np.float64), delta / 2), delta / 2


def closeness_budget(inner: PrivacyEvent, delta: float) -> float:
    """The largest closeness η for which :func:`near_secure_sum` still spends at most δ: what a
    split-and-mix shuffler's shares must reach (:func:`~privbandit.protocol.primitives.shuffle_sum.shares_for`)."""
    eps, base = _secure_sum_part(inner, delta)
    if not math.isfinite(eps) or base >= delta:
        raise ValueError(f"no closeness fits δ = {delta:.3g}: the secure sum spends (ε, δ) = ({eps:.4g}, {base:.3g})")
    return (delta - base) / (1 + math.exp(min(eps, 700.0))) * (1 - 1e-12)  # rounding never overshoots δ


def near_secure_sum(inner: PrivacyEvent, closeness: float, delta: float) -> PrivacyEvent:
    """The guarantee of a release within statistical distance ``closeness`` (η) of a post-processing
    of a secure sum whose own event is ``inner`` (the split-and-mix shuffler,
    :mod:`privbandit.protocol.primitives.shuffle_sum`).

    For neighbours D, D′ and any event E: P[V(D) ∈ E] ≤ P[S(D) ∈ E] + η ≤ e^ε·P[S(D′) ∈ E] + δ_sum(ε) + η
    ≤ e^ε·P[V(D′) ∈ E] + δ_sum(ε) + (1 + e^ε)·η. A pure ε₀ gives (ε₀, (1 + e^{ε₀})η); a curve is read
    at δ/2 (``delta`` the ledger's), leaving the other half for the closeness term. Never pure:
    split-and-mix is not (docs/shuffle-summation.md, "Why not pure ε"). A release with no proof, or
    none at all, stays what it was."""
    if inner.status != "proven":
        return inner
    if not 0 <= closeness <= 1:
        raise ValueError(f"closeness η = {closeness} must lie in [0, 1]")
    eps, base = _secure_sum_part(inner, delta)
    if not math.isfinite(eps):
        return NoneProven(f"{NEAR_SUM_BASIS}: the secure sum's own ε is not finite")
    return ApproxDP(float(eps), base + (1 + math.exp(min(eps, 700.0))) * closeness, NEAR_SUM_BASIS)


def polya_sum_epsilon(r: float, beta: float, sensitivity: int) -> float:
    """Pure ε of adding ``X⁺ − X⁻``, ``X^± ∼ NB(r, β)`` i.i.d., to a sensitivity-Δ integer sum.

    This is what is left of Theorem 1's noise when only a fraction ``r = n′/n ≤ 1`` of the Pólya
    shares arrive (dropouts, or colluders who reveal theirs); r = 1 gives ``Lap_Z`` and
    ``Δ·log(1/β) = ε``.

    Computed, not bounded. For r ≤ 1 the NB pmf is non-increasing and log-convex, so the
    difference D is symmetric, non-increasing in |k| and log-convex for k ≥ 0; hence
    ``sup_{k, 0<d≤Δ} log P(k)/P(k+d)`` is attained at d = Δ, and ``log P(k) − log P(k+Δ)`` falls
    for k ≥ 0 towards Δ·log(1/β). The sup therefore lies at k ∈ [−Δ, 0]; we scan
    k ∈ [−Δ, 5 scale lengths] to be safe, where the FFT convolution is accurate to ~1e−9
    relative (the values there are ≥ e^{−5−ε}·P(0), far above its ~1e−16·P(0) absolute error).
    """
    from scipy.signal import fftconvolve
    from scipy.stats import nbinom

    if not 0 < r <= 1:
        raise ValueError(f"share fraction r={r} must lie in (0, 1]")
    if not 0 < beta < 1:
        raise ValueError(f"beta={beta} must lie in (0, 1)")
    scale = 1.0 / -math.log(beta)
    span = math.ceil(40 * scale) + 2 * sensitivity
    pmf = nbinom.pmf(np.arange(span + 1), r, 1.0 - beta)
    # P(D = k) = Σ_j P(X = j + k)·P(X = j): a correlation, index span + k.
    d = np.clip(fftconvolve(pmf, pmf[::-1]), 0.0, None)
    ks = np.arange(-sensitivity, math.ceil(5 * scale) + 1)
    with np.errstate(divide="ignore"):
        ratio = np.log(d[span + ks]) - np.log(d[span + ks + sensitivity])
    return float(ratio.max())
