"""What every in-process adversary shares: who the attackers are, and how they tamper.

Attackers are a deterministic subset of each cohort, drawn like dropouts (exactly
``⌊fraction·size⌋`` of every block of :data:`~privbandit.protocol.seeding.USER_BLOCK` users) from
a stream of their own, ``(seed, *prefix, "adversary", round, block)``. So a fleet hosting any shard
of blocks picks exactly the attackers the in-process engine picks, and the honest users' draws
(rewards, rounding, noise shares) are the same with or without an adversary: an attacked run and
its honest twin differ only where the attackers act.

An attacker is a user of the cohort who runs the honest randomizer and then replaces its message
(:meth:`Adversary.tamper`), or, for colluders, keeps its message and reveals its noise share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privbandit.protocol.events import RoundPlan
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.seeding import USER_BLOCK, stream


@dataclass(frozen=True)
class Block:
    """One block of a round's reporting users, as the attackers of that block see it.

    ``messages`` are the honest messages (residues in Z_m, or raw rewards) of the block's users who
    report, ``encoded`` their honest encodings x̂ (or raw rewards), ``attackers`` a mask over them.
    """

    plan: RoundPlan
    index: int
    messages: np.ndarray
    encoded: np.ndarray
    attackers: np.ndarray


class Adversary(ABC):
    """A fraction of the users, acting together against the learner or against privacy."""

    kind: ClassVar[str]
    summary: ClassVar[str]  # one line, for `privbandit attack --help`
    leaks_shares: ClassVar[bool] = False  # colluders: the ledger reports ε against the coalition

    def __init__(self, fraction: float, mechanism: Mechanism, seed: int, stream_prefix: tuple = (),
                 best_arm: int = 0):
        if not 0 <= fraction < 1 / 3:
            raise ValueError(f"adversary fraction={fraction} must lie in [0, 1/3) (the release threshold)")
        self.fraction = float(fraction)
        self.mechanism = mechanism
        self.seed = seed
        self.stream_prefix = stream_prefix
        # Worst case: the attackers know which arm is best (the simulated world does), so they
        # push it down and every other arm up, the way that makes successive elimination fail.
        self.best_arm = best_arm

    def members(self, plan: RoundPlan, block: int, size: int) -> np.ndarray:
        """Which of the block's ``size`` users are attackers: exactly ``⌊fraction·size⌋``."""
        mask = np.zeros(size, dtype=bool)
        count = int(self.fraction * size)
        if count:
            rng = stream(self.seed, *self.stream_prefix, "adversary", plan.round_id, block)
            mask[rng.choice(size, count, replace=False)] = True
        return mask

    def promote(self, plan: RoundPlan) -> bool:
        """True: push this round's estimate up (a bad arm); False: down (the best arm)."""
        return plan.arm != self.best_arm

    @abstractmethod
    def tamper(self, block: Block) -> np.ndarray:
        """The messages the block actually sends: the honest ones where ``attackers`` is False."""


def block_bounds(plan: RoundPlan, block: int) -> tuple[int, int]:
    """The block's users as offsets ``[start, stop)`` into the cohort."""
    start = block * USER_BLOCK
    return start, min(start + USER_BLOCK, plan.cohort)
