"""``privbandit aggregator`` and ``privbandit shuffler``: collect a round's reports, release once.

The aggregator releases the modular sum and nothing else (or, for the local model, forwards the
attributable reports); the shuffler releases a uniformly permuted multiset without ids. Reports are
admitted only from the round's invited cohort, only with the round's modulus, and count once.
A round that does not complete by its deadline is released over the reports that came if the
release threshold allows, else not at all; the failure is reported loudly.

With ``intermediary = "secagg"`` the aggregator never sees a residue: it runs the server side of
Bonawitz et al.'s protocol (:mod:`privbandit.services.secagg_rounds`), relaying keys and
encrypted shares between fleets, and releases the unmasked sum.
"""

from __future__ import annotations

import time

import numpy as np

from privbandit.experiment.build import build_mechanism
from privbandit.experiment.config import AlgorithmConfig
from privbandit.protocol.events import Reports, RoundPlan
from privbandit.protocol.mechanisms.base import RoundParams
from privbandit.protocol.parties import Intermediary, ProtocolError, Shuffler, shuffle_rng
from privbandit.protocol.seeding import USER_BLOCK, derive_key, stream
from privbandit.services import codec
from privbandit.services.party import PartyService
from privbandit.services.secagg_rounds import AggregatorSecAgg

DEFAULT_DEADLINE_S = 120.0
DEFAULT_SECAGG_STEP_S = 30.0  # a secure-aggregation step waits this long for every fleet


class IntermediaryService(PartyService):
    family_handlers = {"shuffle-linear-bandits": "privbandit.services.linear:ShufflerHandler"}
    def __init__(self, settings, role: str = "aggregator", deadline_s: float = DEFAULT_DEADLINE_S,
                 shuffle_key: int | None = None, secagg_step_s: float = DEFAULT_SECAGG_STEP_S):
        if role not in ("aggregator", "shuffler"):
            raise ValueError(f"role {role!r} must be 'aggregator' or 'shuffler'")
        self.role = role
        super().__init__(settings)
        self.deadline_s = deadline_s
        self.shuffle_key = shuffle_key
        self.mechanism = None
        self.active = False  # does this task route through us?
        self.boxes: dict[int, tuple[Intermediary, float]] = {}
        self.closed: set[int] = set()
        self.waiting: dict[int, list] = {}  # reports that arrived before their plan
        self.failed: set[int] = set()
        self.blocks_in: dict[int, set[int]] = {}
        self.secagg_step_s = secagg_step_s
        self.secagg: AggregatorSecAgg | None = None

    def subscriptions(self):
        return [self.t("control"), self.t("plan"), self.t("report", self.role)]

    async def on_task(self, spec: dict) -> None:
        algo = AlgorithmConfig.model_validate(spec["algorithm"])
        self.mechanism = build_mechanism(algo)
        wanted = "shuffler" if algo.intermediary == "shuffler" else "aggregator"
        self.active = wanted == self.role
        # The permutation key never travels on the bus: the shuffler derives it from its own
        # master key (reproducible runs), or draws permutations from the OS CSPRNG.
        self.task_key = None if self.shuffle_key is None else derive_key(self.shuffle_key, spec["run"], spec["label"])
        self.forget_waiting()
        self.boxes, self.closed, self.failed = {}, set(), set()
        self.blocks_in: dict[int, set[int]] = {}
        self.secagg = None
        if self.active and algo.intermediary == "secagg":
            self.secagg = AggregatorSecAgg(self.run_id, spec["index"], algo.secagg_graph, self.secagg_step_s,
                                           self.relay, self.release_secure, self.abort_secure,
                                           self.rejected)

    def forget_waiting(self) -> None:
        # Reports held for a round that was never planned were for a round that does not exist.
        self.rejected["wrong-round"] += sum(len(held) for held in self.waiting.values())
        self.waiting = {}

    def on_shutdown(self) -> None:
        super().on_shutdown()
        self.forget_waiting()

    async def on_message(self, name: str, msg) -> None:
        if isinstance(msg, codec.PlanMsg):
            if self.current(msg) and self.active and msg.collect:
                await self.open_round(msg)
        elif isinstance(msg, (codec.ReportsMsg, codec.SecAggMsg)):
            if self.current(msg):
                await self.collect(msg)
        else:
            self.reject("unexpected-kind", msg.kind)

    async def open_round(self, msg: codec.PlanMsg) -> None:
        if msg.round in self.boxes or msg.round in self.closed:
            return  # a re-announced plan
        q = msg.params
        plan = RoundPlan(round_id=msg.round, batch=msg.batch, arm=msg.arm, first_user=msg.first_user,
                         cohort=msg.cohort, params=RoundParams(**q.model_dump()), collect=True)
        if self.secagg is not None:
            self.secagg.open(plan)
            box = None  # the protocol state lives in self.secagg
        elif self.role == "shuffler":
            rng = shuffle_rng() if self.task_key is None else stream(self.task_key, "shuffle", msg.round)
            box = Shuffler(plan, self.mechanism, rng, self.rejected)
        else:
            box = Intermediary(plan, self.mechanism, self.rejected)
        self.boxes[msg.round] = (box, time.monotonic())
        for early in self.waiting.pop(msg.round, []):
            await self.collect(early)

    async def collect(self, msg: codec.ReportsMsg | codec.SecAggMsg) -> None:
        if msg.round in self.closed or msg.round in self.failed:
            return self.reject("round-closed", f"round {msg.round}")
        if msg.round not in self.boxes:
            held = self.waiting.setdefault(msg.round, [])
            if sum(len(v) for v in self.waiting.values()) >= self.MAX_EARLY:
                return self.reject("early-overflow", f"round {msg.round}")
            held.append(msg)
            return
        box, _ = self.boxes[msg.round]
        if (box is None) != isinstance(msg, codec.SecAggMsg):
            return self.reject("wrong-protocol", f"{msg.kind} for round {msg.round}")
        if box is None:
            reason = await self.secagg.on_message(msg)
            return self.reject(reason, f"round {msg.round} {msg.step}") if reason else None
        if msg.m != box.plan.params.m:
            return self.reject("wrong-modulus", f"m={msg.m}, round {msg.round} uses {box.plan.params.m}")
        values = msg.values.astype(np.int64) if msg.values.dtype.kind == "u" else msg.values
        box.receive(Reports(msg.round, msg.user_ids.astype(np.int64), values))  # counts its rejections
        blocks = self.blocks_in.setdefault(msg.round, set())
        if msg.block is not None and msg.block < -(-box.plan.cohort // USER_BLOCK):
            blocks.add(msg.block)
        if box.complete:
            await self.release(msg.round, box)
        elif len(blocks) * USER_BLOCK >= box.plan.cohort:
            # Every block has reported: whoever is missing dropped out. Release over the reports
            # that came if the threshold allows; else wait for stragglers until the deadline.
            try:
                await self.release(msg.round, box, partial=True)
            except ProtocolError:
                pass

    async def relay(self, msg: codec.SecAggMsg) -> None:
        """Aggregator → fleets: deliveries to the fleet they are for, the rest to every fleet."""
        where = ("relay", self.role, f"users-{msg.shard}") if msg.step == "delivery" else ("relay", self.role)
        await self.bus.publish(self.t(*where), msg)

    async def release_secure(self, round_id: int, value: int, n_reports: int) -> None:
        await self.bus.publish(self.t("release", self.role), codec.ReleaseMsg(
            run=self.run_id, task=self.task_index, round=round_id, n_reports=n_reports, value=value))
        del self.boxes[round_id]
        self.closed.add(round_id)

    async def abort_secure(self, round_id: int, reason: str) -> None:
        self.failed.add(round_id)
        del self.boxes[round_id]
        await self.status("error", self.task_index, round=round_id, reason=f"round {round_id}: {reason}")

    async def release(self, round_id: int, box: Intermediary, partial: bool = False) -> None:
        rel = box.release(partial)
        reports = None
        if rel.reports is not None:
            reports = codec.packed(rel.reports, box.plan.params.m)
        await self.bus.publish(self.t("release", self.role), codec.ReleaseMsg(
            run=self.run_id, task=self.task_index, round=round_id, n_reports=rel.n_reports,
            value=rel.value, reports=reports))
        del self.boxes[round_id]
        self.blocks_in.pop(round_id, None)
        self.closed.add(round_id)

    async def tick(self) -> None:
        if self.secagg is not None:
            return await self.secagg.tick()  # a secure round's deadlines are per step
        now = time.monotonic()
        for round_id, (box, opened) in list(self.boxes.items()):
            if now - opened > self.deadline_s and round_id not in self.failed:
                # Past the deadline the missing users count as dropouts: release over the reports
                # that came if the threshold allows (the analyzer's ledger then records the ε the
                # survivors' noise gives), else release nothing and say so.
                try:
                    await self.release(round_id, box, partial=True)
                except ProtocolError as exc:
                    self.failed.add(round_id)
                    await self.status("error", self.task_index, round=round_id,
                                      reason=f"round {round_id} missed its {self.deadline_s:.0f} s deadline: "
                                             f"{exc.detail}")
