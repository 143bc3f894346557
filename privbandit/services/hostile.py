"""A hostile client on the wire: the traffic adversaries of ``privbandit attack`` (issue #5).

It connects to a running session's broker with whatever account it was given (the users'
account for report attacks, the analyzer's for ``curious-analyzer``), reads the plans any user may
read, and answers each with messages the intermediaries must refuse without disturbing the honest
result. Report attacks go to the report topic of the intermediary the running task uses (the
aggregator, or the shuffler when the task spec says so). What each kind sends (the message
builders are sans-I/O: :class:`TrafficAttacker`):

- ``replay``: reports for rounds and tasks that already closed (``round-closed``, ``wrong-task``).
  A user sees no release, so it knows a round closed only from a later task, or from a pause of
  more than ``WAVE_GAP_S`` between bursts of plans (the analyzer plans again only after the
  releases it waits for). A one-task session whose plans never pause gives it nothing it can be
  sure of, and it then sends nothing rather than race open rounds (that is ``impersonate``);
  its report says so with ``messages_sent`` 0;
- ``sybil``: reports from ids outside the invited cohort (``not-in-cohort``);
- ``impersonate``: reports under invited ids, sent the moment the plan appears, racing the fleets,
  once without MACs and once with guessed ones (``missing-tag``, ``bad-tag``: the users' one-time
  MACs of :mod:`privbandit.protocol.primitives.report_auth`, which the attacker has no key for);
- ``flood``: for every plan, many copies of duplicates, garbage, near-miss messages (wrong
  version, run, task, round, modulus, schema) and one oversized payload;
- ``volley``: for every plan message, re-announcements included, 15 reports under invited ids
  with guessed MACs, the last as large as the codec allows (8 MiB): the attack of issue #32 item 3,
  which made the analyzer re-announce every 3 s, each re-announcement drawing another volley;
- ``forge``: with the experiment file too (``privbandit attack forge FILE``): for every plan,
  every invited user's report (residue 0) under the MACs and block tags its seed gave before
  issue #32 (:func:`seed_derived_users_key`), and once an error status of ``users-1`` under the
  fleets' MAC of that key: the attack that took Dist-DP-SE's regret from 12,933 to 159,503 and
  failed a session. The session's keys are its own now; all of it is refused as forged;
- ``bombs``: for every plan, the next of the costliest messages to decode
  (:func:`decoding_bombs`, issue #32 item 2: a 500,000-key map, four million nested lists, …), to
  the round's intermediary or, for a status or truth, to a fleet's metrics topic (the observer);
- ``curious-analyzer``: subscribes to reports, metrics and everything, and publishes forged
  releases; it reports what the broker let through.

Each kind leaves when the session shuts down (the observer's ``shutdown`` on the control topic) or
after its duration. An experiment file can list them (``traffic_adversaries``): a run over MQTT then
starts one hostile process per kind next to the parties (services/launcher.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import signal
from pathlib import Path

import zlib

import aiomqtt
import msgpack
import numpy as np

from privbandit.protocol.primitives.report_auth import NONCE_MAC_BYTES, PRIME, TAG_DTYPE, ReportAuthenticator
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine.events import Reports
from privbandit.services import codec
from privbandit.services.bus import BusSettings, topic

# Adversaries on the wire; they need a broker and a running session.
TRAFFIC_ADVERSARIES: dict[str, str] = {
    "replay": "re-sends reports for rounds that already closed, and for the running task's old rounds",
    "impersonate": "sends reports under invited users' ids, racing the genuine fleets",
    "sybil": "sends reports from ids outside the invited cohort",
    "flood": "floods the report topic: duplicates, junk, malformed and oversized messages",
    "bombs": "sends the costliest messages to decode, one per plan: huge maps, nested lists, bins, bodies",
    "volley": "answers every plan message, re-announcements too, with 15 forged reports, one of 8 MiB",
    "forge": "with the experiment file: forges every invited user's report and a fleet's status with the "
             "keys its seed gave before session secrets",
    "curious-analyzer": "with the analyzer's credentials: subscribes to reports and metrics, forges releases",
}

WAVE_GAP_S = 0.2  # plans this far apart belong to different bursts (the analyzer waited for releases)
SYBIL_IDS = 64  # ids per forged message: enough to count, small enough to flood with
FLOOD_COPIES = 20
DISCONNECT_WAIT_S = 2.0  # a broker holding the connection back may never answer the DISCONNECT
VOLLEY = 15  # forged reports per plan message (issue #32 item 3: "about 15 … one of 8 MiB")


def malformed_variants(run_id: str, m: int = 53) -> list[bytes]:
    """Garbage and near-miss reports: each one fails a different decoder or protocol check."""
    good = codec.ReportsMsg(run=run_id, task=0, round=0, plan=0, user_ids=np.array([0], "<u4"),
                            values=np.array([[[1]]], "<u2"))
    raw = msgpack.unpackb(codec.encode(good))
    return [
        b"\xc1 not msgpack", msgpack.packb([1, 2]), msgpack.packb({**raw, "v": 9}),
        msgpack.packb({**raw, "kind": "nope"}), msgpack.packb({**raw, "round": "x"}),
        codec.encode(good.model_copy(update={"run": "someone-else"})),
        codec.encode(good.model_copy(update={"values": codec.packed(np.array([[[m + 7]]]), m)})),  # not a residue
        codec.encode(good.model_copy(update={"user_ids": np.array([10**6], "<u4")})),
        codec.encode(good.model_copy(update={"round": 10**6})),  # a round that never exists
        codec.encode(good.model_copy(update={"task": 10**6})),  # a task that never comes
        # Lengths that disagree: user_ids of 2 against values of 1 (the codec refuses the shape).
        msgpack.packb({**raw, "user_ids": {"dtype": "<u4", "shape": [2], "data": bytes(8)}}),
    ]


def seed_derived_users_key(seed: int) -> int:
    """The users' report-authentication master as the launcher derived it from the run seed before
    issue #32 (``seeding.report_auth_master``): what anyone holding the experiment file, a results
    directory or the dashboard could compute. Sessions draw their own now (``SessionKeys``)."""
    seq = np.random.SeedSequence(seed, spawn_key=(zlib.crc32(b"report-auth"),))
    return int.from_bytes(seq.generate_state(8, np.uint32).tobytes(), "little")


def _map_header(n: int) -> bytes:
    return b"\xdf" + n.to_bytes(4, "big")  # map 32


def _array_header(n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big")  # array 32


def decoding_bombs(run_id: str, size: int = codec.MAX_MESSAGE_BYTES - 4096) -> list[tuple[str, str, bytes]]:
    """The costliest messages to decode that the users' account may send, each under ``size`` bytes
    (the packet cap, less room for the topic): ``(name, topic class, payload)``. msgpack and pydantic
    spend time per item, not per byte, so each packs as many items as it can: the issue's
    500,000-key map and four million nested empty lists (issue #32 item 2), lists of lists and of
    maps under the per-container bound, a bin the size of the message, the deepest nesting, keys the
    schema does not know, and bodies of the most items a truth and a status may hold."""
    reports = {"v": codec.WIRE_VERSION, "run": run_id, "kind": "reports", "task": 0, "round": 0, "plan": 0}
    head = msgpack.packb(reports)[1:]  # its six entries, without the map's own header
    status = {"v": codec.WIRE_VERSION, "run": run_id, "kind": "status", "party": "users-0", "state": "stats",
              "task": 0}

    def with_field(name: str, raw: bytes, base: dict = reports) -> bytes:
        return _map_header(len(base) + 1) + msgpack.packb(base)[1:] + msgpack.packb(name) + raw

    def chunks(item: bytes, per: int) -> bytes:  # lists of `per` items, as many as fit
        one = _array_header(per) + item * per
        return _array_header((size - 200) // len(one)) + one * ((size - 200) // len(one))

    wide = 500_000
    keys = b"".join(msgpack.packb(f"k{i}") + b"\x00" for i in range(wide))
    lists = codec.MAX_ITEMS // 4097 - 1  # lists of 4096 items each, just inside the item budget
    body = [list(range(4096)) for _ in range(lists)]
    empty = [[[] for _ in range(4000)] for _ in range(codec.MAX_CONTAINERS // 4001)]  # just inside the budget
    return [
        ("500,000-key map", "report", _map_header(len(reports) + wide) + head + keys),
        ("4 M nested empty lists", "report", with_field("x", _array_header(4_000_000) + b"\x90" * 4_000_000)),
        ("lists of 4,096 empty lists", "report", with_field("x", chunks(b"\x90", 4096))),
        ("lists of 4,096 empty maps", "report", with_field("x", chunks(b"\x80", 4096))),
        ("lists of 4,096 small ints", "report", with_field("x", chunks(b"\x01", 4096))),
        ("lists of 4,096 floats", "report", with_field("x", chunks(msgpack.packb(0.5), 4096))),
        ("4 KB strings", "report", with_field("x", chunks(msgpack.packb("a" * 4000), 64))),
        ("a bin of the whole message", "report", with_field("block_tag", msgpack.packb(bytes(size - 200)))),
        ("deepest nesting", "report", with_field("x", b"\x91" * (size - 200) + b"\xc0")),
        ("4,000 unknown keys", "report", _map_header(len(reports) + 4000) + head
         + b"".join(msgpack.packb(f"k{i}") + b"\x00" for i in range(4000))),
        ("a status body of 60,000 items", "metrics", msgpack.packb({**status, "body": {"rejected": body}})),
        ("a status body of 8,000 empty lists", "metrics", msgpack.packb({**status, "body": {"rejected": empty}})),
        ("a truth's extras of 60,000 items", "metrics", msgpack.packb({
            "v": codec.WIRE_VERSION, "run": run_id, "kind": "truth", "task": 0, "plan": 0, "block": 0,
            "first_user": 0, "size": 1, **{k: {"dtype": "<f8", "shape": [1], "data": bytes(8)}
                                           for k in ("pseudo", "realized")},
            **{k: {"dtype": "<f8", "shape": [1, 0], "data": b""} for k in ("pseudo_at", "realized_at")},
            "extras": {"x": body}})),
    ]


class TrafficAttacker:
    """Turns each plan a user can read into the hostile messages of one kind (bytes, no I/O).
    ``where`` maps a round to the intermediary that collects it (from the plans seen)."""

    def __init__(self, kind: str, run_id: str, seed: int | None = None, experiment_seed: int | None = None):
        """``seed``: the attacker's own randomness; ``experiment_seed``: the run seed of the
        experiment file, which ``forge`` needs (and the others do not use)."""
        if kind not in ("replay", "sybil", "impersonate", "flood", "bombs", "volley", "forge"):
            raise ValueError(f"traffic adversary {kind!r} is not replay, sybil, impersonate, flood, bombs, volley "
                             f"or forge")
        if kind == "forge" and experiment_seed is None:
            raise ValueError("forge needs the experiment file's seed")
        self.kind, self.run_id = kind, run_id
        self.forger = None if kind != "forge" else ReportAuthenticator(seed_derived_users_key(experiment_seed))
        self.rng = np.random.default_rng(seed)
        self.seen: list[codec.PlanMsg] = []  # collected plans of earlier rounds and tasks
        self.waves: list[int] = []
        self.rounds: dict[tuple[int, int], codec.RoundSpec] = {}  # (task, round) → its spec
        self.bombs = decoding_bombs(run_id) if kind == "bombs" else []

    def _reports(self, plan: codec.PlanMsg, join: codec.JoinSpec, ids: np.ndarray, **update) -> tuple[str, bytes]:
        rnd = self.rounds[plan.task, join.round]
        if rnd.m is not None:
            values = self.rng.integers(0, rnd.m, (1, ids.size, rnd.width))
        elif rnd.integer:
            values = self.rng.integers(0, int(rnd.high or 1) + 1, (1, ids.size, rnd.width))
        else:
            values = self.rng.random((1, ids.size, rnd.width))
        msg = codec.ReportsMsg(run=self.run_id, task=plan.task, round=join.round, plan=plan.plan,
                               user_ids=ids.astype("<u8"), values=codec.packed(values, rnd.m, rnd.high, rnd.integer))
        return rnd.intermediary, codec.encode(msg.model_copy(update=update) if update else msg)

    def on_plan(self, plan: codec.PlanMsg, wave: int = 0) -> list[tuple[str, bytes]]:
        """(intermediary, payload) pairs answering one plan: published on the intermediary's report
        topic, or, where the intermediary is a ``metrics/users-i`` path, there. ``wave`` numbers
        the bursts of plans as they appear: the analyzer plans again only once the rounds it waits
        for are released, so the rounds of plans two bursts back are closed."""
        for rnd in plan.opens:
            self.rounds.setdefault((plan.task, rnd.id), rnd)
        again = any(p.task == plan.task and p.plan == plan.plan for p in self.seen)
        if not plan.joins or (again and self.kind != "volley"):
            return []  # a plan that collects nothing, or a re-announced one (a volley answers it too)
        out: list[tuple[str, bytes]] = []
        join = plan.joins[0]
        cohort = np.arange(join.first, join.first + min(join.count, SYBIL_IDS))
        outside = plan.first_user + plan.cohort + np.arange(SYBIL_IDS)
        if self.kind == "sybil":
            out.append(self._reports(plan, join, outside))
        elif self.kind == "impersonate":
            out.append(self._reports(plan, join, cohort))
            out.append(self._reports(plan, join, cohort, tags=self.rng.integers(0, PRIME, cohort.size).astype(TAG_DTYPE)))
            # A forged "block complete" marker: it would declare every missing user a dropout.
            out.append(self._reports(plan, join, np.zeros(0, np.int64), block=0,
                                     block_tag=secrets.token_bytes(NONCE_MAC_BYTES)))
        elif self.kind == "replay":
            # Plans of earlier tasks, or earlier plans whose rounds the analyzer has seen released
            # (it plans again only once the rounds it waits for are released): closed rounds.
            done = [p for p, w in zip(self.seen, self.waves) if p.task < plan.task or w < wave - 1]
            for old in done[-4:]:
                j = old.joins[0]
                out.append(self._reports(old, j, np.arange(j.first, j.first + min(j.count, SYBIL_IDS))))
        elif self.kind == "volley":
            guessed = {"tags": self.rng.integers(0, PRIME, cohort.size).astype(TAG_DTYPE)}
            out += [self._reports(plan, join, cohort, **guessed)] * (VOLLEY - 1)
            rnd = self.rounds[plan.task, join.round]
            one = np.zeros((1, 1, rnd.width), np.int64 if rnd.integer else np.float64)
            record = 8 + 4 + codec.packed(one, rnd.m, rnd.high, rnd.integer).nbytes
            ids = join.first + np.arange((codec.MAX_MESSAGE_BYTES - 4096) // record) % join.count  # invited ids, again
            out.append(self._reports(plan, join, ids, tags=self.rng.integers(0, PRIME, ids.size).astype(TAG_DTYPE)))
            if again:
                return out
        elif self.kind == "forge":
            out += self._forged(plan)
        elif self.kind == "bombs":
            name, where, payload = self.bombs[len(self.seen) % len(self.bombs)]
            out.append((self.rounds[plan.task, join.round].intermediary if where == "report" else "metrics/users-0",
                        payload))
        else:  # flood
            box = self.rounds[plan.task, join.round].intermediary
            out += [self._reports(plan, join, outside)] * FLOOD_COPIES
            out += [(box, m) for m in malformed_variants(self.run_id, self.rounds[plan.task, join.round].m or 53)] * 2
            out.append((box, b"\x00" * (codec.MAX_MESSAGE_BYTES + 1)))
        self.seen.append(plan)
        self.waves.append(wave)
        return out

    def _forged(self, plan: codec.PlanMsg) -> list[tuple[str, bytes]]:
        """``forge``: every invited user's report (residue 0) of every join, one message per block
        as a fleet sends it, MAC'd and closed under the seed's key; before the first, an error
        status of ``users-1`` under that key's fleets' MAC."""
        from privbandit.services.users import reports_message, status_tag

        out = []
        if not self.seen:
            status = codec.StatusMsg(run=self.run_id, party="users-1", state="error", task=plan.task,
                                     body={"reason": "forged with the experiment file's keys"})
            out.append(("metrics/users-1", codec.encode(status.model_copy(
                update={"tag": status_tag(self.forger, status)}))))
        p = plan.to_plan()
        for j in p.joins:
            spec = self.rounds.get((plan.task, j.round_id))
            if spec is None:
                continue
            rnd = spec.to_round()
            ids = j.members()
            blocks = (ids - p.first_user) // USER_BLOCK
            for block in np.unique(blocks):
                mine = ids[blocks == block].astype(np.int64)
                zeros = np.zeros((1, mine.size, rnd.width), np.int64 if rnd.integer else np.float64)
                msg = reports_message(self.forger, self.run_id, plan.task, p, rnd, int(block),
                                      Reports(j.round_id, p.id, mine, zeros))
                out.append((rnd.intermediary, codec.encode(msg)))
        return out


async def attack_session(kind: str, settings: BusSettings, duration_s: float, ready_file: Path | None = None,
                         experiment_seed: int | None = None, report_file: Path | None = None) -> dict:
    """Attack a running session until it shuts down, for at most ``duration_s``, or until SIGTERM
    (the launcher's stop); what was done and seen, and which of the three ended it. ``ready_file``
    is created once the attack is subscribed: the launcher starts the session only then, so the
    attack sees it from its first plan. ``report_file`` gets the report (JSON) as soon as the
    attack ends, before the disconnect: a broker holding this connection back to its account's
    budget can keep a DISCONNECT waiting past the launcher's grace before SIGKILL."""
    client = settings.client(f"hostile-{kind}-{secrets.token_hex(4)}", True, timeout=10)
    try:
        await client.__aenter__()
    except aiomqtt.MqttError as exc:
        raise ConnectionError(f"cannot reach the broker at {settings.broker_url}: {exc}") from exc
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        run = settings.run_id
        attack = _curious if kind == "curious-analyzer" else functools.partial(
            _report_attack, kind=kind, experiment_seed=experiment_seed)

        def subscribed() -> None:
            if ready_file is not None:
                ready_file.parent.mkdir(parents=True, exist_ok=True)
                ready_file.touch()

        report = await attack(client, run, lambda pump: _attack_until(pump, stop, duration_s), subscribed)
        if report_file is not None:
            report_file.parent.mkdir(parents=True, exist_ok=True)
            report_file.write_text(json.dumps(report, indent=2) + "\n")
        return report
    finally:
        try:
            await asyncio.wait_for(client.__aexit__(None, None, None), DISCONNECT_WAIT_S)
        except Exception:  # noqa: BLE001 — the broker may be gone or holding us back: nothing left to do
            pass


async def _attack_until(pump, stop: asyncio.Event, duration_s: float) -> str:
    """Run ``pump`` (it returns at the session's shutdown) until it returns, ``stop`` is set or
    ``duration_s`` passes; returns which, or ``disconnected`` when the broker dropped the connection
    (the report is still written: a broker cutting an attacker off is a result, not a crash)."""
    pumping, stopped = asyncio.ensure_future(pump), asyncio.ensure_future(stop.wait())
    done, pending = await asyncio.wait({pumping, stopped}, timeout=duration_s, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if pumping in done:
        if isinstance(pumping.exception(), aiomqtt.MqttError):
            return "disconnected"  # the broker cut this client off (its budget, or its end): reported
        pumping.result()  # a failure of the attack itself is loud
        return "shutdown"
    return "terminated" if stopped in done else "duration"


def _is_shutdown(msg) -> bool:
    """The session is over: the observer's shutdown on the control topic."""
    return isinstance(msg, codec.ControlMsg) and msg.action == "shutdown"


def _decoded(payload):
    try:
        return codec.decode(bytes(payload))
    except codec.DecodeError:
        return None


async def _report_attack(client: aiomqtt.Client, run: str, until, subscribed, kind: str,
                         experiment_seed: int | None = None) -> dict:
    attacker = TrafficAttacker(kind, run, experiment_seed=experiment_seed)
    await client.subscribe([(topic(run, "plan"), 1), (topic(run, "control"), 1)])
    subscribed()
    plans = sent = unacknowledged = wave = 0
    last = 0.0

    async def pump():
        nonlocal plans, sent, unacknowledged, wave, last
        async for message in client.messages:
            msg = _decoded(message.payload)
            if _is_shutdown(msg):
                return
            if isinstance(msg, codec.PlanMsg):
                plans += 1
                now = asyncio.get_running_loop().time()
                wave += now - last > WAVE_GAP_S
                last = now
                for target, payload in attacker.on_plan(msg, wave):  # the round's own intermediary
                    parts = target.split("/") if "/" in target else ("report", target)
                    try:
                        await client.publish(topic(run, *parts), payload, qos=1)
                    except aiomqtt.MqttError:
                        # The broker held this account back past the client's timeout (its budget):
                        # that is the defence working, not a failure of the attack; counted.
                        unacknowledged += 1
                    sent += 1

    ended = await until(pump())
    return {"kind": kind, "run": run, "plans_seen": plans, "messages_sent": sent,
            "publishes_unacknowledged": unacknowledged, "ended_by": ended}


async def _curious(client: aiomqtt.Client, run: str, until, subscribed) -> dict:
    """With the analyzer's account: try to read what only intermediaries and the observer read,
    and to publish what only intermediaries publish. (It also reads the control topic, which the
    analyzer may, to leave at the session's shutdown.)"""
    filters = [topic(run, "report", "#"), topic(run, "metrics", "#"), topic(run, "#"), "#"]
    result = await client.subscribe([(f, 1) for f in filters])
    codes = [getattr(c, "value", c) for c in (result if isinstance(result, (list, tuple)) else [result])]
    await client.subscribe(topic(run, "control"), qos=1)
    subscribed()
    forged = codec.encode(codec.ReleaseMsg(run=run, task=0, round=0, n_reports=1, values=np.zeros((1, 1), np.int64)))
    for intermediary in ("aggregator", "shuffler"):
        await client.publish(topic(run, "release", intermediary), forged, qos=1)
    seen: dict[str, int] = {}

    async def pump():
        async for message in client.messages:
            parts = message.topic.value.split("/")
            cls = parts[2] if len(parts) > 2 else "other"
            seen[cls] = seen.get(cls, 0) + 1
            if cls == "control" and _is_shutdown(_decoded(message.payload)):
                return

    ended = await until(pump())
    return {"kind": "curious-analyzer", "run": run, "subscribe_codes": dict(zip(filters, codes)),
            "received_by_topic_class": seen, "forbidden_received": seen.get("report", 0) + seen.get("metrics", 0),
            "forged_releases_sent": 2, "ended_by": ended}
