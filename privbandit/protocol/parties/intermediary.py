"""The ideal intermediary: collects one round's reports and releases what the trust model allows.

- ``modular-sum``: the secure aggregator's ideal functionality, ``(Σ y_i) mod m`` and nothing else.
  Real pairwise masking will implement the same release; this is the seam.
- ``pass-through``: the local model, where the server sees every (attributable) report.

Reports are admitted only from the round's cohort and count once; anything else is rejected with
a reason, counted, and does not disturb what was already accepted. Where the trust model lets the
intermediary see reports, ``window`` (the slack B of :mod:`privbandit.protocol.adversaries.defences`)
also rejects residues outside ``[−B, g + B]`` as ``out-of-window``: a rejected attacker then counts
exactly like a dropout.

A round whose cohort did not all report (dropouts) is released over the reports that arrived only
when asked to (``partial=True``: a deadline passed, or the simulation knows nobody else is coming)
and only if at least :func:`release_threshold` of them did: the same ``⌊2n/3⌋ + 1`` survivors a
complete-graph secure aggregation needs, so the ideal functionality and the real protocol release
in the same cases.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from privbandit.protocol.adversaries.defences import in_window
from privbandit.protocol.events import Release, Reports, RoundPlan
from privbandit.protocol.mechanisms.base import Mechanism


class ProtocolError(Exception):
    """A message the protocol cannot accept. ``reason`` is a short, countable key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def release_threshold(cohort: int) -> int:
    """``⌊2n/3⌋ + 1``: fewest reports a partial round is released with (secagg.graph's rule)."""
    from privbandit.protocol.secagg.graph import default_threshold

    return min(cohort, default_threshold(cohort))


class Intermediary:
    def __init__(self, plan: RoundPlan, mechanism: Mechanism, rejected: Counter | None = None,
                 window: int | None = None):
        if not plan.collect:
            raise ProtocolError("not-collected", f"round {plan.round_id} is never aggregated")
        self.plan = plan
        self.mechanism = mechanism
        self.received = np.zeros(plan.cohort, dtype=bool)
        modular = plan.params.m is not None
        self.values = np.zeros(plan.cohort, dtype=np.int64 if modular else np.float64)
        self.rejected: Counter[str] = Counter() if rejected is None else rejected
        self.window = window if modular else None  # raw rewards are always checked against [0, 1]

    @property
    def complete(self) -> bool:
        return bool(self.received.all())

    def receive(self, reports: Reports) -> int:
        """Admit a batch of records; returns how many were accepted. Never raises on bad records."""
        if reports.round_id != self.plan.round_id:
            self.rejected["wrong-round"] += len(reports.user_ids)
            return 0
        idx = np.asarray(reports.user_ids, dtype=np.int64) - self.plan.first_user
        values = np.asarray(reports.values)
        ok = (idx >= 0) & (idx < self.plan.cohort)
        self.rejected["not-in-cohort"] += int((~ok).sum())
        ok &= self._valid_values(values, ok)
        cand, vals = idx[ok], values[ok]
        # A report counts once: keep the first record of each id in this batch, then drop ids
        # already received. The bincount check keeps the honest case (no repeats) O(n).
        if cand.size and np.bincount(cand, minlength=self.plan.cohort).max() > 1:
            _, first = np.unique(cand, return_index=True)
            first.sort()
            cand, vals = cand[first], vals[first]
        fresh = ~self.received[cand]
        cand, vals = cand[fresh], vals[fresh]
        self.rejected["duplicate"] += int(ok.sum()) - cand.size
        self.received[cand] = True
        self.values[cand] = vals
        return int(cand.size)

    def _valid_values(self, values: np.ndarray, admitted: np.ndarray) -> np.ndarray:
        """Residues must lie in Z_m; raw rewards in [0, 1]. Counts only admitted records."""
        m = self.plan.params.m
        if m is not None and values.dtype.kind not in "iu":
            self.rejected["bad-type"] += int(admitted.sum())
            return np.zeros(values.size, dtype=bool)
        if m is not None:
            ok = (values >= 0) & (values < m)
        else:
            ok = np.isfinite(values) & (values >= 0) & (values <= 1)
        self.rejected["out-of-range"] += int((admitted & ~ok).sum())
        if self.window is not None:
            fits = np.zeros(values.size, dtype=bool)
            fits[ok] = in_window(values[ok], self.plan.params, self.window)
            self.rejected["out-of-window"] += int((admitted & ok & ~fits).sum())
            ok = fits
        return ok

    def _require_enough(self, partial: bool) -> int:
        n, cohort = int(self.received.sum()), self.plan.cohort
        if n == cohort:
            return n
        if not partial:
            raise ProtocolError("incomplete-round", f"round {self.plan.round_id}: {n} of {cohort}")
        t = release_threshold(cohort)
        if n < t:
            raise ProtocolError("below-threshold", f"round {self.plan.round_id}: {n} of {cohort} reports, "
                                                   f"threshold {t}; nothing released")
        return n

    def release(self, partial: bool = False) -> Release:
        """The round's release: of the whole cohort, or with ``partial`` of the reports that came."""
        n = self._require_enough(partial)
        values = self.values[self.received]
        if self.mechanism.intermediary == "pass-through":
            return Release(round_id=self.plan.round_id, n_reports=n, reports=values)
        value = self.mechanism.aggregate(values, self.plan.params)
        return Release(round_id=self.plan.round_id, n_reports=n, value=value)
