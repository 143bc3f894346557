"""The analyzer and the user population as sans-I/O parties, around a family's logic.

:class:`Analyzer` keeps what every family's server does the same way: which rounds are open, the
check of each release against its round *before* anything changes (a malformed release is refused
and the round stays open), and the ledger. :class:`Users` splits a plan's cohort into blocks of
:data:`~privbandit.protocol.primitives.seeding.USER_BLOCK` users (the unit a fleet hosts, each
with its own random streams), and applies dropouts and adversaries to any family's reports. The
intermediaries are :mod:`privbandit.protocol.spine.intermediary`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from privbandit.protocol.primitives.seeding import USER_BLOCK, stream
from privbandit.protocol.privacy import Ledger
from privbandit.protocol.spine.adversaries import Adversary, Block
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Plan, Record, Release, Reports, Round, Truth
from privbandit.protocol.spine.family import AnalyzerLogic, UserLogic
from privbandit.protocol.spine.intermediary import valid_entries


def check_release(rnd: Round, release: Release, runs: int) -> None:
    """Is this a release the round's rule can produce? Raises ProtocolError otherwise."""
    n = release.n_reports
    if not rnd.min_reports <= n <= rnd.expected:
        raise ProtocolError("bad-report-count", f"round {rnd.id}: {n} reports; expected "
                                                f"{rnd.min_reports}..{rnd.expected}")
    v = release.values
    if not isinstance(v, np.ndarray):
        raise ProtocolError("bad-release", f"round {rnd.id}: no values")
    if rnd.rule == "argmax":
        if v.shape != (runs, 1) or v.dtype.kind not in "iu" or v.min() < 0 or v.max() >= rnd.width:
            raise ProtocolError("bad-release", f"round {rnd.id}: an argmax is one index in 0..{rnd.width - 1} per run")
        return
    if rnd.rule == "sum":
        want = (runs, rnd.width) if rnd.segment is None else (runs, rnd.expected // rnd.segment, rnd.width)
        if v.shape != want:
            raise ProtocolError("wrong-shape", f"round {rnd.id}: a sum of shape {v.shape}, not {want}")
        if rnd.segment is not None:
            n = rnd.segment  # each segment's sum: a complete segment's reports (segments need complete rounds)
        if rnd.m is not None:
            if v.dtype.kind not in "iu" or v.min() < 0 or v.max() >= rnd.m:
                raise ProtocolError("out-of-range", f"round {rnd.id}: a sum outside Z_{rnd.m}")
        elif rnd.integer and v.dtype.kind not in "iu":
            raise ProtocolError("bad-type", f"round {rnd.id}: an integer sum of dtype {v.dtype}")
        elif not rnd.integer and (v.dtype.kind != "f" or not np.isfinite(v).all()):
            raise ProtocolError("out-of-range", f"round {rnd.id}: a sum that is not finite")
        else:
            lo = -np.inf if rnd.low is None else n * rnd.low
            hi = np.inf if rnd.high is None else n * rnd.high
            if v.min() < lo or v.max() > hi:
                raise ProtocolError("out-of-range", f"round {rnd.id}: a sum outside [{lo}, {hi}]")
        return
    want = (runs, n * rnd.width, 1) if rnd.messages else (runs, n, rnd.width)
    if v.shape != want:
        raise ProtocolError("wrong-shape", f"round {rnd.id}: {v.shape} reports, not {want}")
    ok, reason = valid_entries(rnd, v)
    if not ok.all():
        raise ProtocolError(reason, f"round {rnd.id}: {int((~ok).sum())} invalid reports")
    if rnd.rule == "pass":  # senders listed once each, in increasing order
        ids = release.user_ids
        if ids is None or ids.shape != (n,) or (n > 1 and not bool(np.all(ids[1:] > ids[:-1]))):
            raise ProtocolError("bad-release", f"round {rnd.id}: a pass-through release needs {n} senders, "
                                               f"increasing")


class Analyzer:
    """The server of one task: the family's learner (:class:`AnalyzerLogic`) behind the checks
    every family's server makes, and the ledger. It sees plans it made and releases; never a
    report, never ground truth, never the world seed (only its own key)."""

    def __init__(self, logic: AnalyzerLogic, ledger: Ledger, runs: int = 1):
        self.logic = logic
        self.ledger = ledger
        self.runs = runs
        self.open: dict[int, Round] = {}
        self.decoded: dict[int, Round] = {}  # rounds released and decoded: a repeat is checked against its rule

    def next_plans(self) -> list[Plan]:
        plans = self.logic.plans()
        for plan in plans:
            for rnd in plan.opens:
                self.open[rnd.id] = rnd
        return plans

    def awaited(self) -> set[int]:
        """The open rounds the logic still needs released (all of them, unless it says otherwise:
        an Anytime-Lazy-UCB array the horizon cut short is never released)."""
        awaiting = getattr(self.logic, "awaiting", None)
        return set(self.open) if awaiting is None else set(awaiting()) & set(self.open)

    @property
    def done(self) -> bool:
        return self.logic.done and not self.awaited()

    def abandoned(self) -> list[int]:
        """Once done: the rounds left open that will never be released (their users were served)."""
        return sorted(set(self.open) - self.awaited()) if self.done else []

    def check_repeat(self, release: Release) -> None:
        """A release of a round decoded already: a repeat the rule can produce is normal (an
        intermediary answers a re-announced plan with it); one it cannot is refused for what it is,
        as it would have been before the genuine one came (ProtocolError)."""
        check_release(self.decoded[release.round_id], release, self.runs)

    def on_release(self, release: Release) -> Record:
        rnd = self.open.get(release.round_id)
        if rnd is None:
            raise ProtocolError("unknown-round", f"no open round {release.round_id}")
        check_release(rnd, release, self.runs)
        body, spend = self.logic.on_release(rnd, release)
        del self.open[rnd.id]  # only now: a malformed release leaves the round open
        self.decoded[rnd.id] = rnd
        # A release may carry several events in different lanes (a central learner's tree leaf and
        # the optimizer calls it triggered); the record's ε is the first's, the release's own, and
        # only the first counts as releases.
        spends = list(spend) if isinstance(spend, (list, tuple)) else [spend]
        for k, s in enumerate(spends):
            self.ledger.record(s.event, s.lane, s.group, s.releases if k == 0 else 0)
        spend = spends[0]
        return Record(rnd.id, release.n_reports, self.ledger.event_epsilon(spend.event),
                      {"expected": rnd.expected, "bits": report_bits(rnd), **body})


def report_bits(rnd: Round) -> int:
    """Protocol bits of one report: ⌈log₂ m⌉ per residue, 64 per float, else the bound's bits."""
    if rnd.m is not None:
        return rnd.width * max(1, (rnd.m - 1).bit_length())
    if not rnd.integer or rnd.high is None:
        return 64 * rnd.width
    return rnd.width * max(1, int(max(abs(rnd.high), abs(rnd.low or 0))).bit_length() + (1 if (rnd.low or 0) < 0 else 0))


def blocks_of(plan: Plan) -> range:
    return range((plan.cohort + USER_BLOCK - 1) // USER_BLOCK)


class Users:
    """The users of one task: the family's :class:`UserLogic` over blocks of a plan's cohort, with
    simulated dropouts (exactly ``⌊q·size⌋`` of each block's users of a plan that collects, drawn
    from ``(seed, *prefix, "dropout", plan, block)``: served, never reporting) and an adversary."""

    def __init__(self, logic: UserLogic, seed: int, prefix: tuple = (), dropout_rate: float = 0.0,
                 adversary: Adversary | None = None):
        if not 0 <= dropout_rate < 1:
            raise ValueError(f"dropout_rate={dropout_rate} must lie in [0, 1)")
        self.logic = logic
        self.seed = seed
        self.prefix = prefix
        self.dropout_rate = dropout_rate
        self.adversary = adversary

    def stay(self, plan: Plan, block: int, size: int) -> np.ndarray | None:
        gone = int(self.dropout_rate * size)
        if not gone or not plan.joins:
            return None
        rng = stream(self.seed, *self.prefix, "dropout", plan.id, block)
        keep = np.ones(size, dtype=bool)
        keep[rng.choice(size, gone, replace=False)] = False
        return keep

    def serve(self, plan: Plan, blocks: Iterable[int] | None = None,
              rounds: dict[int, Round] | None = None) -> Iterator[tuple[list[Reports], list[Truth]]]:
        """Serve the plan to the given blocks of its cohort (all by default), one block at a time:
        yields each block's reports (one per round it reports into) and its truth, so a driver
        that passes them on at once holds one block, whatever the cohort. ``rounds``: the rounds
        the plan's reports go to (its own ``opens`` and any opened earlier), for adversaries."""
        for block in blocks_of(plan) if blocks is None else blocks:
            first = plan.first_user + block * USER_BLOCK
            size = min(USER_BLOCK, plan.cohort - block * USER_BLOCK)
            answer = self.logic.act(plan, block, first, size, self.stay(plan, block, size))
            attackers = 0
            bad = None if self.adversary is None else self.adversary.members(plan, block, size)
            reports = []
            for round_id, offsets, values, encoded in answer.reports:
                if bad is not None and bad[offsets].any():
                    rnd = (rounds or {}).get(round_id) or next(r for r in plan.opens if r.id == round_id)
                    mask = bad[offsets]
                    values = self.adversary.tamper(Block(plan, rnd, block, first, values, encoded, mask))
                    attackers += int(mask.sum())
                reports.append(Reports(round_id, plan.id, first + offsets, values))
            truths = []
            if answer.truth is not None:
                truth = answer.truth
                if self.adversary is not None:
                    truth = Truth(**{**truth.__dict__, "extras": {**truth.extras, "attackers": attackers}})
                truths.append(truth)
            yield reports, truths

    def respond(self, plan: Plan, blocks: Iterable[int] | None = None,
                rounds: dict[int, Round] | None = None) -> tuple[list[Reports], list[Truth]]:
        """:meth:`serve`'s blocks gathered: one Reports per (round, plan) and every truth (a fleet
        answers the blocks it hosts of a plan in one go)."""
        reports, truths = [], []
        for reps, block_truths in self.serve(plan, blocks, rounds):
            reports += reps
            truths += block_truths
        return merge_reports(reports), truths


def merge_reports(reports: list[Reports]) -> list[Reports]:
    """One Reports per (round, plan) for the in-process engine (a fleet sends one per block)."""
    if len(reports) < 2:
        return reports
    by: dict[tuple[int, int], list[Reports]] = {}
    for r in reports:
        by.setdefault((r.round_id, r.plan_id), []).append(r)
    return [parts[0] if len(parts) == 1 else
            Reports(k[0], k[1], np.concatenate([p.user_ids for p in parts]),
                    np.concatenate([p.values for p in parts], axis=1)) for k, parts in by.items()]
