"""A secure-aggregation step deadline tells a dropout from a slow machine (issue #32 item 7).

At load ≈ 14–20 on 2 cores, a batch of ten 1,024-user Dist-DP-SE rounds passed the 30-s step
deadline while both fleets were still working through them: every round aborted ("0 live users")
and the run failed. Now a step past its deadline waits on while a fleet it lacks shows it is alive
(a new chunk of it, any round, within the last deadline; a fleet computing a step sends an empty
heartbeat chunk every second), and only a silent fleet's users are dropouts, as before.

The aggregator's rule is driven here on a fake clock (deterministic); the fleet's heartbeats in real
time. The end-to-end figures under four busy loops are benchmarks/bench_secagg_starved.py's.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections import Counter

import numpy as np
import pytest

from privbandit.services import codec, secagg_rounds
from privbandit.services.secagg_rounds import (
    HEARTBEAT_CHUNK,
    STEP_EXTEND_MAX,
    AggregatorSecAgg,
    FleetSecAgg,
    _empty,
    to_messages,
)
from tests.services.test_secagg_rounds import FLEETS, IDENTITY, M, _secure_round, _wire, fleet_auth

DEADLINE = 10.0
COHORT = 12  # threshold ⌊2·12/3⌋ + 1 = 9: without one fleet's 6 users the round cannot go on
VALUES = {u: 1000 * u + 7 for u in range(COHORT)}


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(secagg_rounds, "time", types.SimpleNamespace(monotonic=c.monotonic,
                                                                     process_time=time.process_time))
    return c


class Round:
    """One secure round between an aggregator and two fleets, every message through the codec;
    ``held`` keeps what the test has not delivered yet."""

    def __init__(self):
        self.rnd = _secure_round(7, COHORT)
        self.to_agg, self.to_fleets = [], []
        self.released, self.aborted = [], []
        self.rejected = Counter()

        async def up(msg):
            self.to_agg.append(_wire(msg))

        async def down(msg):
            self.to_fleets.append(_wire(msg))

        async def release(round_id, value, n):
            self.released.append((value, n))

        async def abort(round_id, reason):
            self.aborted.append(reason)

        self.agg = AggregatorSecAgg("r1", 0, DEADLINE, down, release, abort, self.rejected, FLEETS)
        self.fleets = [FleetSecAgg("r1", 0, i, 2, IDENTITY, up, fleet_auth(i)) for i in range(2)]

    async def start(self):
        cohort = np.arange(COHORT)
        self.agg.open(self.rnd, cohort)
        for i, fleet in enumerate(self.fleets):
            await fleet.start(self.rnd, cohort, {u: v for u, v in VALUES.items() if u % 2 == i}, [])

    async def deliver(self, keep=lambda msg: False):
        """Everything queued both ways until quiet, but the fleet chunks ``keep`` holds back."""
        held = []
        while self.to_agg or self.to_fleets:
            while self.to_agg:
                msg = self.to_agg.pop(0)
                if keep(msg):
                    held.append(msg)
                else:
                    assert await self.agg.on_message(msg) is None
            while self.to_fleets:
                msg = self.to_fleets.pop(0)
                for fleet in self.fleets:
                    if msg.round in fleet.rounds:
                        assert await fleet.on_message(msg) is None
        return held

    def heartbeat(self, shard: int, step: str, number: int) -> codec.SecAggMsg:
        """What a fleet computing ``step`` sends every second: an empty, non-final chunk."""
        (msg,) = to_messages(step, _empty(step), run="r1", task=0, round_id=7, shard=shard, shards=2)
        msg = msg.model_copy(update={"chunk": HEARTBEAT_CHUNK + number, "final": False})
        return _wire(msg.model_copy(update={"tag": fleet_auth(shard).mac("secagg-chunk", "r1", 0, shard,
                                                                         payload=codec.encode(msg))}))


def _fleet1(step):
    return lambda msg: msg.shard == 1 and msg.step == step


def test_a_step_past_its_deadline_waits_for_a_fleet_that_is_still_alive(clock):
    """Fleet 1's `shares` come 1.8 deadlines late, but it sent a heartbeat 0.9 deadlines in: at
    1.5 deadlines the step is still open (the old aggregator went on without fleet 1's six users and
    aborted), and the round releases the exact sum of all twelve."""
    r = Round()

    async def go():
        await r.start()
        held = await r.deliver(keep=_fleet1("shares"))  # advertise done; fleet 1's shares held back
        assert held and r.agg.rounds[7][1] == "shares"
        clock.now = 0.9 * DEADLINE
        assert await r.agg.on_message(r.heartbeat(1, "shares", 0)) is None
        clock.now = 1.5 * DEADLINE
        await r.agg.tick()
        assert r.aborted == [] and r.agg.rounds[7][1] == "shares", "went on without a live fleet"
        clock.now = 1.8 * DEADLINE
        for msg in held:
            assert await r.agg.on_message(msg) is None
        await r.deliver()

    asyncio.run(go())
    assert r.aborted == [] and r.released == [(sum(VALUES.values()) % M, COHORT)]
    assert r.rejected == Counter()
    assert r.agg.finished[-1].extended == pytest.approx(0.8 * DEADLINE)


def test_a_silent_fleet_is_a_dropout_one_deadline_after_its_last_chunk(clock):
    """Fleet 1 says nothing after its heartbeat at 0.9 deadlines: at 1.95 deadlines (more than one
    deadline since) its users are dropouts, and with six of twelve gone the round aborts, loudly."""
    r = Round()

    async def go():
        await r.start()
        await r.deliver(keep=_fleet1("shares"))
        clock.now = 0.9 * DEADLINE
        await r.agg.on_message(r.heartbeat(1, "shares", 0))
        clock.now = 1.85 * DEADLINE
        await r.agg.tick()
        assert r.aborted == []  # heard 0.95 deadlines ago: still alive
        clock.now = 1.95 * DEADLINE
        await r.agg.tick()

    asyncio.run(go())
    assert r.released == [] and len(r.aborted) == 1 and "after step 'shares'" in r.aborted[0], r.aborted


def test_a_live_fleet_that_never_answers_is_waited_for_at_most_the_cap(clock):
    """Heartbeats for ever, never the step: the step goes on without it after STEP_EXTEND_MAX
    deadlines (a corrupt fleet cannot hold a round for ever)."""
    r = Round()

    async def go():
        await r.start()
        await r.deliver(keep=_fleet1("shares"))
        for beat in range(1, 200):
            clock.now = beat * DEADLINE / 2
            await r.agg.on_message(r.heartbeat(1, "shares", beat))
            await r.agg.tick()
            if r.aborted:
                return clock.now

    aborted_at = asyncio.run(go())
    assert STEP_EXTEND_MAX * DEADLINE < aborted_at <= (STEP_EXTEND_MAX + 0.5) * DEADLINE, aborted_at


def test_a_replayed_chunk_is_no_sign_of_life(clock):
    """A chunk that is a copy of one admitted (QoS 1 redelivery, or a replay by a users-account
    holder) is a duplicate, and does not keep a dead fleet's step waiting."""
    r = Round()

    async def go():
        await r.start()
        await r.deliver(keep=_fleet1("shares"))
        beat = r.heartbeat(1, "shares", 0)
        await r.agg.on_message(beat)
        clock.now = 1.5 * DEADLINE
        assert await r.agg.on_message(beat) == "duplicate"
        await r.agg.tick()

    asyncio.run(go())
    assert len(r.aborted) == 1, "a replay kept a silent fleet's round waiting"


def test_a_fleet_computing_a_step_sends_heartbeats_and_its_round_completes(monkeypatch):
    """Real time: fleet 1 takes 0.6 s over its `masked` step while the aggregator's deadline is
    0.25 s and its timer ticks every 20 ms. The fleet computes off its event loop and sends an
    empty chunk every 50 ms meanwhile; the aggregator waits, and releases the exact sum. (The old
    fleet computed on its loop and sent nothing: the step went on without it and aborted.)"""
    monkeypatch.setattr(secagg_rounds, "HEARTBEAT_S", 0.05)
    rejected, released, aborted, beats = Counter(), [], [], []
    inbox: asyncio.Queue

    async def go():
        nonlocal inbox
        inbox = asyncio.Queue()

        async def up(msg):
            msg = _wire(msg)
            if msg.chunk >= HEARTBEAT_CHUNK:
                beats.append(msg)
            await inbox.put(("agg", msg))

        async def down(msg):
            await inbox.put(("fleets", _wire(msg)))

        async def release(round_id, value, n):
            released.append((value, n))

        async def abort(round_id, reason):
            aborted.append(reason)

        agg = AggregatorSecAgg("r1", 0, 0.25, down, release, abort, rejected, FLEETS)
        fleets = [FleetSecAgg("r1", 0, i, 2, IDENTITY, up, fleet_auth(i)) for i in range(2)]
        rnd, cohort = _secure_round(7, COHORT), np.arange(COHORT)
        agg.open(rnd, cohort)
        for i, fleet in enumerate(fleets):
            await fleet.start(rnd, cohort, {u: v for u, v in VALUES.items() if u % 2 == i}, [])
        slow = fleets[1].rounds[7]
        mask = slow.mask
        slow.mask = lambda batch: (time.sleep(0.6), mask(batch))[1]

        async def ticker():
            while True:
                await asyncio.sleep(0.02)
                await agg.tick()

        # Each party its own process: one message at a time each, as a party's pump hands them on.
        mailboxes = [asyncio.Queue() for _ in fleets]

        async def fleet_loop(fleet, mailbox):
            while True:
                msg = await mailbox.get()
                if msg.round in fleet.rounds:
                    assert await fleet.on_message(msg) is None

        workers = [asyncio.create_task(ticker())] + [asyncio.create_task(fleet_loop(f, q))
                                                     for f, q in zip(fleets, mailboxes)]
        try:
            async with asyncio.timeout(20):
                while not (released or aborted):
                    where, msg = await inbox.get()
                    if where == "agg":
                        assert await agg.on_message(msg) is None
                    else:
                        for mailbox in mailboxes:
                            mailbox.put_nowait(msg)
        finally:
            for w in workers:
                w.cancel()

    asyncio.run(go())
    assert aborted == [] and released == [(sum(VALUES.values()) % M, COHORT)], aborted
    assert len(beats) >= 3 and {(b.shard, b.step, b.final, b.ids.size) for b in beats} == {(1, "masked", False, 0)}
    assert len({b.chunk for b in beats}) == len(beats)
    assert rejected == Counter()
