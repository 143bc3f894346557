"""A caller's world for :class:`privbandit.policy.Policy`: Algorithm 4's users (concurrent-shuffle
private LinUCB, its exact-sum reference and random play), whose K fixed arms are the caller's
``contexts`` and whose rewards y_t ∈ [0, 1] (Assumption C.1) come from the caller.

The users' logic is the family's own (:class:`~.bandit.BanditUsers`): every user of a lowest-level
batch plays the arm step 3 chooses from the broadcast (θ̂, V⁻¹, β), and reports her P_Vec counts of
[φy, upper(φφᵀ)] to each level's shuffler from the streams ``(seed, "cs-alg4-noise", label, run,
level, batch)``, which no reward touches. What differs is the seam :meth:`~.bandit.BanditUsers.rewards`:
the batch's rewards are asked of the caller once, when its first level plan comes, and the batch's
other level plans (the users recompute, they keep nothing) read the same ones. Only the caller knows
θ*: the arms' means are NaN, and the block truths carry no regret.

The counters (Algorithms 2/3) are refused: they hand out no arms.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.concurrent_shuffle.bandit import BanditUsers, alg4_of
from privbandit.families.shuffle_linear_bandits.caller import checked_arms
from privbandit.families.shuffle_linear_bandits.learners import Widths
from privbandit.families.shuffle_linear_bandits.world import LinearInstances
from privbandit.protocol.spine.family import CallerRewards
from privbandit.protocol.spine.observer import checkpoint_grid

REWARDS = CallerRewards(0.0, 1.0)  # Assumption C.1: y_t ∈ [0, 1], so every entry of φy lies in [−1, 1]


class CallerBanditUsers(BanditUsers):
    """:class:`BanditUsers` of one run whose arms are the caller's and whose rewards are ``ask(arms)``'s."""

    def __init__(self, ask, arms: np.ndarray, norm: float, entry: float, *args):
        super().__init__(*args)
        self.ask = ask
        self.inst = LinearInstances(arms[None], np.zeros((1, arms.shape[1])), norm, entry)
        self.choose = Widths(self.inst.arms)
        self.means = np.full((1, arms.shape[0]), np.nan)  # unknown: the caller's truth
        self.best = np.full(1, np.nan)
        self.batch, self.held = -1, None  # the rewards of the batch being served

    def rewards(self, batch: int, picks: np.ndarray, u: np.ndarray, mu: np.ndarray) -> np.ndarray:
        if batch != self.batch:  # the batch's first level plan: ask; its other levels read them again
            self.held = np.asarray(self.ask(np.ascontiguousarray(picks[0], dtype=np.int64)), dtype=np.float64)[None]
            self.batch = batch
        return self.held


def caller_users(fam, config, label: str, run: int, ask, contexts=None):
    """The users of run ``run`` of Algorithm 4's ``label`` with the caller's arms ``contexts`` (K, d),
    within the bounds P_Vec is calibrated to, and the caller's rewards."""
    env = config.environment
    x, norm, entry = checked_arms(contexts, env, env.generator)
    a = alg4_of(fam.public_task(config, label, [run]))
    users = CallerBanditUsers(ask, x, norm, entry, a, env, config.seed, [run], label,
                              checkpoint_grid(config.horizon, config.checkpoints))
    return users, REWARDS
