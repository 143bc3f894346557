"""A caller's world for :class:`privbandit.policy.Policy`: Algorithm 1's users (and VB-SDP-AE's),
whose rewards come from the caller instead of the simulated :class:`~.world.BanditInstance`.

The users' logic is the family's own (:class:`~.parties.BanditUsers`,
:class:`~.shuffle_elimination.ShuffleEliminationUsers`): the same encoding, noise shares and
randomized rounding, drawn from the same streams. What differs is the world: the instance's
``sample`` asks the caller for the block's rewards of the arm the plan prescribes. Only the caller
knows the truth, so no arm is "best" but the one pulled (no counterfactual reward is asked for) and
the gaps are NaN: the block truths carry no regret, and a Policy reports none.

Same seed, same rewards: the central and non-private algorithms (``dp-se``, ``se``), whose users
draw nothing, make exactly ``privbandit.run``'s decisions and ledger. Users who randomize draw their
noise from the stream the simulated world draws the rewards (and a counterfactual best-arm reward)
from first, so their noise realizations, though of the same law, differ from a simulated run's.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab import config as cfg
from privbandit.protocol.spine.family import CallerRewards

REWARDS = CallerRewards(0.0, 1.0)  # Algorithm 1 encodes rewards in [0, 1] (Assumption 1's bound)


class CallerBandit:
    """The duck-typed :class:`~.world.BanditInstance` of a caller's world (see the module docstring)."""

    reward = "caller"

    def __init__(self, n_arms: int, ask):
        self.n_arms = n_arms
        self.ask = ask
        self.gaps = np.full(n_arms, np.nan)  # unknown: the caller's truth
        self.best_arm = None

    def sample(self, arm: int, size: int, rng: np.random.Generator) -> np.ndarray:
        self.best_arm = arm  # the only arm a user's reward is known for: no counterfactual draw
        return np.asarray(self.ask(np.full(size, arm, dtype=np.int64)), dtype=np.float64)


def caller_users(fam, config, label: str, run: int, ask, contexts=None):
    from privbandit.families.distributed_dp_mab.family import instance_for

    if contexts is not None:
        raise ValueError(f"contexts: family {fam.name} is a multi-armed bandit, its arms have no features; give none")
    a = fam.algorithm(config, label)
    if a.algorithm in cfg.SEQUENTIAL:
        raise NotImplementedError(f"algorithms.{label}: {a.algorithm} is a one-user-per-release baseline whose "
                                  f"users' rewards are keyed by user index inside OnlineUsers: no caller seam yet")
    world = CallerBandit(instance_for(config, run).n_arms, ask)  # the arm count the analyzer is told
    return fam.users(config, label, [run], instance=world), REWARDS
