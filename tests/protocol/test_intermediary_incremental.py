"""The intermediary's incremental bookkeeping decides exactly what a full scan would.

An :class:`Intermediary` decides again whether a round is ready or starved only for the rounds an
event touched, and the service keeps the releases its checkpoints hold up to date as releases are
made: both against the full scans they replaced (kept here as the reference), over seeded random
sequences of plans, joins, reports (duplicates, strangers, bad values), answered joins (dropouts),
closed rounds and releases.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Reports, Round
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.services import intermediary as service_module
from privbandit.services.intermediary import IntermediaryService

M = 97


class FullScan(Intermediary):
    """The reference: every open round examined on every call, as before the bookkeeping."""

    def ready(self) -> list[int]:
        return sorted(rid for rid, state in self.rounds.items() if state.complete or (
            self.fully_answered(state) and state.received >= state.round.min_reports))

    def starved(self) -> list[int]:
        return sorted(rid for rid, state in self.rounds.items()
                      if not state.complete and self.fully_answered(state) and state.received < state.round.min_reports)


def _outcome(call):
    """A call's result or its refusal, comparable across the two boxes."""
    try:
        return "ok", call()
    except ProtocolError as exc:
        return "refused", exc.reason


def _release_key(rel):
    return rel.round_id, rel.n_reports, rel.values.tolist(), None if rel.user_ids is None else rel.user_ids.tolist()


def _session(seed: int, steps: int) -> tuple[int, int, int]:
    """One random session driven into both boxes; returns (ready, starved, released) seen, so the
    caller can check the session exercised every path."""
    rng = np.random.default_rng(seed)
    new, old = Intermediary("aggregator"), FullScan("aggregator")
    boxes = (new, old)
    next_round, next_plan, next_user = 0, 0, 0
    plans: list[Plan] = []
    seen_ready = seen_starved = released = 0
    for _ in range(steps):
        event = rng.choice(["plan", "report", "report", "report", "report", "answered", "close", "release"])
        if event == "plan" or not plans:
            cohort = int(rng.integers(1, 12))
            opens, joins = [], []
            for _ in range(int(rng.integers(0, 3))):  # a new round, and this plan's share of it
                count = int(rng.integers(1, cohort + 1))
                first = int(rng.integers(next_user, next_user + cohort - count + 1))
                reports = int(rng.integers(1, count + 1))
                expected = reports + (0 if rng.random() < 0.6 else int(rng.integers(1, 4)))
                threshold = None if rng.random() < 0.3 else int(rng.integers(1, expected + 1))
                opens.append(Round(next_round, "aggregator", str(rng.choice(["sum", "pass"])), expected, m=M,
                                   threshold=threshold))
                joins.append(Join(next_round, first, count, reports))
                next_round += 1
            # joins into rounds already open here (or closed: ignored), some promising too much
            for rid in list(new.rounds)[-3:] + sorted(new.closed)[-1:]:
                if rng.random() < 0.3:
                    count = int(rng.integers(1, cohort + 1))
                    first = int(rng.integers(next_user, next_user + cohort - count + 1))
                    room = new.rounds[rid].round.expected - new.rounds[rid].joined if rid in new.rounds else count
                    reports = min(count, room + (rng.random() < 0.1))
                    joins.append(Join(rid, first, count, int(rng.integers(0, reports + 1))))
            plan = Plan(next_plan, next_user, cohort, opens=tuple(opens), joins=tuple(joins))
            next_plan, next_user = next_plan + 1, next_user + cohort
            results = {_outcome(lambda b=b: b.open_plan(plan)) for b in boxes}
            assert len(results) == 1, results
            plans.append(plan)
        elif event == "report":
            plan = plans[int(rng.integers(len(plans)))]
            if not plan.joins:
                continue
            join = plan.joins[int(rng.integers(len(plan.joins)))]
            n = int(rng.integers(1, 8))
            # mostly joined users, some twice, some outside the join; a few values out of range
            ids = rng.integers(join.first - 1, join.first + join.count + 1, size=n)
            if rng.random() < 0.7:
                ids.sort()
            values = rng.integers(0, M + 3 if rng.random() < 0.2 else M, size=(1, n, 1))
            rid = join.round_id if rng.random() < 0.95 else int(rng.integers(0, next_round + 1))
            got = {b.receive(Reports(rid, plan.id, ids.copy(), values.copy())) for b in boxes}
            assert len(got) == 1, got
        elif event == "answered":
            plan = plans[int(rng.integers(len(plans)))]
            rid = None  # all the plan's joins here, or one
            if rng.random() < 0.5 and plan.joins:
                rid = plan.joins[int(rng.integers(len(plan.joins)))].round_id
            for b in boxes:
                b.answered(plan.id, rid)
        elif event == "close" and new.rounds and rng.random() < 0.3:
            rid = list(new.rounds)[int(rng.integers(len(new.rounds)))]
            for b in boxes:
                b.close(rid)
        elif event == "release" and new.rounds:  # an early, refused release must disturb nothing
            rid = list(new.rounds)[int(rng.integers(len(new.rounds)))]
            partial = bool(rng.random() < 0.5)
            a, b = (_outcome(lambda x=x: _release_key(x.release(rid, partial=partial))) for x in boxes)
            assert a == b
            released += a[0] == "ok"
        if rng.random() < 0.5:  # the bookkeeping must hold however seldom it is asked
            continue
        assert new.starved() == old.starved()
        ready = new.ready()
        assert ready == old.ready()
        seen_ready += len(ready)
        seen_starved += len(new.starved())
        if rng.random() < 0.2:
            for rid in new.starved():
                for b in boxes:
                    b.close(rid)
        for rid in ready if rng.random() < 0.7 else []:
            assert _release_key(new.release(rid, partial=True)) == _release_key(old.release(rid, partial=True))
            released += 1
        assert new.rejected == old.rejected
    assert (new.ready(), new.starved()) == (old.ready(), old.starved())
    assert (new.closed, new.rejected) == (old.closed, old.rejected)
    return seen_ready, seen_starved, released


@pytest.mark.parametrize("seed", range(6))
def test_ready_and_starved_rounds_are_those_a_full_scan_finds(seed):
    seen_ready, seen_starved, released = _session(seed, 800)
    assert seen_ready > 10 and seen_starved > 5 and released > 10  # the session reached every outcome


def _kept_by_walk(released: OrderedDict, data: dict, budget: int) -> list[bytes]:
    """The reference: the checkpoint's releases as the walk over every release of the task found them."""
    kept, size = [], 0
    for rid in reversed(released):
        if kept and size + len(data[rid]) > budget:
            break
        kept.append(data[rid])
        size += len(data[rid])
    return kept[::-1]


class _Box:
    closed: set = set()


@pytest.mark.parametrize("seed", range(4))
def test_a_checkpoint_keeps_the_releases_the_walk_over_every_release_kept(seed, monkeypatch):
    budget = 100
    monkeypatch.setattr(service_module, "KEEP_RELEASE_BYTES", budget)
    rng = np.random.default_rng(seed)
    service = IntermediaryService.__new__(IntermediaryService)  # only the checkpoint's bookkeeping
    saved, journal = [], []

    def save_state(state, added=None, **_):  # the whole state (a snapshot's), and what the journal gets
        saved.append(state())
        journal.append(added)

    service.state, service.box, service.failed = object(), _Box(), set()
    service.unsaved_closed, service.unsaved_failed = [], []
    service.save_state = save_state
    service.released, service.released_data = OrderedDict(), {}
    service.forget_kept()
    rid = 0
    for _ in range(400):
        if rng.random() < 0.02:  # a new task
            service.released, service.released_data = OrderedDict(), {}
            service.forget_kept()
        fresh = []
        for _ in range(int(rng.integers(0, 4))):  # releases between boundaries (a restore brings many)
            service.released[rid] = None
            service.released_data[rid] = bytes(int(rng.choice([1, 7, 30, 60, budget, budget + 20])))
            fresh.append(service.released_data[rid])
            rid += 1
        service.checkpoint_round()
        assert saved[-1]["releases"] == _kept_by_walk(service.released, service.released_data, budget)
        assert journal[-1]["releases"] == fresh  # the journal gets each release once, when it is new
    assert max(len(s["releases"]) for s in saved) > 3


def test_without_a_state_directory_nothing_is_gathered_for_checkpoints():
    service = IntermediaryService.__new__(IntermediaryService)
    service.state, service.save_state = None, None  # would raise if a checkpoint were gathered
    service.released, service.released_data = OrderedDict({0: None}), {}
    service.forget_kept()
    service.checkpoint_round()


@pytest.mark.parametrize("m", [None, 2**31 - 1])
def test_an_integer_sum_over_interleaved_blocks_is_the_sum_of_every_report(m):
    """An integer sum is released without sorting its reports into slot order (two fleets' blocks
    interleave): it must still be every accepted report's exact sum, once each (Python integers
    as the reference; with m near 2^31 an int64 sum of 2^12 residues needs no wrap)."""
    rng = np.random.default_rng(7)
    n, block = 4096, 256
    rnd = Round(0, "aggregator", "sum", n, width=2, m=m, low=None if m else -2**40, high=None if m else 2**40)
    plan = Plan(0, 0, n, opens=(rnd,), joins=(Join(0, 0, n, n),))
    box = Intermediary("aggregator")
    box.open_plan(plan)
    values = rng.integers(0, m, size=(1, n, 2)) if m else rng.integers(-2**40, 2**40, size=(1, n, 2))
    starts = rng.permutation(np.arange(0, n, block))
    for at in starts:  # blocks out of order, each in order, as fleets send them
        box.receive(Reports(0, 0, np.arange(at, at + block), values[:, at:at + block]))
    box.receive(Reports(0, 0, np.arange(0, block), values[:, :block]))  # a replay: refused, not summed
    assert box.ready() == [0] and box.rejected["duplicate"] == block
    want = [[sum(int(v) for v in values[0, :, k]) % (m or 2**64) for k in range(2)]]
    got = box.release(0).values.tolist()
    assert [[g % (m or 2**64) for g in got[0]]] == want


def test_a_pass_over_interleaved_blocks_is_released_in_user_order():
    """Only exact sums skip the sort: a pass (and a shuffle, whose keyed permutation applies to
    the order) still sees the reports in slot order, as before."""
    rnd = Round(0, "aggregator", "pass", 64, m=M)
    box = Intermediary("aggregator")
    box.open_plan(Plan(0, 0, 64, opens=(rnd,), joins=(Join(0, 0, 64, 64),)))
    values = np.arange(64).reshape(1, 64, 1) % M
    for at in (32, 0, 48, 16):
        box.receive(Reports(0, 0, np.arange(at, at + 16), values[:, at:at + 16]))
    rel = box.release(0)
    assert rel.user_ids.tolist() == list(range(64)) and rel.values[0, :, 0].tolist() == list(range(64))
