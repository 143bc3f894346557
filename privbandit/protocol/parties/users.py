"""Users: local randomizers in a simulated world.

Each user pulls the arm the plan prescribes, draws a reward from the instance, and runs the
mechanism's randomizer R on it. A cohort is processed as numpy batches of
:data:`~privbandit.protocol.seeding.USER_BLOCK` users, each block with its own random stream, so
a fleet hosting any shard of blocks draws exactly what the in-process engine draws.

Ground truth (rewards, the served arm's gap, realized regret) goes to :class:`CohortTruth`, which
only the observer receives.
"""

from __future__ import annotations

import numpy as np

from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.events import CohortTruth, Reports, RoundPlan
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.seeding import USER_BLOCK, stream


class UserPopulation:
    def __init__(
        self,
        instance: BanditInstance,
        mechanism: Mechanism,
        seed: int,
        checkpoints: np.ndarray,
        stream_prefix: tuple = (),
    ):
        self.instance = instance
        self.mechanism = mechanism
        self.seed = seed
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)  # counts of users served, 1-based
        self.stream_prefix = stream_prefix

    def respond(self, plan: RoundPlan) -> tuple[Reports | None, CohortTruth]:
        inst = self.instance
        best = inst.best_arm
        # Checkpoints c with first_user < c ≤ first_user + cohort fall inside this cohort.
        lo, hi = np.searchsorted(self.checkpoints, [plan.first_user + 1, plan.first_user + plan.cohort + 1])
        inside = self.checkpoints[lo:hi] - plan.first_user - 1  # 0-based positions in the cohort
        realized_at = np.empty(inside.size)
        messages, realized_total, reward_sum, encoded_sum, noise_sum = [], 0.0, 0.0, 0.0, 0
        for block, start in enumerate(range(0, plan.cohort, USER_BLOCK)):
            size = min(USER_BLOCK, plan.cohort - start)
            rng = stream(self.seed, *self.stream_prefix, "users", plan.round_id, block)
            rewards = inst.sample(plan.arm, size, rng)
            if plan.arm == best:
                regret = np.zeros(size)
            else:
                # Realized regret as the authors' code plots it: the reward the best arm would have
                # paid this user minus the reward it got, drawn independently.
                regret = inst.sample(best, size, rng) - rewards
            running = np.cumsum(regret) + realized_total
            sel = (inside >= start) & (inside < start + size)
            realized_at[sel] = running[inside[sel] - start]
            realized_total = float(running[-1])
            reward_sum += float(rewards.sum())
            if plan.collect:
                out = self.mechanism.randomize(rewards, plan.params, rng)
                messages.append(out.messages)
                encoded_sum += out.encoded_sum
                noise_sum += out.noise_sum
        truth = CohortTruth(
            round_id=plan.round_id,
            first_user=plan.first_user,
            cohort=plan.cohort,
            gap=float(inst.gaps[plan.arm]),
            realized_regret=realized_total,
            realized_at_checkpoints=realized_at,
            reward_sum=reward_sum,
            encoded_sum=encoded_sum,
            noise_sum=noise_sum,
        )
        if not plan.collect:
            return None, truth
        ids = np.arange(plan.first_user, plan.first_user + plan.cohort, dtype=np.int64)
        return Reports(round_id=plan.round_id, user_ids=ids, values=np.concatenate(messages)), truth
