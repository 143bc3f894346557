"""Secure-aggregation rounds over the bus: chunked SecAggMsg ⇄ the batches of
:mod:`privbandit.protocol.primitives.secagg.batch`, and the two step machines that drive them.

Every fleet answers every step of every secure round, with at least one (maybe empty) chunk
marked ``final``, so the aggregator knows when a step is complete without knowing which fleet
hosts whom. A step that is not complete by its deadline goes on with what came: the missing users
are dropouts, and Bonawitz et al.'s recovery (or a loud abort) follows.

A deadline must tell a dropout from a slow machine (issue #32 item 7). A fleet is a process that
answers the steps of every secure round in turn; on a starved machine (two busy loops per core)
it answered a batch of ten 512- or 1,024-user rounds' ``shares`` steps one after another over more
than 30 s, and every round past the deadline aborted for want of "live" users that were working. So a
step past its deadline waits on while a fleet it still lacks shows it is alive: a new chunk of
that fleet admitted (a valid MAC, not a duplicate; any round) within the last deadline. A fleet
computes a step off its event loop, and meanwhile sends an empty, non-final chunk of the step every
:data:`HEARTBEAT_S` (numbered from :data:`HEARTBEAT_CHUNK`, past any data chunk), so a fleet that
takes minutes over one large round is heard from too. A fleet that died, or lost the broker, sends
nothing, and its users are dropouts one deadline after the step opened (or after its last chunk),
as before. A live fleet that keeps a step waiting is waited for at most :data:`STEP_EXTEND_MAX`
deadlines in all.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from privbandit.protocol.primitives.report_auth import FleetKeys, ReportAuthenticator
from privbandit.protocol.primitives.secagg.batch import (
    ADVERT_RECORD,
    BatchError,
    CIPHERTEXT_BYTES,
    Adverts,
    AggregatorRound,
    FleetRound,
    Masked,
    Shares,
    Unmasks,
    concat,
    round_setup,
    rows_of,
)
from privbandit.protocol.primitives.secagg.errors import SecAggError
from privbandit.protocol.primitives.secagg.graph import MaskingGraph, contiguous_hosts
from privbandit.protocol.primitives.secagg.protocol import LIMBS
from privbandit.services import codec

CHUNK_BYTES = 4 * 2**20  # well under codec.MAX_MESSAGE_BYTES
_ROW_BYTES = {"advertise": 8 + ADVERT_RECORD, "directory": 8 + ADVERT_RECORD, "shares": 16 + CIPHERTEXT_BYTES,
              "delivery": 16 + CIPHERTEXT_BYTES, "masked": 16, "survivors": 8, "unmask": 17 + 4 * LIMBS}
NEXT = {"advertise": "directory", "shares": "delivery", "masked": "survivors", "unmask": None}
FLEET_STEPS = ("advertise", "shares", "masked", "unmask")
# A step waits on for a fleet that is still sending chunks at most this many deadlines in all: a
# fleet alive but withholding one round's step (a corrupt one) cannot hold it for ever. 10 × the
# 30-s default is 300 s, beyond the observer's 240-s stall deadline for a session that moves not
# at all, and 3× the slowest step measured under starvation (95 s: docs/secure-aggregation.md).
STEP_EXTEND_MAX = 10
# A fleet computing a step (key generation, share encryption, masking: 20 s for 10⁴ users on an
# idle core) says it is alive this often, with an empty chunk of the step, far inside any deadline.
HEARTBEAT_S = 1.0
HEARTBEAT_CHUNK = 2**31  # heartbeat chunks are numbered from here; a step's data chunks from 0

Send = Callable[[codec.SecAggMsg], Awaitable[None]]

log = logging.getLogger("privbandit.secagg")


def secure_host(users: np.ndarray, shards: int) -> np.ndarray:
    """The fleet that runs each user's side of a secure round under the ``"id"`` hosting rule:
    user u on fleet u mod N. Public, so the aggregator routes each share ciphertext to its
    recipient's fleet; by id rather than by 65,536-user block, so a round's protocol work is
    spread over every fleet. Needs no graph, so a fleet can keep its users' inputs block by block,
    before the round's cohort is complete."""
    return np.asarray(users, dtype=np.int64) % shards


HOSTING = ("id", "ring")


def round_hosts(graph: MaskingGraph, users, shards: int, hosting: str) -> np.ndarray:
    """The fleet of each of ``users`` in a round of ``graph``. ``"id"``: :func:`secure_host`.
    ``"ring"``: :func:`~privbandit.protocol.primitives.secagg.graph.contiguous_hosts`, the
    masking graph's ring cut into one arc per fleet, so that all but the edges across the arcs'
    ends join two users of one fleet, whose pairwise keys that fleet derives once for both
    (:class:`~privbandit.protocol.primitives.secagg.keys.CheckedAdverts`), and a fleet reads the
    advertisements of its own arc and of k/2 users past either end only (issue #33). ``"ring"``
    needs the round's whole cohort (the graph), so a fleet using it must keep every user's input
    until the round starts. Both are public rules: every fleet and the aggregator compute them."""
    if hosting == "id":
        return secure_host(users, shards)
    if hosting == "ring":
        return contiguous_hosts(graph, users, shards)
    raise ValueError(f"hosting must be one of {HOSTING}, got {hosting!r}")


@dataclass
class RoundCost:
    """What one party spent on one secure round, logged when the round ends (one line per party;
    benchmarks/bench_secagg.py --fleets reads it).

    ``cpu``: seconds of this process's CPU (``time.process_time``) while it handled the round's
    messages, per step: decoding and checking chunks, the protocol's work, encoding, MACs and
    handing the chunks to the bus; CPU the process spent meanwhile on anything else (another
    round's messages, the bus's own I/O while it waited) counts too, so it is an upper bound when
    rounds overlap. ``sent``: payload bytes of the chunks it published, per step. ``wall``: seconds
    from the round's start here (a fleet's round 0, the aggregator's opening) to its end."""

    round_id: int
    users: int  # a fleet: its users in the round; the aggregator: the round's cohort
    degree: int = 0  # the graph's k and t
    threshold: int = 0
    survivors: int | None = None  # the aggregator, once released: |U₃|, whose inputs the sum covers
    extended: float = 0.0  # the aggregator: seconds its steps waited past the deadline for live fleets
    cpu: Counter = field(default_factory=Counter)
    sent: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    wall: float | None = None

    def end(self) -> None:
        self.wall = time.monotonic() - self.started

    def line(self, party: str, outcome: str) -> str:
        steps = ", ".join(f"{k} {v:.3f}" for k, v in self.cpu.items())
        sent = ", ".join(f"{k} {v}" for k, v in self.sent.items())
        kept = "" if self.survivors is None else f", survivors {self.survivors}"
        waited = f", extended_s {self.extended:.3f}" if self.extended else ""
        return (f"secagg cost: {party} round {self.round_id} {outcome}: users {self.users}{kept}, k {self.degree}, "
                f"t {self.threshold}, cpu_s {sum(self.cpu.values()):.3f} ({steps}), sent_bytes {sum(self.sent.values())} ({sent}), "
                f"wall_s {self.wall:.3f}{waited}")


class _Timed:
    """``with _Timed(cost, step):`` adds the block's process CPU to ``cost.cpu[step]``."""

    def __init__(self, cost: RoundCost | None, step: str):
        self.cost, self.step = cost, step

    def __enter__(self):
        self.t0 = time.process_time()

    def __exit__(self, *exc):
        if self.cost is not None:
            self.cost.cpu[self.step] += time.process_time() - self.t0


def _u(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64).astype("<u8")


def to_messages(step: str, batch, *, run: str, task: int, round_id: int, shard: int, shards: int
                ) -> list[codec.SecAggMsg]:
    """One step's batch as chunks of ≤ CHUNK_BYTES, the last marked final (at least one chunk)."""
    if step in ("advertise", "directory"):
        cols = {"ids": batch.ids}
        rec, width = batch.records, ADVERT_RECORD
    elif step in ("shares", "delivery"):
        cols = {"ids": batch.senders, "peers": batch.recipients}
        rec, width = batch.ciphertexts, CIPHERTEXT_BYTES
    elif step == "masked":
        cols, rec, width = {"ids": batch.ids, "values": batch.values}, b"", 0
    elif step == "survivors":
        cols, rec, width = {"ids": batch}, b"", 0
    else:
        cols = {"ids": batch.responders, "peers": batch.owners, "kinds": batch.kinds}
        rec, width = b"", 0
    n = len(cols["ids"])
    row = _ROW_BYTES[step]
    if step == "masked":  # a user's masked input is the round's width of residues, sent flat
        values = rows_of(batch.values, n)
        row += 8 * (values.shape[1] - 1)
        cols["values"] = values
    per = max(1, CHUNK_BYTES // row)
    out = []
    for c, lo in enumerate(range(0, max(n, 1), per)):
        hi = min(n, lo + per)
        fields = {k: _u(v[lo:hi]).reshape(-1) for k, v in cols.items()}
        if step == "unmask":
            fields["kinds"] = np.asarray(cols["kinds"][lo:hi]).astype("|u1")
            fields["limbs"] = np.asarray(batch.limbs[lo * LIMBS: hi * LIMBS]).astype("<u4")
        out.append(codec.SecAggMsg(run=run, task=task, round=round_id, step=step, shard=shard, shards=shards,
                                   chunk=c, final=hi >= n, records=rec[lo * width: hi * width], **fields))
    return out


def _empty(step: str):
    """A fleet's step batch with no row (a heartbeat's, or a fleet hosting none of the round)."""
    none = np.zeros(0, np.int64)
    return {"advertise": lambda: Adverts(none, b""), "shares": lambda: Shares(none, none, b""),
            "masked": lambda: Masked(none, np.zeros((0, 1), np.int64)),
            "unmask": lambda: Unmasks(none, none, none, none)}[step]()


def from_messages(step: str, msgs: list[codec.SecAggMsg]):
    """Chunks of one step back into one batch; :class:`BatchError` if they do not fit together."""
    def ids(m):
        return np.asarray(m.ids).astype(np.int64)

    def need(m, *names):
        for name in names:
            if getattr(m, name) is None:
                raise BatchError(f"{step} chunk lacks {name}")

    if step in ("advertise", "directory"):
        return concat([Adverts(ids(m), m.records) for m in msgs], Adverts)
    if step in ("shares", "delivery"):
        for m in msgs:
            need(m, "peers")
        return concat([Shares(ids(m), np.asarray(m.peers).astype(np.int64), m.records) for m in msgs], Shares)
    if step == "masked":
        for m in msgs:
            need(m, "values")
        # rows_of refuses values that are not as many residues for every id
        return concat([Masked(ids(m), rows_of(np.asarray(m.values).astype(np.int64), len(m.ids))) for m in msgs],
                      Masked)
    if step == "survivors":
        return np.concatenate([ids(m) for m in msgs] or [np.zeros(0, np.int64)])
    for m in msgs:
        need(m, "peers", "kinds", "limbs")
    return concat([Unmasks(ids(m), np.asarray(m.peers).astype(np.int64), np.asarray(m.kinds).astype(np.int64),
                           np.asarray(m.limbs).astype(np.int64)) for m in msgs], Unmasks)


class _Inbox:
    """Chunks of one step: deduplicated by (shard, chunk), complete when every shard's final came."""

    def __init__(self):
        self.chunks: dict[tuple[int, int], codec.SecAggMsg] = {}
        self.finals: set[int] = set()
        self.shards: int | None = None
        self.opened = time.monotonic()

    def add(self, msg: codec.SecAggMsg) -> str | None:
        """None if accepted; ``duplicate`` for a redelivered copy; ``secagg-conflicting-chunk`` for
        a different chunk under the same (fleet, number): a replay or an impersonation (fleets
        share one broker account), which must not silently displace the genuine one."""
        seen = self.chunks.get((msg.shard, msg.chunk))
        if seen is not None:
            return "duplicate" if codec.encode(seen) == codec.encode(msg) else "secagg-conflicting-chunk"
        self.chunks[msg.shard, msg.chunk] = msg
        if msg.final:
            self.finals.add(msg.shard)
        return None

    def complete(self, shards: int) -> bool:
        return len(self.finals) >= shards

    def messages(self) -> list[codec.SecAggMsg]:
        return [self.chunks[k] for k in sorted(self.chunks)]


class FleetSecAgg:
    """A fleet's secure rounds: its users' :class:`FleetRound` per round, advanced by the
    aggregator's directory, delivery and survivor messages."""

    def __init__(self, run: str, task: int, shard: int, shards: int, identities, send: Send,
                 auth: ReportAuthenticator, hosting: str = "id"):
        if hosting not in HOSTING:
            raise ValueError(f"hosting must be one of {HOSTING}, got {hosting!r}")
        self.run, self.task, self.shard, self.shards = run, task, shard, shards
        self.hosting = hosting  # the public rule that puts a round's users on fleets (round_hosts)
        self.identities = identities
        self.auth = auth
        self.send = send
        self.rounds: dict[int, FleetRound] = {}
        self.inboxes: dict[tuple[int, str], _Inbox] = {}
        self.aborted: dict[str, int] = {}
        self.costs: dict[int, RoundCost] = {}  # rounds in flight; finished ones go to the log
        self.finished: deque[RoundCost] = deque(maxlen=256)  # … and the last ones here
        self.beats = itertools.count(HEARTBEAT_CHUNK)  # heartbeat chunk numbers: each chunk is new

    async def _publish(self, step: str, round_id: int, batch, update: dict | None = None) -> None:
        cost = self.costs.get(round_id)
        for msg in to_messages(step, batch, run=self.run, task=self.task, round_id=round_id,
                               shard=self.shard, shards=self.shards):
            msg = msg if update is None else msg.model_copy(update=update)
            signed = msg.model_copy(update={"tag": self.auth.mac(
                "secagg-chunk", self.run, self.task, self.shard, payload=codec.encode(msg))})
            if cost is not None:
                cost.sent[step] += len(codec.encode(signed))
            await self.send(signed)

    async def _computing(self, step: str, round_id: int, work, *args):
        """``work(*args)`` in a worker thread, one at a time (the fleet's handler awaits it, so
        steps are computed in the order they came); meanwhile the event loop sends an empty,
        non-final chunk of ``step`` every :data:`HEARTBEAT_S`, which tells the aggregator this
        fleet is slow, not gone."""
        done = asyncio.Event()

        async def beat():
            while True:
                try:
                    return await asyncio.wait_for(done.wait(), HEARTBEAT_S)
                except asyncio.TimeoutError:  # still computing; a beat in flight is never cut short
                    await self._publish(step, round_id, _empty(step), {"chunk": next(self.beats), "final": False})

        beating = asyncio.create_task(beat())
        try:
            return await asyncio.to_thread(work, *args)
        finally:
            done.set()
            await beating

    async def start(self, rnd, cohort: np.ndarray, values: dict[int, np.ndarray], dropouts: list[int]) -> None:
        """Round 0 for this fleet's users of round ``rnd``, whose users are ``cohort`` (its joins'
        members, ``rnd.expected`` of them). ``values`` (reporting users' inputs) and ``dropouts``
        hold at least the users :func:`round_hosts` puts on this fleet, possibly none (then an
        empty final chunk); this fleet runs those and ignores the rest."""
        cost = self.costs[rnd.id] = RoundCost(rnd.id, 0)

        def setup():
            config, graph = round_setup(self.run, self.task, rnd.id, cohort, rnd.m, rnd.secagg,
                                        rnd.secagg_degree, rnd.secagg_threshold, rnd.width)
            given = np.asarray([*values, *dropouts], dtype=np.int64)
            here = set(given[round_hosts(graph, given, self.shards, self.hosting) == self.shard].tolist())
            fleet = FleetRound(config, graph, self.identities, {u: v for u, v in values.items() if u in here},
                               [u for u in dropouts if u in here])
            cost.users = len(here)
            return graph, fleet, fleet.advertise()

        with _Timed(cost, "advertise"):
            graph, fleet, adverts = await self._computing("advertise", rnd.id, setup)
            cost.degree, cost.threshold = graph.degree, graph.threshold
            self.rounds[rnd.id] = fleet
            await self._publish("advertise", rnd.id, adverts)

    async def on_message(self, msg: codec.SecAggMsg) -> str | None:
        """Returns a rejection reason, or None."""
        fleet = self.rounds.get(msg.round)
        if fleet is None:
            return "secagg-unknown-round"
        if msg.step not in ("directory", "delivery", "survivors"):
            return "secagg-wrong-direction"
        if msg.step == "delivery" and msg.shard != self.shard:
            return None  # another fleet's mail
        answer = {"directory": "shares", "delivery": "masked", "survivors": "unmask"}[msg.step]
        cost = self.costs.get(msg.round)
        with _Timed(cost, answer):
            try:
                from_messages(msg.step, [msg])
            except BatchError:
                return "secagg-malformed"
            box = self.inboxes.setdefault((msg.round, msg.step), _Inbox())
            refused = box.add(msg)
            if refused:
                return refused
            if not msg.final:
                return None
            batch = from_messages(msg.step, box.messages())
            del self.inboxes[msg.round, msg.step]
            work = {"directory": fleet.share, "delivery": fleet.mask, "survivors": fleet.unmask}[msg.step]
            await self._publish(answer, msg.round, await self._computing(answer, msg.round, work, batch))
            if msg.step == "survivors":
                for reason, count in fleet.aborted.items():
                    self.aborted[reason] = self.aborted.get(reason, 0) + count
                del self.rounds[msg.round]
        if msg.step == "survivors" and cost is not None:
            cost.end()
            self.finished.append(self.costs.pop(msg.round))
            log.info(cost.line(f"users-{self.shard}", "done"))
        return None


def _origins(msgs: list[codec.SecAggMsg]) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, fleets)``: each advertised user, sorted, and the fleet whose chunk carried it (the
    last one, in the order the server reads the chunks, if two did: the advertisement it keeps)."""
    ids = [np.asarray(m.ids).astype(np.int64) for m in msgs]
    if not ids or not sum(a.size for a in ids):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    users = np.concatenate(ids)
    fleets = np.concatenate([np.full(a.size, m.shard, dtype=np.int64) for a, m in zip(ids, msgs)])
    last = users.size - 1 - np.unique(users[::-1], return_index=True)[1]  # each id's last row
    return users[last], fleets[last]


class AggregatorSecAgg:
    """The aggregator's secure rounds: collect a step from every fleet (or until its deadline),
    run the server's step, send the result on, and finally release ``(Σ y mod m, |U₃|)``."""

    def __init__(self, run: str, task: int, step_deadline_s: float, send: Send,
                 release: Callable[[int, np.ndarray, int], Awaitable[None]],
                 abort: Callable[[int, str], Awaitable[None]], rejected: Counter,
                 auth: ReportAuthenticator | FleetKeys, hosting: str = "id"):
        if hosting not in HOSTING:
            raise ValueError(f"hosting must be one of {HOSTING}, got {hosting!r}")
        self.hosting = hosting  # the fleets' rule (round_hosts), for a recipient no fleet advertised
        self.origins: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # round → (user ids, fleet that advertised each)
        self.auth = auth  # every fleet's chunk key (FleetKeys): one fleet cannot sign for another
        self.rejected = rejected  # the service's counters: the server's refusals land there
        self.run, self.task = run, task
        self.step_deadline_s = step_deadline_s
        self.send, self.release, self.abort = send, release, abort
        self.rounds: dict[int, tuple[AggregatorRound, str, _Inbox]] = {}
        self.shards: int | None = None
        self.costs: dict[int, RoundCost] = {}  # rounds in flight; finished ones go to the log
        self.finished: deque[RoundCost] = deque(maxlen=256)  # … and the last ones here
        self._closing: list[tuple[RoundCost, str]] = []
        self.heard: dict[int, float] = {}  # fleet → when a new chunk of it was last admitted (any round)
        self.extending: set[tuple[int, str]] = set()  # (round, step) waiting past its deadline: logged once

    def open(self, rnd, cohort: np.ndarray) -> None:
        """A secure round among ``cohort`` (its joins' members, ``rnd.expected`` of them)."""
        config, graph = round_setup(self.run, self.task, rnd.id, cohort, rnd.m, rnd.secagg,
                                    rnd.secagg_degree, rnd.secagg_threshold, rnd.width)
        self.rounds[rnd.id] = (AggregatorRound(config, graph), "advertise", _Inbox())
        self.costs[rnd.id] = RoundCost(rnd.id, rnd.expected, graph.degree, graph.threshold)

    async def on_message(self, msg: codec.SecAggMsg) -> str | None:
        state = self.rounds.get(msg.round)
        if state is None:
            return "secagg-unknown-round"
        with _Timed(self.costs.get(msg.round), state[1]):
            reason = await self._on_chunk(msg, *state)
        self._log_closed()
        return reason

    async def _on_chunk(self, msg: codec.SecAggMsg, server: AggregatorRound, step: str, box: _Inbox) -> str | None:
        if msg.step not in FLEET_STEPS:
            return "secagg-wrong-direction"
        if not hmac.compare_digest(msg.tag, self.auth.mac(
                "secagg-chunk", self.run, self.task, msg.shard, payload=codec.encode(msg.model_copy(update={"tag": b""})))):
            return "secagg-bad-tag"
        if msg.step != step:
            return "secagg-wrong-step"
        try:
            from_messages(step, [msg])
        except BatchError:
            return "secagg-malformed"
        if self.shards is None:
            self.shards = msg.shards
        elif msg.shards != self.shards:
            return "secagg-shard-count"
        refused = box.add(msg)
        if refused is None:  # a new chunk under the fleet's own key: it is alive (a replay is a duplicate)
            self.heard[msg.shard] = time.monotonic()
        if refused == "secagg-conflicting-chunk":
            self._close(msg.round)
            await self.abort(msg.round, f"secure aggregation aborted at step {step!r}: fleet {msg.shard} sent two "
                                        f"different chunks {msg.chunk} (a replay or an impersonation)")
            return refused
        if refused:
            return refused
        if box.complete(self.shards):
            await self._advance(msg.round)
        return None

    async def tick(self) -> None:
        """Steps past their deadline go on with what came (the silent users are dropouts), unless
        a fleet the step still lacks is alive (:meth:`still_working`)."""
        for round_id, (_, step, box) in list(self.rounds.items()):
            now = time.monotonic()
            if now - box.opened <= self.step_deadline_s or self.still_working(round_id, step, box, now):
                continue
            with _Timed(self.costs.get(round_id), step):
                await self._advance(round_id)
            self._log_closed()

    def still_working(self, round_id: int, step: str, box: "_Inbox", now: float) -> bool:
        """Past the deadline: does a fleet whose final chunk of this step has not come show it is
        alive (a new chunk of it admitted within the last deadline, any round), with the step open
        for less than :data:`STEP_EXTEND_MAX` deadlines? A slow machine, not a dropout: wait on."""
        missing = set(range(self.shards or 1)) - box.finals
        alive = sorted(s for s in missing if now - self.heard.get(s, -math.inf) <= self.step_deadline_s)
        waited = now - box.opened
        if not alive or waited > STEP_EXTEND_MAX * self.step_deadline_s:
            return False
        if (round_id, step) not in self.extending:
            self.extending.add((round_id, step))
            log.info("round %d: step %r past its %.0f s deadline; waiting on: fleet(s) %s still sending chunks",
                     round_id, step, self.step_deadline_s, ", ".join(map(str, alive)))
        return True

    async def _advance(self, round_id: int) -> None:
        server, step, box = self.rounds[round_id]
        if (round_id, step) in self.extending:  # how long the step waited past its deadline
            self.extending.discard((round_id, step))
            if (cost := self.costs.get(round_id)) is not None:
                cost.extended += max(0.0, time.monotonic() - box.opened - self.step_deadline_s)
        before = server.rejected
        try:
            batch = from_messages(step, box.messages())
            if step == "advertise":
                self.origins[round_id] = _origins(box.messages())
                out = ("directory", server.directory(batch))
            elif step == "shares":
                out = ("delivery", server.deliveries(batch))
            elif step == "masked":
                out = ("survivors", server.survivors(batch))
            else:
                value, n = server.finalize(batch)
                if (cost := self.costs.get(round_id)) is not None:
                    cost.survivors = n
                self._count(server, before)
                self._close(round_id, "released")
                return await self.release(round_id, value, n)
        except (SecAggError, BatchError) as exc:
            self._count(server, before)
            self._close(round_id)
            return await self.abort(round_id, f"secure aggregation aborted after step {step!r}: {exc}")
        self._count(server, before)
        self.rounds[round_id] = (server, FLEET_STEPS[FLEET_STEPS.index(step) + 1], _Inbox())
        name, batch = out
        if name == "delivery":
            await self._deliver(round_id, batch)
        else:
            for msg in to_messages(name, batch, run=self.run, task=self.task, round_id=round_id, shard=0, shards=1):
                self._sent(round_id, name, msg)
                await self.send(msg)

    def _count(self, server: AggregatorRound, before: int) -> None:
        if server.rejected > before:  # senders outside the round, or repeating themselves
            self.rejected["secagg-not-admitted"] += server.rejected - before

    def _sent(self, round_id: int, step: str, msg: codec.SecAggMsg) -> None:
        if (cost := self.costs.get(round_id)) is not None:
            cost.sent[step] += len(codec.encode(msg))

    def _close(self, round_id: int, outcome: str = "aborted") -> None:
        del self.rounds[round_id]
        self.origins.pop(round_id, None)
        self.extending = {key for key in self.extending if key[0] != round_id}
        cost = self.costs.pop(round_id, None)
        if cost is not None:
            self._closing.append((cost, outcome))

    def _log_closed(self) -> None:
        """Log the rounds that ended during the step just timed (so the step's CPU is all in)."""
        for cost, outcome in self._closing:
            cost.end()
            self.finished.append(cost)
            log.info(cost.line("aggregator", outcome))
        self._closing.clear()

    async def _deliver(self, round_id: int, shares: Shares) -> None:
        # Route each ciphertext to the fleet hosting its recipient, so a fleet gets its own users'
        # mail only: the fleet whose MAC'd chunk advertised the recipient (whatever public rule the
        # fleets host by: round_hosts), else the aggregator's own rule.
        shards = self.shards or 1
        host = round_hosts(self.rounds[round_id][0].server.graph, shares.recipients, shards, self.hosting)
        ids, origin = self.origins.get(round_id, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        if ids.size:
            at = np.minimum(np.searchsorted(ids, shares.recipients), ids.size - 1)
            known = ids[at] == shares.recipients
            host[known] = origin[at[known]]
        rows = np.frombuffer(shares.ciphertexts, dtype=np.uint8).reshape(-1, CIPHERTEXT_BYTES)
        for i in range(shards):
            mine = host == i
            part = Shares(shares.senders[mine], shares.recipients[mine], rows[mine].tobytes())
            for msg in to_messages("delivery", part, run=self.run, task=self.task, round_id=round_id,
                                   shard=i, shards=shards):
                self._sent(round_id, "delivery", msg)
                await self.send(msg)
