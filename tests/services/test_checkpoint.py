"""Checkpoints: the file format, atomic replacement, refusal of foreign or damaged files, and the
analyzer's journal rebuilding the sans-I/O party to an identical continuation."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privbandit import registry
from privbandit.protocol.primitives.seeding import analyzer_master_key
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.runner import tasks
from privbandit.services import codec
from privbandit.services.analyzer import AnalyzerService, build_analyzer, replay_releases
from privbandit.services.bus import BusSettings, Traffic
from privbandit.services.checkpoint import (
    MAGIC,
    CheckpointError,
    StateDir,
    atomic_write,
    decode_checkpoint,
    encode_checkpoint,
    resume_state,
    spec_fingerprint,
)

RUN = "ck-run"
SPEC = "0" * 64


def test_state_dir_round_trips_and_replaces_atomically(tmp_path):
    sd = StateDir(tmp_path / "s", RUN, "analyzer")
    assert sd.load() is None
    sd.save(3, SPEC, {"releases": [[0, 10, 5], [1, 10, 2**62 + 1], [2, 9, 0.25]]})
    sd.save(4, SPEC, {"releases": [[7, 1, -1]]})
    ckpt = StateDir(tmp_path / "s", RUN, "analyzer").load()
    assert (ckpt.task, ckpt.spec, ckpt.state) == (4, SPEC, {"releases": [[7, 1, -1]]})
    assert sorted(os.listdir(tmp_path / "s")) == ["checkpoint.bin"]  # no temporary left behind
    assert sd.writes == 2 and sd.bytes_written > 0


def test_a_failed_write_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    sd = StateDir(tmp_path, RUN, "aggregator")
    sd.save(0, SPEC, {"closed": [1]})

    def crash(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        sd.save(0, SPEC, {"closed": [1, 2]})
    monkeypatch.undo()
    assert sd.load().state == {"closed": [1]}
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.bin"]


@pytest.mark.parametrize(("run", "party", "reason"), [("other-run", "analyzer", "checkpoint-wrong-run"),
                                                      (RUN, "aggregator", "checkpoint-wrong-party")])
def test_a_checkpoint_of_another_run_or_party_is_refused_by_name(tmp_path, run, party, reason):
    StateDir(tmp_path, run, party).save(0, SPEC, {})
    with pytest.raises(CheckpointError) as info:
        StateDir(tmp_path, RUN, "analyzer").load()
    assert info.value.reason == reason and str(tmp_path / "checkpoint.bin") in str(info.value)


def test_resume_state_by_task_and_spec(tmp_path):
    where = tmp_path / "checkpoint.bin"
    spec_a, spec_b = spec_fingerprint({"index": 1, "label": "A"}), spec_fingerprint({"index": 1, "label": "B"})
    assert spec_a != spec_b and spec_a == spec_fingerprint({"label": "A", "index": 1})  # key order is canonical
    _, _, ckpt = decode_checkpoint(encode_checkpoint(RUN, "analyzer", 1, spec_a, {"x": 1}))
    assert resume_state(None, 1, spec_a, where) is None
    assert resume_state(ckpt, 1, spec_a, where) == {"x": 1}
    assert resume_state(ckpt, 2, spec_b, where) is None  # an earlier task's state: start afresh
    with pytest.raises(CheckpointError, match="another task spec") as info:
        resume_state(ckpt, 1, spec_b, where)
    assert info.value.reason == "checkpoint-wrong-experiment"
    with pytest.raises(CheckpointError) as info:
        resume_state(ckpt, 0, spec_a, where)
    assert info.value.reason == "checkpoint-ahead"


GOOD = encode_checkpoint(RUN, "users-3", 2, SPEC, {"releases": [[0, 3, 1]], "closed": [0]})
BODY = len(MAGIC) + 8 + 32  # where a snapshot's body starts
REASONS = {"checkpoint-too-large", "checkpoint-bad-magic", "checkpoint-corrupt", "checkpoint-not-msgpack",
           "checkpoint-schema"}


def _rehash(body: bytes) -> bytes:
    import hashlib

    return MAGIC + len(body).to_bytes(8, "big") + hashlib.sha256(body).digest() + body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=64).map(lambda b: MAGIC + b),
    # one byte of a valid file flipped: caught by the digest (or the magic)
    st.tuples(st.integers(0, len(GOOD) - 1), st.integers(1, 255)).map(
        lambda t: GOOD[:t[0]] + bytes([GOOD[t[0]] ^ t[1]]) + GOOD[t[0] + 1:]),
    # a valid digest over a mangled body: the decoder and the schema must catch it
    st.binary(max_size=120).map(_rehash),
    st.tuples(st.integers(0, len(GOOD) - BODY - 1), st.binary(min_size=1, max_size=8)).map(
        lambda t: _rehash(GOOD[BODY:][:t[0]] + t[1] + GOOD[BODY:][t[0] + len(t[1]):])),
    st.integers(0, len(GOOD) - 1).map(lambda i: GOOD[:i]),  # truncated
    st.binary(max_size=120).map(lambda b: GOOD + b),  # a journal of garbage: it ends where a record fails
))
def test_fuzzed_checkpoints_are_refused_with_a_reason(data):
    try:
        run, party, ckpt = decode_checkpoint(data, "fuzz.bin")
    except CheckpointError as exc:
        assert exc.reason in REASONS and "fuzz.bin" in str(exc)
        return
    assert isinstance(ckpt.state, dict) and isinstance(ckpt.task, int) and ckpt.task >= 0  # a valid file


def test_mutated_fields_name_the_field():
    import msgpack

    body = msgpack.unpackb(GOOD[BODY:])
    for field, bad in (("task", -1), ("run", "a b"), ("spec", "xyz"), ("format", 1), ("state", [1])):
        with pytest.raises(CheckpointError, match=f"'{field}'") as info:
            decode_checkpoint(_rehash(msgpack.packb({**body, field: bad})))
        assert info.value.reason == "checkpoint-schema"
    assert decode_checkpoint(GOOD)[2].task == 2


def _journaled(tmp_path, n: int) -> tuple[StateDir, dict]:
    """A snapshot of task 1 and ``n`` journal records, each one more release and a new counter."""
    sd = StateDir(tmp_path, RUN, "analyzer")
    full = {"releases": [b"r0"], "n": 0}
    sd.save(1, SPEC, full)
    for i in range(1, n + 1):
        full["releases"].append(b"r%d" % i)
        full["n"] = i
        sd.append(1, SPEC, {"releases": [b"r%d" % i]}, {"n": i}, lambda: full)
    return sd, full


def test_the_journal_holds_what_changed_and_loads_applied(tmp_path):
    sd, full = _journaled(tmp_path, 40)
    assert (sd.snapshots, sd.writes) == (1, 41)
    ckpt = StateDir(tmp_path, RUN, "analyzer").load()
    assert (ckpt.task, ckpt.spec, ckpt.state, ckpt.records, ckpt.dropped) == (1, SPEC, full, 40, 0)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.bin"]
    sd.append(2, SPEC, {"releases": [b"x"]}, {}, lambda: {"releases": [b"x"]})  # another task: a snapshot
    assert sd.snapshots == 2 and StateDir(tmp_path, RUN, "analyzer").load().state == {"releases": [b"x"]}


def test_a_checkpoint_per_release_costs_the_same_however_long_the_run(tmp_path):
    """The cost of checkpointing n releases one at a time is linear in n (the journal, compacted
    when it outgrows its snapshot), not quadratic (the whole state per release, as before issue #33:
    5,000 releases of 100 bytes would have written 1.25 GB)."""
    import privbandit.services.checkpoint as checkpoint_mod

    release = bytes(100)
    for n in (2_000, 8_000):
        sd = StateDir(tmp_path / str(n), RUN, "analyzer")
        full = {"releases": []}
        for _ in range(n):
            full["releases"].append(release)
            sd.append(0, SPEC, {"releases": [release]}, {}, lambda: full)
        final = len(checkpoint_mod.encode_checkpoint(RUN, "analyzer", 0, SPEC, full))
        assert sd.bytes_written < 4 * final, (n, sd.bytes_written, final)  # snapshots ≤ 2 × final, records ≤ 1.5 ×
        assert sd.snapshots <= 3 + math.log2(n), sd.snapshots
        assert StateDir(tmp_path / str(n), RUN, "analyzer").load().state == full


def test_a_torn_record_ends_the_journal_loudly_and_the_next_checkpoint_is_a_snapshot(tmp_path, caplog):
    sd, full = _journaled(tmp_path, 3)
    sd.close()
    path = tmp_path / "checkpoint.bin"
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # the last record torn (a power cut mid-write)
    again = StateDir(tmp_path, RUN, "analyzer")
    ckpt = again.load()
    assert ckpt.records == 2 and ckpt.dropped > 0 and ckpt.state["releases"] == full["releases"][:3]
    assert ckpt.state["n"] == 2 and "do not check" in caplog.text
    again.append(1, SPEC, {"releases": [b"r3"]}, {"n": 3}, lambda: full)
    assert again.snapshots == 1  # not a record after the torn one: it would never be read
    assert StateDir(tmp_path, RUN, "analyzer").load().state == full
    # a record changed in place (its digest no longer checks) ends the journal there, and so do the
    # records after it, chained to its digest
    path.write_bytes(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 1]) + data[len(data) // 2 + 1:])
    assert StateDir(tmp_path, RUN, "analyzer").load().records < 3


def test_a_journal_record_of_the_wrong_shape_is_refused_by_field(tmp_path):
    from privbandit.services.checkpoint import encode_record

    snapshot = encode_checkpoint(RUN, "analyzer", 0, SPEC, {"closed": 7})
    digest = snapshot[len(MAGIC) + 8:len(MAGIC) + 40]
    for added in ({"closed": [1]}, {"releases": 5}):
        record, _ = encode_record(digest, added, {})
        with pytest.raises(CheckpointError, match="not a list") as info:
            decode_checkpoint(snapshot + record)
        assert info.value.reason == "checkpoint-schema"


def test_atomic_write_replaces_a_file(tmp_path):
    path = tmp_path / "f"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two" and sorted(os.listdir(tmp_path)) == ["f"]


# --- killed and restarted parties: the same numbers ----------------------------------------------
#
# A broker-less session: the real analyzer, intermediary and user-fleet services, their messages
# crossing the codec as bytes through an in-memory broker that keeps each client's session (its
# subscriptions and queued messages) across a restart, as Mosquitto does for the fixed client ids
# the parties use. The test plays the observer: it announces the task and collects records and the
# analyzer's final status. A party is killed after it has handled some messages (what it did since
# its last checkpoint is lost with it) and started again from its state directory; the session must
# end with the in-process engine's records, ledger and learner, bit for bit.

RUN_ID = "ckpt"
USERS_KEY = 0x7E57  # the session's users' report key, as the launcher would give fleets, boxes and observer


def _matches(pattern: str, topic: str) -> bool:
    p, t = pattern.split("/"), topic.split("/")
    for i, part in enumerate(p):
        if part == "#":
            return True
        if i >= len(t) or (part != "+" and part != t[i]):
            return False
    return len(p) == len(t)


class _Bus:
    def __init__(self, net: "_Net"):
        self.net = net
        self.traffic = Traffic()
        self.lost = None

    async def publish(self, topic: str, msg) -> None:
        self.net.publish(topic, codec.encode(msg))


class _Net:
    """An in-memory broker with persistent sessions: a client's queue outlives its process."""

    def __init__(self):
        self.subs: dict[str, list[str]] = {}
        self.queues: dict[str, list[tuple[str, bytes]]] = {}
        self.live: dict[str, object] = {}
        self.handled: dict[str, int] = {}
        self.seen: list[tuple[str, object]] = []  # what the observer's topics carried

    def attach(self, name: str, service) -> None:
        service.bus = _Bus(self)
        self.subs[name] = service.subscriptions()
        self.queues.setdefault(name, [])
        self.live[name] = service
        self.handled.setdefault(name, 0)

    def kill(self, name: str) -> None:
        del self.live[name]  # its queue stays with the broker

    def publish(self, topic: str, data: bytes) -> None:
        if "/metrics/" in topic:
            self.seen.append((topic, codec.decode(data)))
        for name, patterns in self.subs.items():
            if any(_matches(p, topic) for p in patterns):
                self.queues[name].append((topic, data))

    async def step(self) -> bool:
        """Deliver one message to each live client with one queued; False if none had any."""
        moved = False
        for name, service in list(self.live.items()):
            if self.queues[name] and self.live.get(name) is service:
                topic, data = self.queues[name].pop(0)
                await service.handle(topic, codec.decode(data))
                self.handled[name] += 1
                moved = True
        return moved


def _mab(label: str, algorithm: dict, horizon: int = 200_000, arms: int = 6):
    fam = registry.family("distributed-dp-mab")
    config = fam.load({"name": "ck", "horizon": horizon, "seed": 11, "epsilon": 0.5, "runs": 1,
                       "environment": {"kind": "uniform", "arms": arms}, "algorithms": {label: algorithm}}, "ck.toml")
    return fam, config, label


def _pol(label: str, algorithm: dict, horizon: int = 60_000):
    fam = registry.family("private-online-learning")
    config = fam.load({"family": fam.name, "name": "ck", "horizon": horizon, "seed": 5, "epsilon": 1.0, "runs": 1,
                       "environment": {"means": [0.9, 0.8, 0.5, 0.4]}, "algorithms": {label: algorithm}}, "ck.toml")
    return fam, config, label


TASKS = {
    "Dist-DP-SE": lambda: _mab("Dist-DP-SE", {}),
    "Dist-RDP-SE-shuffled": lambda: _mab("Dist-RDP-SE-shuffled", {"algorithm": "dist-rdp-se",
                                                                  "intermediary": "shuffler-residues"}),
    "LDP-SE": lambda: _mab("LDP-SE", {}),
    "Dist-CDP-SE": lambda: _mab("Dist-CDP-SE", {}),
    "DP-SE": lambda: _mab("DP-SE", {}),
    # Cohorts of several blocks of users (2 fleets): a round's reports come in several messages, so
    # an intermediary killed between two of them loses reports it had accepted.
    "Dist-DP-SE-blocks": lambda: _mab("Dist-DP-SE", {}, horizon=1_000_000, arms=2),
    "Dist-RDP-SE-shuffled-blocks": lambda: _mab("Dist-RDP-SE-shuffled", {"algorithm": "dist-rdp-se",
                                                                         "intermediary": "shuffler-residues"},
                                                horizon=1_000_000, arms=2),
    "anytime-lazy-ucb@distributed": lambda: _pol("anytime-lazy-ucb@distributed",
                                                 {"algorithm": "anytime-lazy-ucb", "trust": "distributed"}),
    # Many short releases (413 plans for 1,000 users: a plan serves the users whose arm no reward
    # can change): the checkpoints are a snapshot and a long journal of records.
    "hybrid-ucb": lambda: _pol("hybrid-ucb", {"algorithm": "hybrid-ucb"}, horizon=1000),
}


def _wire(value):
    """A value as it reaches the observer (tuples become lists, numpy scalars Python numbers)."""
    return codec.body_from_wire(codec.body_to_wire(value))


def _engine(fam, config, label) -> tuple[dict, dict]:
    """The in-process run: records by round, and the analyzer's final (privacy, learner)."""
    from privbandit.protocol.spine import engine

    _, analyzer, users, boxes, observer = tasks.parties(fam, config, label, [0], oracle=False)
    engine.run(analyzer, users, boxes, observer)
    return ({rid: _wire(r.__dict__) for rid, r in observer.records.items()},
            _wire({"privacy": analyzer.ledger.summary(), "learner": analyzer.logic.summary()}))


def _services(fam, config, name: str, state: Path):
    from privbandit.protocol.primitives.seeding import shuffler_master_key
    from privbandit.services.intermediary import IntermediaryService
    from privbandit.services.users import UserFleetService

    settings = BusSettings(run_id=RUN_ID)
    if name == "analyzer":
        return AnalyzerService(settings, analyzer_master_key(config.seed), state / name)
    if name.startswith("users-"):
        return UserFleetService(settings, fam, config, int(name.split("-")[1]), 2, report_key=USERS_KEY)
    shuffle = shuffler_master_key(config.seed) if name == "shuffler" else None
    return IntermediaryService(settings, USERS_KEY, name, shuffle_key=shuffle,
                               state_dir=state / name)


async def _session(fam, config, label, state: Path, victim: str | None = None, after: int = 0):
    """Run one task through the services; kill ``victim`` once it has handled ``after`` messages
    and start it again from its state directory. Returns (records by round, final status body,
    the restarted party or None, every party's refusals, the reports an intermediary had accepted
    into rounds not yet released when it died)."""
    import privbandit.services.analyzer as analyzer_mod
    import privbandit.services.intermediary as intermediary_mod

    net = _Net()
    names = ["analyzer", *fam.intermediaries(config), "users-0", "users-1"]
    for name in names:
        net.attach(name, _services(fam, config, name, state))
    net.subs["observer"] = [f"pb/{RUN_ID}/metrics/+"]
    net.queues["observer"] = []
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name, public=fam.public_task(config, label, [0]),
                          session="5e55").model_dump()
    net.publish(f"pb/{RUN_ID}/control", codec.encode(codec.ControlMsg(run=RUN_ID, action="task", task=0, body=spec)))
    restarted, rejected, lost = None, {}, 0
    retries = 0
    while not any(isinstance(m, codec.StatusMsg) and m.state == "task-done" for _, m in net.seen):
        if victim is not None and restarted is None and net.handled[victim] >= after:
            dead = net.live[victim]
            rejected[f"{victim} (killed)"] = {k: v for k, v in dead.rejected.items() if v}
            if hasattr(dead, "box") and dead.box is not None:
                lost = sum(state.received for state in dead.box.rounds.values())
            net.kill(victim)
            restarted = _services(fam, config, victim, state)
            net.attach(victim, restarted)
            if victim != "analyzer" or restarted.checkpoint is None:
                # The observer re-announces the running task to a party that restarted; the analyzer
                # resumes from its checkpoint, announcing its open plans again.
                net.queues[victim].append((f"pb/{RUN_ID}/control", codec.encode(
                    codec.ControlMsg(run=RUN_ID, action="task", task=0, body=spec))))
            else:
                await restarted.start_task(spec)
        if await net.step():
            continue
        # Quiet, and not done: what was lost with the victim is asked for again, as the parties'
        # timers do (the analyzer re-announces open plans, an intermediary asks for resends).
        retries += 1
        assert retries < 50, f"the session stalled: {net.handled}"
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(analyzer_mod, "PLAN_RETRY_S", -1.0)
            mp.setattr(intermediary_mod, "RESEND_S", -1.0)
            for service in list(net.live.values()):
                await service.tick()
    for name, service in net.live.items():
        rejected[name] = {k: v for k, v in service.rejected.items() if v}
    records = {m.round: _wire(codec.record_of(m).__dict__) for _, m in net.seen if isinstance(m, codec.RecordMsg)}
    done = [m for _, m in net.seen if isinstance(m, codec.StatusMsg) and m.state == "task-done"][-1]
    final = _wire({"privacy": done.body["privacy"], "learner": done.body["learner"]})
    return records, final, restarted, rejected, lost


@pytest.fixture(scope="module")
def references():
    return {}


def _reference(references, key):
    if key not in references:
        fam, config, label = TASKS[key]()
        references[key] = (fam, config, label, *_engine(fam, config, label))
    return references[key]


@pytest.mark.parametrize("key", list(TASKS))
def test_the_services_without_faults_give_the_engines_numbers(tmp_path, references, key):
    """The harness itself: the services, through the codec, make exactly the in-process records."""
    fam, config, label, records, final = _reference(references, key)
    got, got_final, _, rejected, _ = asyncio.run(_session(fam, config, label, tmp_path))
    assert len(records) >= 4
    assert got == records and got_final == final
    assert not any(rejected.values()), rejected


@pytest.mark.parametrize(("key", "victim", "after", "mid_round"), [
    ("Dist-DP-SE", "analyzer", 3, False), ("Dist-DP-SE", "analyzer", 9, False), ("Dist-DP-SE", "analyzer", 20, False),
    ("Dist-DP-SE", "analyzer", 70, False),  # one release before the end
    ("LDP-SE", "analyzer", 7, False), ("DP-SE", "analyzer", 5, False), ("Dist-CDP-SE", "analyzer", 11, False),
    ("anytime-lazy-ucb@distributed", "analyzer", 10, False),
    ("Dist-DP-SE", "aggregator", 6, False), ("Dist-DP-SE", "aggregator", 25, False),
    ("Dist-RDP-SE-shuffled", "shuffler", 9, False),
    ("anytime-lazy-ucb@distributed", "aggregator", 15, False),
    ("Dist-DP-SE-blocks", "aggregator", 65, True), ("Dist-DP-SE-blocks", "aggregator", 70, True),
    ("Dist-RDP-SE-shuffled-blocks", "shuffler", 69, True),
    ("hybrid-ucb", "analyzer", 250, False), ("hybrid-ucb", "aggregator", 500, False),
])
def test_a_killed_party_restarted_from_its_checkpoint_gives_the_same_numbers(tmp_path, references, key, victim, after,
                                                                             mid_round):
    """Kill a party mid-task (between two messages: reports it accepted since its last round
    boundary die with it) and restart it from its state directory: the task ends with the in-process
    engine's records, ledger and learner state, no release counted twice, none lost."""
    fam, config, label, records, final = _reference(references, key)
    got, got_final, restarted, rejected, lost = asyncio.run(_session(fam, config, label, tmp_path, victim, after))
    assert restarted is not None, "the session ended before the fault"
    assert restarted.checkpoint is not None, "the victim had not checkpointed yet: a weak fault"
    if key == "hybrid-ucb":  # resumed from a snapshot and the journal of records appended after it
        assert restarted.checkpoint.records > 100, restarted.checkpoint.records
    assert (lost > 0) == mid_round, lost  # mid-round: accepted reports were lost and had to be sent again
    assert got == records and got_final == final
    # the restart resumed (not a fresh start): no refusal but the idempotent repeats a restart causes
    allowed = {"duplicate", "round-closed", "late-resend", "wrong-task"}
    assert all(set(r) <= allowed for r in rejected.values()), rejected


@pytest.mark.parametrize(("victim", "after"), [("analyzer", 1), ("aggregator", 0)])
def test_a_party_killed_before_its_first_checkpoint_starts_afresh_with_the_same_numbers(tmp_path, references, victim,
                                                                                      after):
    """The analyzer checkpoints at its first release, an intermediary when its task starts."""
    fam, config, label, records, final = _reference(references, "Dist-DP-SE")
    got, got_final, restarted, rejected, _ = asyncio.run(_session(fam, config, label, tmp_path, victim, after))
    assert restarted is not None and restarted.checkpoint is None
    assert got == records and got_final == final


def test_a_journal_of_another_task_does_not_replay():
    fam, config, label = TASKS["Dist-DP-SE"]()
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name,
                          public=fam.public_task(config, label, [0])).model_dump()
    party = build_analyzer(spec, analyzer_master_key(config.seed))
    foreign = codec.ReleaseMsg(run=RUN, task=0, round=999, n_reports=5, values=np.array([[3]], dtype="<i8"))
    with pytest.raises(ProtocolError, match="unknown-round"):
        replay_releases(party, [foreign])


def test_a_checkpoint_whose_releases_do_not_replay_stops_the_analyzer(tmp_path):
    """A checkpoint of this task (right spec) whose journal the learner refuses is not resumed."""
    fam, config, label = TASKS["Dist-DP-SE"]()
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name,
                          public=fam.public_task(config, label, [0])).model_dump()
    foreign = codec.ReleaseMsg(run=RUN, task=0, round=999, n_reports=5, values=np.array([[3]], dtype="<i8"))
    for journal in ([codec.encode(foreign)], [b"\x00garbage"],
                    [codec.encode(codec.ResendMsg(run=RUN, task=0, round=0))]):
        StateDir(tmp_path, RUN, "analyzer").save(0, spec_fingerprint(spec), {"releases": journal})
        service = AnalyzerService(BusSettings(run_id=RUN), analyzer_master_key(config.seed), tmp_path)
        service.bus = _Bus(_Net())
        with pytest.raises(CheckpointError) as info:
            asyncio.run(service.start_task(spec))
        assert info.value.reason == "checkpoint-inconsistent" and str(tmp_path) in str(info.value)


def test_a_checkpoint_of_another_session_is_refused(tmp_path):
    """Same run id, same experiment, a new session (the observer's nonce differs): refused."""
    fam, config, label = TASKS["Dist-DP-SE"]()
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name,
                          public=fam.public_task(config, label, [0])).model_dump()
    old, new = {**spec, "session": "aa"}, {**spec, "session": "bb"}
    StateDir(tmp_path, RUN, "analyzer").save(0, spec_fingerprint(old), {"releases": []})
    service = AnalyzerService(BusSettings(run_id=RUN), 1, tmp_path)
    assert service.resumable(old) == {"releases": []}
    with pytest.raises(CheckpointError, match="another task spec") as info:
        service.resumable(new)
    assert info.value.reason == "checkpoint-wrong-experiment"
    StateDir(tmp_path, RUN, "analyzer").save(4, spec_fingerprint(old), {"releases": []})
    with pytest.raises(CheckpointError, match="another session") as info:
        AnalyzerService(BusSettings(run_id=RUN), 1, tmp_path).resumable(new)  # task 0 < 4
    assert info.value.reason == "checkpoint-ahead"


def test_progress_counts_an_intermediarys_closed_rounds_and_the_analyzers_releases(tmp_path):
    from privbandit.services.checkpoint import progress

    assert progress(tmp_path / "nothing-yet") == (-1, 0)
    StateDir(tmp_path / "a", "r", "analyzer").save(2, "0" * 64, {"releases": [b"x", b"y"]})
    assert progress(tmp_path / "a") == (2, 2)
    # An intermediary also keeps its recent releases: rounds done are its closed ones.
    StateDir(tmp_path / "g", "r", "aggregator").save(1, "0" * 64, {"closed": [0, 1, 2], "releases": [b""]})
    assert progress(tmp_path / "g") == (1, 3)


def _first_plans_truths(fleets, spec, config, net, observer) -> list:
    """The fleets serve the task's first plan; the observer takes in the truths they send."""
    plan = codec.plan_msg(RUN_ID, 0, build_analyzer(spec, analyzer_master_key(config.seed)).next_plans()[0])

    async def serve():
        for fleet in fleets:
            fleet.bus = _Bus(net)
            await fleet.start_task(spec)
            await fleet.handle(f"pb/{RUN_ID}/plan", plan)

    asyncio.run(serve())
    truths = [(t, m) for t, m in net.seen if isinstance(m, codec.TruthMsg)]
    assert truths
    for topic, msg in truths:
        asyncio.run(observer.handle(topic, msg))
    return truths


def test_a_restarted_observer_keeps_the_truths_it_had_checkpointed(tmp_path, monkeypatch):
    """A fleet keeps its truths only in memory: a fleet restarted earlier in the task cannot send
    again, on the observer's resync, the truths it sent before. So the observer checkpoints the
    truths it accepts (within about two seconds), and a restarted observer starts its task with
    them, checked again; without that save, the restarted observer would have none."""
    import privbandit.services.observer as observer_mod
    from privbandit.services.observer import ObserverService
    from privbandit.services.users import UserFleetService

    fam, config, label = TASKS["Dist-DP-SE"]()
    parties = ["analyzer", "aggregator", "users-0", "users-1"]
    net = _Net()

    def observer():
        obs = ObserverService(BusSettings(run_id=RUN_ID), fam, config, parties, tmp_path / "out",
                              state_dir=tmp_path / "observer", report_key=USERS_KEY)
        obs.bus = _Bus(net)
        return obs

    def restarted():
        obs = observer()
        asyncio.run(obs.on_connect())  # resumes task 0, restores its truths, asks for a resync
        assert obs.index == 0
        return obs

    first = observer()
    asyncio.run(first.next_task())  # task 0, as when every party said ready
    spec = first.task_body
    fleets = [UserFleetService(BusSettings(run_id=RUN_ID), fam, config, i, 2, report_key=USERS_KEY) for i in range(2)]
    truths = _first_plans_truths(fleets, spec, config, net, first)
    served = first.observer.served()
    assert served > 0
    assert restarted().observer.served() == 0  # not saved yet: a restart here would lose them
    monkeypatch.setattr(observer_mod, "TRUTH_SAVE_S", 0.0)
    asyncio.run(first.tick())
    second = restarted()
    assert second.observer.served() == served
    assert sorted(second.observer.truths) == sorted(first.observer.truths)

    # A saved truth whose fleets' MAC does not verify is refused on restore, and counted.
    state = second.state.load()
    forged = codec.decode(state.state["truths"][0]).model_copy(update={"tag": b"\0" * 32})
    second.state.save(state.task, state.spec, {**state.state, "truths": [codec.encode(forged),
                                                                          *state.state["truths"][1:]]})
    third = restarted()
    assert third.rejected["bad-truth-tag"] == 1 and len(third.observer.truths) == len(truths) - 1


def test_an_observer_ignores_the_last_tasks_truths_served_again_and_refuses_any_other():
    """A fleet asked for a plan again near a task's end serves its truths again, and they can reach
    the observer after it moved on: a byte-identical copy of a truth it accepted in the last task
    is ignored, as a duplicate within a task is; a different one is ``wrong-task``."""
    from privbandit.services.observer import ObserverService
    from privbandit.services.users import UserFleetService

    fam, config, label = TASKS["Dist-DP-SE"]()
    net = _Net()
    obs = ObserverService(BusSettings(run_id=RUN_ID), fam, config, ["analyzer", "aggregator", "users-0"],
                          Path("unused"), report_key=USERS_KEY)
    obs.bus = _Bus(net)
    asyncio.run(obs.next_task())
    fleet = UserFleetService(BusSettings(run_id=RUN_ID), fam, config, 0, 1, report_key=USERS_KEY)
    truths = _first_plans_truths([fleet], obs.task_body, config, net, obs)
    asyncio.run(obs.next_task())  # the next task (or the session's end)
    for topic, msg in truths:  # served again, late
        asyncio.run(obs.handle(topic, msg))
    assert obs.rejected["wrong-task"] == 0
    topic, msg = truths[0]
    other = msg.model_copy(update={"pseudo": msg.pseudo + 1.0})
    other = other.model_copy(update={"tag": fleet.auth.mac("truth", RUN_ID, 0, other.plan, other.block,
                                                           payload=codec.encode(other.model_copy(update={"tag": b""})))})
    asyncio.run(obs.handle(topic, other))
    assert obs.rejected["wrong-task"] == 1


def test_a_fleet_serves_a_plan_again_once_for_a_burst_of_requests(monkeypatch):
    """A restarted intermediary asks for every open round again, and one plan may join hundreds:
    serving the plan once answers them all, so a burst of requests costs one serve, not one each
    (a fleet that did one each fell minutes behind and missed the session's end)."""
    import privbandit.services.users as users_mod
    from privbandit.services.users import UserFleetService

    fam, config, label = TASKS["Dist-DP-SE"]()
    net = _Net()
    fleet = UserFleetService(BusSettings(run_id=RUN_ID), fam, config, 0, 1, report_key=USERS_KEY)
    fleet.bus = _Bus(net)
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name, public=fam.public_task(config, label, [0]),
                          session="5e55").model_dump()
    plan = build_analyzer(spec, analyzer_master_key(config.seed)).next_plans()[0]
    round_id = plan.joins[0].round_id

    def reports() -> int:
        return sum(topic.endswith("/report/aggregator") for topic, _ in net.queues["box"])

    net.subs["box"], net.queues["box"] = [f"pb/{RUN_ID}/report/+"], []
    burst = [codec.ResendMsg(run=RUN_ID, task=0, round=round_id) for _ in range(20)]

    async def go():
        await fleet.start_task(spec)
        await fleet.handle(f"pb/{RUN_ID}/plan", codec.plan_msg(RUN_ID, 0, plan))
        once = reports()
        for msg in burst:
            await fleet.handle(f"pb/{RUN_ID}/relay/aggregator", msg)
        return once

    once = asyncio.run(go())
    assert once > 0 and reports() == 2 * once
    monkeypatch.setattr(users_mod, "RESERVE_S", 0.0)  # without the window, every request is a serve
    for msg in burst:
        asyncio.run(fleet.handle(f"pb/{RUN_ID}/relay/aggregator", msg))
    assert reports() == 22 * once
    # Only the asker's rounds are sent again: a shuffler's request sends nothing to the aggregator,
    # which did not ask and may have closed its rounds (their late copies would count as refusals).
    asyncio.run(fleet.handle(f"pb/{RUN_ID}/relay/shuffler", burst[0]))
    assert reports() == 22 * once


def test_a_fleet_refuses_a_secure_round_weaker_than_its_threat_model():
    """The analyzer chooses each secure round's graph (k, t); a curious one could send a sparser
    graph or a lower threshold, so that the aggregator and a few colluders can unmask a user. A
    fleet recomputes (k, t) from the experiment's threat model and refuses a plan that differs
    (`bad-plan`), sending nothing for it; the honest plan is served."""
    from dataclasses import replace

    from privbandit.protocol.primitives.report_auth import fleet_key
    from privbandit.protocol.spine.events import Plan
    from privbandit.services.users import UserFleetService

    fam, config, label = _mab("Dist-DP-SE", {"intermediary": "secagg", "secagg_graph": "sparse",
                                             "dropout_rate": 0.1, "dropout_tolerance": 0.1}, horizon=20_000)
    from privbandit.protocol.spine import engine

    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name, public=fam.public_task(config, label, [0]),
                          session="5e55").model_dump()
    _, analyzer, users, boxes, observer = tasks.parties(fam, config, label, [0], oracle=False)
    next_plans = analyzer.next_plans

    class Found(Exception):  # the first plan of a cohort large enough for a sparse graph (k < n − 1)
        pass

    def watch():
        got = next_plans()
        for p in got:
            if p.opens and p.opens[0].expected >= 64:
                raise Found(p)
        return got

    analyzer.next_plans = watch
    with pytest.raises(Found) as found:
        engine.run(analyzer, users, boxes, observer)
    plan = found.value.args[0]
    (rnd,) = plan.opens
    assert rnd.secagg == "sparse" and 2 <= rnd.secagg_threshold <= rnd.secagg_degree < rnd.expected - 1
    weaker = [replace(rnd, secagg_threshold=rnd.secagg_threshold - 1),
              replace(rnd, secagg_degree=rnd.secagg_degree - 2), replace(rnd, secagg="complete")]

    def sent(fleet) -> int:
        return len(fleet.bus.net.queues["box"])

    async def go():
        outcomes = []
        for i, bad in enumerate([*weaker, rnd]):
            net = _Net()
            fleet = UserFleetService(BusSettings(run_id=RUN_ID), fam, config, 0, 1, report_key=USERS_KEY,
                                     fleet_key=fleet_key(7, 0), identity_key=8)
            fleet.bus = _Bus(net)
            net.subs["box"], net.queues["box"] = [f"pb/{RUN_ID}/report/+", f"pb/{RUN_ID}/metrics/+"], []
            await fleet.start_task(spec)
            forged = Plan(plan.id, plan.first_user, plan.cohort, opens=(bad,), joins=plan.joins, body=plan.body)
            await fleet.handle(f"pb/{RUN_ID}/plan", codec.plan_msg(RUN_ID, 0, forged))
            outcomes.append((fleet.rejected["bad-plan"], sent(fleet)))
        return outcomes

    *refused, honest = asyncio.run(go())
    assert refused == [(1, 0)] * 3, refused
    assert honest[0] == 0 and honest[1] > 0


def test_a_restarted_intermediary_still_answers_for_releases_long_past(tmp_path):
    """A checkpoint keeps every release of the task within its byte budget, not the last 64: an
    analyzer that died with an early round's release unsaved re-announces that round's plan, and a
    shuffler restarted 100 rounds later must still hold the release to send it again (a count
    limit of 64 once stalled a concurrent-shuffle session for good)."""
    from privbandit.services.intermediary import IntermediaryService

    fam, config, label = TASKS["Dist-DP-SE"]()
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name, public=fam.public_task(config, label, [0]),
                          session="5e55").model_dump()

    def box():
        service = IntermediaryService(BusSettings(run_id=RUN_ID), 7, "aggregator", state_dir=tmp_path)
        service.bus = _Bus(_Net())
        asyncio.run(service.start_task(spec))
        return service

    first = box()
    for rid in range(100):  # released rounds 0 … 99, each checkpointed (to the journal) as it is released
        msg = codec.ReleaseMsg(run=RUN_ID, task=0, round=rid, n_reports=3, values=np.array([[rid]], dtype=np.int64))
        asyncio.run(first.publish_release(rid, msg))
    assert first.state.snapshots == 1 and first.state.writes == 101  # the task's start, then one record each
    again = box()
    assert sorted(again.released) == list(range(100))
    assert again.released[0].values.tolist() == [[0]]


def test_a_forged_repeat_of_a_decoded_release_is_refused_for_what_it_is():
    """A release that comes after its round was decoded is normally a repeat (an intermediary
    answers a re-announced plan with it) and is dropped quietly; one its round's rule cannot
    produce is refused by reason, as it would have been before the genuine one: the refusal counts
    no longer depend on which came first."""
    from privbandit.protocol.spine.events import Release

    fam, config, label = TASKS["Dist-DP-SE"]()
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name, public=fam.public_task(config, label, [0]),
                          session="5e55").model_dump()
    party = build_analyzer(spec, analyzer_master_key(config.seed))
    (rnd, *_) = [r for p in party.next_plans() for r in p.opens]
    genuine = Release(rnd.id, rnd.expected, np.array([[1]], dtype=np.int64))
    party.on_release(genuine)
    party.check_repeat(genuine)  # a repeat the rule can produce: fine
    for forged, reason in ((Release(rnd.id, rnd.expected + 1, np.array([[1]], dtype=np.int64)), "bad-report-count"),
                           (Release(rnd.id, rnd.expected, np.array([[rnd.m]], dtype=np.int64)), "out-of-range")):
        with pytest.raises(ProtocolError) as refused:
            party.check_repeat(forged)
        assert refused.value.reason == reason
