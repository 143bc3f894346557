"""An intermediary as a sans-I/O object: the rounds it collects, and what it releases of each.

One :class:`Intermediary` per intermediary party (the aggregator, a shuffler, ``shuffler-3``, …),
driven by the in-process engine or by its MQTT service. It holds no family code: a round says
everything it needs (:class:`~privbandit.protocol.spine.events.Round`).

- :meth:`Intermediary.open` a round, :meth:`Intermediary.join` plans into it (who may report);
- :meth:`Intermediary.receive` reports: a record is admitted only from a user a plan joined into
  the round, once per plan (a user reporting into two rounds of one plan at one intermediary is a
  duplicate), within the join's quota, and only if every entry is a valid value for the round; the
  rest are rejected with a reason, counted, and never disturb what was accepted;
- :meth:`Intermediary.ready` says which rounds can be released: complete, or (``final``) every
  joined user has answered and the reports that came meet the round's threshold (dropouts);
- :meth:`Intermediary.release` makes the release the round's rule allows, and closes the round.

Costs are proportional to the message, not to the cohort: a fleet's records arrive sorted, so a
message's own duplicates are found in one pass (sorting only when they are not), and a message of
consecutive ids, all valid and new, is admitted by slices, without a gather. Nor to the rounds
open: which rounds are ready or starved is decided again only for the rounds an event touched. An
integer sum is added up as its records are admitted (:func:`summed`): its reports are not kept; any
other round writes each record at its slot in one array, released as it is. Who reported is a count
while the records come in slot order (the in-process engine's blocks), a flag per user only after.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from privbandit.protocol.primitives.encoding import check_modulus
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Reports, Round


def summed(rnd: Round) -> bool:
    """An integer sum (or argmax of sums) computed here: exact in any order, so each message's
    records are added as they are admitted, and neither kept nor sorted. At T = 10⁸ a round holds
    2²⁵ reports: keeping them (values and slots, 512 MiB) and gathering them into one array at the
    release cost the aggregator more than checking their MACs, and sorting them 16 % of its time."""
    return rnd.rule in ("sum", "argmax") and rnd.integer and rnd.secagg is None and rnd.segment is None


def add_sums(total: np.ndarray | None, values: np.ndarray, m: int | None) -> np.ndarray:
    """``total`` (R, width) plus the entrywise sums of ``values`` (R, n, width) over n: mod m in
    chunks whose sum of residues below m stays below 2⁶³ (the bound of
    :func:`~privbandit.protocol.primitives.encoding.modular_sum`), else in int64, which wraps
    exactly as one sum over every record would. A modulus above 2⁶² is refused (EncodingError)."""
    values = values.astype(np.int64, copy=False)
    total = np.zeros((values.shape[0], values.shape[2]), np.int64) if total is None else total
    if m is None:
        return total + values.sum(axis=1)
    step = max(1, (2**63 - 1) // check_modulus(m) - 1)
    for lo in range(0, values.shape[1], step):
        total = (total + values[:, lo:lo + step].sum(axis=1) % m) % m
    return total


@dataclass
class _Part:
    """One join's slots in a round: who of the plan's range reported, and what, each record written
    at its slot as its message brings it; for a :func:`summed` round only their running sum."""

    join: Join
    named: np.ndarray | None = None  # (count,) bool: who may report, when the join names its users
    # (R, count, width), the records' axis outermost in memory (the layout the gathers values[:, cand]
    # make, on which a float sum's rounding depends): allocated at the first record, and only the
    # pages of the slots written are ever touched. One array, not a list of messages to concatenate
    # at the release: a round of n kept reports costs 8 bytes per entry once, not twice.
    kept: np.ndarray | None = None
    accepted: int = 0
    sum: np.ndarray | None = None  # (R, width): a summed round's accepted records, added up (mod m)
    # Who reported. While the records came in slot order from slot 0 without a gap (the in-process
    # engine's blocks), the count of that prefix says it; the (count,) mask is made only once one
    # did not (a fleet's blocks out of order, dropouts, a duplicate): a 2²⁵-report round in order
    # then holds no 32 MiB of flags.
    filled: int = 0
    mask: np.ndarray | None = None

    @property
    def received(self) -> np.ndarray:
        """(count,) bool: who of the join's range reported (made from the prefix on first use)."""
        if self.mask is None:
            self.mask = np.zeros(self.join.count, dtype=bool)
            self.mask[:self.filled] = True
        return self.mask

    def free(self, span: slice) -> bool:
        """Has no slot of ``span`` reported yet?"""
        if self.mask is None:
            return span.start >= self.filled
        return not self.mask[span].any()

    def mark(self, span: slice) -> None:
        """The slots of ``span`` reported."""
        if self.mask is None and span.start == self.filled:
            self.filled = span.stop
        else:
            self.received[span] = True

    def keep(self, rnd: Round, slots: np.ndarray | slice, values: np.ndarray) -> None:
        """Take in accepted records at their slots (copied: the sender keeps ``values``)."""
        if summed(rnd):
            self.sum = add_sums(self.sum, values, rnd.m)
            return
        if self.kept is None:
            runs, _, width = values.shape
            dtype = np.int64 if rnd.integer else np.float64
            self.kept = np.empty((self.join.count, runs, width), dtype).transpose(1, 0, 2)
        self.kept[:, slots] = values

    def collected(self) -> np.ndarray | None:
        """The values of every accepted record, in slot order: the part's own array (not a copy)
        when every slot reported; None before any record."""
        if self.kept is None or self.accepted == self.join.count:
            return self.kept
        return self.kept[:, self.reporters()]

    def reporters(self) -> np.ndarray:
        """The slots of every accepted record, increasing (a fresh array)."""
        if self.accepted == self.join.count:
            return np.arange(self.join.count)
        if self.mask is None:
            return np.arange(self.filled)
        return np.flatnonzero(self.mask)


@dataclass
class _Collecting:
    round: Round
    parts: dict[int, _Part] = field(default_factory=dict)  # plan id → its part
    received: int = 0
    joined: int = 0  # reports promised by the joins so far

    @property
    def complete(self) -> bool:
        return self.received >= self.round.expected


def valid_entries(rnd: Round, values: np.ndarray) -> tuple[np.ndarray, str]:
    """Per record (axis 1 of ``values`` (R, n, width)): are all its entries valid for the round?
    Returns the mask and the reason for the invalid ones."""
    n = values.shape[1]
    if rnd.integer and values.dtype.kind not in "iu":
        return np.zeros(n, dtype=bool), "bad-type"
    if not rnd.integer and values.dtype.kind != "f":
        return np.zeros(n, dtype=bool), "bad-type"
    if rnd.m is not None:
        ok = (values >= 0) & (values < rnd.m)
    elif rnd.low is not None and rnd.high is not None and (rnd.integer or math.isfinite(rnd.low + rnd.high)):
        # both bounds, finite for floats: NaN and ±inf fail one comparison, so no isfinite pass
        # (a one-report round per user checks each report twice: here and at the analyzer)
        ok = values >= rnd.low
        ok &= values <= rnd.high
    else:
        ok = np.ones(values.shape, dtype=bool) if rnd.integer else np.isfinite(values)
        if rnd.low is not None:
            ok &= values >= rnd.low
        if rnd.high is not None:
            ok &= values <= rnd.high
    return ok.all(axis=(0, 2)), "out-of-range"


def in_window(rnd: Round, values: np.ndarray) -> np.ndarray:
    """Residues whose representative in ``[lo, hi]`` mod m exists, per record."""
    lo, hi = rnd.window
    return (((values.astype(np.int64) - lo) % rnd.m) <= hi - lo).all(axis=(0, 2))


def first_of_each(ids: np.ndarray) -> np.ndarray:
    """Index of the first record of each id, in message order (a fleet sends ids increasing, so the
    common case is one comparison pass)."""
    if ids.size < 2 or bool(np.all(ids[1:] > ids[:-1])):
        return np.arange(ids.size)
    _, first = np.unique(ids, return_index=True)
    first.sort()
    return first


class Intermediary:
    """The rounds one intermediary party collects. ``runs``: R, the runs axis of every report.
    ``shuffle_keys``: each run's permutation key (reproducible runs), or None: the OS CSPRNG."""

    def __init__(self, name: str, runs: int = 1, shuffle_keys: list[int] | None = None,
                 rejected: Counter | None = None):
        self.name = name
        self.runs = runs
        self.shuffle_keys = shuffle_keys
        self.rejected: Counter[str] = Counter() if rejected is None else rejected
        self.rounds: dict[int, _Collecting] = {}
        self.closed: set[int] = set()
        self.plan_joins: dict[int, list[int]] = {}  # plan → the rounds it joined here
        # A plan joining more than one round here: who of its cohort reported, into any of them.
        self.plan_seen: dict[int, np.ndarray] = {}
        self.plan_first: dict[int, int] = {}
        self.answered_joins: set[tuple[int, int]] = set()  # (round, plan): every joined user answered
        # Whether a round is ready or starved changes only when a plan joins it, a report
        # is admitted or a join is answered: those rounds are decided again, not every open one on
        # every message (that scan grew with the rounds open, and so did the cost of each message).
        self._touched: set[int] = set()
        self._ready: set[int] = set()
        self._starved: set[int] = set()

    # --- rounds and joins ----------------------------------------------------------------------
    def open(self, rnd: Round) -> None:
        if rnd.intermediary != self.name:
            raise ProtocolError("wrong-intermediary", f"round {rnd.id} is collected by {rnd.intermediary}")
        if rnd.id in self.rounds or rnd.id in self.closed:
            return  # a re-announced plan
        self.rounds[rnd.id] = _Collecting(rnd)  # neither ready nor starved before a plan joins it

    def join(self, plan: Plan, join: Join) -> None:
        state = self.rounds.get(join.round_id)
        if state is None:
            if join.round_id in self.closed:
                return
            raise ProtocolError("unknown-round", f"plan {plan.id} joins round {join.round_id}, never opened here")
        if plan.id in state.parts:
            return  # a re-announced plan
        if not (plan.first_user <= join.first and join.first + join.count <= plan.first_user + plan.cohort
                and 0 <= join.reports <= join.count):
            raise ProtocolError("bad-join", f"plan {plan.id}: {join} lies outside its cohort")
        if state.joined + join.reports > state.round.expected:
            raise ProtocolError("bad-join", f"round {join.round_id}: joins promise more than {state.round.expected} reports")
        named = None
        if join.users is not None:
            named = np.zeros(join.count, dtype=bool)
            named[join.members() - join.first] = True
        state.parts[plan.id] = _Part(join, named)
        state.joined += join.reports
        self._touched.add(join.round_id)
        joined = self.plan_joins.setdefault(plan.id, [])
        joined.append(join.round_id)
        if len(joined) == 2:  # joins come with the plan, before any of its reports
            self.plan_seen[plan.id] = np.zeros(plan.cohort, dtype=bool)
            self.plan_first[plan.id] = plan.first_user

    def open_plan(self, plan: Plan) -> None:
        """Open the plan's rounds collected here and join its users into them."""
        for rnd in plan.opens:
            if rnd.intermediary == self.name:
                self.open(rnd)
        for j in plan.joins:
            if j.round_id in self.rounds or j.round_id in self.closed:
                self.join(plan, j)

    def answered(self, plan_id: int, round_id: int | None = None) -> None:
        """Every user the plan joined into the round (all its rounds here, by default) has answered
        or never will: the missing ones dropped out."""
        for rid in self.plan_joins.get(plan_id, ()) if round_id is None else (round_id,):
            self.answered_joins.add((rid, plan_id))
            self._touched.add(rid)

    def join_of(self, round_id: int, plan_id: int) -> Join | None:
        state = self.rounds.get(round_id)
        part = None if state is None else state.parts.get(plan_id)
        return None if part is None else part.join

    # --- reports -------------------------------------------------------------------------------
    def receive(self, reports: Reports) -> int:
        """Admit a message's records; returns how many were accepted. Never raises on bad input."""
        ids = np.asarray(reports.user_ids)
        n = ids.size
        if reports.round_id in self.closed:
            self.rejected["round-closed"] += n
            return 0
        state = self.rounds.get(reports.round_id)
        part = None if state is None else state.parts.get(reports.plan_id)
        if part is None:
            self.rejected["not-joined" if state is not None else "unknown-round"] += n
            return 0
        rnd, join = state.round, part.join
        values = np.asarray(reports.values)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or values.shape != (self.runs, n, rnd.width):
            self.rejected["wrong-shape"] += n
            return 0
        idx = ids.astype(np.int64) - join.first
        ok = (idx >= 0) & (idx < join.count)
        self.rejected["not-in-cohort"] += n - int(np.count_nonzero(ok))
        if part.named is not None:  # in the range, but not a user the join names
            named = ok.copy()
            named[ok] = part.named[idx[ok]]
            self.rejected["not-named"] += int(np.count_nonzero(ok & ~named))
            ok = named
        valid, reason = valid_entries(rnd, values)
        self.rejected[reason] += int(np.count_nonzero(ok & ~valid))
        ok &= valid
        if rnd.window is not None and ok.any():
            fits = np.zeros(n, dtype=bool)
            fits[ok] = in_window(rnd, values[:, ok])
            self.rejected["out-of-window"] += int((ok & ~fits).sum())
            ok = fits
        seen = self.plan_seen.get(reports.plan_id)
        if n and self._admit_run(reports, state, part, idx, values, ok, seen):
            return n
        cand = np.flatnonzero(ok)
        cand = cand[first_of_each(idx[cand])]
        if seen is None:  # the plan's only round here: the part's own record of who reported
            fresh = ~part.received[idx[cand]]
        else:
            fresh = ~seen[ids[cand].astype(np.int64) - self.plan_first[reports.plan_id]]
        self.rejected["duplicate"] += int(ok.sum()) - int(fresh.sum())
        cand = cand[fresh]
        room = join.reports - part.accepted
        if cand.size > room:
            self.rejected["over-quota"] += cand.size - room
            cand = cand[:room]
        slots = idx[cand]
        part.received[slots] = True
        if cand.size:
            part.keep(rnd, slots, values[:, cand])
        part.accepted += cand.size
        state.received += cand.size
        if cand.size:
            self._touched.add(reports.round_id)
        if seen is not None:
            seen[ids[cand].astype(np.int64) - self.plan_first[reports.plan_id]] = True
        return int(cand.size)

    def _admit_run(self, reports: Reports, state: _Collecting, part: _Part, idx: np.ndarray, values: np.ndarray,
                   ok: np.ndarray, seen: np.ndarray | None) -> bool:
        """A fleet's message, admitted whole by slices: every record valid, slots increasing without
        a gap, none reported before, within the quota. Leaves the state and counts receive's gathers
        would leave; returns False, having changed nothing, for any other message."""
        n = idx.size
        low = int(idx[0])
        if (int(idx[-1]) - low != n - 1 or n > part.join.reports - part.accepted or not bool(ok.all())
                or not (n == 1 or bool(np.all(idx[1:] > idx[:-1])))):  # n − 1 apart and increasing: consecutive
            return False
        span = slice(low, low + n)
        if seen is None:
            if not part.free(span):
                return False
        else:  # the plan reports into other rounds here too: who of its cohort has reported, anywhere
            at = part.join.first - self.plan_first[reports.plan_id] + low
            if seen[at:at + n].any():
                return False
            seen[at:at + n] = True
        self.rejected["duplicate"] += 0  # receive's counter keys, zeros included, whichever way it went
        part.mark(span)
        part.keep(state.round, span, values)
        part.accepted += n
        state.received += n
        self._touched.add(reports.round_id)
        return True

    # --- releases ------------------------------------------------------------------------------
    def fully_answered(self, state: _Collecting) -> bool:
        rid = state.round.id
        return state.joined == state.round.expected and all((rid, p) in self.answered_joins for p in state.parts)

    def _decide(self) -> None:
        """Decide again whether each touched round is ready or starved (the rest have not changed)."""
        for rid in self._touched:
            state = self.rounds.get(rid)
            if state is None:
                continue
            done = state.complete
            answered = not done and self.fully_answered(state)
            enough = state.received >= state.round.min_reports
            (self._ready.add if done or (answered and enough) else self._ready.discard)(rid)
            (self._starved.add if answered and not enough else self._starved.discard)(rid)
        self._touched.clear()

    def ready(self) -> list[int]:
        """Rounds to release now: complete ones, and fully answered ones whose reports reach the
        round's threshold (the missing users dropped out)."""
        self._decide()
        return sorted(self._ready)

    def starved(self) -> list[int]:
        """Fully answered rounds below their threshold: nothing can ever release them."""
        self._decide()
        return sorted(self._starved)

    def received(self, round_id: int) -> int:
        return self.rounds[round_id].received

    def counts(self) -> dict[str, int]:
        """What this party holds: rounds open, the complete ones among them (a secure sum still
        being computed), and the reports the open rounds hold."""
        held = self.rounds.values()
        return {"open": len(self.rounds), "complete": sum(s.complete for s in held),
                "reports": sum(s.received for s in held)}

    def close(self, round_id: int) -> None:
        """Close a round released elsewhere (a secure aggregation round's protocol) or failed."""
        self.rounds.pop(round_id, None)
        self.closed.add(round_id)
        self._forget(round_id)

    def _forget(self, round_id: int) -> None:
        for book in (self._touched, self._ready, self._starved):
            book.discard(round_id)

    def release(self, round_id: int, partial: bool = False) -> Release:
        """Release a round by its rule and close it. ``partial``: over the reports that came (at
        least the threshold), else only a complete round."""
        state = self.rounds.get(round_id)
        if state is None:
            raise ProtocolError("unknown-round", f"no open round {round_id}")
        rnd = state.round
        n = state.received
        if n < rnd.expected and not partial:
            raise ProtocolError("incomplete-round", f"round {round_id}: {n} of {rnd.expected}")
        if n < rnd.min_reports:
            raise ProtocolError("below-threshold", f"round {round_id}: {n} of {rnd.expected} reports, "
                                f"threshold {rnd.min_reports}; nothing released")
        parts = [state.parts[p] for p in sorted(state.parts)]
        if summed(rnd):  # added up as admitted (exact in any order): nothing to gather or sort
            values = None
        else:  # a float sum, a shuffle (its keyed permutation applies to the order), a pass: slot order
            kept = [v for v in (p.collected() for p in parts) if v is not None]
            dtype = np.int64 if rnd.integer else np.float64
            # One part's own array as it is (a concatenation would copy it, keeping its layout).
            values = (kept[0] if len(kept) == 1 else
                      np.concatenate(kept or [np.zeros((self.runs, 0, rnd.width), dtype)], axis=1))
        if rnd.rule == "sum":
            out = Release(round_id, n, self._sum(rnd, parts, values))
        elif rnd.rule == "argmax":
            lo, _ = rnd.decode
            signed = (self._sum(rnd, parts, values) - lo) % rnd.m + lo
            out = Release(round_id, n, signed.argmax(axis=1)[:, None].astype(np.int64))
        elif rnd.rule == "shuffle":
            out = Release(round_id, n, self._shuffle(rnd, values))
        else:
            ids = [p.reporters() for p in parts]
            for p, slots in zip(parts, ids):
                slots += p.join.first  # a fresh array each: the user ids in place
            ids = ids[0] if len(ids) == 1 else np.concatenate(ids)
            out = Release(round_id, n, values, user_ids=ids)
        del self.rounds[round_id]
        self.closed.add(round_id)
        self._forget(round_id)
        for pid in state.parts:  # a plan whose rounds here are all closed needs no bookkeeping
            self.answered_joins.discard((round_id, pid))
            if all(r in self.closed for r in self.plan_joins.get(pid, ())):
                for book in (self.plan_joins, self.plan_seen, self.plan_first):
                    book.pop(pid, None)
        return out

    def _sum(self, rnd: Round, parts: list[_Part], values: np.ndarray | None) -> np.ndarray:
        """Entrywise sums over the reports, per run: a secure round's by its protocol, a summed
        round's from its parts' running sums, a float round's over ``values`` (slot order)."""
        if rnd.secagg is not None:
            return self._secure_sum(rnd, parts)
        if rnd.segment is not None:  # each segment's own sum (integers: exact), (R, segments, width)
            return values.reshape(self.runs, -1, rnd.segment, rnd.width).sum(axis=2)
        if summed(rnd):
            total = np.zeros((self.runs, rnd.width), np.int64)
            for p in parts:
                if p.sum is not None:
                    total = add_sums(total, p.sum[:, None, :], rnd.m)
            return total
        return values.sum(axis=1)

    def _secure_sum(self, rnd: Round, parts: list[_Part]) -> np.ndarray:
        """The same modular sum by a real Bonawitz et al. round among the joined users (those the
        joins name, else their whole ranges); those whose report never came take part in the key
        rounds and drop out (the recovery path)."""
        from privbandit.protocol.primitives.secagg.driver import secure_sum
        from privbandit.protocol.primitives.secagg.errors import SecAggAbort

        if self.runs != 1:
            raise ProtocolError("secagg-shape", f"round {rnd.id}: secure aggregation runs one run")
        offsets = [p.join.members() - p.join.first for p in parts]  # the joins' named users, else their ranges
        ids = np.concatenate([p.join.first + o for p, o in zip(parts, offsets)])
        got = np.concatenate([p.received[o] for p, o in zip(parts, offsets)])
        vals = np.zeros((ids.size, rnd.width), dtype=np.int64)  # the dropouts' entries are never read
        at = 0
        for p, o in zip(parts, offsets):
            v = p.collected()
            if v is not None:
                slots = p.reporters()  # a slot's place among the part's members (every admitted slot is one)
                vals[at + np.searchsorted(o, slots)] = v[0]
            at += o.size
        try:
            total = secure_sum(ids, vals, rnd.m, mode=rnd.secagg, round_id=rnd.id, dropped=ids[~got],
                               degree=rnd.secagg_degree, threshold=rnd.secagg_threshold)
        except SecAggAbort as exc:
            raise ProtocolError("secagg-abort", f"round {rnd.id}: {exc}") from None
        return total.reshape(1, rnd.width)

    def _shuffle(self, rnd: Round, values: np.ndarray) -> np.ndarray:
        if rnd.messages:  # every entry a message: one permutation of all n·width of them
            flat = values.reshape(self.runs, -1, 1)
            return np.stack([flat[r, self.rng(r, rnd.id).permutation(flat.shape[1])] for r in range(self.runs)])
        out = np.empty_like(values)
        bounds = np.cumsum((0,) + (rnd.groups or (rnd.width,)))
        n = values.shape[1]
        for r in range(self.runs):
            rng = self.rng(r, rnd.id)
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                if rnd.segment is None:
                    order = rng.permutation(n)
                else:  # each segment permuted on its own (Fisher–Yates per row), left in place
                    seg = rnd.segment
                    order = (rng.permuted(np.tile(np.arange(seg), (n // seg, 1)), axis=1)
                             + np.arange(0, n, seg)[:, None]).ravel()
                out[r, :, lo:hi] = values[r, order, lo:hi]
        return out

    def rng(self, run: int, round_id: int) -> np.random.Generator:
        """Run ``run``'s permutation stream for a round: from its key, or from the OS CSPRNG."""
        if self.shuffle_keys is None:
            return np.random.default_rng(int.from_bytes(os.urandom(32), "little"))
        return stream(self.shuffle_keys[run], "shuffle", round_id)
