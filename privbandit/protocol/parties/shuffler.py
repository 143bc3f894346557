"""The shuffler: releases a round's reports as a uniformly permuted multiset.

Sender identity, arrival order and timing are stripped: the release is ``values[π]`` for a uniform
random permutation π, with no ids. Real deployments must draw π from a CSPRNG; by default we seed
numpy's generator from ``os.urandom``, and only a run that asks for reproducibility passes a seed.
"""

from __future__ import annotations

import os

import numpy as np

from privbandit.protocol.events import Release
from privbandit.protocol.parties.intermediary import Intermediary


def shuffle_rng(seed: int | None = None) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(os.urandom(32), "little") if seed is None else seed)


class Shuffler(Intermediary):
    def __init__(self, plan, mechanism, rng: np.random.Generator, rejected=None, window: int | None = None):
        super().__init__(plan, mechanism, rejected, window)
        self.rng = rng

    def release(self, partial: bool = False) -> Release:
        n = self._require_enough(partial)
        return Release(round_id=self.plan.round_id, n_reports=n,
                       reports=self.rng.permutation(self.values[self.received]))
