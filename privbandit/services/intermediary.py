"""``privbandit aggregator`` and ``privbandit shuffler``: collect rounds' reports, release each once.

One service for every intermediary party and every family. It holds no family code: the rounds the
analyzer's plans open say what to admit and what to release (a modular sum and nothing else; the
reports themselves, attributable; or their uniformly permuted multiset, without ids), and the
sans-I/O :class:`~privbandit.protocol.spine.intermediary.Intermediary` enforces it. A record is
admitted only from a user a plan joined into the round, with a valid MAC, once; a fleet declares a
block of a plan's cohort answered with a MAC'd closing message, and once every block has answered
the missing users count as dropouts. A round that does not complete by its deadline is released over
the reports that came if its threshold allows, else not at all; the failure is reported loudly.

A round with ``secagg`` set is computed by Bonawitz et al.'s protocol: the aggregator never sees a
residue, relays keys and encrypted shares between fleets (:mod:`privbandit.services.secagg_rounds`),
and releases the unmasked sum.

With a state directory it checkpoints at every round boundary (a release, or a failed round): the
closed and failed rounds of the running task and its recent releases. A restarted intermediary
resumes from it: a closed round is never opened twice (so never counted twice), a re-announced
plan of a closed round gets its release again (the analyzer may have lost it), and the rounds it
opens before its first release after the restart, whose reports it may have acknowledged and lost,
are asked for again (:class:`~privbandit.services.codec.ResendMsg`, every ``RESEND_S`` until they
complete); so it is after it regains a lost broker. A secure round is never re-run (not with the
same key material, which would let a server unmask inputs, nor with fresh keys, which would let it
difference two sums over the same inputs): one in flight at a crash aborts at its step deadline,
loudly, naming round and step.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict, deque
from itertools import islice

import numpy as np

from privbandit.protocol.primitives.report_auth import FleetKeys, ReportAuthenticator
from privbandit.protocol.primitives.seeding import USER_BLOCK, derive_key
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Plan, Reports
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.services import codec
from privbandit.services.checkpoint import CheckpointError
from privbandit.services.party import PartyService
from privbandit.services.secagg_rounds import AggregatorSecAgg

log = logging.getLogger("privbandit.intermediary")

DEFAULT_DEADLINE_S = 120.0
DEFAULT_SECAGG_STEP_S = 30.0  # a secure-aggregation step waits this long for every fleet
# A round asked for again and still incomplete is asked for again this often: a fleet whose broker
# session was not saved before the broker died misses requests sent before it resubscribes.
RESEND_S = 3.0
# Releases a checkpoint keeps to answer a re-announced plan (the analyzer restarted and lost one):
# the most recent ones within this budget, however many. A count limit (64) once lost a release:
# the analyzer died with a round's release unsaved, the shuffler released 80 more rounds before it
# too was restarted, and the restarted shuffler, holding the round closed but not its release,
# never answered the analyzer's re-announced plan (concurrent-shuffle, 146 rounds closed).
KEEP_RELEASE_BYTES = 64 * 2**20
# A re-announced plan makes this party ask the fleets again for a round only if no report of the
# round came for this long: the analyzer re-announces after 3 s without a release, and a round of
# 2^25 users takes longer than that to arrive; asking then made every fleet send the whole plan
# again (+50 % report traffic at T = 10⁸, 33 M late copies). With 1 s, fleets still busy computing
# a 2^25-user plan before its first block went out were asked again.
IDLE_S = RESEND_S
# The round counts (the dashboard's round table) go to the observer when they change, at most once
# a tick, and at least this often: the observer then knows the party is up even while no round moves.
ROUNDS_EVERY_S = 5.0


def blocks_of(plan: Plan) -> int:
    return (plan.cohort + USER_BLOCK - 1) // USER_BLOCK


class IntermediaryService(PartyService):
    """One intermediary party (``role``: its name and broker account: ``aggregator``, ``shuffler``,
    or one of several of a role, ``shuffler-2``, which the family's rounds then name)."""

    def __init__(self, settings, report_key: int, role: str = "aggregator", deadline_s: float = DEFAULT_DEADLINE_S,
                 shuffle_key: int | None = None, secagg_step_s: float = DEFAULT_SECAGG_STEP_S,
                 state_dir=None, fleet_master: int | None = None):
        self.role = role
        super().__init__(settings, state_dir=state_dir)
        self.auth = ReportAuthenticator(report_key)
        # Each fleet signs its secure-aggregation chunks with its own key; without the fleets'
        # master no chunk can be checked, so a secure round is refused (``open_plan``).
        self.fleet_keys = None if fleet_master is None else FleetKeys(fleet_master)
        self.deadline_s = deadline_s
        self.shuffle_key = shuffle_key
        self.secagg_step_s = secagg_step_s
        self.box: Intermediary | None = None
        self.plans: dict[int, Plan] = {}  # plans that joined rounds here, for MACs and blocks
        self.closing: dict[int, dict[int, set[int]]] = {}  # round → plan → blocks answered
        self.opened: dict[int, float] = {}  # open round → when
        self.waiting: dict[tuple, list] = {}  # (round, plan) → reports that arrived before their plan
        self.failed: set[int] = set()
        self.released: OrderedDict[int, codec.ReleaseMsg] = OrderedDict()
        self.released_data: dict[int, bytes] = {}  # each release encoded once, for the checkpoints
        self.unsaved_closed: list[int] = []  # rounds closed, and failed, since the last checkpoint
        self.unsaved_failed: list[int] = []
        self.forget_kept()
        self.secagg: AggregatorSecAgg | None = None
        self.box_task: int | None = None  # the task ``box`` collects
        self.previous: tuple[int, dict[int, Plan]] | None = None  # (the last task, its plans asked again)
        self.secure_joined: dict[int, dict[int, np.ndarray]] = {}  # secure round → plan → its join's members
        # Reports acknowledged to the broker but not checkpointed die with the process (or the
        # broker): the rounds opened until the next release are asked for again.
        self.recovering = self.checkpoint is not None
        self.asked: dict[int, float] = {}  # round → when the fleets were last asked to send it again
        # Plans whose reports were asked for again: a fleet answers with every round of the plan
        # this party holds, so some arrive after their round closed. Those are counted apart
        # (``late-resend``), so an honest run's refusals show only what an attacker would cause.
        self.asked_plans: set[int] = set()
        self.moved: dict[int, float] = {}  # round → when its last report was admitted
        self.rounds_sent: tuple = ()
        self.rounds_sent_at = 0.0

    def subscriptions(self):
        return [self.t("control"), self.t("plan"), self.t("report", self.role)]

    async def start_task(self, spec: dict) -> None:
        await self.report_rounds()  # the task that ends here: its final counts, under its own index
        await super().start_task(spec)

    async def on_task(self, spec: dict) -> None:
        # The plans of the task that ends which this party asked the fleets for again: their copies
        # can still come after the next task starts (an analyzer that re-announced under load).
        self.previous = None if self.box is None else (
            self.box_task, {p: self.plans[p] for p in self.asked_plans if p in self.plans})
        self.box_task = spec["index"]
        runs = spec["runs"]
        # The permutation key never travels on the bus: the shuffler derives it from its own
        # master key (reproducible runs), or draws permutations from the OS CSPRNG.
        keys = None if self.shuffle_key is None else [derive_key(self.shuffle_key, r, spec["label"]) for r in runs]
        self.box = Intermediary(self.role, len(runs), keys, self.rejected)
        self.forget_waiting()
        self.plans, self.closing, self.opened, self.failed, self.asked = {}, {}, {}, set(), {}
        self.asked_plans, self.moved, self.secure_joined = set(), {}, {}
        self.released, self.released_data = OrderedDict(), {}
        self.unsaved_closed, self.unsaved_failed = [], []
        self.forget_kept()
        saved = self.resumable(spec)
        if saved is not None:
            self.restore(saved)
        self.secagg = AggregatorSecAgg(self.run_id, spec["index"], self.secagg_step_s, self.relay,
                                       self.release_secure, self.abort_secure, self.rejected, self.fleet_keys)
        self.checkpoint_round()

    # --- checkpoints ---------------------------------------------------------------------------
    def forget_kept(self) -> None:
        # The releases a checkpoint keeps: the longest run of the latest ones within
        # KEEP_RELEASE_BYTES (at least the last one), kept up to date as releases are made rather
        # than found again by walking every release of the task at every round boundary.
        self.kept: deque[int] = deque()
        self.kept_bytes = 0
        self.kept_seen = 0  # how many of ``released`` (in order) ``kept`` has taken in

    def checkpoint_round(self) -> None:
        """At a round boundary: closed and failed rounds, and the recent releases; what is new since
        the last checkpoint goes to its journal (:mod:`~privbandit.services.checkpoint`)."""
        if self.state is None:
            return  # nothing is persisted: nothing to gather
        new = len(self.released) - self.kept_seen
        fresh = list(reversed(list(islice(reversed(self.released), new))))
        for rid in fresh:
            self.kept.append(rid)
            self.kept_bytes += len(self.released_data[rid])
            while len(self.kept) > 1 and self.kept_bytes > KEEP_RELEASE_BYTES:
                self.kept_bytes -= len(self.released_data[self.kept.popleft()])
        self.kept_seen = len(self.released)
        closed, failed, self.unsaved_closed, self.unsaved_failed = self.unsaved_closed, self.unsaved_failed, [], []
        self.save_state(lambda: {"closed": sorted(self.box.closed), "failed": sorted(self.failed),
                                 "releases": [self.released_data[rid] for rid in self.kept]},
                        added={"closed": closed, "failed": failed,
                               "releases": [self.released_data[rid] for rid in fresh]})

    def restore(self, saved: dict) -> None:
        try:
            self.box.closed = {int(r) for r in saved["closed"]}
            self.failed = {int(r) for r in saved["failed"]}
            for data in saved["releases"]:
                msg = codec.decode(data)
                if not isinstance(msg, codec.ReleaseMsg) or msg.run != self.run_id or msg.round not in self.box.closed:
                    raise ValueError(f"a {msg.kind} for round {getattr(msg, 'round', '?')} is not a closed round's release")
                self.released[msg.round] = msg
                self.released_data[msg.round] = bytes(data)
        except (KeyError, TypeError, ValueError, codec.DecodeError) as exc:
            raise CheckpointError("checkpoint-schema", f"{self.state.path}: {type(exc).__name__}: {exc}") from None
        log.info("resumed task %d from %s: %d closed rounds, %d releases kept", self.task_index,
                 self.state.path, len(self.box.closed), len(self.released))

    async def on_connect(self) -> None:
        await super().on_connect()
        if self.connections > 1 and self.box is not None:  # reports in flight may be gone with the broker
            self.recovering = True
            for round_id in list(self.box.rounds):
                await self.ask_again(round_id)

    async def ask_again(self, round_id: int) -> None:
        self.asked[round_id] = time.monotonic()
        self.asked_plans |= {p.id for p in self.plans.values() if any(j.round_id == round_id for j in p.joins)}
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
            if self.current(msg):
                await self.open_plan(msg.to_plan())
        elif isinstance(msg, codec.CloseMsg):
            if self.current(msg):
                for round_id in msg.rounds:  # never to be released: no failure, nothing to wait for
                    if round_id in self.box.rounds:
                        self.box.close(round_id)
                        self.unsaved_closed.append(round_id)
                        self.forget_round(round_id)
        elif isinstance(msg, (codec.ReportsMsg, codec.SecAggMsg)):
            if self.current(msg):
                await self.collect(msg)
        else:
            self.reject("unexpected-kind", msg.kind)

    # --- plans -----------------------------------------------------------------------------------
    async def open_plan(self, plan: Plan) -> None:
        box = self.box
        mine = [r for r in plan.opens if r.intermediary == self.role]
        mine_ids = {r.id for r in mine}
        joins = [j for j in plan.joins if j.round_id in mine_ids or j.round_id in box.rounds
                 or j.round_id in box.closed or j.round_id in self.failed]
        if not joins:
            return
        for j in joins:  # a re-announced plan of a round released: the analyzer may have lost it
            if j.round_id in self.released:
                await self.bus.publish(self.t("release", self.role), self.released[j.round_id])
            elif (plan.id in self.plans and j.round_id in box.rounds and j.round_id not in self.asked
                  and box.rounds[j.round_id].round.secagg is None
                  and self.idle(j.round_id)):
                # A plan announced again while its round is open here and idle: the analyzer has
                # waited for a release in vain, so reports may be lost (sent to this party before
                # it restarted, or with a lost broker, in a round opened after its first release).
                await self.ask_again(j.round_id)
        new = [r for r in mine if r.id not in box.rounds and r.id not in box.closed and r.id not in self.failed]
        try:
            for rnd in new:
                if rnd.secagg is not None and self.fleet_keys is None:
                    raise ProtocolError("no-fleet-keys", f"secure round {rnd.id}: this {self.role} holds no fleet keys "
                                                         f"(PRIVBANDIT_FLEET_MASTER_KEY) to check the fleets' chunks")
                box.open(rnd)
            for j in joins:
                state = box.rounds.get(j.round_id)
                if state is not None and state.round.secagg is not None and j.members().size != j.reports:
                    raise ProtocolError("bad-join", f"secure round {j.round_id}: a join must name its {j.reports} "
                                                    f"reporters, or every user of its range must report")
            box.open_plan(plan)
        except ProtocolError as exc:
            return self.reject(exc.reason, exc.detail)
        self.plans[plan.id] = plan
        for rnd in new:
            self.opened[rnd.id] = time.monotonic()
            log.debug("%s opened round %d (%d reports)", self.name, rnd.id, rnd.expected)
            if self.recovering:
                await self.ask_again(rnd.id)
        self.open_secure(plan, joins)
        for j in joins:  # reports that overtook this plan (MQTT orders per topic only)
            for early in self.waiting.pop((j.round_id, plan.id), []) + self.waiting.pop((j.round_id, None), []):
                await self.collect(early)

    def open_secure(self, plan: Plan, joins) -> None:
        """A secure round runs among its joins' members once the last join has come (one join for
        a cohort round; many for an array filled over many plans), so its cohort is complete."""
        for j in joins:
            state = self.box.rounds.get(j.round_id)
            if (state is None or state.round.secagg is None or j.round_id in self.secagg.rounds
                    or plan.id in self.secure_joined.get(j.round_id, {})):
                continue  # not secure, running already, or a re-announced plan
            parts = self.secure_joined.setdefault(j.round_id, {})
            parts[plan.id] = j.members()
            if sum(m.size for m in parts.values()) == state.round.expected:
                del self.secure_joined[j.round_id]
                self.secagg.open(state.round, np.concatenate(list(parts.values())))

    # --- reports ---------------------------------------------------------------------------------
    async def collect(self, msg: codec.ReportsMsg | codec.SecAggMsg) -> None:
        box = self.box
        if msg.round in box.closed or msg.round in self.failed:
            return self.refuse_late(msg)
        early = msg.round not in box.rounds or (
            isinstance(msg, codec.ReportsMsg) and msg.plan not in self.plans and box.join_of(msg.round, msg.plan) is None
        ) or (isinstance(msg, codec.SecAggMsg) and msg.round in self.secure_joined)
        if early:  # its plan (a secure round's last join) has not reached us yet: hold it (bounded) until it comes
            key = (msg.round, msg.plan if isinstance(msg, codec.ReportsMsg) else None)
            if sum(len(v) for v in self.waiting.values()) >= self.MAX_EARLY:
                return self.reject("early-overflow", f"round {msg.round}")
            self.waiting.setdefault(key, []).append(msg)
            return
        secure = box.rounds[msg.round].round.secagg is not None
        if secure != isinstance(msg, codec.SecAggMsg):
            return self.reject("wrong-protocol", f"{msg.kind} for round {msg.round}")
        if secure:
            reason = await self.secagg.on_message(msg)
            return self.reject(reason, f"round {msg.round} {msg.step}") if reason else None
        join = box.join_of(msg.round, msg.plan)
        if join is None:
            return self.reject("not-joined", f"plan {msg.plan} does not report into round {msg.round}",
                               max(1, msg.user_ids.size))
        plan = self.plans[msg.plan]
        if not self.block_signed(msg, plan, join):
            return
        ids, values = self.authentic(msg, plan, join)
        before = box.rounds[msg.round].received
        box.receive(Reports(msg.round, msg.plan, ids, values))  # counts its refusals
        if box.rounds[msg.round].received > before:  # admitted reports, not refused junk, keep it moving
            self.moved[msg.round] = time.monotonic()  # (its deadline counts from its opening)
        self.close_block(msg, plan)
        await self.release_ready()

    def current(self, msg) -> bool:
        """The running task's messages, as every party; besides, a report of the last task's plans
        this party asked for again is a late copy, refused as :meth:`refuse_late` refuses one
        within its task (not as ``wrong-task``, which an honest run should never show)."""
        last = self.previous
        if last is not None and isinstance(msg, codec.ReportsMsg) and msg.task == last[0] and msg.plan in last[1]:
            self.refuse_late(msg, last[1], set(last[1]), last[0])
            return False
        return super().current(msg)

    def refuse_late(self, msg: codec.ReportsMsg | codec.SecAggMsg, plans: dict[int, Plan] | None = None,
                    asked: set[int] | None = None, task: int | None = None) -> None:
        """A message for a round already closed. Its forged records are refused for what they are
        (a missing or wrong MAC, an id outside the cohort), as they would have been before the
        release, so the refusal counts do not depend on who won a race; the authentic rest are
        late copies: of a plan this party asked for again (``late-resend``), or replayed
        (``round-closed``). A message the fleets' key did not sign is refused whole, as before the
        release (:meth:`block_signed`). ``plans``, ``asked`` and ``task``: the last task's, for its late copies."""
        plans = self.plans if plans is None else plans
        asked = self.asked_plans if asked is None else asked
        plan = plans.get(msg.plan) if isinstance(msg, codec.ReportsMsg) else None
        join = None if plan is None else next((j for j in plan.joins if j.round_id == msg.round), None)
        if join is not None and not self.block_signed(msg, plan, join, task):
            return
        if join is None or msg.user_ids.size == 0:  # nothing to check a record against, or no record
            records = msg.user_ids.size if isinstance(msg, codec.ReportsMsg) else 1
            return self.reject("round-closed", f"round {msg.round}", max(1, records))
        ids, values = self.authentic(msg, plan, join, task)
        if ids.size and values.shape[0] != self.box.runs:  # as the open round would: one row per run
            return self.reject("wrong-shape", f"{ids.size} records of round {msg.round}", int(ids.size))
        outside = (ids < join.first) | (ids >= join.first + join.count)
        if outside.any():
            self.reject("not-in-cohort", f"{int(outside.sum())} records of round {msg.round}", int(outside.sum()))
        if n := int((~outside).sum()):
            self.reject("late-resend" if msg.plan in asked else "round-closed", f"round {msg.round}", n)

    def authentic(self, msg: codec.ReportsMsg, plan: Plan, join, task: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Drop the joined users' records whose MAC is missing or wrong, so a report under another
        user's id never takes the place of the user's own. Ids outside the join have no key; they
        go on to the round, which refuses them as ``not-in-cohort``. ``task``: the MACs' task (the
        running one by default)."""
        ids = msg.user_ids.astype(np.int64)
        values = codec.as_values(msg.values)
        path = (self.run_id, self.task_index if task is None else task, msg.round, plan.id, plan.first_user)
        if msg.tags is not None and (not ids.size or (int(ids.min()) >= join.first
                                                      and int(ids.max()) < join.first + join.count)):
            # a fleet's message: every id joined, so every record is checked as it came (no copies)
            reason, good = "bad-tag", self.auth.verify(*path, ids, values, msg.tags)
        else:
            inside = (ids >= join.first) & (ids < join.first + join.count)
            reason, good = "missing-tag", ~inside
            if msg.tags is not None:
                reason = "bad-tag"
                good[inside] = self.auth.verify(*path, ids[inside], values[:, inside], msg.tags[inside])
        if (bad := ids.size - int(np.count_nonzero(good))) == 0:
            return ids, values
        self.reject(reason, f"{bad} records of round {msg.round}", bad)
        return ids[good], values[:, good]

    def block_signed(self, msg: codec.ReportsMsg, plan: Plan, join, task: int | None = None) -> bool:
        """Whether ``msg`` closes a block of ``plan`` under the fleets' key, as every message a
        fleet sends does (``task``: the MAC's task, the running one by default). A message that does
        not is refused whole, before any record's MAC is computed: its records under ids outside
        the join as ``not-in-cohort`` (a range check), the rest as ``missing-tag`` (no block or no
        tag) or ``bad-block-tag`` (a wrong one); an empty message counts once. Checking this first
        is what bounds a forgery's cost: one Poly1305 pass over the message instead of a MAC per
        record (#32: 4.0 ms for a forged 1,048,576-record, 6.3-MB message, against 48.6 ms before;
        ``benchmarks/bench_decode_bombs.py``)."""
        task = self.task_index if task is None else task
        where = f"round {msg.round}, plan {plan.id}, block {msg.block}"
        if msg.block is not None and msg.block_tag and msg.block < blocks_of(plan) and self.auth.check_nonce_mac(
                msg.block_tag, "block", self.run_id, task, msg.round, plan.id, msg.block,
                payload=codec.encode(msg.model_copy(update={"block_tag": b""}))):
            return True
        ids = msg.user_ids
        outside = int(np.count_nonzero((ids < join.first) | (ids >= join.first + join.count)))
        if outside:
            self.reject("not-in-cohort", f"{outside} records of {where}, in a message no fleet signed", outside)
        if ids.size - outside or not ids.size:
            reason = "missing-tag" if msg.block is None or not msg.block_tag else "bad-block-tag"
            self.reject(reason, where, max(1, ids.size - outside))
        return False

    def close_block(self, msg: codec.ReportsMsg, plan: Plan) -> None:
        """A fleet says every user of one block of the plan has answered for this round (``msg``
        is :meth:`block_signed`)."""
        closed = self.closing.setdefault(msg.round, {}).setdefault(plan.id, set())
        closed.add(msg.block)
        if len(closed) == blocks_of(plan):
            self.box.answered(plan.id, msg.round)

    # --- releases --------------------------------------------------------------------------------
    async def release_ready(self) -> None:
        for round_id in self.box.starved():
            await self.fail(round_id, f"every user answered but only {self.box.received(round_id)} reports "
                                      f"came, below the threshold")
        for round_id in self.box.ready():
            rnd = self.box.rounds[round_id].round
            await self.publish_release(round_id, codec.release_msg(
                self.run_id, self.task_index, self.box.release(round_id, partial=True), rnd))

    async def publish_release(self, round_id: int, msg: codec.ReleaseMsg) -> None:
        """Release a round, close it, checkpoint: the round boundary."""
        await self.bus.publish(self.t("release", self.role), msg)
        log.debug("%s released round %d (%d reports)", self.name, round_id, msg.n_reports)
        self.box.close(round_id)
        self.unsaved_closed.append(round_id)
        self.forget_round(round_id)
        self.released[round_id] = msg
        if self.state is not None:  # the encoding is for the checkpoints only
            self.released_data[round_id] = codec.encode(msg)
        self.recovering = False
        self.checkpoint_round()

    def idle(self, round_id: int) -> bool:
        """No report of the round for ``IDLE_S`` since it opened or its last report came."""
        last = self.moved.get(round_id, self.opened.get(round_id, -math.inf))
        return time.monotonic() - last > IDLE_S

    def forget_round(self, round_id: int) -> None:
        self.opened.pop(round_id, None)
        self.moved.pop(round_id, None)
        self.asked.pop(round_id, None)
        self.closing.pop(round_id, None)

    async def fail(self, round_id: int, reason: str) -> None:
        self.failed.add(round_id)
        self.unsaved_failed.append(round_id)
        self.box.close(round_id)
        self.unsaved_closed.append(round_id)
        self.forget_round(round_id)
        self.checkpoint_round()
        await self.status("error", self.task_index, round=round_id, reason=f"round {round_id}: {reason}")

    async def relay(self, msg: codec.SecAggMsg) -> None:
        """Aggregator → fleets: deliveries to the fleet they are for, the rest to every fleet."""
        where = ("relay", self.role, f"users-{msg.shard}") if msg.step == "delivery" else ("relay", self.role)
        await self.bus.publish(self.t(*where), msg)

    async def release_secure(self, round_id: int, value: np.ndarray, n_reports: int) -> None:
        await self.publish_release(round_id, codec.ReleaseMsg(
            run=self.run_id, task=self.task_index, round=round_id, n_reports=n_reports,
            values=np.asarray(value, dtype=np.int64).reshape(1, -1)))  # one run: the round's width of sums

    async def abort_secure(self, round_id: int, reason: str) -> None:
        if self.recovering:
            reason += ("; the aggregator restarted (or lost the broker) while this round was in flight, "
                       "and a secure round is never re-run with the same inputs")
        await self.fail(round_id, reason)

    async def report_rounds(self) -> None:
        """The running task's round counts to the observer, if they changed or are due. Only
        counts: the observer may know how many rounds an intermediary holds, not what they hold."""
        if self.box is None:
            return
        counts = {**self.box.counts(), "released": len(self.released), "failed": len(self.failed)}
        now = time.monotonic()
        if (self.task_index, counts) != self.rounds_sent or now - self.rounds_sent_at >= ROUNDS_EVERY_S:
            self.rounds_sent, self.rounds_sent_at = (self.task_index, counts), now
            await self.status("rounds", self.task_index, **counts)

    async def before_stats(self) -> None:
        await self.report_rounds()

    async def tick(self) -> None:
        if self.box is None:
            return
        await self.report_rounds()
        await self.secagg.tick()  # a secure round's deadlines are per step
        now = time.monotonic()
        for round_id, at in list(self.asked.items()):
            if now - at > RESEND_S:
                await self.ask_again(round_id)
        for round_id, opened in list(self.opened.items()):
            state = self.box.rounds.get(round_id)
            if state is None or state.round.secagg is not None or now - opened <= self.deadline_s:
                continue
            # Past the deadline the missing users count as dropouts: release over the reports that
            # came if the threshold allows (the analyzer's ledger then records the ε the survivors'
            # noise gives), else release nothing and say so.
            if state.received >= state.round.min_reports:
                await self.publish_release(round_id, codec.release_msg(
                    self.run_id, self.task_index, self.box.release(round_id, partial=True), state.round))
            else:
                await self.fail(round_id, f"missed its {self.deadline_s:.0f} s deadline: {state.received} of "
                                          f"{state.round.expected} reports, threshold {state.round.min_reports}; "
                                          f"nothing released")
