"""The (randomizer, intermediary, analyzer) triple every mechanism of the MAB family shares.

A mechanism is stateless: its parameter rule maps a round's cohort size n to public
:class:`RoundParams`, its randomizer maps one cohort's rewards to messages, and its analyzer maps a
release to an estimate of the cohort's reward sum. The learner never sees anything else.

Two shapes cover the family (Chowdhury & Zhou 2023, Algorithm 1 and Appendix H):

- :class:`ModularMechanism`: fixed-point encoding, integer noise, arithmetic in Z_m. Local shares
  make it distributed (SecAgg) or local; a noise draw at the analyzer makes it central.
- :class:`RealSumMechanism`: users report raw rewards to a trusted analyzer (DP-SE, non-private).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from privbandit.protocol.primitives import encoding
from privbandit.protocol.privacy import PrivacyEvent

TrustModel = Literal["distributed", "central", "local", "none"]
# What the intermediary computes of a round's reports: their sum mod m, their plain sum (raw rewards
# for a trusted analyzer, which needs nothing else), or nothing (every report passes, attributable).
Intermediary = Literal["modular-sum", "sum", "pass-through"]


@dataclass(frozen=True)
class RoundParams:
    """Public per-round parameters, broadcast with the round plan.

    ``sigma`` and ``h`` are Assumption 1's constants for this round, in reward units: the noise in
    the decoded sum satisfies ``|n_a(b)| ≤ σ·sqrt(log(2/p)) + h·log(2/p)`` with probability ≥ 1 − 2p.

    ``noise_n`` is the number of reports the users' noise shares are calibrated for: n, or
    ``⌈(1−ρ)·n⌉`` under a dropout tolerance ρ, so that any ``noise_n`` survivors carry the full
    noise. ``None`` means n.
    """

    n: int
    g: int | None = None
    tau: int | None = None
    m: int | None = None
    sigma: float = 0.0
    h: float = 0.0
    noise_n: int | None = None

    @property
    def shares_for(self) -> int:
        """How many reports' noise shares add up to the calibrated noise."""
        return self.n if self.noise_n is None else self.noise_n

    @property
    def bits(self) -> int:
        """Protocol bits per report: ⌈log₂ m⌉, or 64 for a raw float64 reward."""
        return 64 if self.m is None else math.ceil(math.log2(self.m))


@dataclass(frozen=True)
class UserOutput:
    """What a cohort's randomizers produce: the messages, plus ground truth for metrics only."""

    messages: np.ndarray  # int64 residues in Z_m, or float64 raw rewards
    encoded_sum: int | float  # Σ x̂ (or Σ x): never reaches the analyzer
    noise_sum: int  # Σ η of the local shares: never reaches the analyzer
    encoded: np.ndarray | None = None  # each user's x̂ (or raw reward): what an attacker swaps out


@dataclass(frozen=True)
class Estimate:
    """The analyzer's decode of one release."""

    reward_sum: float  # R_a(b) = A(ŷ), reward units
    wrapped: bool = False  # Alg. 1 line 28: the underflow correction was applied
    central_noise: float = 0.0  # noise the analyzer itself added (central model), for metrics


class Mechanism(ABC):
    key: ClassVar[str]
    trust_model: ClassVar[TrustModel]
    intermediary: ClassVar[Intermediary]

    @abstractmethod
    def params(self, n: int) -> RoundParams: ...

    @abstractmethod
    def randomize(self, rewards: np.ndarray, params: RoundParams, rng: np.random.Generator) -> UserOutput: ...

    @abstractmethod
    def aggregate(self, messages: np.ndarray, params: RoundParams) -> int | float:
        """The ideal intermediary's function of the messages (the release)."""

    @abstractmethod
    def analyze(self, release: int | float, params: RoundParams, rng: np.random.Generator) -> Estimate: ...

    def protect(self, releases: np.ndarray, params: RoundParams, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """What the analyzer's own noise makes of a batch of releases before it decodes them, and
        that noise: the central model's draw (Alg. 3), none by default. A mechanism whose analyzer
        adds noise draws it here and :meth:`analyze` through it with a batch of one, as
        ``privbandit audit`` does with millions: the audit then tests this code, not a copy (one
        that drew its noise elsewhere would be audited without it, and flagged)."""
        releases = np.asarray(releases)
        return releases, np.zeros_like(releases)

    @abstractmethod
    def privacy_event(self, params: RoundParams, shares: int | None = None) -> PrivacyEvent:
        """The round's guarantee when ``shares`` reports (n by default) made it into the release.

        Distributed noise lives in the shares, so fewer survivors can mean a weaker guarantee;
        central and local guarantees do not depend on it."""


def confidence_log(p: float) -> float:
    """``log(2/p)``, the tail factor in every τ rule (p = 1/T gives the theorems' log(2T))."""
    if not 0 < p <= 1:
        raise ValueError(f"confidence p={p} must lie in (0, 1]")
    return math.log(2.0 / p)


class ModularMechanism(Mechanism):
    """Algorithm 1's template protocol with a mechanism-specific g, τ and noise law."""

    intermediary: ClassVar[Intermediary] = "modular-sum"

    def __init__(self, epsilon: float, p: float, dropout_tolerance: float = 0.0):
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon={epsilon} must be finite and > 0")
        if not 0 <= dropout_tolerance < 1:
            raise ValueError(f"dropout_tolerance={dropout_tolerance} must lie in [0, 1)")
        if dropout_tolerance and self.trust_model != "distributed":
            raise ValueError(f"dropout_tolerance applies to distributed noise only; {self.key} is {self.trust_model}")
        self.epsilon = float(epsilon)
        self.p = float(p)
        self.log2p = confidence_log(p)
        self.dropout_tolerance = float(dropout_tolerance)

    # --- parameter rule -------------------------------------------------------------------
    @abstractmethod
    def precision(self, n: int) -> int:
        """g, the fixed-point precision."""

    @abstractmethod
    def accuracy(self, n: int, g: int) -> int:
        """τ, the bound on |Σ η| that holds with probability ≥ 1 − p."""

    @abstractmethod
    def width_constants(self, n: int, g: int) -> tuple[float, float]:
        """(σ, h) of Assumption 1 in reward units."""

    def noise_users(self, n: int) -> int:
        """``⌈(1−ρ)·n⌉``: the survivors whose shares alone must carry the full noise."""
        return max(1, math.ceil((1.0 - self.dropout_tolerance) * n - 1e-9))

    def excess(self, n: int) -> float:
        """``j = n / noise_users(n) ≥ 1``: how many times the calibrated noise all n shares carry."""
        return n / self.noise_users(n)

    def params(self, n: int) -> RoundParams:
        if n < 1:
            raise ValueError(f"cohort size n={n} must be ≥ 1")
        g = self.precision(n)
        tau = self.accuracy(n, g)
        m = encoding.check_modulus(n * g + 2 * tau + 1)
        sigma, h = self.width_constants(n, g)
        noise_n = self.noise_users(n)
        return RoundParams(n=n, g=g, tau=tau, m=m, sigma=sigma, h=h, noise_n=None if noise_n == n else noise_n)

    # --- randomizer (Alg. 1 lines 18–22) ---------------------------------------------------
    def local_shares(self, size: int, params: RoundParams, rng: np.random.Generator) -> np.ndarray:
        """Each user's integer noise share η_i; none in the central model."""
        return np.zeros(size, dtype=np.int64)

    def randomize(self, rewards: np.ndarray, params: RoundParams, rng: np.random.Generator) -> UserOutput:
        x_hat = encoding.randomized_round(rewards, params.g, rng)
        eta = self.local_shares(x_hat.size, params, rng)
        y = encoding.reduce_mod(x_hat + eta, params.m)
        return UserOutput(messages=y, encoded_sum=int(x_hat.sum()), noise_sum=int(eta.sum()), encoded=x_hat)

    # --- intermediary (Alg. 1 lines 23–25) -------------------------------------------------
    def aggregate(self, messages: np.ndarray, params: RoundParams) -> int:
        return encoding.modular_sum(messages, params.m)

    # --- analyzer (Alg. 1 lines 26–30; Alg. 3 for the central model) ----------------------
    def central_noises(self, params: RoundParams, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` draws of the analyzer's own integer noise; none outside the central model."""
        return np.zeros(size, dtype=np.int64)

    def central_noise(self, params: RoundParams, rng: np.random.Generator) -> int:
        return int(self.central_noises(params, 1, rng)[0])

    def protect(self, releases: np.ndarray, params: RoundParams, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``ŷ = (y + η) mod m`` per release (Alg. 3 line 2 in the central model; η = 0 otherwise)."""
        eta = self.central_noises(params, np.size(releases), rng)
        return encoding.reduce_mod(np.asarray(releases, dtype=np.int64) + eta, params.m), eta

    def analyze(self, release: int, params: RoundParams, rng: np.random.Generator) -> Estimate:
        if not 0 <= release < params.m:
            raise encoding.EncodingError(f"release {release} is not a residue mod {params.m}")
        y, noise = self.protect(np.array([int(release)], dtype=np.int64), params, rng)
        y_hat, eta = int(y[0]), int(noise[0])
        decoded = encoding.decode(y_hat, n=params.n, g=params.g, tau=params.tau, m=params.m)
        return Estimate(
            reward_sum=decoded.noisy_sum / params.g,
            wrapped=decoded.wrapped,
            central_noise=eta / params.g,
        )


class RealSumMechanism(Mechanism):
    """Users hand raw rewards to a trusted analyzer, which may add continuous noise to the sum.

    The round releases the rewards' sum, all the analyzer uses (as CDP-SE's modular sum): the
    intermediary adds the float64 rewards in user order exactly as ``numpy.sum`` over the reports
    did when they were released one by one, so the sums are the same to the bit, and a round holds
    8 bytes per report (not its reports and their ids twice over)."""

    intermediary: ClassVar[Intermediary] = "sum"

    def randomize(self, rewards: np.ndarray, params: RoundParams, rng: np.random.Generator) -> UserOutput:
        rewards = np.asarray(rewards, dtype=np.float64)
        return UserOutput(messages=rewards, encoded_sum=float(rewards.sum()), noise_sum=0, encoded=rewards)

    def aggregate(self, messages: np.ndarray, params: RoundParams) -> float:
        return float(np.sum(messages))
