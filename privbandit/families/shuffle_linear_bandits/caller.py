"""A caller's world for :class:`privbandit.policy.Policy`: the linear family's users, whose K fixed
arms are the caller's ``contexts`` and whose Bernoulli rewards (§5) come from the caller.

The users' logic is the family's own (:class:`~.parties.LinearUsers`): the arm chosen from the
broadcast (θ̂, V⁻¹, β), the same entries, grid and randomizer streams. Only the reward differs
(:meth:`~.parties.LinearUsers.rewards`): it is the caller's y for the arm the plan's users play.
Only the caller knows θ*, so every arm's mean is set to ½ and U_t to 1 − y: the block truths'
regret is meaningless, and a Policy reports none.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.shuffle_linear_bandits.parties import LinearUsers, setup
from privbandit.families.shuffle_linear_bandits.world import LinearInstances, bounds
from privbandit.protocol.spine.family import CallerRewards
from privbandit.protocol.spine.observer import checkpoint_grid

REWARDS = CallerRewards(0.0, 1.0, binary=True)  # §5's Bernoulli rewards: the entries' bound assumes y ∈ {0, 1}


class CallerLinearUsers(LinearUsers):
    """:class:`LinearUsers` of one run whose rewards are ``ask(arms)``'s."""

    def __init__(self, ask, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ask = ask
        self.means, self.best = np.full_like(self.means, 0.5), np.full_like(self.best, 0.5)

    def rewards(self, a: np.ndarray, first: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.asarray(self.ask(np.full(size, int(a[0]), dtype=np.int64)), dtype=np.float64)[None]
        return y, 1.0 - y


def refuse_simulated(env) -> None:
    """A caller's world brings its own arms: ``environment.conversion = "classes"`` (a dataset's users
    and labels, world.ClassContexts) is a simulated world, refused by name."""
    if getattr(env, "conversion", "fixed-arms") != "fixed-arms":
        raise ValueError(f"environment.conversion = {env.conversion!r} is a simulated world (a dataset's users and "
                         f"labels); a caller's world brings its own arms: leave conversion at 'fixed-arms'")


def checked_arms(contexts, env, generator: str) -> tuple[np.ndarray, float, float]:
    """The caller's fixed arms (K, d) as float64, with the bounds (‖φ‖₂, |φ_k|) the noise is calibrated
    to for ``generator``; a ValueError naming ``contexts`` and the allowed shape or bound otherwise.
    The linear family's and Algorithm 4's callers share it."""
    refuse_simulated(env)
    x = None if contexts is None else np.asarray(contexts, dtype=np.float64)
    if x is None or x.shape != (env.arms, env.dim):
        raise ValueError(f"contexts: the {env.arms} arms' features, shape ({env.arms}, {env.dim}) "
                         f"(environment.arms, environment.dim), not {None if x is None else x.shape}")
    norm, entry = bounds(generator)
    if not np.isfinite(x).all() or (np.linalg.norm(x, axis=1) > norm).any() or (np.abs(x) > entry).any():
        raise ValueError(f"contexts: every arm's ‖φ‖₂ must be ≤ {norm:.4g} and every |φ_k| ≤ {entry:g} (the "
                         f"bounds generator = {generator!r} calibrates the noise to)")
    return x, norm, entry


def caller_users(fam, config, label: str, run: int, ask, contexts=None):
    """The users of run ``run`` of ``label`` with the caller's arms ``contexts`` (K, d), within the
    bounds the noise is calibrated to, and the caller's rewards."""
    env = config.environment
    x, norm, entry = checked_arms(contexts, env, config.generator)
    world = LinearInstances(x[None], np.zeros((1, env.dim)), norm, entry)
    users = CallerLinearUsers(ask, setup(fam.public_task(config, label, [run])), world, config.seed, [run], label,
                              checkpoint_grid(config.horizon, config.checkpoints))
    return users, REWARDS
