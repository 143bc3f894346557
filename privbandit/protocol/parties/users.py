"""Users: local randomizers in a simulated world.

Each user pulls the arm the plan prescribes, draws a reward from the instance, and runs the
mechanism's randomizer R on it. A cohort is processed as numpy batches of
:data:`~privbandit.protocol.seeding.USER_BLOCK` users, each block with its own random stream, so
a fleet hosting any shard of blocks draws exactly what the in-process engine draws.

Ground truth (rewards, the served arm's gap, realized regret) goes to :class:`BlockTruth`, which
only the observer receives.

With a ``dropout_rate`` q, exactly ``⌊q·size⌋`` users of each block of a collected round, drawn
uniformly from a stream of their own, are served but never report (a dropout: the device went
offline). Their regret counts; their reward and noise do not enter the round's truth sums.

With an ``adversary`` (:mod:`privbandit.protocol.adversaries`), a deterministic subset of each
block's reporting users runs the honest randomizer and then tampers with its message; the block's
truth counts them (``attackers``). Honest users draw exactly what they draw in the honest run.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from privbandit.protocol.adversaries import Adversary, Block
from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.events import BlockTruth, Reports, RoundPlan
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
        dropout_rate: float = 0.0,
        adversary: Adversary | None = None,
    ):
        if not 0 <= dropout_rate < 1:
            raise ValueError(f"dropout_rate={dropout_rate} must lie in [0, 1)")
        self.dropout_rate = dropout_rate
        self.adversary = adversary
        self.instance = instance
        self.mechanism = mechanism
        self.seed = seed
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)  # counts of users served, 1-based
        self.stream_prefix = stream_prefix

    def blocks(self, plan: RoundPlan) -> range:
        return range((plan.cohort + USER_BLOCK - 1) // USER_BLOCK)

    def _stayers(self, plan: RoundPlan, block: int, size: int) -> slice | np.ndarray:
        gone = int(self.dropout_rate * size)
        if not gone:
            return slice(None)
        rng = stream(self.seed, *self.stream_prefix, "dropout", plan.round_id, block)
        stay = np.ones(size, dtype=bool)
        stay[rng.choice(size, gone, replace=False)] = False
        return stay

    def respond(self, plan: RoundPlan, blocks: Iterable[int] | None = None) -> tuple[Reports | None, list[BlockTruth]]:
        """Serve the plan to the given blocks of its cohort (all of them by default)."""
        inst = self.instance
        best = inst.best_arm
        messages, ids, truths = [], [], []
        for block in self.blocks(plan) if blocks is None else blocks:
            start = block * USER_BLOCK
            size = min(USER_BLOCK, plan.cohort - start)
            first = plan.first_user + start
            rng = stream(self.seed, *self.stream_prefix, "users", plan.round_id, block)
            rewards = inst.sample(plan.arm, size, rng)
            if plan.arm == best:
                regret = np.zeros(size)
            else:
                # Realized regret as the authors' code plots it: the reward the best arm would have
                # paid this user minus the reward it got, drawn independently.
                regret = inst.sample(best, size, rng) - rewards
            running = np.cumsum(regret)
            # Checkpoints c (1-based counts of users served) with first < c ≤ first + size.
            lo, hi = np.searchsorted(self.checkpoints, [first + 1, first + size + 1])
            noise, reported, attackers = 0, rewards, 0
            if plan.collect:
                stay = self._stayers(plan, block, size)
                reported = rewards[stay]
                out = self.mechanism.randomize(reported, plan.params, rng)
                sent = out.messages
                if self.adversary is not None:
                    bad = self.adversary.members(plan, block, size)[stay]
                    sent = self.adversary.tamper(Block(plan, block, sent, out.encoded, bad))
                    attackers = int(bad.sum())
                messages.append(sent)
                ids.append(np.arange(first, first + size, dtype=np.int64)[stay])
                noise = out.noise_sum
            truths.append(BlockTruth(
                round_id=plan.round_id,
                block=block,
                first_user=first,
                size=size,
                gap=float(inst.gaps[plan.arm]),
                realized_regret=float(running[-1]),
                realized_at_checkpoints=running[self.checkpoints[lo:hi] - first - 1],
                reward_sum=float(reported.sum()),
                noise_sum=noise,
                attackers=attackers,
            ))
        if not plan.collect or not messages:
            return None, truths
        return Reports(plan.round_id, np.concatenate(ids), np.concatenate(messages)), truths
