"""Users of the online-learning family (Hu, Huang & Mehta) in a simulated world.

User t (t = 1, 2, …) arrives at round t. Its randomness comes from the block of
:data:`~privbandit.protocol.primitives.seeding.USER_BLOCK` consecutive users it belongs to, one stream per
block, so what a user draws does not depend on how rounds are grouped into cohorts: a cohort
boundary (an array completion) is a fact of the algorithm, not of the simulation.

- bandit feedback: two uniforms per user, its own reward and the best arm's counterfactual reward
  (for realized regret; the observer only);
- full information (DTOL): a K-vector of rewards per user, X(t) with independent coordinates.

Rewards are Bernoulli(µ_j) by default; the paper does not name the family (spec §4.1).
Gaussian rewards (clipped to [0, 1]) reuse the same uniforms through the normal quantile.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.primitives.seeding import USER_BLOCK, stream


def rewards_from_uniforms(instance: BanditInstance, means: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One reward per uniform, with the instance's law at the given means."""
    if instance.reward == "bernoulli":
        return (u < means).astype(np.float64)
    if instance.reward == "gaussian":
        return np.clip(means + instance.sd * ndtri(u), 0.0, 1.0)
    raise ValueError(f"reward law {instance.reward!r} is not supported by the online family")


class OnlineUsers:
    def __init__(self, instance: BanditInstance, seed: int, prefix: tuple, width: int):
        self.instance = instance
        self.seed = seed
        self.prefix = prefix
        self.width = width
        self._cache: dict[int, np.ndarray] = {}

    def _block(self, b: int) -> np.ndarray:
        if b not in self._cache:
            if len(self._cache) > 2:
                self._cache.pop(min(self._cache))
            self._cache[b] = stream(self.seed, *self.prefix, "users", b).random((USER_BLOCK, self.width))
        return self._cache[b]

    def uniforms(self, t0: int, n: int) -> np.ndarray:
        """(n, width) uniforms of users t0 … t0 + n − 1."""
        first, last = t0 - 1, t0 - 1 + n
        parts = []
        for b in range(first // USER_BLOCK, (last - 1) // USER_BLOCK + 1 if n else first // USER_BLOCK):
            lo, hi = max(first, b * USER_BLOCK), min(last, (b + 1) * USER_BLOCK)
            parts.append(self._block(b)[lo - b * USER_BLOCK : hi - b * USER_BLOCK])
        return np.concatenate(parts) if parts else np.zeros((0, self.width))

    def pull(self, t0: int, arms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bandit feedback for users t0…: their rewards and their per-user realized regret."""
        inst = self.instance
        u = self.uniforms(t0, arms.size)
        x = rewards_from_uniforms(inst, inst.means[arms], u[:, 0])
        best = inst.best_arm
        # Realized regret against the best arm's own draw (0 for users who pulled it).
        xb = rewards_from_uniforms(inst, np.full(arms.size, inst.means[best]), u[:, 1])
        return x, np.where(arms == best, 0.0, xb - x)

    def vectors(self, t0: int, n: int) -> np.ndarray:
        """Full-information reward vectors X(t) of users t0 … t0 + n − 1, shape (n, K)."""
        return rewards_from_uniforms(self.instance, self.instance.means, self.uniforms(t0, n))
