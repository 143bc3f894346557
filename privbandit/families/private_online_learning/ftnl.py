"""Follow-the-Noisy-Leader (FTNL): Hu, Huang & Mehta, Algorithm 2, for stochastic decision-theoretic
online learning (full information).

Epoch s = 0, 1, 2, … lasts 2^s rounds, so epoch s covers rounds ``2^s … 2^{s+1} − 1``. Epoch 0
plays action 1 (index 0); epoch s ≥ 1 plays the report-noisy-max (Algorithm 3) of epoch s − 1's
reward vectors *only* (forgetful: RNM must see fresh data, Appendix F). The learner is anytime: it
never needs T. The release itself is a mechanism's job
(:mod:`privbandit.families.private_online_learning.mechanisms`); this is the epoch bookkeeping.
"""

from __future__ import annotations


def epoch_of(t: int) -> int:
    """The epoch round t (1-based) belongs to: ⌊log2 t⌋."""
    if t < 1:
        raise ValueError(f"round t={t} must be ≥ 1")
    return t.bit_length() - 1


def epoch_rounds(s: int) -> range:
    """Rounds of epoch s: 2^s … 2^{s+1} − 1."""
    return range(1 << s, 1 << (s + 1))


class FTNL:
    def __init__(self, n_actions: int):
        if n_actions < 1:
            raise ValueError(f"n_actions={n_actions} must be ≥ 1")
        self.n_actions = n_actions
        self.epoch = 0
        self.action = 0  # "J ← 1": the first action

    @property
    def epoch_length(self) -> int:
        return 1 << self.epoch

    def conclude_epoch(self, selected: int | None) -> None:
        """End the current epoch; ``selected`` is RNM's output on its data (None: a truncated last
        epoch that nothing follows)."""
        if selected is not None:
            if not 0 <= selected < self.n_actions:
                raise ValueError(f"selected action {selected} outside 0..{self.n_actions - 1}")
            self.action = int(selected)
        self.epoch += 1
