"""``privbandit users --shard i/N``: a fleet hosting one shard of the simulated users.

The fleet hosts the blocks of every plan's cohort that the family assigns to it (blocks of
:data:`~privbandit.protocol.primitives.seeding.USER_BLOCK` users; by default block b lives on fleet
b mod N), so any number of fleets draws exactly what the in-process engine draws. Each user acts on
the plan and randomizes locally (the family's :class:`~privbandit.protocol.spine.family.UserLogic`,
with the spine's dropouts and adversaries); the fleet sends one record per user, many records to a
message, one message per (round, block), closing the block with its MAC so the intermediary learns
who dropped out. Ground truth goes only to the fleet's metrics topic, MAC'd as well.

A round computed by secure aggregation gets no residues: each user runs Bonawitz et al.'s user
side (:mod:`privbandit.services.secagg_rounds`) with the aggregator, which relays keys and share
ciphertexts and ends up with the sum only.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from privbandit.protocol.primitives.report_auth import ReportAuthenticator, identity_master
from privbandit.protocol.primitives.secagg.batch import UserIdentities
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine.events import Plan, Reports, Round
from privbandit.protocol.spine.parties import Users, blocks_of
from privbandit.services import codec
from privbandit.services.bus import topic_party
from privbandit.services.party import PartyService
from privbandit.services.secagg_rounds import FleetSecAgg

log = logging.getLogger("privbandit.users")

# A plan served again on request is not served again for this long: the requests for its other
# rounds that queued meanwhile are answered by that serve (intermediaries ask again every 3 s).
RESERVE_S = 1.0


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/N, e.g. 0/2") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {text!r}: need 0 ≤ i < N")
    return i, n


def status_tag(auth: ReportAuthenticator, msg: codec.StatusMsg) -> bytes:
    """The fleets' MAC over a status (encoded with an empty tag), bound to its run and party."""
    return auth.mac("status", msg.run, msg.party, payload=codec.tag_payload(msg))


def truth_tag(auth: ReportAuthenticator, msg: codec.TruthMsg) -> bytes:
    """The fleets' MAC over a block's truth (encoded with an empty tag), bound to its run, task, plan
    and block: what a fleet signs and the observer checks."""
    return auth.mac("truth", msg.run, msg.task, msg.plan, msg.block, payload=codec.tag_payload(msg))


@dataclass
class _SecureInputs:
    """A secure round's inputs this fleet holds until the round's last join comes: Anytime-Lazy-UCB's
    array fills over many plans, and its users stay reachable (here) until it is full."""

    cohort: list[np.ndarray] = field(default_factory=list)  # every join's members, all fleets'
    values: dict[int, np.ndarray] = field(default_factory=dict)  # this fleet's reporters' residues (a row each)
    dropouts: list[int] = field(default_factory=list)  # this fleet's members who did not report


class UserFleetService(PartyService):
    role = "users"

    def __init__(self, settings, family, config, shard: int, shards: int, *, report_key: int,
                 fleet_key: int | None = None, identity_key: int | None = None):
        """``report_key``: the users' report-authentication master; ``fleet_key``: this fleet's own
        chunk key; ``identity_key``: the users' identity master (the session's keys,
        :class:`~privbandit.protocol.primitives.report_auth.SessionKeys`). Without the last two a
        plan that joins a secure round is refused."""
        super().__init__(settings, name=f"users-{shard}")
        self.family = family
        self.config = config
        self.shard, self.shards = shard, shards
        self.users: Users | None = None
        self.rounds: dict[int, Round] = {}  # every round the running task's plans opened
        self.served: dict[int, Plan] = {}
        self.truths: dict[tuple[int, int], codec.TruthMsg] = {}  # what the observer got: sent again on resync
        self.reserved: dict[tuple[int, str], float] = {}  # (plan, asker) → when last served again on request
        self.secagg: FleetSecAgg | None = None
        self.secure_inputs: dict[int, _SecureInputs] = {}  # secure rounds whose cohort is not complete yet
        self.identities = None if identity_key is None else UserIdentities(identity_master(identity_key))
        self.auth = ReportAuthenticator(report_key)
        # The fleet's own key for its secure-aggregation chunks: another fleet cannot sign for it.
        self.chunk_auth = None if fleet_key is None else ReportAuthenticator(fleet_key)

    def subscriptions(self):
        relays = [self.t("relay", name) for name in self.family.intermediaries(self.config)]
        return [self.t("control"), self.t("plan"), *relays, self.t("relay", "aggregator", self.name)]

    async def on_task(self, spec: dict) -> None:
        if spec["family"] != self.family.name:
            raise ValueError(f"a {spec['family']} task reached a fleet started with a {self.family.name} file")
        (run,) = spec["runs"]
        label = spec["label"]
        fam, config = self.family, self.config
        self.users = Users(fam.users(config, label, [run]), config.seed, (run, label),
                           fam.dropout_rate(config, label), fam.adversary(config, label, run))
        self.rounds, self.served, self.truths, self.reserved, self.secure_inputs = {}, {}, {}, {}, {}
        self.secagg = FleetSecAgg(self.run_id, spec["index"], self.shard, self.shards, self.identities,
                                  self.publish_secagg, self.chunk_auth, hosting="ring")

    def signed(self, msg: codec.StatusMsg) -> codec.StatusMsg:
        """Fleets share the users' account: their statuses carry the fleets' MAC, as truths do."""
        return msg.model_copy(update={"tag": status_tag(self.auth, msg)})

    async def on_resync(self) -> None:
        for msg in list(self.truths.values()):
            await self.bus.publish(self.t("metrics", self.name), msg)

    async def publish_secagg(self, msg: codec.SecAggMsg) -> None:
        await self.bus.publish(self.t("report", "aggregator"), msg)

    async def on_message(self, name: str, msg) -> None:
        if isinstance(msg, codec.SecAggMsg):
            if not self.current(msg):
                return
            reason = await self.secagg.on_message(msg)
            return self.reject(reason, f"round {msg.round} {msg.step}") if reason else None
        if isinstance(msg, codec.ResendMsg):
            # An intermediary that may have lost our reports asks again; records are idempotent.
            # Serving a plan again sends every round it joins, so the requests for its other rounds
            # that queued meanwhile (a restarted shuffler asks for each of hundreds of rounds) are
            # answered already: one serve per plan per RESERVE_S, or a restarted fleet works through
            # rounds × plan of them and misses the session's end. Only the asker's rounds are sent
            # again: another intermediary of the plan did not ask and may have closed its rounds.
            asker = topic_party(name)
            if self.current(msg):
                for plan in [p for p in self.served.values() if any(j.round_id == msg.round for j in p.joins)]:
                    recent = time.monotonic() - self.reserved.get((plan.id, asker), -math.inf) < RESERVE_S
                    if not recent and not any(self.rounds[j.round_id].secagg for j in plan.joins):
                        log.info("%s serves plan %d again to the %s, as asked", self.name, plan.id, asker)
                        await self.serve_plan(plan, only=asker)
                        self.reserved[plan.id, asker] = time.monotonic()
            return
        if isinstance(msg, codec.CloseMsg):
            return  # for the intermediaries
        if not isinstance(msg, codec.PlanMsg):
            return self.reject("unexpected-kind", msg.kind)
        if not self.current(msg) or msg.plan in self.served:
            return
        plan = msg.to_plan()
        try:
            self.family.check_plan(plan)
            for rnd in plan.opens:  # a graph weaker than the users' threat model gives is refused
                self.family.check_secure_round(self.config, self.task_spec["label"], rnd)
        except ValueError as exc:
            return self.reject("bad-plan", f"plan {plan.id}: {exc}")
        for rnd in plan.opens:
            self.rounds.setdefault(rnd.id, rnd)
        if any(j.round_id not in self.rounds for j in plan.joins):
            return self.reject("unknown-round", f"plan {plan.id} joins a round no plan opened")
        await self.serve_plan(plan)

    async def serve_plan(self, plan: Plan, only: str | None = None) -> None:
        """Answer ``plan`` for this fleet's blocks: truths to the observer, each round's reports to
        its intermediary (``only``: to that intermediary alone, when it asked for them again)."""
        fam = self.users.logic
        mine = [b for b in blocks_of(plan) if fam.shard(plan, b, self.shards) == self.shard]
        log.debug("%s serves plan %d: blocks %s", self.name, plan.id, mine)
        secure = {j.round_id: j for j in plan.joins if self.rounds[j.round_id].secagg is not None}
        members = {rid: j.members() for rid, j in secure.items()}  # once per join, not once per block
        for rid in secure:
            self.secure_inputs.setdefault(rid, _SecureInputs())
        # A secure round's users are spread over the fleets by the graph (round_hosts), not by block: a
        # cohort under 65,536 users is one block, and its protocol's CPU would all fall on one
        # fleet. So every fleet computes every block of such a plan (the same draws: a block's are
        # keyed by the plan and the block), keeps every input until the round's cohort is
        # complete (FleetSecAgg.start runs its own arc's users), and sends the rest only from the
        # blocks it hosts.
        for block in blocks_of(plan) if secure else mine:  # one block at a time: bounded memory, steady traffic
            hosted = block in mine
            reports, truths = self.users.respond(plan, [block], self.rounds)
            # Truth first: once a round's reports are all in, it can be released and the analyzer
            # moves on, never re-announcing its plan; a fleet killed between the two would leave
            # the observer without that truth for good. The other way round, it re-serves both.
            for t in truths if hosted else ():
                msg = codec.truth_msg(self.run_id, self.task_index, t)
                msg = msg.model_copy(update={"tag": truth_tag(self.auth, msg)})
                self.truths[t.plan_id, t.block] = msg
                await self.bus.publish(self.t("metrics", self.name), msg)
            by_round = {r.round_id: r for r in reports}
            start = plan.first_user + block * USER_BLOCK
            block_ids = np.arange(start, min(start + USER_BLOCK, plan.first_user + plan.cohort))
            for j in plan.joins:
                rnd = self.rounds[j.round_id]
                rep = by_round.get(j.round_id) or Reports(j.round_id, plan.id, np.zeros(0, np.int64),
                                                          np.zeros((1, 0, rnd.width), np.int64 if rnd.integer else np.float64))
                if j.round_id in secure:  # every input, held until the round's cohort is complete:
                    # the hosting rule (round_hosts "ring") needs the round's whole graph
                    held = self.secure_inputs[j.round_id]
                    held.values.update(zip(rep.user_ids.tolist(), rep.values[0]))  # width residues each
                    # The join's members here who did not report join the key rounds, then vanish.
                    held.dropouts += np.setdiff1d(np.intersect1d(members[j.round_id], block_ids), rep.user_ids).tolist()
                    continue
                if hosted and (only is None or rnd.intermediary == only):
                    await self.send_reports(plan, rnd, block, rep)
        if secure and (self.chunk_auth is None or self.identities is None):
            raise ValueError(f"plan {plan.id} joins a secure round, and this fleet holds no key to sign its chunks "
                             f"(PRIVBANDIT_FLEET_KEY) or its users' identities (PRIVBANDIT_IDENTITY_KEY)")
        for rid in secure:
            held = self.secure_inputs[rid]
            held.cohort.append(members[rid])
            if sum(c.size for c in held.cohort) == self.rounds[rid].expected:  # the last join has come
                del self.secure_inputs[rid]  # every fleet answers round 0, with no users if it hosts none
                await self.secagg.start(self.rounds[rid], np.concatenate(held.cohort), held.values, held.dropouts)
        self.served[plan.id] = plan

    async def send_reports(self, plan: Plan, rnd: Round, block: int, rep: Reports) -> None:
        """One (round, block)'s records, closing the block for that round."""
        msg = reports_message(self.auth, self.run_id, self.task_index, plan, rnd, block, rep)
        await self.bus.publish(self.t("report", rnd.intermediary), msg)


def reports_message(auth: ReportAuthenticator, run_id: str, task: int, plan: Plan, rnd: Round, block: int,
                    rep: Reports) -> codec.ReportsMsg:
    """One (round, block)'s records as a fleet sends them: each record MAC'd by its user, the
    message closing the block for that round with the fleets' MAC (also what ``privbandit audit
    --transport mqtt`` sends the real intermediary)."""
    ids = rep.user_ids
    msg = codec.ReportsMsg(
        run=run_id, task=task, round=rnd.id, plan=plan.id, user_ids=codec.ids_on_wire(ids),
        values=codec.packed(rep.values, rnd.m, rnd.high, rnd.integer), block=block,
        tags=auth.tags(run_id, task, rnd.id, plan.id, plan.first_user, ids, rep.values))
    return msg.model_copy(update={"block_tag": auth.nonce_mac("block", run_id, task, rnd.id, plan.id, block,
                                                              payload=codec.encode(msg))})
