"""Stochastic bandit instances: the simulated world only users and the observer can see.

Chowdhury & Zhou (2023), Section 7: K = 10 arms with means i.i.d. U[0.25, 0.75] ("easy") or
U[0.45, 0.55] ("hard") (after Vaswani et al. 2020), Gaussian rewards "projected to [0, 1]". The
standard deviation is not stated in the paper; the authors' code uses 0.1 and clips, and so do we.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

RewardLaw = Literal["gaussian", "bernoulli", "categorical"]


@dataclass(frozen=True)
class BanditInstance:
    """Arm means plus a reward law; every reward lies in [0, 1]."""

    means: np.ndarray
    reward: RewardLaw = "gaussian"
    sd: float = 0.1  # gaussian only: N(µ, sd²) clipped to [0, 1]
    levels: np.ndarray | None = None  # categorical only: reward values ...
    probabilities: np.ndarray | None = None  # ... and one row of probabilities per arm
    gaps: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        means = np.asarray(self.means, dtype=np.float64)
        if means.ndim != 1 or means.size < 2:
            raise ValueError("means: need a 1-D list of at least 2 arm means")
        if np.any(means < 0) or np.any(means > 1):
            raise ValueError("means: every arm mean must lie in [0, 1]")
        if self.reward == "categorical":
            if self.levels is None or self.probabilities is None:
                raise ValueError("categorical rewards need levels and probabilities")
            if np.shape(self.probabilities) != (means.size, np.size(self.levels)):
                raise ValueError("probabilities: need one row per arm and one column per level")
        elif self.reward not in ("gaussian", "bernoulli"):
            raise ValueError(f"reward: {self.reward!r} is not one of gaussian, bernoulli, categorical")
        if self.reward == "gaussian" and not self.sd >= 0:
            raise ValueError(f"sd={self.sd} must be ≥ 0")
        object.__setattr__(self, "means", means)
        expected = self.expected_rewards()
        object.__setattr__(self, "gaps", expected.max() - expected)

    def expected_rewards(self) -> np.ndarray:
        """E[reward] per arm. For clipped Gaussians this differs slightly from the location µ
        (by up to ~1e-4 at µ = 0.25, sd = 0.1), and regret must use the true expectation:
        ``E[clip(X, 0, 1)] = µ(Φ(b) − Φ(a)) + sd(φ(a) − φ(b)) + 1 − Φ(b)``, a = −µ/sd, b = (1−µ)/sd.
        """
        if self.reward != "gaussian" or self.sd == 0:
            return self.means.copy()
        # Imported here: scipy.special costs a process about 0.2 CPU-seconds to import, which the
        # parties that never build an instance (the analyzer, the intermediaries) need not pay.
        from scipy.special import ndtr

        mu, sd = self.means, self.sd
        a, b = -mu / sd, (1 - mu) / sd
        return mu * (ndtr(b) - ndtr(a)) + sd * (_phi(a) - _phi(b)) + 1 - ndtr(b)

    @property
    def n_arms(self) -> int:
        return self.means.size

    @property
    def best_arm(self) -> int:
        return int(np.argmin(self.gaps))

    def sample(self, arm: int, size: int, rng: np.random.Generator) -> np.ndarray:
        mu = self.means[arm]
        if self.reward == "gaussian":
            return np.clip(rng.normal(mu, self.sd, size), 0.0, 1.0)
        if self.reward == "bernoulli":
            return (rng.random(size) < mu).astype(np.float64)
        return rng.choice(self.levels, size=size, p=self.probabilities[arm])


def _phi(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def uniform_means(k: int, low: float, high: float, rng: np.random.Generator) -> np.ndarray:
    """K means i.i.d. U[low, high]: the paper's easy (0.25, 0.75) and hard (0.45, 0.55) instances."""
    if not 0 <= low < high <= 1:
        raise ValueError(f"need 0 ≤ low < high ≤ 1, got low={low}, high={high}")
    return low + (high - low) * rng.random(k)
