"""The observer: joins ground truth (from users) with the analyzer's decodes into a run's results.

It is the only party that sees both sides, and it never feeds anything back into the protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privbandit.protocol.events import CohortTruth
from privbandit.protocol.parties.analyzer import RoundRecord


def checkpoint_grid(horizon: int, points: int = 240) -> np.ndarray:
    """Counts of users at which regret curves are sampled: log-spaced and linear, always ending at T."""
    logs = np.geomspace(1, horizon, points // 2)
    lins = np.linspace(1, horizon, points // 2)
    return np.unique(np.concatenate([logs, lins, [horizon]]).round().astype(np.int64))


@dataclass
class RunResult:
    checkpoints: np.ndarray
    pseudo_regret: np.ndarray
    realized_regret: np.ndarray
    rounds: list[dict]
    privacy: dict
    reports: int
    protocol_bits: int
    max_report_bits: int
    eliminated_at: list[int]
    best_arm: int

    @property
    def best_arm_eliminated(self) -> bool:
        return self.eliminated_at[self.best_arm] > 0


class Observer:
    def __init__(self, checkpoints: np.ndarray, p: float):
        self.checkpoints = checkpoints
        self.p = p
        self.truths: dict[int, CohortTruth] = {}
        self.records: dict[int, RoundRecord] = {}

    def on_truth(self, truth: CohortTruth) -> None:
        self.truths[truth.round_id] = truth

    def on_record(self, record: RoundRecord) -> None:
        self.records[record.round_id] = record

    def regret_curves(self) -> tuple[np.ndarray, np.ndarray]:
        cohorts = sorted(self.truths.values(), key=lambda c: c.first_user)
        pseudo = np.empty(self.checkpoints.size)
        realized = np.empty(self.checkpoints.size)
        pseudo_before = realized_before = 0.0
        for c in cohorts:
            lo, hi = np.searchsorted(self.checkpoints, [c.first_user + 1, c.first_user + c.cohort + 1])
            pseudo[lo:hi] = pseudo_before + c.gap * (self.checkpoints[lo:hi] - c.first_user)
            realized[lo:hi] = realized_before + c.realized_at_checkpoints
            pseudo_before += c.gap * c.cohort
            realized_before += c.realized_regret
        served = sum(c.cohort for c in cohorts)
        if served < self.checkpoints[-1]:
            raise RuntimeError(f"only {served} of {self.checkpoints[-1]} users were served")
        return pseudo, realized

    def round_rows(self) -> list[dict]:
        rows = []
        log2p = math.log(2 / self.p)
        for rid in sorted(self.records):
            r, t = self.records[rid], self.truths[rid]
            q = r.params
            row = {
                "round": rid,
                "batch": r.batch,
                "arm": r.arm,
                "n": q.n,
                "g": q.g,
                "tau": q.tau,
                "m": q.m,
                "bits": q.bits,
                "wrapped": r.wrapped,
                "estimate_sum": r.estimate,
                "true_sum": t.reward_sum,
                "noise": r.estimate - t.reward_sum,
                "noise_bound": q.sigma * math.sqrt(log2p) + q.h * log2p,
            }
            if q.g is not None:
                total_eta = t.noise_sum + round(r.central_noise * q.g)
                row["noise_encoded"] = total_eta
                row["decode_failure"] = abs(total_eta) > q.tau
            rows.append(row)
        return rows
