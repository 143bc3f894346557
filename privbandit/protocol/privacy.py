"""Privacy events and the ledger that composes them.

Privacy is described as data, in the manner of Google's dp-accounting: each mechanism declares one
*event* per round, and the ledger interprets events. Nobody recomputes ε by hand elsewhere.

An event answers three questions about one round's release, against neighbouring data sets that
differ in one user's reward (Chowdhury & Zhou 2023, §2):

- ``pure_epsilon``: ε of (ε, 0)-DP, or ``inf``;
- ``rdp(alphas)``: the Rényi curve ε(α) (Definition 2) at integer orders α ≥ 2;
- ``cdp_epsilon``: ε̂ of ½ε̂²-CDP (Definition 10), or ``None`` when the event has no CDP statement.

Conversions follow the paper's Lemma 10: (α, ε(α))-RDP ⇒ (ε, δ)-DP with
``ε = inf_α ε(α) + log(1/(αδ))/(α−1) + log(1 − 1/α)``. Only integer orders are used: Theorem 2's
Skellam bound holds for integer α only (spec §9 item 24), and for the other events integer orders
lose at most a rounding of the optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Integer Rényi orders the ledger evaluates. The (ε, δ) optimum sits near α ≈ 1 + sqrt(log(1/δ)/ρ);
# for ρ = ε²/2 with ε = 0.01 and δ = 1e-10 that is α ≈ 680, so 2..4096 covers every setting we run.
ORDERS = np.arange(2, 4097, dtype=np.float64)
REPORTED_ORDERS = (2, 3, 4, 5, 8, 16, 32, 64, 128)
EXACT_XI_TERMS = 2**20


@dataclass(frozen=True)
class PureDP:
    """(ε, 0)-DP, e.g. the discrete or continuous Laplace mechanism at sensitivity/scale = ε."""

    epsilon: float

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    def rdp(self, alphas: np.ndarray) -> np.ndarray:
        # ε-DP bounds every Rényi divergence by ε, and implies ½ε²-zCDP (Bun & Steinke 2016,
        # Prop. 3.3; the paper's Lemma 10 last line), i.e. ε(α) ≤ αε²/2. Both hold; take the min.
        return np.minimum(self.epsilon, 0.5 * self.epsilon**2 * alphas)

    @property
    def cdp_epsilon(self) -> float:
        return self.epsilon


@dataclass(frozen=True)
class SkellamRDP:
    """Skellam noise ``Sk(0, variance)`` on a sensitivity-Δ integer sum.

    Lemma 3 (Agarwal et al. 2021, Thm 3.5), integer α > 1:
    ``ε(α) ≤ αΔ²/(2σ²) + min{((2α−1)Δ² + 6Δ)/(4σ⁴), 3Δ/(2σ²)}``.
    We evaluate it at the round's actual Δ = g and σ² = Σ of the shares' variances rather than
    Theorem 2's closed form ε̂(α), whose last term has a misprinted power of ε (spec §9 item 6).
    """

    sensitivity: float
    variance: float

    @property
    def pure_epsilon(self) -> float:
        return math.inf

    def rdp(self, alphas: np.ndarray) -> np.ndarray:
        d, v = self.sensitivity, self.variance
        gaussian = alphas * d**2 / (2 * v)
        correction = np.minimum(((2 * alphas - 1) * d**2 + 6 * d) / (4 * v**2), 3 * d / (2 * v))
        return gaussian + correction

    @property
    def cdp_epsilon(self) -> None:
        return None


@dataclass(frozen=True)
class DiscreteGaussianSumCDP:
    """A sum of n i.i.d. ``N_Z(0, σ²)`` shares on a sensitivity-Δ query.

    Lemma 4 (Kairouz et al. 2021a, Prop. 13), valid for σ ≥ 1/2: ½ε̂²-CDP with
    ``ε̂ = min{ sqrt(Δ²/(nσ²) + ξ/2), Δ/(√n σ) + ξ }``, ``ξ = 10 Σ_{k=1}^{n−1} e^{−2π²σ²·k/(k+1)}``.
    """

    sensitivity: float
    share_variance: float
    n: int

    def __post_init__(self) -> None:
        if self.share_variance < 0.25:
            raise ValueError(
                f"Lemma 4 needs share σ ≥ 1/2; got σ² = {self.share_variance:.4g}"
            )

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

    @property
    def pure_epsilon(self) -> float:
        return math.inf

    def rdp(self, alphas: np.ndarray) -> np.ndarray:
        return 0.5 * self.cdp_epsilon**2 * alphas


@dataclass(frozen=True)
class NoPrivacy:
    @property
    def pure_epsilon(self) -> float:
        return math.inf

    def rdp(self, alphas: np.ndarray) -> np.ndarray:
        return np.full_like(alphas, math.inf, dtype=np.float64)

    @property
    def cdp_epsilon(self) -> None:
        return None


PrivacyEvent = PureDP | SkellamRDP | DiscreteGaussianSumCDP | NoPrivacy


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


def rdp_to_dp(rdp: np.ndarray, delta: float, alphas: np.ndarray = ORDERS) -> float:
    """Lemma 10: the smallest ε with (ε, δ)-DP implied by the RDP curve."""
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta} must lie in (0, 1)")
    with np.errstate(invalid="ignore"):
        eps = rdp + np.log(1 / (alphas * delta)) / (alphas - 1) + np.log1p(-1 / alphas)
    eps = eps[np.isfinite(eps)]
    return float(max(eps.min(), 0.0)) if eps.size else math.inf


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class PrivacyLedger:
    """What one run spent, per user, in the trust model it ran under.

    Users are unique and each one's reward enters exactly one release (Alg. 1, footnote 4), so a
    user's guarantee is that of the round they took part in, and the per-user guarantee of a run is
    the worst round (parallel composition, spec §1.5).
    """

    trust_model: str
    epsilon_target: float | None
    delta: float
    events: list[PrivacyEvent] = field(default_factory=list)

    def record(self, event: PrivacyEvent) -> None:
        self.events.append(event)

    def event_epsilon(self, event: PrivacyEvent) -> float | None:
        """One round's guarantee: its pure ε if finite, else its ε at the ledger's δ."""
        pure = event.pure_epsilon
        if math.isfinite(pure):
            return float(pure)
        return _finite_or_none(rdp_to_dp(event.rdp(ORDERS), self.delta))

    def worst_rdp(self) -> np.ndarray:
        if not self.events:
            return np.zeros_like(ORDERS)
        return np.max([e.rdp(ORDERS) for e in self.events], axis=0)

    def summary(self) -> dict:
        rdp = self.worst_rdp()
        pure = max((e.pure_epsilon for e in self.events), default=0.0)
        cdps = [e.cdp_epsilon for e in self.events]
        cdp = None if any(c is None for c in cdps) else max(cdps, default=0.0)
        eps_delta = rdp_to_dp(rdp, self.delta)
        if math.isfinite(pure):
            eps_delta = min(eps_delta, pure)
        return {
            "trust_model": self.trust_model,
            "epsilon_target": self.epsilon_target,
            "releases": len(self.events),
            "epsilon_pure": _finite_or_none(pure),
            "rdp": {str(a): _finite_or_none(float(rdp[a - 2])) for a in REPORTED_ORDERS},
            "cdp_epsilon": _finite_or_none(cdp),
            "delta": self.delta,
            "epsilon_at_delta": _finite_or_none(eps_delta),
        }
