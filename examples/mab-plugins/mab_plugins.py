"""Two plug-ins for privbandit's distributed-DP MAB family, from outside privbandit.

- ``rr-se`` (a mechanism): each user randomizes a one-bit report by randomized response, so each
  report alone is ε-DP (the local model); the aggregator sums the bits, the analyzer debiases.
- ``fixed-batches`` (a learner): successive elimination with the same number of users per arm in
  every batch (``options = { batch = 2000 }``) instead of Algorithm 1's doubling batches.

Each is a factory the family calls with the algorithm's table (its resolved ε, p, options); what it
returns is one of the family's own types, so the spine gives it the rest: the in-process engine,
the MQTT services, the ledger, the results files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.families.distributed_dp_mab.base import Estimate, ModularMechanism, RoundParams, UserOutput
from privbandit.families.distributed_dp_mab.learners import Lemma2Width, SuccessiveElimination
from privbandit.protocol.primitives import encoding
from privbandit.protocol.privacy import PureDP

GRID = 2**53  # the keep-probability is a multiple of 2^-53, drawn exactly from 53 random bits


class RandomizedResponse(ModularMechanism):
    """A reward r ∈ [0, 1] is first rounded to a bit x̂ with P(x̂ = 1) = r (g = 1), then kept with
    probability p′ = k/2^53 ≤ e^ε/(1+e^ε) and flipped otherwise. P(y = 1 | r) lies in [1−p′, p′],
    so a report is log(p′/(1−p′))-DP, at most ε: the ledger records that, not the nominal ε.

    The release is the bits' sum S; the estimate (S − n(1−p′))/(2p′−1) is unbiased for Σ x̂, and by
    Hoeffding off by at most sqrt(n·log(2/p)/2)/(2p′−1) with probability 1 − p: Assumption 1 with
    σ = sqrt(n/2)/(2p′−1), h = 0. τ = n bounds |Σ(y − x̂)| always, so m = 3n + 1 never wraps."""

    key = "rr"
    trust_model = "local"

    def __init__(self, epsilon: float, p: float):
        super().__init__(epsilon, p)
        self.keep = math.floor(GRID * math.exp(epsilon) / (1 + math.exp(epsilon)))
        while math.log(self.keep) - math.log(GRID - self.keep) > epsilon:  # float rounding rounded up
            self.keep -= 1
        self.realized = math.log(self.keep) - math.log(GRID - self.keep)
        self.flip = (GRID - self.keep) / GRID

    def precision(self, n: int) -> int:
        return 1

    def accuracy(self, n: int, g: int) -> int:
        return n

    def width_constants(self, n: int, g: int) -> tuple[float, float]:
        return math.sqrt(n / 2) / (1 - 2 * self.flip), 0.0

    def randomize(self, rewards: np.ndarray, params: RoundParams, rng: np.random.Generator) -> UserOutput:
        x_hat = encoding.randomized_round(rewards, 1, rng)
        kept = rng.integers(0, GRID, x_hat.size, dtype=np.uint64) < self.keep  # exact Bernoulli(p′)
        y = np.where(kept, x_hat, 1 - x_hat).astype(np.int64)
        return UserOutput(messages=encoding.reduce_mod(y, params.m), encoded_sum=int(x_hat.sum()),
                          noise_sum=int((y - x_hat).sum()), encoded=x_hat)

    def analyze(self, release: int, params: RoundParams, rng: np.random.Generator) -> Estimate:
        if not 0 <= release <= params.n:
            raise encoding.EncodingError(f"release {release} is not a count of {params.n} bits")
        return Estimate(reward_sum=(int(release) - params.n * self.flip) / (1 - 2 * self.flip))

    def privacy_event(self, params: RoundParams, shares: int | None = None) -> PureDP:
        return PureDP(self.realized)  # each report alone


def randomized_response(a) -> RandomizedResponse:
    return RandomizedResponse(a.epsilon, a.p)


@dataclass(frozen=True)
class FixedSchedule:
    users: int

    def size(self, b: int, n_active: int) -> int:
        return self.users


def fixed_batches(a, n_arms: int) -> SuccessiveElimination:
    """Every batch ``options.batch`` users per active arm (1000 by default)."""
    batch = a.options.get("batch", 1000)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"options.batch = {batch!r}: the users per arm in every batch, an integer ≥ 1")
    return SuccessiveElimination(n_arms, FixedSchedule(batch), Lemma2Width(a.p, a.width_multiplier))


fixed_batches.options = ("batch",)  # the options it reads: the family refuses any other key
