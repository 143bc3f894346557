"""``privbandit analyzer``: the server. Runs the learner, publishes round plans, consumes releases.

Its broker account can read only plans' counterpart, the releases, and control; it publishes plans
and its own metrics. It never sees a report, ground truth or the run seed (only its own key).

With a state directory it checkpoints, after every release it decodes, the releases of the running
task: the sans-I/O :class:`Analyzer` is a deterministic function of its task spec, its key and the
releases it consumed (its per-round randomness is ``stream(key, "round", r)``), so replaying them
into a fresh party rebuilds the learner, the ledger and the open batch exactly. A release for a
round it already decoded (an intermediary re-sending after a restart) is an idempotent no-op.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from privbandit.experiment.build import build_learner, build_ledger, build_mechanism
from privbandit.experiment.config import AlgorithmConfig
from privbandit.protocol.events import Release, RoundPlan
from privbandit.protocol.parties import Analyzer, ProtocolError, RoundRecord
from privbandit.protocol.seeding import derive_key
from privbandit.services import codec
from privbandit.services.checkpoint import CheckpointError
from privbandit.services.party import PartyService

log = logging.getLogger("privbandit.analyzer")

PLAN_RETRY_S = 3.0  # re-announce open plans this long after the last progress (restarted fleets)


def plan_msg(run_id: str, task: int, plan: RoundPlan) -> codec.PlanMsg:
    q = plan.params
    return codec.PlanMsg(
        run=run_id, task=task, round=plan.round_id, batch=plan.batch, arm=plan.arm,
        first_user=plan.first_user, cohort=plan.cohort, collect=plan.collect,
        params=codec.params_of(q),
    )


def build_analyzer(spec: dict, master_key: int) -> Analyzer:
    """The sans-I/O analyzer of one task, from the task's public spec and the analyzer's key."""
    algo = AlgorithmConfig.model_validate(spec["algorithm"])
    mechanism = build_mechanism(algo)
    return Analyzer(
        build_learner(algo, spec["arms"]), mechanism, spec["horizon"],
        build_ledger(algo, mechanism, spec["delta"]),
        derive_key(master_key, spec["run"], spec["label"]), bounded=algo.range_check,
    )


def replay_releases(party: Analyzer, releases: list) -> tuple[list[RoundPlan], list[RoundRecord]]:
    """Drive a fresh ``party`` through ``[round, n_reports, value]`` releases as the service did
    (next_plans before the first, after each); returns the last batch of plans it opened and the
    records of the releases.

    The Analyzer is deterministic given its task and key, so this rebuilds its exact state; a
    release it refuses (ProtocolError) means the journal is not this task's."""
    plans, records = party.next_plans(), []
    for round_id, n_reports, value in releases:
        records.append(party.on_release(Release(round_id=round_id, n_reports=n_reports, value=value)))
        plans = party.next_plans() or plans
    return plans, records


class AnalyzerService(PartyService):
    role = "analyzer"
    family_handlers = {"shuffle-linear-bandits": "privbandit.services.linear:AnalyzerHandler"}

    def __init__(self, settings, master_key: int, state_dir=None):
        super().__init__(settings, state_dir=state_dir)
        self.master_key = master_key
        self.party: Analyzer | None = None
        self.announced: list[codec.PlanMsg] = []
        self.last_progress = 0.0
        self.done = False
        self.consumed: list[list] = []  # [round, n_reports, value] of every release decoded, in order
        self.decoded: set[int] = set()
        self.records: list[codec.RecordMsg] = []  # what the observer got: sent again on resync

    def subscriptions(self):
        return [self.t("control"), self.t("release", "+")]

    async def on_task(self, spec: dict) -> None:
        self.party = build_analyzer(spec, self.master_key)
        self.done = False
        self.consumed, self.decoded, self.records = [], set(), []
        saved = self.resumable(spec)
        await self.advance(None if saved is None else self.replay(saved.get("releases")))

    def replay(self, releases) -> list[RoundPlan]:
        """A checkpoint's releases into the fresh party; returns the batch it then has open."""
        try:
            plans, records = replay_releases(self.party, releases)
        except (ProtocolError, TypeError, ValueError) as exc:
            raise CheckpointError("checkpoint-inconsistent", f"{self.state.path}: its releases do not "
                                  f"replay: {exc}") from None
        self.consumed = [list(r) for r in releases]
        self.decoded = {r[0] for r in releases}
        self.records = [self.record_msg(r) for r in records]
        log.info("resumed task %d from %s: %d releases replayed", self.task_index, self.state.path, len(releases))
        return plans

    async def advance(self, plans: list[RoundPlan] | None = None) -> None:
        """Open the next batch if the last one is fully released; finish the task at T.
        ``plans``: the batch a replayed checkpoint left open, announced again."""
        plans = self.party.next_plans() if plans is None else plans
        if plans:
            self.announced = [plan_msg(self.run_id, self.task_index, p) for p in plans]
            log.debug("opened batch %d: rounds %s", plans[0].batch, [p.round_id for p in plans])
            for msg in self.announced:
                await self.bus.publish(self.t("plan"), msg)
        self.last_progress = time.monotonic()
        if not self.party.open and self.party.users_planned >= self.party.horizon and not self.done:
            self.done = True
            await self.status(
                "task-done", self.task_index,
                privacy=self.party.ledger.summary(),
                eliminated_at=self.party.learner.eliminated_at.tolist(),
            )

    async def on_message(self, name: str, msg) -> None:
        if not isinstance(msg, codec.ReleaseMsg):
            return self.reject("unexpected-kind", msg.kind)
        if not self.current(msg) or msg.round in self.decoded:
            return
        reports = msg.reports
        if reports is not None and reports.dtype.kind == "u":  # packed residues
            reports = reports.astype(np.int64)
        plan = self.party.open.get(msg.round)
        release = Release(round_id=msg.round, n_reports=msg.n_reports, value=msg.value, reports=reports)
        try:
            record = self.party.on_release(release)
        except (ProtocolError, ValueError) as exc:
            return self.reject(getattr(exc, "reason", "bad-release"), str(exc))
        # The journal keeps the reduced value (what A decodes), not a local model's reports.
        value = msg.value if reports is None else self.party.mechanism.aggregate(reports, plan.params)
        self.consumed.append([msg.round, msg.n_reports, value.item() if hasattr(value, "item") else value])
        self.decoded.add(msg.round)
        self.records.append(self.record_msg(record))
        await self.bus.publish(self.t("metrics", self.name), self.records[-1])
        await self.advance()
        # Only now: everything this state implies (the record, the next plans) is at the broker or
        # in the outbox. A restart from it announces the open batch again and the observer's resync
        # fetches the records, so it never misses a message, at worst repeats one.
        self.save_state({"releases": self.consumed})

    def record_msg(self, record: RoundRecord) -> codec.RecordMsg:
        return codec.RecordMsg(
            run=self.run_id, task=self.task_index, round=record.round_id, batch=record.batch, arm=record.arm,
            params=codec.params_of(record.params),
            release=record.release, estimate=record.estimate, wrapped=record.wrapped,
            central_noise=record.central_noise, reports=record.reports, epsilon=record.epsilon,
        )

    async def on_resync(self) -> None:
        for msg in self.records:
            await self.bus.publish(self.t("metrics", self.name), msg)
        if self.done:
            self.done = False
            await self.advance([])  # task-done again

    async def tick(self) -> None:
        # Plans are idempotent: a fleet that restarted and missed them serves them again, and
        # intermediaries and the observer count each record once. Only plans still owed a release
        # (and the uncollected tail, which fleets must serve for its truth) are repeated: a
        # fleet sends a block's truth before its reports, so a released round lacks nothing, and
        # an intermediary answers a repeated plan of a round it released with that release again.
        if self.party is not None and time.monotonic() - self.last_progress > PLAN_RETRY_S:
            again = [msg for msg in self.announced if msg.round in self.party.open or not msg.collect]
            if again:
                log.info("no release for %.0f s: announcing rounds %s again", PLAN_RETRY_S, [m.round for m in again])
            for msg in again:
                await self.bus.publish(self.t("plan"), msg)
            self.last_progress = time.monotonic()
