"""``privbandit analyzer``: the server. Runs the learner, publishes round plans, consumes releases.

Its broker account can read only plans' counterpart, the releases, and control; it publishes plans
and its own metrics. It never sees a report, ground truth or the run seed (only its own key).
"""

from __future__ import annotations

import time

import numpy as np

from privbandit.experiment.build import build_learner, build_mechanism
from privbandit.experiment.config import AlgorithmConfig
from privbandit.protocol.events import Release, RoundPlan
from privbandit.protocol.parties import Analyzer, ProtocolError
from privbandit.protocol.privacy import PrivacyLedger
from privbandit.protocol.seeding import derive_key
from privbandit.services import codec
from privbandit.services.party import PartyService

PLAN_RETRY_S = 3.0  # re-announce open plans this long after the last progress (restarted fleets)


def plan_msg(run_id: str, task: int, plan: RoundPlan) -> codec.PlanMsg:
    q = plan.params
    return codec.PlanMsg(
        run=run_id, task=task, round=plan.round_id, batch=plan.batch, arm=plan.arm,
        first_user=plan.first_user, cohort=plan.cohort, collect=plan.collect,
        params=codec.params_of(q),
    )


class AnalyzerService(PartyService):
    role = "analyzer"
    family_handlers = {"shuffle-linear-bandits": "privbandit.services.linear:AnalyzerHandler"}

    def __init__(self, settings, master_key: int):
        super().__init__(settings)
        self.master_key = master_key
        self.party: Analyzer | None = None
        self.announced: list[codec.PlanMsg] = []
        self.last_progress = 0.0
        self.done = False

    def subscriptions(self):
        return [self.t("control"), self.t("release", "+")]

    async def on_task(self, spec: dict) -> None:
        algo = AlgorithmConfig.model_validate(spec["algorithm"])
        mechanism = build_mechanism(algo)
        self.party = Analyzer(
            build_learner(algo, spec["arms"]), mechanism, spec["horizon"],
            PrivacyLedger(mechanism.trust_model, None if algo.algorithm == "se" else algo.epsilon, spec["delta"]),
            derive_key(self.master_key, spec["run"], spec["label"]),
        )
        self.done = False
        await self.advance()

    async def advance(self) -> None:
        """Open the next batch if the last one is fully released; finish the task at T."""
        plans = self.party.next_plans()
        if plans:
            self.announced = [plan_msg(self.run_id, self.task_index, p) for p in plans]
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
        if not self.current(msg):
            return
        reports = msg.reports
        if reports is not None and reports.dtype.kind == "u":  # packed residues
            reports = reports.astype(np.int64)
        release = Release(round_id=msg.round, n_reports=msg.n_reports, value=msg.value, reports=reports)
        try:
            record = self.party.on_release(release)
        except (ProtocolError, ValueError) as exc:
            return self.reject(getattr(exc, "reason", "bad-release"), str(exc))
        q = record.params
        await self.bus.publish(self.t("metrics", self.name), codec.RecordMsg(
            run=self.run_id, task=self.task_index, round=record.round_id, batch=record.batch, arm=record.arm,
            params=codec.params_of(q),
            release=record.release, estimate=record.estimate, wrapped=record.wrapped,
            central_noise=record.central_noise, reports=record.reports, epsilon=record.epsilon,
        ))
        await self.advance()

    async def tick(self) -> None:
        # Plans are idempotent: a fleet that restarted and missed them serves them again, and
        # intermediaries and the observer count each record once.
        if self.party is not None and time.monotonic() - self.last_progress > PLAN_RETRY_S:
            for msg in self.announced:
                await self.bus.publish(self.t("plan"), msg)
            self.last_progress = time.monotonic()
