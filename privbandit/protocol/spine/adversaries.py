"""What every in-process adversary shares: who the attackers are, and how they tamper.

Attackers are a deterministic subset of each block of a plan's reporting users, drawn like dropouts
(exactly ``⌊fraction·k⌋`` of the block's k reporters) from a stream of their own,
``(seed, *prefix, "adversary", plan, block)``. So a fleet hosting any shard of blocks picks exactly
the attackers the in-process engine picks, and the honest users' draws (rewards, rounding, noise
shares) are the same with or without an adversary: an attacked run and its honest twin differ only
where the attackers act.

An attacker is a user who runs the honest randomizer and then replaces its message
(:meth:`Adversary.tamper`), or, for colluders, keeps its message and reveals its noise share. A
family registers the adversaries that make sense for it (the distributed-DP MAB family's poisoning
users know its encoding); the spine applies them to any family's reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.events import Plan, Round


@dataclass(frozen=True)
class Block:
    """One block of a round's reporting users, as its attackers see it: the honest ``messages``
    (R, k, width), the honest encodings (k,) or (k, width) (or None), and the ``attackers`` mask (k,)."""

    plan: Plan
    round: Round
    index: int
    first: int  # the block's first user (offset 0 of ``messages`` is the first reporter)
    messages: np.ndarray
    encoded: np.ndarray | None
    attackers: np.ndarray


class Adversary(ABC):
    """A fraction of the users, acting together against the learner or against privacy."""

    kind: ClassVar[str]
    summary: ClassVar[str]  # one line, for `privbandit list` and `privbandit attack --help`
    leaks_shares: ClassVar[bool] = False  # colluders: the ledger reports ε against the coalition

    def __init__(self, fraction: float, seed: int, stream_prefix: tuple = ()):
        if not 0 <= fraction < 1 / 3:
            raise ValueError(f"adversary fraction={fraction} must lie in [0, 1/3) (the release threshold)")
        self.fraction = float(fraction)
        self.seed = seed
        self.stream_prefix = stream_prefix

    def members(self, plan: Plan, block: int, size: int) -> np.ndarray:
        """Which of the block's ``size`` users are attackers: exactly ``⌊fraction·size⌋``."""
        mask = np.zeros(size, dtype=bool)
        count = int(self.fraction * size)
        if count:
            rng = stream(self.seed, *self.stream_prefix, "adversary", plan.id, block)
            mask[rng.choice(size, count, replace=False)] = True
        return mask

    @abstractmethod
    def tamper(self, block: Block) -> np.ndarray:
        """The messages the block actually sends: the honest ones where ``attackers`` is False."""
