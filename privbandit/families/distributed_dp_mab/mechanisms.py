"""The mechanisms of Chowdhury & Zhou (2023), "Distributed Differential Privacy in Multi-Armed
Bandits", each with its parameter rule exactly as its theorem states it.

Tags follow the spec: [P] stated by the paper, [R] rebuilt from garbled text, [I] our inference.

| class                    | algorithm    | theorem | trust       | noise                          |
|--------------------------|--------------|---------|-------------|--------------------------------|
| PolyaSecAgg              | Dist-DP-SE   | Thm 1   | distributed | Pólya shares → Lap_Z(g/ε)      |
| SkellamSecAgg            | Dist-RDP-SE  | Thm 2   | distributed | Skellam shares → Sk(0, g²/ε²)  |
| DiscreteGaussianSecAgg   | Dist-CDP-SE  | Thm 4   | distributed | N_Z(0, g²/(nε²)) per user      |
| CentralDiscreteLaplace   | CDP-SE       | Thm 5   | central     | Lap_Z(g/ε) at the analyzer     |
| LocalDiscreteLaplace     | LDP-SE       | Thm 6   | local       | Lap_Z(g/ε) per user            |
| CentralLaplace           | DP-SE        | S&S '19 | central     | Laplace(1/ε) on each arm's sum |
| NonPrivate               | SE           | —       | none        | none                           |

Dropout tolerance ρ (beyond the paper, issue #4): the distributed mechanisms can calibrate each
share for ``n′ = ⌈(1−ρ)n⌉`` reports instead of n, so the guarantee survives up to ρn dropouts. All
n shares then carry ``j = n/n′`` times the noise; τ and Assumption 1's (σ, h) grow to match, as
each class states. ρ = 0 is the paper exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from privbandit.families.distributed_dp_mab.base import (
    Estimate,
    ModularMechanism,
    RealSumMechanism,
    RoundParams,
)
from privbandit.protocol.primitives.noise import (
    grid_laplace,
    sample_discrete_laplace,
    sample_polya_shares,
    sample_skellam,
)
from privbandit.protocol.primitives.noise.discrete_gaussian import sample_discrete_gaussian
from privbandit.protocol.privacy import (
    DiscreteGaussianSumCDP,
    NonPrivate as NonPrivateEvent,
    PureDP,
    SkellamRDP,
    polya_sum_epsilon,
)

SQRT2 = math.sqrt(2.0)


class PolyaSecAgg(ModularMechanism):
    """Theorem 1 (Dist-DP-SE): (ε, 0)-DP in the distributed model.

    [P] ``g = ⌈ε√n⌉``, ``τ = ⌈(g/ε)·log(2/p)⌉`` (p = 1/T gives the printed log(2T)),
    ``m = n·g + 2τ + 1``, ``η_i = γ⁺ − γ⁻``, ``γ^± ∼ Pólya(1/n, e^{−ε/g})`` so ``Σ η ∼ Lap_Z(g/ε)``.
    [P] Width constants (Section 6): ``σ = √2/ε`` (rounding, Term (ii)), ``h = 1/ε`` (Term (i)).

    [I] Dropout tolerance ρ: shares are ``Pólya(1/n′, β)``, so all n sum to a difference of two
    ``NB(j, β)``; with ``J = ⌈j⌉`` each side is dominated by a sum of J geometrics, whence
    ``P(|Σ η| > t) ≤ 2J·β^{t/J}`` and ``τ = ⌈J·(g/ε)·log(2J/p)⌉``, ``h = J(1 + log₂ J)/ε``.
    Both reduce to Theorem 1's at ρ = 0 (J = 1).
    """

    key = "dist-dp"
    trust_model = "distributed"

    def _units(self, n: int) -> int:
        return math.ceil(self.excess(n) - 1e-12)

    def precision(self, n: int) -> int:
        return math.ceil(self.epsilon * math.sqrt(n))

    def accuracy(self, n: int, g: int) -> int:
        J = self._units(n)
        return math.ceil(J * g / self.epsilon * (self.log2p + math.log(J)))

    def width_constants(self, n: int, g: int) -> tuple[float, float]:
        J = self._units(n)
        return SQRT2 / self.epsilon, J * (1 + math.log2(J)) / self.epsilon

    def local_shares(self, size, params, rng):
        return sample_polya_shares(params.shares_for, params.g / self.epsilon, size, rng)

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> PureDP:
        shares = params.n if shares is None else shares
        if shares >= params.shares_for:  # Lap_Z(g/ε) plus independent noise: post-processing
            return PureDP(self.epsilon)
        return PureDP(polya_sum_epsilon(shares / params.shares_for, math.exp(-self.epsilon / params.g), params.g))


class CentralDiscreteLaplace(PolyaSecAgg):
    """Theorem 5 (CDP-SE, Algorithms 2–3): the trusted analyzer adds ``Lap_Z(g/ε)`` mod m itself.

    [P] Same g, τ, m as Theorem 1; users send ``x̂ mod m`` with no noise.
    """

    key = "cdp"
    trust_model = "central"

    def local_shares(self, size, params, rng):
        return np.zeros(size, dtype=np.int64)

    def central_noises(self, params, size, rng) -> np.ndarray:
        return sample_discrete_laplace(params.g / self.epsilon, size, rng)

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> PureDP:
        return PureDP(self.epsilon)  # the analyzer's own draw: survivors do not matter


class SkellamSecAgg(ModularMechanism):
    """Theorem 2 (Dist-RDP-SE): (α, ε̂(α))-RDP for integer α ≥ 2, scale factor s ≥ 1.

    [P] ``g = ⌈s·ε·√n⌉``, ``m = n·g + 2τ + 1``, ``η_i ∼ Sk(0, g²/(nε²))`` so ``Σ η ∼ Sk(0, g²/ε²)``.
    [R] ``τ = ⌈(2g/ε)·sqrt(log(2/p)) + √2·log(2/p)⌉`` (Proposition 1's tail; the radicals were lost
    in extraction). ``tau_rule="log"`` is the authors' code, which drops the square root: a larger,
    more conservative τ (spec §5.6).
    [I] Width constants ``σ = 2/ε + √2/(sε)``, ``h = 1/(sε)``: Term (i)'s ``(2/ε)√log`` plus
    Term (ii)'s rounding ``√2/(sε)·√log``; Term (i)'s ``√2·log/g ≤ 1/(sε)`` for n ≥ 2. These are
    also the constants of the authors' code.
    [I] Dropout tolerance ρ: shares of variance ``g²/(n′ε²)``; all n carry ``j = n/n′`` times the
    variance, so the noise terms of τ and σ scale by √j (the rounding term does not).
    """

    key = "dist-rdp"
    trust_model = "distributed"

    def __init__(self, epsilon: float, p: float, s: float = 10.0, tau_rule: str = "sqrt-log",
                 dropout_tolerance: float = 0.0):
        super().__init__(epsilon, p, dropout_tolerance)
        if not s >= 1:
            raise ValueError(f"scale s={s} must be ≥ 1 (Theorem 2)")
        if tau_rule not in ("sqrt-log", "log"):
            raise ValueError(f"tau_rule={tau_rule!r} must be 'sqrt-log' or 'log'")
        self.s = float(s)
        self.tau_rule = tau_rule

    def precision(self, n: int) -> int:
        return math.ceil(self.s * self.epsilon * math.sqrt(n))

    def accuracy(self, n: int, g: int) -> int:
        tail = self.log2p if self.tau_rule == "log" else math.sqrt(self.log2p)
        return math.ceil(2 * g * math.sqrt(self.excess(n)) / self.epsilon * tail + SQRT2 * self.log2p)

    def width_constants(self, n: int, g: int) -> tuple[float, float]:
        se = self.s * self.epsilon
        return 2 * math.sqrt(self.excess(n)) / self.epsilon + SQRT2 / se, 1 / se

    def share_variance(self, params: RoundParams) -> float:
        return params.g**2 / (params.shares_for * self.epsilon**2)

    def local_shares(self, size, params, rng):
        return sample_skellam(self.share_variance(params), size, rng)

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> SkellamRDP:
        shares = params.n if shares is None else shares
        return SkellamRDP(sensitivity=params.g, variance=shares * self.share_variance(params))


class DiscreteGaussianSecAgg(SkellamSecAgg):
    """Theorem 4 (Dist-CDP-SE): ½ε̂²-CDP with ``ε̂ ≤ min{sqrt(ε² + ξ/2), ε + ξ}``.

    [P] ``g = ⌈sε√n⌉``, ``η_i ∼ N_Z(0, g²/(nε²))``, ``τ = ⌈(g/ε)·sqrt(2·log(2/p))⌉``,
    ``m = n·g + 2τ + 1``. The sum of shares is (g²/ε²)-sub-Gaussian, hence h = 0.
    [I] ``σ = √2/ε + √2/(sε)``: the sub-Gaussian tail plus rounding.
    Shares come from the exact sampler of Canonne, Kamath & Steinke (2020).
    [I] Dropout tolerance ρ: as for Skellam, the sub-Gaussian terms scale by √j.
    """

    key = "dist-cdp"

    def __init__(self, epsilon: float, p: float, s: float = 10.0, dropout_tolerance: float = 0.0):
        super().__init__(epsilon, p, s, dropout_tolerance=dropout_tolerance)

    def accuracy(self, n: int, g: int) -> int:
        return math.ceil(g * math.sqrt(self.excess(n)) / self.epsilon * math.sqrt(2 * self.log2p))

    def width_constants(self, n: int, g: int) -> tuple[float, float]:
        return SQRT2 * math.sqrt(self.excess(n)) / self.epsilon + SQRT2 / (self.s * self.epsilon), 0.0

    def local_shares(self, size, params, rng):
        # Exact rational σ² so the sampler's accept/reject decisions are exact.
        sigma2 = Fraction(params.g**2) / (params.shares_for * Fraction(self.epsilon) ** 2)
        return sample_discrete_gaussian(sigma2, size, rng)

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> DiscreteGaussianSumCDP:
        return DiscreteGaussianSumCDP(
            sensitivity=params.g, share_variance=self.share_variance(params),
            n=params.n if shares is None else shares,
        )


class LocalDiscreteLaplace(PolyaSecAgg):
    """Theorem 6 (LDP-SE, Algorithms 4–5): each user's message alone is (ε, 0)-DP.

    [P] ``g = ⌈ε√n⌉``, ``η_i ∼ Lap_Z(g/ε)`` per user, ``m = n·g + 2τ + 1``, and
    ``τ = ⌈(c·g/ε)·sqrt(2n·log(2/p))⌉`` with c the *unspecified* absolute constant of Lemma 5.
    [I] We take the maximum Lemma 5 actually requires,
    ``τ = ⌈(c·g/ε)·max{sqrt(2n·log(2/p)), 2·log(2/p)}⌉`` (the printed form drops the second
    branch, which binds when n < 2·log(2/p)), and ``c = 2``: continuous Laplace(b) has MGF
    ``1/(1 − b²λ²) ≤ e^{2b²λ²}`` for |λ| ≤ 1/(√2 b), so it is (4b², √2 b)-sub-exponential, i.e.
    c = 2 in Lemma 5's (c²b², c·b) form; Lap_Z(b) is dominated the same way (checked numerically in
    the tests). Width: ``σ = c·sqrt(2n)/ε + √2/ε``, ``h = 2c/ε`` (noise plus rounding).
    The intermediary forwards attributable reports: the analyzer sees every message.
    """

    key = "ldp"
    trust_model = "local"
    intermediary = "pass-through"

    def __init__(self, epsilon: float, p: float, c: float = 2.0):
        super().__init__(epsilon, p)
        if not c > 0:
            raise ValueError(f"LDP constant c={c} must be > 0")
        self.c = float(c)

    def accuracy(self, n: int, g: int) -> int:
        spread = max(math.sqrt(2 * n * self.log2p), 2 * self.log2p)
        return math.ceil(self.c * g / self.epsilon * spread)

    def width_constants(self, n: int, g: int) -> tuple[float, float]:
        return self.c * math.sqrt(2 * n) / self.epsilon + SQRT2 / self.epsilon, 2 * self.c / self.epsilon

    def local_shares(self, size, params, rng):
        return sample_discrete_laplace(params.g / self.epsilon, size, rng)

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> PureDP:
        return PureDP(self.epsilon)  # each message alone: survivors do not matter


class CentralLaplace(RealSumMechanism):
    """DP-SE (Sajed & Sheffet 2019): the trusted analyzer adds ``Laplace(1/ε)`` to each arm's sum.

    Rewards lie in [0, 1], so an arm's batch sum has sensitivity 1. Each (batch, arm) sum gets its
    *own* draw; the authors' code added one scalar to all arms at once, which leaves arm
    comparisons noise-free (spec §6 item 2). We do not reproduce that. The noise is the exact
    Laplace on the grid 2⁻²⁰ (:mod:`~privbandit.protocol.primitives.noise.grid_laplace`), not
    floating-point Laplace, which is not ε-DP (Mironov 2012).
    """

    key = "dp-se"
    trust_model = "central"

    def __init__(self, epsilon: float):
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon={epsilon} must be finite and > 0")
        self.epsilon = float(epsilon)

    def params(self, n: int) -> RoundParams:
        return RoundParams(n=n, sigma=0.0, h=1.0 / self.epsilon)

    def protect(self, releases: np.ndarray, params: RoundParams, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return grid_laplace(np.asarray(releases, dtype=np.float64), 1.0, self.epsilon, rng)

    def analyze(self, release: float, params: RoundParams, rng: np.random.Generator) -> Estimate:
        noisy, noise = self.protect(np.array([float(release)]), params, rng)
        return Estimate(reward_sum=float(noisy[0]), central_noise=float(noise[0]))

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> PureDP:
        return PureDP(self.epsilon)


class NonPrivate(RealSumMechanism):
    """Successive elimination without privacy: the analyzer sees the exact sum."""

    key = "none"
    trust_model = "none"

    def params(self, n: int) -> RoundParams:
        return RoundParams(n=n)

    def analyze(self, release: float, params: RoundParams, rng: np.random.Generator) -> Estimate:
        return Estimate(reward_sum=float(release))

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> NonPrivateEvent:
        return NonPrivateEvent()
