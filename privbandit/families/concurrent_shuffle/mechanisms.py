"""What one tree node runs: a summation protocol inside one shuffler (M^sum_v of Alg. 2/3), and
the centralized and local baselines. Inputs are bits b_t ∈ {0, 1} (the paper's binary PSCO,
Cor. 3.3 / 3.5 and the lower bound).

Every mechanism is per level (its parameters depend on the batch size m = s_i) and count-encoded:
a user's report is one integer, the number of 1-bits among her one-bit messages, so the sum of a
batch's reports determines the shuffled multiset of its bits (the analyzer's whole view), as in
P_Vec's :class:`~privbandit.families.shuffle_linear_bandits.mechanisms.LabelCountShuffler`.

- :class:`SplitMixSum` (``split-mix``, the default): the summation the shuffle model's literature
  proves, split-and-mix of Pólya-noised bits (Ishai et al. 2006; Balle, Bell, Gascón & Nissim 2019):
  each user adds her Pólya share to her bit mod M and splits the residue into s uniform shares,
  the shuffler releases the multiset of every share, the analyzer sums them mod M: the node's bits
  plus Lap_Z(1/ε), within the closeness η of the shares (:mod:`privbandit.protocol.primitives.shuffle_sum`).
  (ε, (1 + e^ε)η)-DP per node.
- :class:`BinomialSum` (``bin-a``): a labelled baseline, not a protocol from the literature: the
  spec's option A shape for M^sum_bin, "Algorithm 3 of Tenenbaum et al. 2021" (arXiv 2106.02900),
  whose text we could not obtain. A user sends her bit and ℓ noise bits Ber(q); the analyzer
  subtracts mℓq. The node's view is Σb + Bin(mℓ, q) (a shuffled multiset of bits is its count), and
  (ℓ, q) are calibrated by the *exact* privacy of that view: the hockey-stick divergence of
  Bin(mℓ, q) against its shift by 1, computed (:func:`binomial_delta`), not a constant C_bin.
- :class:`VecSum` (``pvec``): P_Vec of Chowdhury & Zhou 2022 (App. C, Alg. 5–7) with one coordinate,
  the parameters and privacy of :mod:`privbandit.families.shuffle_linear_bandits.params`, reused.
- :class:`CentralLaplace` (``central_tree``): a trusted server adds Lap_Z(L/ε) to each node of the
  binary tree, L = ⌈log₂ n⌉ levels (each user is in ≤ L nodes).
- :class:`RandomizedResponse` (``ldp``): every user's own ε-LDP report (Warner), attributable.

Budgets: a user is in one node per level, so each level runs at (ε/k, δ/k) (simple composition,
Alg. 3; the paper's footnotes 9–10 leave advanced composition out) and the ledger adds the levels'
events in lanes ``level-i``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.protocol.primitives import shuffle_sum
from privbandit.protocol.primitives.noise import discrete_laplace_variance, sample_discrete_laplace, sample_polya_shares
from privbandit.protocol.privacy import ApproxDP, NoneProven, PrivacyEvent, PureDP, closeness_budget, near_secure_sum

PROTOCOLS = ("split-mix", "bin-a", "pvec")
STAND_IN = ("a labelled baseline, not Tenenbaum et al. 2021's Alg. 3 (text not obtained): spec option A, binomial "
            "noise bits calibrated by the exact privacy of the binomial count")
BIN_BASIS = ("binomial count Σb + Bin(mℓ, q) behind a shuffler: (ε, δ) from its hockey-stick divergence, "
             "computed exactly (privbandit concurrent_shuffle.binomial_delta)")
Q_GRID = 2**32  # q is a multiple of 2⁻³²: the law the privacy computation is about is the one sampled


def binomial_delta(trials: int, q: float, epsilon: float) -> float:
    """δ(ε) of adding Bin(trials, q) to a sensitivity-1 integer count: the larger of the two
    hockey-stick divergences H_{e^ε}(P‖P+1) and H_{e^ε}(P+1‖P), summed exactly over the support."""
    from scipy.stats import binom

    x = np.arange(trials + 2)
    logp = binom.logpmf(x, trials, q)  # P(X = x), −inf at x = trials + 1
    logs = np.concatenate([[-np.inf], logp[:-1]])  # P(X + 1 = x)
    with np.errstate(invalid="ignore"):
        one = np.exp(logp) - np.exp(epsilon + logs)
        two = np.exp(logs) - np.exp(epsilon + logp)
    return float(max(np.clip(one, 0, None).sum(), np.clip(two, 0, None).sum()))


@lru_cache(maxsize=256)
def _fair_trials(epsilon: float, delta: float) -> int:
    """The fewest fair noise bits M with Bin(M, ½) (ε, δ)-private on a sensitivity-1 count."""
    hi = max(4, int(8 * math.log(2 / delta) / epsilon**2))
    while binomial_delta(hi, 0.5, epsilon) > delta:
        hi *= 2
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if binomial_delta(mid, 0.5, epsilon) <= delta:
            hi = mid
        else:
            lo = mid + 1
    return hi


@lru_cache(maxsize=256)
def binomial_calibration(m: int, epsilon: float, delta: float) -> tuple[int, int, float]:
    """(ℓ noise bits per user, q numerator on the 2⁻³² grid, δ achieved) for a batch of m users.

    Option A's shape: M fair bits suffice; small batches share them (ℓ = ⌈M/m⌉, q = ½); a batch of
    more than M users sends one bit each with the smallest grid q that is (ε, δ)-private (variance
    ≈ M/4 either way). Checked by :func:`binomial_delta` on the exact (mℓ, q) sampled."""
    fair = _fair_trials(epsilon, delta)
    if m <= fair:
        ell = -(-fair // m)
        return ell, Q_GRID // 2, binomial_delta(m * ell, 0.5, epsilon)
    lo, hi = 1, Q_GRID // 2
    start = max(1, int(fair / (4 * m) * Q_GRID))
    while start > 1 and binomial_delta(m, start / Q_GRID, epsilon) <= delta:
        start //= 2
    lo = start
    while lo < hi:
        mid = (lo + hi) // 2
        if binomial_delta(m, mid / Q_GRID, epsilon) <= delta:
            hi = mid
        else:
            lo = mid + 1
    return 1, hi, binomial_delta(m, hi / Q_GRID, epsilon)


@dataclass(frozen=True)
class BinomialSum:
    """Spec §2.2.1 option A (a stand-in, see the module docstring), for a batch of m users."""

    m: int
    epsilon: float
    delta: float
    ell: int
    q_num: int
    delta_achieved: float
    name: str = "bin-a"
    trust: str = "shuffle"

    @classmethod
    def make(cls, m: int, epsilon: float, delta: float) -> BinomialSum:
        ell, q_num, got = binomial_calibration(m, epsilon, delta)
        return cls(m, epsilon, delta, ell, q_num, got)

    @property
    def q(self) -> float:
        return self.q_num / Q_GRID

    def draw(self, shape: tuple, rng: np.random.Generator) -> np.ndarray:
        """Each user's count of 1s among her ℓ Ber(q) noise bits."""
        if self.q_num == Q_GRID // 2 and self.ell <= 62:  # fair bits: popcounts of exact random words
            words = rng.integers(0, 1 << self.ell, size=shape, dtype=np.int64)
            return _popcount(words)
        return rng.binomial(self.ell, self.q, size=shape).astype(np.int64)

    def encode(self, bits: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return bits.astype(np.int64) + noise

    @property
    def max_report(self) -> int:
        return 1 + self.ell

    def analyze(self, total: np.ndarray, m: int) -> np.ndarray:
        """A_bin: Σ received bits − mℓq (unbiased)."""
        return total - m * self.ell * self.q

    def variance(self, m: int | None = None) -> float:
        m = self.m if m is None else m
        return m * self.ell * self.q * (1 - self.q)

    def event(self) -> PrivacyEvent:
        """(ε, δ) only if the computed δ of the exact (mℓ, q) sampled meets it (it does by
        construction; the check keeps the ledger from ever stating more than was computed)."""
        if not self.delta_achieved <= self.delta:
            return NoneProven(f"binomial stand-in: computed δ = {self.delta_achieved:.3g} > {self.delta:.3g}")
        return ApproxDP(self.epsilon, self.delta, BIN_BASIS)

    def bits_per_user(self) -> int:
        return 1 + self.ell

    def describe(self) -> dict:
        return {"protocol": self.name, "stand_in": STAND_IN, "m": self.m, "ell": self.ell, "q": self.q,
                "epsilon": self.epsilon, "delta": self.delta, "delta_computed": self.delta_achieved,
                "node_variance": self.variance()}


@dataclass(frozen=True)
class SplitMixSum:
    """Split-and-mix of Pólya-noised bits for a node of m users at (ε, δ) (see the module docstring).

    - each user's Pólya share η = γ⁺ − γ⁻, γ^± ∼ Pólya(1/m, e^{−ε}), so the node's shares sum to
      Lap_Z(1/ε) (Goryczka & Xiong 2015; the MAB paper's Fact 1): pure ε for a sensitivity-1 count;
    - modulus M = m + 2τ + 1 with τ = ⌈log(2/p)/ε⌉: the noisy count decodes exactly unless
      |Σ η| > τ, which has probability ≤ p (the discrete Laplace's tail; ``decode_failure``);
    - s shares per user, the fewest with (1 + e^ε)·η(m, s, M) ≤ δ (:func:`shuffle_sum.shares_for`);
    - the node's event: (ε, (1 + e^ε)·η)-DP (:func:`~privbandit.protocol.privacy.near_secure_sum`).
    """

    m: int
    epsilon: float
    delta: float
    tau: int
    modulus: int
    shares: int
    closeness: float
    p: float
    name: str = "split-mix"
    trust: str = "shuffle"

    @classmethod
    def make(cls, m: int, epsilon: float, delta: float, p: float) -> SplitMixSum:
        if not 0 < epsilon or not 0 < delta < 1 or not 0 < p < 1:
            raise ValueError(f"split-mix node of {m} users: (ε, δ) = ({epsilon}, {delta}) and p = {p} need ε > 0, "
                             f"δ and p in (0, 1)")
        tau = math.ceil(math.log(2 / p) / epsilon)
        modulus = m + 2 * tau + 1
        shares = shuffle_sum.shares_for(m, modulus, closeness_budget(PureDP(epsilon), delta))
        return cls(m, epsilon, delta, tau, modulus, shares, shuffle_sum.closeness(m, shares, modulus), p)

    def draw(self, shape: tuple, rng: np.random.Generator) -> np.ndarray:
        """Each user's Pólya share of the node's Lap_Z(1/ε)."""
        size = int(np.prod(shape))
        return sample_polya_shares(self.m, 1.0 / self.epsilon, size, rng).reshape(shape)

    def encode(self, bits: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """The residue (b + η) mod M each user splits into her shares."""
        return np.mod(bits.astype(np.int64) + noise, self.modulus)

    @property
    def max_report(self) -> int:
        return self.modulus - 1

    def analyze(self, total: np.ndarray, m: int) -> np.ndarray:
        """The node count from the sum of its residues (or shares): mod M, read in [−τ, m + τ]."""
        y = np.mod(np.asarray(total).astype(np.int64), self.modulus)
        return np.where(y > m + self.tau, y - self.modulus, y).astype(np.float64)

    def variance(self, m: int | None = None) -> float:
        return discrete_laplace_variance(1.0 / self.epsilon)

    def event(self) -> PrivacyEvent:
        return near_secure_sum(PureDP(self.epsilon), self.closeness, self.delta)

    def bits_per_user(self) -> int:
        return self.shares * (self.modulus - 1).bit_length()

    def describe(self) -> dict:
        return {"protocol": self.name, "m": self.m, "epsilon": self.epsilon, "delta": self.delta, "tau": self.tau,
                "modulus": self.modulus, "shares": self.shares, "closeness": self.closeness,
                "decode_failure_bound": self.p, "node_variance": self.variance()}


def _popcount(words: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words).astype(np.int64)
    out = np.zeros(words.shape, np.int64)
    w = words.copy()
    while w.any():
        out += w & 1
        w >>= 1
    return out


@dataclass(frozen=True)
class VecSum:
    """P_Vec with one coordinate (Chowdhury & Zhou 2022, Alg. 5–7), reused from the linear family."""

    m: int
    epsilon: float
    delta: float
    params: slb.VecParams
    covered: bool
    warnings: tuple[str, ...]
    scale: float | None
    name: str = "pvec"
    trust: str = "shuffle"

    @classmethod
    def make(cls, m: int, epsilon: float, delta: float, scale: float | None = None) -> VecSum:
        budget = lp.Budget(epsilon, delta, 1)
        params = lp.vec_params("theory", budget, m, 1, 1.0, 1.0, scale, "2delta")
        covered, warnings = lp.vec_warnings("theory", budget, params, scale)
        return cls(m, epsilon, delta, params, covered, tuple(warnings), scale)

    def draw(self, shape: tuple, rng: np.random.Generator):
        return slb.BitSumRandomizer(self.params).draw(shape + (1,), rng)

    def encode(self, bits: np.ndarray, noise) -> np.ndarray:
        return slb.BitSumRandomizer(self.params).apply(bits[..., None].astype(np.float64), noise)[..., 0]

    @property
    def max_report(self) -> int:
        return self.params.max_count

    def analyze(self, total: np.ndarray, m: int) -> np.ndarray:
        return slb.BitSumAnalyzer(self.params).analyze(total, m)

    def variance(self, m: int | None = None) -> float:
        """Bits (x ∈ {0, 1}, w = x + 1 on span 2 with g steps) round exactly when g is even."""
        m = self.m if m is None else m
        pr = self.params
        frac = (pr.g / 2) % 1
        return pr.scale**2 * m * (frac * (1 - frac) + pr.b * pr.p * (1 - pr.p))

    def event(self) -> PrivacyEvent:
        budget = lp.Budget(self.epsilon, self.delta, 1)
        return lp.batch_event("linucb-sdp-vec", "theory", budget, self.m, 1.0, None, self.params, self.scale)

    def bits_per_user(self) -> int:
        return self.params.g + self.params.b

    def describe(self) -> dict:
        pr = self.params
        return {"protocol": self.name, "m": self.m, "g": pr.g, "b": pr.b, "p": pr.p, "epsilon": self.epsilon,
                "delta": self.delta, "covered": self.covered, "warnings": list(self.warnings),
                "node_variance": self.variance()}


@dataclass(frozen=True)
class CentralLaplace:
    """The central binary tree's node: the true sum plus Lap_Z(levels/ε) from the trusted server."""

    m: int
    epsilon: float  # per node: ε/levels
    name: str = "laplace"
    trust: str = "central"

    @property
    def scale(self) -> float:
        return 1.0 / self.epsilon

    def noise(self, shape: tuple, rng: np.random.Generator) -> np.ndarray:
        return sample_discrete_laplace(self.scale, int(np.prod(shape)), rng).reshape(shape)

    def variance(self, m: int | None = None) -> float:
        from privbandit.protocol.primitives.noise import discrete_laplace_variance

        return discrete_laplace_variance(self.scale)

    def event(self) -> PrivacyEvent:
        return PureDP(self.epsilon)

    def bits_per_user(self) -> int:
        return 1

    def describe(self) -> dict:
        return {"protocol": self.name, "m": self.m, "epsilon_node": self.epsilon, "scale": self.scale,
                "node_variance": self.variance()}


RR_GRID = 2**53


def rr_keep(epsilon: float) -> tuple[int, float]:
    """Randomized response's keep-probability on the 2⁻⁵³ grid, rounded down, and the ε it truly
    gives (log p/(1−p) ≤ ε): the ledger states the sampled law's ε, not the nominal one."""
    keep = math.floor(RR_GRID * math.exp(epsilon) / (1 + math.exp(epsilon)))
    while math.log(keep) - math.log(RR_GRID - keep) > epsilon:
        keep -= 1
    return keep, math.log(keep) - math.log(RR_GRID - keep)


@dataclass(frozen=True)
class RandomizedResponse:
    """The local counter's report: b with probability p = e^ε/(1+e^ε), else 1 − b (ε-LDP)."""

    epsilon: float
    m: int = 1
    name: str = "rr"
    trust: str = "local"

    @property
    def keep(self) -> tuple[int, float]:
        return rr_keep(self.epsilon)

    @property
    def p(self) -> float:
        return self.keep[0] / RR_GRID

    def draw(self, shape: tuple, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, RR_GRID, size=shape, dtype=np.uint64) < np.uint64(self.keep[0])

    def encode(self, bits: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return (bits.astype(bool) == noise).astype(np.int64)

    max_report = 1

    def analyze(self, total: np.ndarray, m: int) -> np.ndarray:
        p = self.p
        return (total - m * (1 - p)) / (2 * p - 1)

    def variance(self, m: int | None = None) -> float:
        p = self.p
        return (1 if m is None else m) * p * (1 - p) / (2 * p - 1) ** 2

    def event(self) -> PrivacyEvent:
        return PureDP(self.keep[1])

    def bits_per_user(self) -> int:
        return 1

    def describe(self) -> dict:
        return {"protocol": self.name, "epsilon_actual": self.keep[1], "keep": self.p,
                "node_variance": self.variance()}


def level_budget(mode: str, epsilon: float, delta: float, k: int, n: int) -> tuple[float, float]:
    """(ε, δ) of one level's mechanisms: ε/k, δ/k (Alg. 3); Alg. 2 (and the central tree) use
    ε/log n, δ/log n (the paper's split, spec §8 item 8); the local counter ε per user."""
    from privbandit.families.concurrent_shuffle.tree import log2_levels

    if mode == "ldp":
        return epsilon, 0.0
    if mode in ("csta_binary", "central_tree"):
        L = log2_levels(n)
        return epsilon / L, delta / L
    return epsilon / k, delta / k


def level_mechanism(mode: str, protocol: str, m: int, epsilon: float, delta: float, vec_scale: float | None = None,
                    n: int | None = None):
    """The mechanism every node of a level of m users runs (``n``: the horizon, whose 1/(10n) is
    split-mix's decode-failure probability per node)."""
    if mode == "central_tree":
        return CentralLaplace(m, epsilon)
    if mode == "ldp":
        return RandomizedResponse(epsilon)
    if protocol == "split-mix":
        return SplitMixSum.make(m, epsilon, delta, 1 / (10 * (n or m)))
    if protocol == "bin-a":
        if not 0 < epsilon or not 0 < delta < 1:
            raise ValueError(f"per-level (ε, δ) = ({epsilon}, {delta}) must have ε > 0 and δ in (0, 1)")
        return BinomialSum.make(m, epsilon, delta)
    if protocol == "pvec":
        return VecSum.make(m, epsilon, delta, vec_scale)
    raise ValueError(f"protocol = {protocol!r} is not one of {', '.join(PROTOCOLS)}")
