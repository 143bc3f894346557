"""Batched successive arm elimination.

Two instances of one learner:

- Chowdhury & Zhou (2023), Algorithm 1: batches ``l(b) = η^b`` users per active arm (η = 2 in the
  paper; any η > 1 by Remark 4), the confidence radius of Lemma 2 (eq. 2).
- DP-SE (Sajed & Sheffet 2019): epochs sized by the gap guess ``Δ_e = 2^{−e}`` and ε, with their
  radius ``h_e + c_e``.

Both are *forgetful*: an arm's estimate uses only the last batch's sum. Both eliminate arm a at the
end of batch b iff ``UCB_a(b) < max_{a′} LCB_{a′}(b)`` (Algorithm 1 line 16), i.e. iff
``max_{a′} µ̂_{a′} − µ̂_a > 2β(b)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.families.distributed_dp_mab.base import RoundParams


@dataclass(frozen=True)
class GeometricSchedule:
    """``l(b) = ⌈η^b⌉`` users per active arm in batch b = 1, 2, … (Algorithm 1 line 4, Remark 4)."""

    eta: float = 2.0

    def __post_init__(self):
        if not self.eta > 1:
            raise ValueError(f"batch growth eta={self.eta} must be > 1 (Remark 4)")

    def size(self, b: int, n_active: int) -> int:
        return math.ceil(self.eta**b)


@dataclass(frozen=True)
class Lemma2Width:
    """Lemma 2, eq. (2), times a width multiplier (the authors' ``crs``, 1 by default):

    ``β(b) = sqrt(log(4|Φ|b²/p)/(2l)) + σ·sqrt(log(2|Φ|b²/p))/l + h·log(2|Φ|b²/p)/l``

    with the round's Assumption-1 constants σ, h. The union-bound factors (4, 2) are a parameter
    because DP-SE's radius is the same shape with (8, 4): see :func:`sajed_sheffet_width`.
    """

    p: float
    multiplier: float = 1.0
    hoeffding_factor: float = 4.0
    noise_factor: float = 2.0

    def radius(self, b: int, n_active: int, params: RoundParams, l: np.ndarray | int | None = None):
        """β(b) for batches of ``l`` reports (``params.n`` by default; an array gives one radius per
        arm, for rounds where some reports dropped out)."""
        l = params.n if l is None else np.asarray(l, dtype=np.float64)
        union = n_active * b * b / self.p
        noise_log = math.log(self.noise_factor * union)
        return self.multiplier * (
            np.sqrt(math.log(self.hoeffding_factor * union) / (2 * l))
            + params.sigma * math.sqrt(noise_log) / l
            + params.h * noise_log / l
        )


@dataclass(frozen=True)
class SajedSheffetSchedule:
    """DP-SE's epoch length: ``R_e = max{32·ln(8|S|e²/β)/Δ_e², 8·ln(4|S|e²/β)/(ε·Δ_e)} + 1``,
    ``Δ_e = 2^{−e}``; β is the failure probability (1/T in Hu et al., 0.1 in Chowdhury & Zhou's
    code). Constants as in the spec's reconstruction (private-online-learning §2.3, matching the
    distributed-DP authors' code), rounded down like their ``int(·)``.
    """

    epsilon: float
    p: float

    def size(self, b: int, n_active: int) -> int:
        gap = 2.0**-b
        union = n_active * b * b / self.p
        return 1 + int(max(32 * math.log(8 * union) / gap**2, 8 * math.log(4 * union) / (self.epsilon * gap)))


def sajed_sheffet_width(p: float, multiplier: float = 1.0) -> Lemma2Width:
    """DP-SE's radius ``h_e + c_e = sqrt(ln(8|S|e²/β)/(2R_e)) + ln(4|S|e²/β)/(R_e·ε)``: Lemma 2's
    shape with factors (8, 4), σ = 0 and h = 1/ε (its mechanism's round parameters)."""
    return Lemma2Width(p, multiplier, hoeffding_factor=8.0, noise_factor=4.0)


@dataclass(frozen=True)
class BatchOutcome:
    batch: int
    radius: float | np.ndarray  # one per active arm when their report counts differ
    eliminated: tuple[int, ...]


class SuccessiveElimination:
    """The elimination state machine: which arms are active, which batch is next.

    Pure decision logic: the analyzer party feeds it one decoded sum per (batch, active arm).
    """

    def __init__(self, n_arms: int, schedule, width):
        if n_arms < 1:
            raise ValueError(f"n_arms={n_arms} must be ≥ 1")
        self.n_arms = n_arms
        self.schedule = schedule
        self.width = width
        self.batch = 1
        self.active = np.arange(n_arms)
        self.estimates = np.zeros(n_arms)
        self.eliminated_at = np.zeros(n_arms, dtype=np.int64)  # 0 = never eliminated

    def batch_size(self) -> int:
        return self.schedule.size(self.batch, self.active.size)

    def conclude_batch(self, sums: dict[int, float], params: RoundParams,
                       counts: dict[int, int] | None = None) -> BatchOutcome:
        """Algorithm 1 lines 13–16 for the current batch; ``sums`` maps each active arm to R_a(b).

        ``counts`` gives each arm's number of reports when some dropped out (l(b) by default): the
        mean and its radius then use the reports that arrived."""
        if set(sums) != set(self.active.tolist()):
            raise ValueError(f"batch {self.batch} needs sums for arms {self.active.tolist()}, got {sorted(sums)}")
        b = self.batch
        if counts is None:
            l, radius = params.n, self.width.radius(b, self.active.size, params)
        else:
            l = np.array([counts[a] for a in self.active], dtype=np.float64)
            radius = self.width.radius(b, self.active.size, params, l)
        mu = np.array([sums[a] for a in self.active]) / l
        self.estimates[self.active] = mu
        keep = mu + radius >= (mu - radius).max()
        gone = self.active[~keep]
        self.eliminated_at[gone] = b
        self.active = self.active[keep]
        self.batch += 1
        return BatchOutcome(batch=b, radius=radius, eliminated=tuple(int(a) for a in gone))
