"""The observer: joins ground truth (from users) with the analyzer's decodes into a run's results.

It is the only party that sees both sides, and it never feeds anything back into the protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privbandit.protocol.events import BlockTruth
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.parties.analyzer import RoundRecord
from privbandit.protocol.privacy import NoPrivacy, PrivacyLedger


@dataclass(frozen=True)
class CoalitionLedger:
    """The ε left against the analyzer together with colluding users (adversaries/collusion.py).

    Colluders' shares are known to the coalition, so only the ``reports − colluders`` honest shares
    protect the honest users: the mechanism's own ``privacy_event(params, shares)``, which also
    answers for dropouts. Kept by the observer, which alone knows who colluded.
    """

    mechanism: Mechanism
    trust_model: str
    epsilon_target: float | None
    delta: float

    def new(self) -> PrivacyLedger:
        return PrivacyLedger(self.trust_model, self.epsilon_target, self.delta)

    def event(self, params, reports: int, colluders: int):
        honest = reports - colluders
        return self.mechanism.privacy_event(params, honest) if honest >= 1 else NoPrivacy()


def coalition_ledger(mechanism: Mechanism, ledger: PrivacyLedger, adversary) -> CoalitionLedger | None:
    """A coalition ledger beside ``ledger`` when the adversary reveals shares, else None."""
    if adversary is None or not adversary.leaks_shares:
        return None
    return CoalitionLedger(mechanism, ledger.trust_model, ledger.epsilon_target, ledger.delta)


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
    rejected: dict = field(default_factory=dict)  # rejected reports by reason (in-process runs)

    @property
    def best_arm_eliminated(self) -> bool:
        return self.eliminated_at[self.best_arm] > 0


class Observer:
    """Assembles per-block ground truth and per-round decodes, whatever order they arrive in."""

    def __init__(self, checkpoints: np.ndarray, p: float, coalition: CoalitionLedger | None = None):
        self.checkpoints = checkpoints
        self.p = p
        self.coalition = coalition
        self.blocks: dict[tuple[int, int], BlockTruth] = {}
        self.records: dict[int, RoundRecord] = {}

    def on_truth(self, truth: BlockTruth) -> None:
        self.blocks[truth.round_id, truth.block] = truth

    def on_record(self, record: RoundRecord) -> None:
        self.records[record.round_id] = record

    def regret_curves(self) -> tuple[np.ndarray, np.ndarray]:
        blocks = sorted(self.blocks.values(), key=lambda b: b.first_user)
        pseudo = np.full(self.checkpoints.size, np.nan)
        realized = np.full(self.checkpoints.size, np.nan)
        pseudo_before = realized_before = 0.0
        served = 0
        for b in blocks:
            if b.first_user != served:
                raise RuntimeError(f"users {served}..{b.first_user - 1} were never reported served")
            lo, hi = np.searchsorted(self.checkpoints, [b.first_user + 1, b.first_user + b.size + 1])
            pseudo[lo:hi] = pseudo_before + b.gap * (self.checkpoints[lo:hi] - b.first_user)
            realized[lo:hi] = realized_before + b.realized_at_checkpoints
            pseudo_before += b.gap * b.size
            realized_before += b.realized_regret
            served += b.size
        if served != self.checkpoints[-1]:
            raise RuntimeError(f"{served} of {self.checkpoints[-1]} users were reported served")
        return pseudo, realized

    def round_truth(self, round_id: int) -> tuple[float, int, int]:
        """Σ rewards, Σ η and the attackers over a round's blocks, added in block order."""
        parts = sorted((b for (r, _), b in self.blocks.items() if r == round_id), key=lambda b: b.block)
        return (sum(b.reward_sum for b in parts), sum(b.noise_sum for b in parts),
                sum(b.attackers for b in parts))

    def result(self, privacy: dict, eliminated_at: list[int], best_arm: int, rejected: dict | None = None) -> RunResult:
        """The run's results; ``privacy`` is the analyzer's ledger summary (plus, with colluders,
        ``coalition``: the same ledger against the analyzer and the colluders)."""
        pseudo, realized = self.regret_curves()
        released = [r.params for r in self.records.values()]
        rows, coalition = self.round_rows()
        if coalition is not None:
            privacy = {**privacy, "coalition": {**coalition.summary(),
                                                "colluders": sum(row["attackers"] for row in rows)}}
        return RunResult(
            checkpoints=self.checkpoints,
            pseudo_regret=pseudo,
            realized_regret=realized,
            rounds=rows,
            privacy=privacy,
            reports=sum(q.n for q in released),
            protocol_bits=sum(q.n * q.bits for q in released),
            max_report_bits=max((q.bits for q in released), default=0),
            eliminated_at=list(eliminated_at),
            best_arm=best_arm,
            rejected={k: v for k, v in sorted((rejected or {}).items()) if v},
        )

    def round_rows(self) -> tuple[list[dict], PrivacyLedger | None]:
        """One row per released round; with colluders, also the coalition's ledger over them."""
        rows = []
        log2p = math.log(2 / self.p)
        ledger = None if self.coalition is None else self.coalition.new()
        for rid in sorted(self.records):
            r = self.records[rid]
            reward_sum, noise_sum, attackers = self.round_truth(rid)
            q = r.params
            row = {
                "round": rid,
                "batch": r.batch,
                "arm": r.arm,
                "n": q.n,
                "reports": r.reports,
                "epsilon": r.epsilon,
                "g": q.g,
                "tau": q.tau,
                "m": q.m,
                "bits": q.bits,
                "wrapped": r.wrapped,
                "estimate_sum": r.estimate,
                "true_sum": reward_sum,
                "noise": r.estimate - reward_sum,
                "noise_bound": q.sigma * math.sqrt(log2p) + q.h * log2p,
                "attackers": attackers,
            }
            if ledger is not None:
                event = self.coalition.event(q, r.reports, attackers)
                ledger.record(event)
                row["epsilon_coalition"] = ledger.event_epsilon(event)
            if q.g is not None:
                total_eta = noise_sum + round(r.central_noise * q.g)
                row["noise_encoded"] = total_eta
                row["decode_failure"] = abs(total_eta) > q.tau
            rows.append(row)
        return rows, ledger
