"""The observer: joins ground truth (from users) with the analyzer's records into a task's results.

It is the only party that sees both sides, and it never feeds anything back into the protocol.
The in-process engine and the MQTT observer service fill the same :class:`Observer`, in whatever
order messages arrive, so both transports write the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from privbandit.protocol.spine.events import Record, Truth


def checkpoint_grid(horizon: int, points: int = 240) -> np.ndarray:
    """Counts of users at which regret curves are sampled: log-spaced and linear, always ending at T."""
    logs = np.geomspace(1, horizon, points // 2)
    lins = np.linspace(1, horizon, points // 2)
    return np.unique(np.concatenate([logs, lins, [horizon]]).round().astype(np.int64))


def checkpoints_in(checkpoints: np.ndarray, first: int, size: int) -> np.ndarray:
    """The checkpoints c (1-based counts of users served) with first < c ≤ first + size."""
    lo, hi = np.searchsorted(checkpoints, [first + 1, first + size + 1])
    return checkpoints[lo:hi]


@dataclass
class RunResult:
    """What one task (R stacked runs of one algorithm; R = 1 over MQTT) produced."""

    runs: list[int]
    checkpoints: np.ndarray
    pseudo: np.ndarray  # (R, C) cumulative pseudo-regret at the checkpoints
    realized: np.ndarray  # (R, C)
    rounds: list[dict]  # one row per released round (with "run" when R > 1)
    privacy: dict  # the ledger's summary (per user, per run; stacked runs share their releases)
    learner: list[dict]  # per run: what the learner ended with
    reports: int  # reports planned per run
    protocol_bits: int  # per run
    max_report_bits: int
    rejected: dict = field(default_factory=dict)
    records: int = 0  # releases decoded (a plan of many users is one; the ledger counts users)


class Observer:
    """Assembles per-block truths and per-round records, whatever order they arrive in."""

    def __init__(self, checkpoints: np.ndarray, runs: int = 1):
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        self.runs = runs
        self.truths: dict[tuple[int, int], Truth] = {}
        self.by_plan: dict[int, dict[int, Truth]] = {}  # plan → block → truth: rows look truths up per plan
        self.records: dict[int, Record] = {}

    def on_truth(self, truth: Truth) -> bool:
        """Keep a block's truth once (a restarted fleet may send it twice); True if new."""
        key = (truth.plan_id, truth.block)
        if key in self.truths:
            return False
        self.truths[key] = truth
        self.by_plan.setdefault(truth.plan_id, {})[truth.block] = truth
        return True

    def on_record(self, record: Record) -> bool:
        if record.round_id in self.records:
            return False
        self.records[record.round_id] = record
        return True

    def served(self) -> int:
        return sum(t.size for t in self.truths.values())

    def truths_of(self, plan_id: int) -> list[Truth]:
        """A plan's block truths, in block order."""
        blocks = self.by_plan.get(plan_id, {})
        return [blocks[b] for b in sorted(blocks)]

    def regret_curves(self, partial: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(R, C) pseudo- and realized regret at the checkpoints, from the blocks in serving order.
        ``partial``: a task still running (the dashboard): the curves as far as the users served
        without a gap, NaN after."""
        blocks = sorted((t for t in self.truths.values() if t.size), key=lambda t: t.first_user)
        shape = (self.runs, self.checkpoints.size)
        pseudo, realized = np.full(shape, np.nan), np.full(shape, np.nan)
        pseudo_before = np.zeros(self.runs)
        realized_before = np.zeros(self.runs)
        served = 0
        for b in blocks:
            if b.first_user != served:
                if partial:
                    break
                raise RuntimeError(f"users {served}..{b.first_user - 1} were never reported served")
            lo, hi = np.searchsorted(self.checkpoints, [b.first_user + 1, b.first_user + b.size + 1])
            pseudo[:, lo:hi] = pseudo_before[:, None] + b.pseudo_at
            realized[:, lo:hi] = realized_before[:, None] + b.realized_at
            pseudo_before = pseudo_before + b.pseudo
            realized_before = realized_before + b.realized
            served += b.size
        if served != self.checkpoints[-1] and not partial:
            raise RuntimeError(f"{served} of {self.checkpoints[-1]} users were reported served")
        return pseudo, realized

    def result(self, runs: list[int], privacy: dict, learner: list[dict],
               row: Callable[[Record, list[Truth]], dict | list[dict] | None],
               rejected: dict | None = None) -> RunResult:
        """The task's results; ``row`` is the family's ``rounds.csv`` row (or rows) of a released round."""
        pseudo, realized = self.regret_curves()
        rows = []
        for rid in sorted(self.records):
            rec = self.records[rid]
            made = row(rec, self.truths_of(rec.body.get("plan", rid)))
            # A row maker may give several rows for one record (an in-process block standing for
            # several rounds), each naming its own round, n and reports.
            for extra in [] if made is None else [made] if isinstance(made, dict) else made:
                extra = dict(extra)
                rows.append({"round": extra.pop("round", rid), "n": extra.pop("n", rec.body["expected"]),
                             "reports": extra.pop("reports", rec.n_reports), "epsilon": rec.epsilon,
                             "bits": rec.body["bits"], **extra})
        released = list(self.records.values())
        return RunResult(
            runs=list(runs), checkpoints=self.checkpoints, pseudo=pseudo, realized=realized, rounds=rows,
            privacy=privacy, learner=learner,
            reports=sum(r.body["expected"] for r in released),
            protocol_bits=sum(r.body["expected"] * r.body["bits"] for r in released),
            max_report_bits=max((r.body["bits"] for r in released), default=0),
            rejected={k: v for k, v in sorted((rejected or {}).items()) if v},
            records=len(released),
        )


PER_RUN = "_per_run"


def spread_per_run(result: RunResult) -> None:
    """Rows a family's row maker gave per stacked round with their per-run fields under
    :data:`PER_RUN` become one row per run, run by run: a stacked task then writes the rows that one
    task per run writes over MQTT, in the same order."""
    rows = []
    for i, run in enumerate(result.runs):
        for row in result.rounds:
            rows.append({**{k: v for k, v in row.items() if k != PER_RUN}, "run": run, **row[PER_RUN][i]})
    result.rounds = rows

