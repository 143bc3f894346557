"""``privbandit analyzer``: the server. Runs the family's learner, publishes plans, consumes releases.

Its broker account can read only releases and control; it publishes plans and its own metrics. It
never sees a report, ground truth or the run seed (only its own key). It holds no family code: the
task's family (from the registry) builds the learner's logic from the task's public spec.

With a state directory it checkpoints, after every release it decodes, the releases of the running
task (the new one appended to the checkpoint's journal, :mod:`~privbandit.services.checkpoint`): the
analyzer logic is a deterministic function of its public task, its key and the releases it consumed
(docs/architecture.md), so replaying them into a fresh party rebuilds the learner, the
ledger and the open plans exactly. A release for a round it already decoded (an intermediary
re-sending after a restart) is an idempotent no-op, unless the round's rule cannot produce it:
then it is refused by reason, as it would have been before the genuine one.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from privbandit import registry
from privbandit.protocol.primitives.seeding import derive_key
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Plan
from privbandit.protocol.spine.parties import Analyzer
from privbandit.services import codec
from privbandit.services.checkpoint import CheckpointError
from privbandit.services.party import PartyService

log = logging.getLogger("privbandit.analyzer")

# Open plans are announced again this long after the last progress (a fleet or an intermediary
# that restarted, or a broker that lost them), then after twice as long each time nothing moved,
# up to PLAN_RETRY_MAX_S. Every announcement is read by whoever holds the users' account: at a
# fixed 3 s, an attacker answering each with a volley of forged reports kept the aggregator busy,
# which delayed the releases, which brought the next announcement (issue #32 item 3).
PLAN_RETRY_S = 3.0
PLAN_RETRY_MAX_S = 24.0


def build_analyzer(spec: dict, master_key: int) -> Analyzer:
    """The sans-I/O analyzer of one task, from the task's public spec and the analyzer's key."""
    family = registry.family(spec["family"])
    public = spec["public"]
    keys = [derive_key(master_key, r, spec["label"]) for r in spec["runs"]]
    return Analyzer(family.analyzer(public, keys), family.ledger(public), runs=len(spec["runs"]))


def replay_releases(party: Analyzer, releases: list[codec.ReleaseMsg]) -> tuple[list[Plan], list]:
    """Drive a fresh ``party`` through its releases as the service did (next_plans before the first,
    after each); returns the plans to announce again (those that opened rounds still open, then the
    last plans) and the records of the releases. A release it refuses (ProtocolError) means the
    journal is not this task's."""
    plans, records = party.next_plans(), []
    openers = list(plans)
    for msg in releases:
        records.append(party.on_release(codec.release_of(msg)))
        new = party.next_plans()
        openers = [p for p in openers if any(r.id in party.open for r in p.opens)] + new  # stays small
        plans = new or plans
    openers = [p for p in openers if any(r.id in party.open for r in p.opens)]
    return openers + [p for p in plans if p.id not in {o.id for o in openers}], records


class AnalyzerService(PartyService):
    role = "analyzer"

    def __init__(self, settings, master_key: int, state_dir=None):
        super().__init__(settings, state_dir=state_dir)
        self.master_key = master_key
        self.party: Analyzer | None = None
        self.announced: list[codec.PlanMsg] = []
        self.last_progress = 0.0
        self.retries = 0  # re-announcements since the last progress: each waits twice as long
        self.done = False
        self.consumed: list[codec.ReleaseMsg] = []  # every release decoded, in order
        self.records: list[codec.RecordMsg] = []  # what the observer got: sent again on resync
        # Seconds from one release decoded (or the task's start) to the next: for a sequential learner
        # (one plan per user) one user's whole round trip, analyzer → plan → fleet → report →
        # intermediary → release → analyzer, the limit of its rate over MQTT. Logged when the task
        # ends (benchmarks/bench_online_mqtt.py reads it).
        self.last_release_at = 0.0
        self.trips: list[float] = []

    def subscriptions(self):
        return [self.t("control"), self.t("release", "+")]

    async def on_task(self, spec: dict) -> None:
        self.party = build_analyzer(spec, self.master_key)
        self.done = False
        self.consumed, self.records = [], []
        self.last_release_at, self.trips = time.monotonic(), []
        saved = self.resumable(spec)
        await self.advance(None if saved is None else self.replay(saved.get("releases")))

    def replay(self, releases) -> list[Plan]:
        """A checkpoint's releases into the fresh party; returns the plans it then has open."""
        try:
            msgs = [codec.decode(data) for data in releases]
            if not all(isinstance(m, codec.ReleaseMsg) for m in msgs):
                raise ValueError("a checkpointed release is not a release")
            plans, records = replay_releases(self.party, msgs)
        except (ProtocolError, TypeError, ValueError, codec.DecodeError) as exc:
            raise CheckpointError("checkpoint-inconsistent", f"{self.state.path}: its releases do not "
                                  f"replay: {exc}") from None
        self.consumed = msgs
        self.records = [codec.record_msg(self.run_id, self.task_index, r) for r in records]
        log.info("resumed task %d from %s: %d releases replayed", self.task_index, self.state.path, len(msgs))
        return plans

    async def advance(self, plans: list[Plan] | None = None) -> None:
        """Publish the logic's next plans; finish the task once it is done and nothing is open.
        ``plans``: the plans a replayed checkpoint left open, announced again."""
        plans = self.party.next_plans() if plans is None else plans
        if plans:
            # Keep every plan that opens or joins a round still open, in order: a round may fill
            # over many cohorts (an array), an intermediary that restarted learns the round from the
            # plan that opens it, and a fleet that restarted rebuilds the inputs it held for a
            # secure round (released only at its last join) from every plan that joined it.
            kept = [m for m in self.announced if self.joins_open(m)]
            new = [codec.plan_msg(self.run_id, self.task_index, p) for p in plans]
            self.announced = kept + [m for m in new if m.plan not in {k.plan for k in kept}]
            log.debug("task %s: plans %s", self.task_index, [p.id for p in plans])
            for msg in new:
                await self.bus.publish(self.t("plan"), msg)
        self.last_progress = time.monotonic()
        self.retries = 0
        if self.party.done and not self.done:
            self.done = True
            if abandoned := self.party.abandoned():
                await self.bus.publish(self.t("plan"), codec.CloseMsg(run=self.run_id, task=self.task_index,
                                                                      rounds=abandoned))
            self.log_trips()
            await self.status("task-done", self.task_index, privacy=self.party.ledger.summary(),
                              learner=self.party.logic.summary(), records=len(self.party.decoded))

    async def on_message(self, name: str, msg) -> None:
        if not isinstance(msg, codec.ReleaseMsg):
            return self.reject("unexpected-kind", msg.kind)
        if not self.current(msg):
            return
        try:
            if msg.round in self.party.decoded:  # a repeat: refused only if its rule cannot produce it
                return self.party.check_repeat(codec.release_of(msg))
            record = self.party.on_release(codec.release_of(msg))
        except ProtocolError as exc:  # the round stays open: a valid release may still come
            return self.reject(exc.reason, str(exc))
        now = time.monotonic()
        self.trips.append(now - self.last_release_at)
        self.last_release_at = now
        self.consumed.append(msg)
        self.records.append(codec.record_msg(self.run_id, self.task_index, record))
        await self.bus.publish(self.t("metrics", self.name), self.records[-1])
        await self.advance()
        # Only now: everything this state implies (the record, the next plans) is at the broker or
        # in the outbox. A restart from it announces the open plans again and the observer's resync
        # fetches the records, so it never misses a message, at worst repeats one.
        # The new release goes to the journal; all of them only when it is compacted (StateDir).
        self.save_state(lambda: {"releases": [codec.encode(m) for m in self.consumed]},
                        added={"releases": [codec.encode(msg)]})

    def log_trips(self) -> None:
        if self.trips:
            ms = np.percentile(np.asarray(self.trips) * 1e3, [50, 90])
            log.info("task %d: %d releases; from one release to the next: median %.3f ms, p90 %.3f ms",
                     self.task_index, len(self.trips), ms[0], ms[1])

    async def on_resync(self) -> None:
        for msg in self.records:
            await self.bus.publish(self.t("metrics", self.name), msg)
        if self.done:
            self.done = False
            await self.advance([])  # task-done again

    def joins_open(self, msg: codec.PlanMsg) -> bool:
        """Does the plan open or join a round still open?"""
        return any(r.id in self.party.open for r in msg.opens) or any(j.round in self.party.open for j in msg.joins)

    def still_owed(self, msg: codec.PlanMsg) -> bool:
        """A plan to announce again: one of its rounds is still open, or it collects nothing (its
        users must still be served, for their truth)."""
        return not msg.joins or self.joins_open(msg)

    async def tick(self) -> None:
        # Plans are idempotent: a fleet that restarted and missed them serves them again, and
        # intermediaries and the observer count each record once. A fleet sends a block's truth
        # before its reports, so a released round lacks nothing, and an intermediary answers a
        # repeated plan of a round it released with that release again.
        wait = min(PLAN_RETRY_S * 2**self.retries, PLAN_RETRY_MAX_S)
        if self.party is not None and time.monotonic() - self.last_progress > wait:
            again = [msg for msg in self.announced if self.still_owed(msg)]
            if again:
                log.info("no release for %.0f s: announcing plans %s again", wait, [m.plan for m in again])
            for msg in again:
                await self.bus.publish(self.t("plan"), msg)
            self.last_progress = time.monotonic()
            self.retries += 1
