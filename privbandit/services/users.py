"""``privbandit users --shard i/N``: a fleet hosting one shard of the simulated users.

The fleet owns every user block b with b mod N = i (blocks of seeding.USER_BLOCK users), so any
number of fleets draws exactly what the in-process engine draws. Each user randomizes locally; the
fleet sends one record per user (id, message), many records to an MQTT message, one message per
block. Ground truth goes only to the fleet's metrics topic.

Under ``intermediary = "secagg"`` the fleet's users do not send their residues: each one runs
Bonawitz et al.'s user side (:mod:`privbandit.services.secagg_rounds`) with the aggregator, which
relays keys and share ciphertexts and ends up with the sum only.
"""

from __future__ import annotations

import logging

import numpy as np

from privbandit.experiment.build import build_adversary, build_mechanism
from privbandit.experiment.config import AlgorithmConfig, ExperimentConfig
from privbandit.experiment.runner import instance_for
from privbandit.protocol.events import RoundPlan
from privbandit.protocol.secagg.batch import UserIdentities
from privbandit.protocol.report_auth import ReportAuthenticator
from privbandit.protocol.seeding import USER_BLOCK, report_auth_master, users_identity_master
from privbandit.protocol.mechanisms.base import RoundParams
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.parties import UserPopulation
from privbandit.services import codec
from privbandit.services.party import PartyService
from privbandit.services.secagg_rounds import FleetSecAgg


log = logging.getLogger("privbandit.users")


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/N, e.g. 0/2") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {text!r}: need 0 ≤ i < N")
    return i, n


class UserFleetService(PartyService):
    role = "users"
    family_handlers = {"shuffle-linear-bandits": "privbandit.services.linear:UsersHandler"}

    def __init__(self, settings, config: ExperimentConfig, shard: int, shards: int):
        super().__init__(settings, name=f"users-{shard}")
        self.config = config
        self.shard, self.shards = shard, shards
        self.population: UserPopulation | None = None
        self.intermediary = "aggregator"
        self.served: dict[int, codec.PlanMsg] = {}
        self.truths: dict[tuple[int, int], codec.TruthMsg] = {}  # what the observer got: sent again on resync
        self.secagg: FleetSecAgg | None = None
        self.identities = UserIdentities(users_identity_master(config.seed))
        self.auth = ReportAuthenticator(report_auth_master(config.seed))

    def subscriptions(self):
        return [self.t("control"), self.t("plan"), self.t("relay", "aggregator"),
                self.t("relay", "aggregator", self.name), self.t("relay", "shuffler")]

    async def on_task(self, spec: dict) -> None:
        algo = AlgorithmConfig.model_validate(spec["algorithm"])
        self.intermediary = "shuffler" if algo.intermediary == "shuffler" else "aggregator"
        instance, mechanism, prefix = instance_for(self.config, spec["run"]), build_mechanism(algo), (spec["run"], spec["label"])
        self.population = UserPopulation(
            instance, mechanism, self.config.seed,
            checkpoint_grid(self.config.horizon, self.config.checkpoints), prefix,
            algo.dropout_rate, build_adversary(algo, mechanism, self.config.seed, prefix, instance),
        )
        self.served = {}
        self.truths = {}
        self.secagg = None
        if algo.intermediary == "secagg":
            self.secagg = FleetSecAgg(self.run_id, spec["index"], self.shard, self.shards, algo.secagg_graph,
                                      self.identities, self.publish_secagg, self.auth)

    async def on_resync(self) -> None:
        for msg in list(self.truths.values()):
            await self.bus.publish(self.t("metrics", self.name), msg)

    async def publish_secagg(self, msg: codec.SecAggMsg) -> None:
        await self.bus.publish(self.t("report", "aggregator"), msg)

    async def on_message(self, name: str, msg) -> None:
        if isinstance(msg, codec.SecAggMsg):
            if not self.current(msg):
                return
            if self.secagg is None:
                return self.reject("secagg-not-running", f"round {msg.round}")
            reason = await self.secagg.on_message(msg)
            return self.reject(reason, f"round {msg.round} {msg.step}") if reason else None
        if isinstance(msg, codec.ResendMsg):
            # An intermediary that may have lost our reports asks again; records are idempotent.
            plan = self.served.get(msg.round)
            if self.current(msg) and plan is not None and self.secagg is None:
                log.info("%s sends round %d again, as asked", self.name, msg.round)
                await self.serve_plan(plan)
            return
        if not isinstance(msg, codec.PlanMsg):
            return self.reject("unexpected-kind", msg.kind)
        if self.current(msg) and msg.round not in self.served:
            await self.serve_plan(msg)

    async def serve_plan(self, msg: codec.PlanMsg) -> None:
        plan = RoundPlan(round_id=msg.round, batch=msg.batch, arm=msg.arm, first_user=msg.first_user,
                         cohort=msg.cohort, params=RoundParams(**msg.params.model_dump()), collect=msg.collect)
        mine = [b for b in self.population.blocks(plan) if b % self.shards == self.shard]
        log.debug("%s serves round %d: blocks %s", self.name, msg.round, mine)
        secure = self.secagg is not None and plan.collect
        values, dropouts = {}, []
        for block in mine:  # one block at a time: bounded memory, steady traffic
            reports, truths = self.population.respond(plan, [block])
            # Truth first: once a round's reports are all in, it can be released and the analyzer
            # moves on, never re-announcing its plan; a fleet killed between the two would leave
            # the observer without that truth for good. The other way round, it re-serves both.
            for t in truths:
                self.truths[t.round_id, t.block] = codec.TruthMsg(
                    run=self.run_id, task=self.task_index, round=t.round_id, block=t.block,
                    first_user=t.first_user, size=t.size, gap=t.gap, realized_regret=t.realized_regret,
                    realized_at=t.realized_at_checkpoints, reward_sum=t.reward_sum,
                    noise_sum=int(t.noise_sum), attackers=t.attackers)
                await self.bus.publish(self.t("metrics", self.name), self.truths[t.round_id, t.block])
            if secure:
                start = plan.first_user + block * USER_BLOCK
                ids = np.arange(start, min(start + USER_BLOCK, plan.first_user + plan.cohort))
                sent = np.zeros(0, np.int64)
                if reports is not None:
                    sent = reports.user_ids
                    values.update(zip(sent.tolist(), reports.values.tolist()))
                dropouts += np.setdiff1d(ids, sent).tolist()  # they join rounds 0–1, then vanish
            elif reports is not None:
                await self.bus.publish(self.t("report", self.intermediary), codec.ReportsMsg(
                    run=self.run_id, task=self.task_index, round=plan.round_id, m=plan.params.m,
                    user_ids=reports.user_ids.astype("<u4" if reports.user_ids[-1] < 2**32 else "<u8"),
                    values=codec.packed(reports.values, plan.params.m), block=block,
                    tags=self.auth.tags(self.run_id, self.task_index, plan.round_id, plan.first_user,
                                        reports.user_ids, reports.values)))
        if secure:  # every fleet answers round 0, with no users if it hosts none of this cohort
            await self.secagg.start(plan, values, dropouts)
        self.served[msg.round] = msg
