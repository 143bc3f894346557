"""``privbandit aggregator`` and ``privbandit shuffler``: collect a round's reports, release once.

The aggregator releases the modular sum and nothing else (or, for the local model, forwards the
attributable reports); the shuffler releases a uniformly permuted multiset without ids. Reports are
admitted only from the round's invited cohort, only with the round's modulus, and count once.
A round that does not complete by its deadline is released over the reports that came if the
release threshold allows, else not at all; the failure is reported loudly.

With ``intermediary = "secagg"`` the aggregator never sees a residue: it runs the server side of
Bonawitz et al.'s protocol (:mod:`privbandit.services.secagg_rounds`), relaying keys and
encrypted shares between fleets, and releases the unmasked sum.

With a state directory it checkpoints at every round boundary (a release, or a failed round):
the closed and failed rounds of the running task and the releases of its last two batches. A
restarted intermediary resumes from it: a closed round is never opened twice (so never counted
twice), a re-announced plan of a closed round gets its release again (the analyzer may have lost
it), and a round it opens after the restart, whose reports it may have acknowledged and lost,
is asked for again (:class:`~privbandit.services.codec.ResendMsg`, every ``RESEND_S`` until it
completes); so it is after it regains a lost broker. A secure round is never re-run (not with the
same key material, which would let a server unmask inputs, nor with fresh keys, which would let
it difference two sums over the same inputs): one in flight at a crash aborts at its step
deadline, loudly, naming round and step.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from privbandit.experiment.build import build_mechanism
from privbandit.experiment.config import AlgorithmConfig
from privbandit.protocol.adversaries import report_slack
from privbandit.protocol.events import Reports, RoundPlan
from privbandit.protocol.mechanisms.base import RoundParams
from privbandit.protocol.parties import Intermediary, ProtocolError, Shuffler, shuffle_rng
from privbandit.protocol.report_auth import ReportAuthenticator
from privbandit.protocol.seeding import USER_BLOCK, derive_key, stream
from privbandit.services import codec
from privbandit.services.checkpoint import CheckpointError
from privbandit.services.party import PartyService
from privbandit.services.secagg_rounds import AggregatorSecAgg

log = logging.getLogger("privbandit.intermediary")

DEFAULT_DEADLINE_S = 120.0
KEEP_BATCHES = 2  # releases kept for re-sending: the analyzer's open batch, and the one before
DEFAULT_SECAGG_STEP_S = 30.0  # a secure-aggregation step waits this long for every fleet
# A round asked for again and still incomplete is asked for again this often: a fleet whose broker
# session was not saved before the broker died misses requests sent before it resubscribes.
RESEND_S = 3.0


class IntermediaryService(PartyService):
    family_handlers = {"shuffle-linear-bandits": "privbandit.services.linear:ShufflerHandler"}

    def __init__(self, settings, report_key: int, role: str = "aggregator", deadline_s: float = DEFAULT_DEADLINE_S,
                 shuffle_key: int | None = None, secagg_step_s: float = DEFAULT_SECAGG_STEP_S,
                 state_dir=None):
        if role not in ("aggregator", "shuffler"):
            raise ValueError(f"role {role!r} must be 'aggregator' or 'shuffler'")
        self.role = role
        super().__init__(settings, state_dir=state_dir)
        self.auth = ReportAuthenticator(report_key)
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
        self.released: dict[int, tuple[int, codec.ReleaseMsg]] = {}  # round → (batch, release)
        self.batch_of: dict[int, int] = {}
        # Reports acknowledged to the broker but not checkpointed die with the process: the first
        # task run after a restart (or the one running when the broker came back) asks for them
        # again, for the rounds that can have been open then: batches up to ``recover_upto`` (the
        # analyzer plans batch b + 2 only once b + 1 is released, so later rounds lost nothing).
        self.recover_next_task = self.checkpoint is not None
        self.recover_task: int | None = None
        self.recover_upto = 0
        self.asked: dict[int, float] = {}  # round → when the fleets were last asked to send it again

    def subscriptions(self):
        return [self.t("control"), self.t("plan"), self.t("report", self.role)]

    async def on_task(self, spec: dict) -> None:
        algo = AlgorithmConfig.model_validate(spec["algorithm"])
        self.mechanism = build_mechanism(algo)
        self.range_check = algo.range_check
        wanted = "shuffler" if algo.intermediary == "shuffler" else "aggregator"
        self.active = wanted == self.role
        # The permutation key never travels on the bus: the shuffler derives it from its own
        # master key (reproducible runs), or draws permutations from the OS CSPRNG.
        self.task_key = None if self.shuffle_key is None else derive_key(self.shuffle_key, spec["run"], spec["label"])
        self.forget_waiting()
        self.boxes, self.closed, self.failed = {}, set(), set()
        self.blocks_in: dict[int, set[int]] = {}
        self.released, self.batch_of, self.asked = {}, {}, {}
        saved = self.resumable(spec)
        if saved is not None:
            self.restore(saved)
        if self.recover_next_task:
            self.recover_task, self.recover_next_task = spec["index"], False
            self.recover_upto = self.last_batch() + 1
        self.secagg = None
        if self.active and algo.intermediary == "secagg":
            self.secagg = AggregatorSecAgg(self.run_id, spec["index"], algo.secagg_graph, self.secagg_step_s,
                                           self.relay, self.release_secure, self.abort_secure,
                                           self.rejected, self.auth)
        self.checkpoint_round()

    # --- checkpoints ---------------------------------------------------------------------------
    def last_batch(self) -> int:
        """The latest batch this intermediary has seen a plan of (0: none)."""
        return max([b for b, _ in self.released.values()] + list(self.batch_of.values()), default=0)

    def checkpoint_round(self) -> None:
        """At a round boundary: closed and failed rounds, and the last batches' releases."""
        if self.released:
            last = max(batch for batch, _ in self.released.values())
            self.released = {r: (b, m) for r, (b, m) in self.released.items() if b > last - KEEP_BATCHES}
        self.save_state({"closed": sorted(self.closed), "failed": sorted(self.failed),
                         "releases": [[b, codec.encode(m)] for b, m in self.released.values()]})

    def restore(self, saved: dict) -> None:
        """Closed and failed rounds and kept releases from a checkpoint of the running task."""
        try:
            self.closed = {int(r) for r in saved["closed"]}
            self.failed = {int(r) for r in saved["failed"]}
            for batch, data in saved["releases"]:
                msg = codec.decode(data)
                if not isinstance(msg, codec.ReleaseMsg) or msg.run != self.run_id or msg.round not in self.closed:
                    raise ValueError(f"a {msg.kind} for round {getattr(msg, 'round', '?')} is not a closed round's release")
                self.released[msg.round] = (int(batch), msg)
        except (KeyError, TypeError, ValueError, codec.DecodeError) as exc:
            raise CheckpointError("checkpoint-schema", f"{self.state.path}: {type(exc).__name__}: {exc}") from None
        log.info("resumed task %d from %s: %d closed rounds, %d releases kept", self.task_index,
                 self.state.path, len(self.closed), len(self.released))

    async def on_connect(self) -> None:
        await super().on_connect()
        if self.connections > 1:  # the broker was lost: reports in flight may be gone with it
            if self.task_spec is None:
                self.recover_next_task = True
            else:
                self.recover_task, self.recover_upto = self.task_index, self.last_batch() + 1
                for round_id, (box, _) in self.boxes.items():
                    if box is not None:
                        await self.ask_again(round_id)

    async def ask_again(self, round_id: int) -> None:
        self.asked[round_id] = time.monotonic()
        log.info("%s asks the fleets to send round %d again", self.name, round_id)
        await self.bus.publish(self.t("relay", self.role), codec.ResendMsg(
            run=self.run_id, task=self.task_index, round=round_id))

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
        if msg.round in self.closed and msg.round in self.released:
            # A re-announced plan of a round we released: the analyzer may have lost the release
            # (it restarted); it ignores a release it already decoded.
            return await self.bus.publish(self.t("release", self.role), self.released[msg.round][1])
        if msg.round in self.boxes or msg.round in self.closed or msg.round in self.failed:
            return  # a re-announced plan
        q = msg.params
        plan = RoundPlan(round_id=msg.round, batch=msg.batch, arm=msg.arm, first_user=msg.first_user,
                         cohort=msg.cohort, params=RoundParams(**q.model_dump()), collect=True)
        window = report_slack(self.mechanism, plan.params) if self.range_check and q.m is not None else None
        if self.secagg is not None:
            self.secagg.open(plan)
            box = None  # the protocol state lives in self.secagg
        elif self.role == "shuffler":
            rng = shuffle_rng() if self.task_key is None else stream(self.task_key, "shuffle", msg.round)
            box = Shuffler(plan, self.mechanism, rng, self.rejected, window)
        else:
            box = Intermediary(plan, self.mechanism, self.rejected, window)
        self.boxes[msg.round] = (box, time.monotonic())
        self.batch_of[msg.round] = msg.batch
        log.debug("%s opened round %d (batch %d, %d users)", self.name, msg.round, msg.batch, msg.cohort)
        if self.recover_task == self.task_index and msg.batch <= self.recover_upto and box is not None:
            await self.ask_again(msg.round)
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
        ids, values = self.authentic(msg, box.plan, msg.user_ids.astype(np.int64), values)
        box.receive(Reports(msg.round, ids, values))  # counts its rejections
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

    def authentic(self, msg: codec.ReportsMsg, plan: RoundPlan, ids: np.ndarray, values: np.ndarray):
        """Drop the invited users' records whose MAC is missing or wrong, so a report under another
        user's id never takes the place of the user's own. Ids outside the cohort have no key; they
        go on to the round, which rejects them as ``not-in-cohort``."""
        invited = (ids >= plan.first_user) & (ids < plan.first_user + plan.cohort)
        if msg.tags is None or msg.tags.shape != ids.shape:
            reason, good = "missing-tag" if msg.tags is None else "bad-tag", ~invited
        else:
            reason, good = "bad-tag", ~invited
            good[invited] = self.auth.verify(self.run_id, self.task_index, msg.round, plan.first_user,
                                             ids[invited], values[invited], msg.tags[invited])
        if not good.all():
            self.rejected[reason] += int((~good).sum())
            log.warning("%s dropped %d records of round %d: %s", self.name, int((~good).sum()), msg.round, reason)
        return ids[good], values[good]

    async def relay(self, msg: codec.SecAggMsg) -> None:
        """Aggregator → fleets: deliveries to the fleet they are for, the rest to every fleet."""
        where = ("relay", self.role, f"users-{msg.shard}") if msg.step == "delivery" else ("relay", self.role)
        await self.bus.publish(self.t(*where), msg)

    async def release_secure(self, round_id: int, value: int, n_reports: int) -> None:
        await self.publish_release(round_id, codec.ReleaseMsg(
            run=self.run_id, task=self.task_index, round=round_id, n_reports=n_reports, value=value))

    async def publish_release(self, round_id: int, msg: codec.ReleaseMsg) -> None:
        """Release a round, close it, checkpoint: the round boundary."""
        await self.bus.publish(self.t("release", self.role), msg)
        log.debug("%s released round %d (%d reports)", self.name, round_id, msg.n_reports)
        del self.boxes[round_id]
        self.blocks_in.pop(round_id, None)
        self.closed.add(round_id)
        self.released[round_id] = (self.batch_of.pop(round_id), msg)
        self.checkpoint_round()

    async def abort_secure(self, round_id: int, reason: str) -> None:
        if self.recover_task == self.task_index and self.batch_of.get(round_id, 0) <= self.recover_upto:
            reason += ("; the aggregator restarted (or lost the broker) while this round was in flight, "
                       "and a secure round is never re-run with the same inputs")
        self.failed.add(round_id)
        del self.boxes[round_id]
        self.batch_of.pop(round_id, None)
        self.checkpoint_round()
        await self.status("error", self.task_index, round=round_id, reason=f"round {round_id}: {reason}")

    async def release(self, round_id: int, box: Intermediary, partial: bool = False) -> None:
        rel = box.release(partial)
        reports = None
        if rel.reports is not None:
            reports = codec.packed(rel.reports, box.plan.params.m)
        await self.publish_release(round_id, codec.ReleaseMsg(
            run=self.run_id, task=self.task_index, round=round_id, n_reports=rel.n_reports,
            value=rel.value, reports=reports))

    async def tick(self) -> None:
        if self.secagg is not None:
            return await self.secagg.tick()  # a secure round's deadlines are per step
        now = time.monotonic()
        for round_id, at in list(self.asked.items()):
            if round_id not in self.boxes:
                del self.asked[round_id]  # released, or failed
            elif now - at > RESEND_S:
                await self.ask_again(round_id)
        for round_id, (box, opened) in list(self.boxes.items()):
            if now - opened > self.deadline_s and round_id not in self.failed:
                # Past the deadline the missing users count as dropouts: release over the reports
                # that came if the threshold allows (the analyzer's ledger then records the ε the
                # survivors' noise gives), else release nothing and say so.
                try:
                    await self.release(round_id, box, partial=True)
                except ProtocolError as exc:
                    self.failed.add(round_id)
                    self.checkpoint_round()
                    await self.status("error", self.task_index, round=round_id,
                                      reason=f"round {round_id} missed its {self.deadline_s:.0f} s deadline: "
                                             f"{exc.detail}")
