"""The intermediary's fast admission gives what the gathering admission gave, record for record.

A message of consecutive ids, all valid and new and within the quota, is admitted by slices
(``Intermediary._admit_run``), and an integer sum is added up as its records come instead of kept
and gathered at the release. ``Frozen`` is the intermediary's ``receive`` and ``release`` as they
were before (commit 5c82b88), kept here as the reference; both are driven by seeded random
sessions of fleet-like messages (consecutive runs, whole blocks replayed, runs overlapping earlier
ones, ids outside the join, bad values, a run past the quota, shuffled ids) into plans that join
one round or several, under every rule, and must agree on every return value, every refusal count
(zero-valued counter keys included: they reach the observer's stats) and every release.
"""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.protocol.primitives.encoding import EncodingError, modular_sum
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Reports, Round
from privbandit.protocol.spine.intermediary import Intermediary, first_of_each, in_window, valid_entries


class Frozen(Intermediary):
    """receive and release as they were before the fast admission and the running sums (and its
    parts' storage: slots and values per message, gathered at the release)."""

    def _stored(self, round_id: int, plan_id: int) -> tuple[list, list]:
        return self.__dict__.setdefault("stored", {}).setdefault((round_id, plan_id), ([], []))

    def _collected(self, round_id: int, plan_id: int, ordered: bool):
        slot_list, value_list = self._stored(round_id, plan_id)
        if not slot_list:
            return np.zeros(0, np.int64), None
        slots = np.concatenate(slot_list)
        values = np.concatenate(value_list, axis=1)
        if ordered and slots.size > 1 and not bool(np.all(slots[1:] > slots[:-1])):
            order = np.argsort(slots, kind="stable")
            slots, values = slots[order], values[:, order]
        return slots, values

    def receive(self, reports: Reports) -> int:
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
        self.rejected["not-in-cohort"] += int((~ok).sum())
        valid, reason = valid_entries(rnd, values)
        self.rejected[reason] += int((ok & ~valid).sum())
        ok &= valid
        if rnd.window is not None and ok.any():
            fits = np.zeros(n, dtype=bool)
            fits[ok] = in_window(rnd, values[:, ok])
            self.rejected["out-of-window"] += int((ok & ~fits).sum())
            ok = fits
        cand = np.flatnonzero(ok)
        cand = cand[first_of_each(idx[cand])]
        seen = self.plan_seen.get(reports.plan_id)
        if seen is None:
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
            slot_list, value_list = self._stored(reports.round_id, reports.plan_id)
            slot_list.append(slots)
            value_list.append(values[:, cand])
        part.accepted += cand.size
        state.received += cand.size
        if cand.size:
            self._touched.add(reports.round_id)
        if seen is not None:
            seen[ids[cand].astype(np.int64) - self.plan_first[reports.plan_id]] = True
        return int(cand.size)

    def release(self, round_id: int, partial: bool = False) -> Release:
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
        exact = rnd.rule in ("sum", "argmax") and rnd.integer and rnd.secagg is None
        got = [self._collected(round_id, p, ordered=not exact) for p in sorted(state.parts)]
        dtype = np.int64 if rnd.integer else np.float64
        values = np.concatenate([v for _, v in got if v is not None] or [np.zeros((self.runs, 0, rnd.width), dtype)],
                                axis=1).astype(dtype, copy=False)
        if rnd.rule == "sum":
            out = Release(round_id, n, self._frozen_sum(rnd, values))
        elif rnd.rule == "argmax":
            lo, _ = rnd.decode
            signed = (self._frozen_sum(rnd, values) - lo) % rnd.m + lo
            out = Release(round_id, n, signed.argmax(axis=1)[:, None].astype(np.int64))
        elif rnd.rule == "shuffle":
            out = Release(round_id, n, self._shuffle(rnd, values))
        else:
            ids = np.concatenate([p.join.first + slots for p, (slots, _) in zip(parts, got)])
            out = Release(round_id, n, values, user_ids=ids)
        del self.rounds[round_id]
        self.closed.add(round_id)
        self._forget(round_id)
        for pid in state.parts:
            self.answered_joins.discard((round_id, pid))
            if all(r in self.closed for r in self.plan_joins.get(pid, ())):
                for book in (self.plan_joins, self.plan_seen, self.plan_first):
                    book.pop(pid, None)
        return out

    def _frozen_sum(self, rnd: Round, values: np.ndarray) -> np.ndarray:
        if rnd.m is not None:
            return np.array([[modular_sum(values[r, :, k], rnd.m) for k in range(rnd.width)]
                             for r in range(self.runs)], dtype=np.int64)
        return values.sum(axis=1)


KINDS = [  # (rule, integer, m, low, high, window, decode)
    ("sum", True, 97, None, None, None, None),
    ("sum", True, 2**62, None, None, None, None),  # chunks of one residue: the running sum reduces each
    ("sum", True, 2**40, None, None, (-5, 2**39), None),
    ("sum", True, None, -2**62, 2**62, None, None),  # int64 sums that wrap, as one sum over all would
    ("sum", False, None, 0.0, 1.0, None, None),
    ("argmax", True, 1009, None, None, None, (-100, 900)),
    ("pass", True, 97, None, None, None, None),
    ("shuffle", True, 97, None, None, None, None),
]


def _release_key(rel):
    return rel.round_id, rel.n_reports, rel.values.tolist(), None if rel.user_ids is None else rel.user_ids.tolist()


def _values(rng, rnd: Round, runs: int, n: int, bad: bool) -> np.ndarray:
    shape = (runs, n, rnd.width)
    if not rnd.integer:
        x = rng.random(shape)
        if bad:
            x.flat[rng.integers(0, x.size)] = rng.choice([np.nan, 1.5, -0.1])
        return x
    if rnd.m is not None:
        x = rng.integers(0, rnd.m, shape, dtype=np.int64)
        if bad:
            x.flat[rng.integers(0, x.size)] = rng.choice([-1, rnd.m])
        return x
    return rng.integers(int(rnd.low), int(rnd.high), shape, dtype=np.int64, endpoint=True)


def _session(seed: int, steps: int) -> dict:
    rng = np.random.default_rng(seed)
    runs = int(rng.integers(1, 3))
    keys = [int(k) for k in rng.integers(0, 2**62, runs)]
    new, old = Intermediary("aggregator", runs, keys), Frozen("aggregator", runs, keys)
    boxes = (new, old)
    plans: list[Plan] = []
    next_round = next_user = 0
    seen = {"fast": 0, "released": 0, "refused": 0}
    fast = Intermediary._admit_run

    def counting(self, *a):  # how often the fast path admitted a message: the session must exercise it
        took = fast(self, *a)
        seen["fast"] += took
        return took

    Intermediary._admit_run = counting
    try:
        for _ in range(steps):
            event = rng.choice(["plan", "report", "report", "report", "report", "report", "release"])
            if event == "plan" or not plans:
                cohort = int(rng.integers(1, 400))
                rules = [KINDS[int(rng.integers(len(KINDS)))] for _ in range(int(rng.integers(1, 3)))]
                opens, joins = [], []
                for rule, integer, m, low, high, window, decode in rules:
                    count = int(rng.integers(1, cohort + 1))
                    first = next_user + int(rng.integers(0, cohort - count + 1))
                    reports = count if rng.random() < 0.7 else int(rng.integers(1, count + 1))
                    threshold = None if rng.random() < 0.5 else int(rng.integers(1, reports + 1))
                    width = int(rng.integers(1, 4))
                    opens.append(Round(next_round, "aggregator", rule, reports, width=width, integer=integer, m=m,
                                       low=low, high=high, window=window, threshold=threshold, decode=decode))
                    joins.append(Join(next_round, first, count, reports))
                    next_round += 1
                plan = Plan(len(plans), next_user, cohort, opens=tuple(opens), joins=tuple(joins))
                next_user += cohort
                for b in boxes:
                    b.open_plan(plan)
                plans.append(plan)
                continue
            if event == "release":
                open_ids = sorted(new.rounds)
                if not open_ids:
                    continue
                rid = open_ids[int(rng.integers(len(open_ids)))]
                partial = bool(rng.random() < 0.7)
                got = []
                for b in boxes:
                    try:
                        got.append(("ok", _release_key(b.release(rid, partial=partial))))
                    except ProtocolError as exc:
                        got.append(("refused", exc.reason))
                assert got[0] == got[1]
                seen["released" if got[0][0] == "ok" else "refused"] += 1
                continue
            plan = plans[int(rng.integers(len(plans)))]
            join = plan.joins[int(rng.integers(len(plan.joins)))]
            rnd = next(r for r in plan.opens if r.id == join.round_id)
            how = rng.choice(["run", "run", "run", "run", "replay", "overlap", "outside", "bad", "shuffled",
                              "quota", "stray"])
            start = join.first + int(rng.integers(0, join.count))
            n = int(rng.integers(1, join.first + join.count - start + 1))
            if how == "overlap":  # a run reaching back over records that may have come
                start = max(join.first, start - int(rng.integers(1, 20)))
            if how == "replay":  # the join's first records again
                start, n = join.first, min(n, join.count)
            if how == "quota":  # the whole join: more than its quota when reports < count
                start, n = join.first, join.count
            ids = start + np.arange(n)
            if how == "outside":
                ids = ids + int(rng.choice([-join.count, join.count, -1]))
            if how == "shuffled":
                ids = rng.permutation(ids)
            if how == "stray":  # a gap, a repeat
                ids = np.sort(rng.choice(ids, n, replace=True))
            values = _values(rng, rnd, runs, ids.size, how == "bad")
            got = {b.receive(Reports(join.round_id, plan.id, ids.copy(), values.copy())) for b in boxes}
            assert len(got) == 1, got
            assert dict(new.rejected) == dict(old.rejected)
            assert new.ready() == old.ready() and new.starved() == old.starved()
    finally:
        Intermediary._admit_run = fast
    for rid in sorted(new.rounds):
        a, b = [], []
        for box, out in ((new, a), (old, b)):
            try:
                out.append(_release_key(box.release(rid, partial=True)))
            except ProtocolError as exc:
                out.append(exc.reason)
        assert a == b
        seen["released"] += isinstance(a[0], tuple)
    assert dict(new.rejected) == dict(old.rejected) and new.closed == old.closed
    return seen


@pytest.mark.parametrize("seed", range(8))
def test_admission_and_releases_are_those_of_the_gathering_code(seed):
    seen = _session(seed, 600)
    assert seen["fast"] > 50 and seen["released"] > 10 and seen["refused"] > 0, seen  # every path taken


def test_a_modulus_above_the_supported_range_is_refused_loudly():
    """The running sum reduces in chunks sized by m: an m whose residues' sums could overflow is
    refused, as modular_sum refused it at the release."""
    rnd = Round(0, "aggregator", "sum", 4, m=2**63)
    box = Intermediary("aggregator")
    box.open_plan(Plan(0, 0, 4, opens=(rnd,), joins=(Join(0, 0, 4, 4),)))
    with pytest.raises(EncodingError, match="outside the supported range"):
        box.receive(Reports(0, 0, np.arange(4), np.ones((1, 4, 1), np.int64)))


def test_a_summed_round_keeps_no_report():
    """A 2²⁵-report round held 512 MiB of values and slots until its release; now its sum."""
    rnd = Round(0, "aggregator", "sum", 4096, m=2**37)
    box = Intermediary("aggregator")
    box.open_plan(Plan(0, 0, 4096, opens=(rnd,), joins=(Join(0, 0, 4096, 4096),)))
    values = np.random.default_rng(0).integers(0, 2**37, (1, 4096, 1))
    for at in range(0, 4096, 512):
        assert box.receive(Reports(0, 0, np.arange(at, at + 512), values[:, at:at + 512])) == 512
    part = box.rounds[0].parts[0]
    assert part.kept is None and part.sum.tolist() == [[int(values.sum()) % 2**37]]
    assert box.release(0).values.tolist() == [[int(values.sum()) % 2**37]]
