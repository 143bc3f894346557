"""A caller's world for :class:`privbandit.policy.Policy`: the bandit-feedback algorithms' users
(Anytime-Lazy-UCB, Hybrid-UCB, DP-SE), whose rewards come from the caller instead of the simulated
:class:`~.world.OnlineUsers`.

The users' logic is the family's own (:class:`~.parties.OnlineBanditUsers`, and the MAB family's
users for DP-SE): their arms from the plan (the lazy policy and their arrival time, or given arms),
their randomizers from their own streams ``(…, "randomizer", plan, block, arm)``, which no reward
draw touches. Fed the simulated world's rewards, a policy makes ``privbandit.run``'s releases bit
for bit (Hybrid-UCB without the in-process look-ahead: the blocks no reward can change, one user
otherwise, as over MQTT; the same decisions). Only the caller knows the truth: the block truths carry no regret.

Full information (FTNL, naive FTNL, FTL, Hedge) is refused: each user reports her whole reward
vector X(t) ∈ [0, 1]^K, and a Policy takes one reward per arm handed out.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab.caller import REWARDS, CallerBandit

FULL_INFORMATION = ("ftnl", "naive-ftnl", "ftl", "hedge")


class CallerOnlineUsers:
    """The duck-typed :class:`~.world.OnlineUsers` of a caller's world: ``pull`` asks the caller."""

    def __init__(self, n_arms: int, ask):
        self.instance = CallerBandit(n_arms, ask)  # DP-SE's users sample it; its gaps are NaN
        self.ask = ask

    def pull(self, t0: int, arms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The caller's rewards of users t0 … for their arms; realized regret unknown (NaN)."""
        return np.asarray(self.ask(np.asarray(arms, dtype=np.int64)), dtype=np.float64), np.full(arms.size, np.nan)


def caller_users(fam, config, label: str, run: int, ask, contexts=None):
    if contexts is not None:
        raise ValueError(f"contexts: family {fam.name} is a multi-armed bandit, its arms have no features; give none")
    a = fam.algorithm(config, label)
    if a.algorithm in FULL_INFORMATION:
        raise NotImplementedError(f"algorithms.{label}: {a.algorithm} learns from full information (each user "
                                  f"reports her whole reward vector X(t) ∈ [0, 1]^K); a Policy takes one reward "
                                  f"per arm handed out")
    world = CallerOnlineUsers(len(config.environment.means), ask)  # the arm count the analyzer is told
    return fam.users(config, label, [run], world=world), REWARDS
