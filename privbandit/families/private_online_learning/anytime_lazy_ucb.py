"""Anytime-Lazy-UCB: Hu, Huang & Mehta, Algorithm 1, in the O(1)-per-arm form of Appendix A.

Per arm the learner keeps two tuples (Appendix A): the last *full* array's private mean and size
λ = 2^{r_j}, and the array being filled (only its count, which the analyzer knows because it
assigns arms; its sum lives with whoever aggregates it: the trusted learner in the central model,
the secure aggregator in the distributed one). Partial arrays never reach the index: the index
(eq. 4) is a function of the broadcast :class:`LazyPolicy` and the round t only.

Between two array completions the policy is constant, so a whole cohort of users t0 … t1 learns its
arms from one broadcast and its own arrival times (:meth:`LazyPolicy.arms`), one vectorized batch.

[INFERRED, spec §7 item 1] the initial pull of each arm is array 0 (λ⁽⁰⁾ = 1) and its private
mean is ``X + Lap(1/ε)``: the paper only says "pull j once to initialize μ̃_{j,1,0}", but Theorem
2's argument needs every observation to reach decisions through a Laplace-noised sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.families.private_online_learning.mechanisms import refresh_count


@dataclass(frozen=True)
class LazyPolicy:
    """What the analyzer broadcasts after each release: private means and the full arrays' sizes.

    ``bonus_epsilon`` is the ε in eq. (4)'s ``3 ln t/(ελ)`` term (the privacy ε of the release).
    """

    means: np.ndarray  # μ̃_j, eq. (3)
    sizes: np.ndarray  # λ_j^{(r_j)} = 2^{r_j}
    epsilon: float

    def index(self, t: np.ndarray) -> np.ndarray:
        """Eq. (4): ``μ̃_j + sqrt(3 ln t/λ_j) + 3 ln t/(ε λ_j)``, natural log, one row per t."""
        lt = np.log(np.asarray(t, dtype=np.float64))[:, None]
        inv = 1.0 / self.sizes
        return self.means + np.sqrt(3.0 * lt * inv) + (3.0 / self.epsilon) * lt * inv

    def arms(self, t: np.ndarray) -> np.ndarray:
        """Each user's arm from its own arrival time; ties go to the lowest index."""
        return np.argmax(self.index(t), axis=1)


class AnytimeLazyUCB:
    """Algorithm 1's state at the analyzer: counts O_j, full-array index r_j, private means.

    Sans-I/O: :meth:`plan_cohort` says which arms the next users pull (up to and including the next
    array completion); :meth:`on_release` takes the noisy sum of the array that completed.
    """

    def __init__(self, n_arms: int, epsilon: float):
        if n_arms < 1:
            raise ValueError(f"n_arms={n_arms} must be ≥ 1")
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon={epsilon} must be finite and > 0")
        self.n_arms = n_arms
        self.epsilon = float(epsilon)
        self.pulls = np.zeros(n_arms, dtype=np.int64)  # O_j
        self.full = np.full(n_arms, -1, dtype=np.int64)  # r_j; -1 until the initial pull's release
        self.means = np.zeros(n_arms)
        self.releases = 0

    # --- what the learner publishes ------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return bool(np.all(self.full >= 0))

    def policy(self) -> LazyPolicy:
        if not self.initialized:
            raise RuntimeError("the initial pulls have not all been released yet")
        return LazyPolicy(self.means.copy(), np.ldexp(1.0, self.full), self.epsilon)

    def filling(self, arm: int) -> tuple[int, int]:
        """(index, size) of the array arm's next observation goes to."""
        r = int(self.full[arm]) + 1
        return r, 1 << r

    def remaining(self) -> np.ndarray:
        """Pulls each arm still needs before its filling array is full."""
        return np.array([refresh_count(int(r) + 1) for r in self.full]) - self.pulls

    # --- the decision ---------------------------------------------------------------------------
    def plan_cohort(self, t0: int, t_max: int, chunk: int = 1 << 12, max_chunk: int = 1 << 18) -> np.ndarray:
        """Arms of users t0, t0+1, … up to the first array completion or t_max (inclusive).

        The first K rounds are the initial pulls (arm t − 1, one release each). Afterwards the
        cohort is computed chunk by chunk from the constant policy, each chunk twice the last (from
        ``chunk`` to ``max_chunk``): a cohort cut early costs little, a long one few calls. The
        chunks bound memory only; the cohort's extent does not depend on them.
        """
        if t0 > t_max:
            return np.zeros(0, dtype=np.int64)
        if t0 <= self.n_arms:
            return np.array([t0 - 1], dtype=np.int64)
        policy = self.policy()
        need = self.remaining()
        parts = []
        while t0 <= t_max:
            n = min(chunk, t_max - t0 + 1)
            arms = policy.arms(np.arange(t0, t0 + n))
            counts = np.bincount(arms, minlength=self.n_arms)
            done = np.flatnonzero(counts >= need)
            if done.size:  # cut at the earliest completion: the next user faces a new policy
                end = min(int(np.flatnonzero(arms == j)[need[j] - 1]) + 1 for j in done)
                parts.append(arms[:end])
                break
            parts.append(arms)
            need = need - counts
            t0 += n
            chunk = min(2 * chunk, max_chunk)
        return np.concatenate(parts)

    def record_pulls(self, arms: np.ndarray) -> list[int]:
        """Count a cohort's pulls; returns the arms whose filling array became full."""
        before = self.remaining()
        counts = np.bincount(arms, minlength=self.n_arms)
        if np.any(counts > before):
            raise ValueError("a cohort overran an array completion: partial arrays must not be skipped")
        self.pulls += counts
        return [int(j) for j in np.flatnonzero(counts == before)]

    def on_release(self, arm: int, noisy_sum: float, size: int) -> None:
        """Eq. (3): the completed array's noisy sum becomes arm's private mean; forget the rest."""
        r, expected = self.filling(arm)
        if size != expected or self.pulls[arm] != refresh_count(r):
            raise ValueError(f"arm {arm}: release of size {size} at {self.pulls[arm]} pulls; expected array "
                             f"{r} of size {expected} at {refresh_count(r)} pulls")
        self.full[arm] = r
        self.means[arm] = noisy_sum / size
        self.releases += 1
