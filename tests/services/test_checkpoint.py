"""Checkpoints: the file format, atomic replacement, refusal of foreign or damaged files, and the
analyzer's journal rebuilding the sans-I/O party to an identical continuation."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privbandit.experiment.config import ExperimentConfig
from privbandit.experiment.runner import instance_for, resolved_algorithms
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.parties import Intermediary, UserPopulation
from privbandit.protocol.primitives.seeding import analyzer_master_key
from privbandit.services.analyzer import build_analyzer, replay_releases
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
REASONS = {"checkpoint-too-large", "checkpoint-bad-magic", "checkpoint-corrupt", "checkpoint-not-msgpack",
           "checkpoint-schema"}


def _rehash(body: bytes) -> bytes:
    import hashlib

    return MAGIC + hashlib.sha256(body).digest() + body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=64).map(lambda b: MAGIC + b),
    # one byte of a valid file flipped: caught by the digest (or the magic)
    st.tuples(st.integers(0, len(GOOD) - 1), st.integers(1, 255)).map(
        lambda t: GOOD[:t[0]] + bytes([GOOD[t[0]] ^ t[1]]) + GOOD[t[0] + 1:]),
    # a valid digest over a mangled body: the decoder and the schema must catch it
    st.binary(max_size=120).map(_rehash),
    st.tuples(st.integers(0, len(GOOD) - 41), st.binary(min_size=1, max_size=8)).map(
        lambda t: _rehash(GOOD[40:][:t[0]] + t[1] + GOOD[40:][t[0] + len(t[1]):])),
    st.integers(0, len(GOOD) - 1).map(lambda i: GOOD[:i]),  # truncated
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

    body = msgpack.unpackb(GOOD[40:])
    for field, bad in (("task", -1), ("run", "a b"), ("spec", "xyz"), ("format", 2), ("state", [1])):
        with pytest.raises(CheckpointError, match=f"'{field}'") as info:
            decode_checkpoint(_rehash(msgpack.packb({**body, field: bad})))
        assert info.value.reason == "checkpoint-schema"
    assert decode_checkpoint(GOOD)[2].task == 2


def test_atomic_write_replaces_a_file(tmp_path):
    path = tmp_path / "f"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two" and sorted(os.listdir(tmp_path)) == ["f"]


# --- the analyzer's journal: an identical continuation --------------------------------------------

def _task(label: str, algorithm: dict) -> tuple[ExperimentConfig, dict]:
    config = ExperimentConfig.model_validate({
        "name": "ck", "horizon": 200_000, "seed": 11, "epsilon": 0.5, "runs": 1,
        "environment": {"kind": "uniform", "arms": 6}, "algorithms": {label: algorithm}})
    algo = resolved_algorithms(config)[label]
    return config, {"index": 0, "run": 0, "label": label, "algorithm": algo.model_dump(),
                    "horizon": config.horizon, "arms": 6, "delta": config.delta}


def _drive(party, users, mechanism, stop_after=None):
    """Serve plans and feed releases until the horizon (or ``stop_after`` releases); returns the
    journal ([round, n, value]) and the records."""
    journal, records = [], []
    plans = party.next_plans()
    while plans:
        for plan in plans:
            if stop_after is not None and len(journal) == stop_after:
                return journal, records
            sent, _ = users.respond(plan)
            if sent is None:
                continue
            box = Intermediary(plan, mechanism)
            box.receive(sent)
            rel = box.release()
            value = rel.value if rel.reports is None else mechanism.aggregate(rel.reports, plan.params)
            records.append(party.on_release(rel))
            journal.append([plan.round_id, rel.n_reports, value.item() if hasattr(value, "item") else value])
        plans = party.next_plans()
    return journal, records


@pytest.mark.parametrize(("label", "algorithm"), [
    ("Dist-DP-SE", {}), ("DP-SE", {}), ("LDP-SE", {}), ("Dist-CDP-SE", {}),
])
def test_a_checkpoint_rebuilds_the_analyzer_to_an_identical_continuation(label, algorithm):
    """Run a task to the end (A); run it again to mid-way (B), checkpoint B's journal through the
    file format, rebuild C from it, and finish C: C's records and final state equal A's, bit for bit."""
    config, spec = _task(label, algorithm)
    key = analyzer_master_key(config.seed)

    def fresh():
        party = build_analyzer(spec, key)
        users = UserPopulation(instance_for(config, 0), party.mechanism, config.seed,
                               checkpoint_grid(config.horizon, config.checkpoints), (0, label))
        return party, users

    a, users = fresh()
    full, records_a = _drive(a, users, a.mechanism)
    assert len(full) >= 6
    for cut in (0, 1, len(full) // 2, len(full) - 1):
        b, _ = fresh()
        journal, _ = _drive(b, users, b.mechanism, stop_after=cut)
        assert journal == full[:cut]
        data = encode_checkpoint(RUN, "analyzer", 0, spec_fingerprint(spec), {"releases": journal})
        c, _ = fresh()
        open_batch, replayed = replay_releases(c, decode_checkpoint(data)[2].state["releases"])
        assert replayed == records_a[:cut]
        assert sorted(c.open) == sorted(b.open) and {p.round_id for p in open_batch} >= set(b.open)
        rest, records_c = _drive_open(c, users, open_batch)
        assert records_c == records_a[cut:]
        assert np.array_equal(c.learner.eliminated_at, a.learner.eliminated_at)
        assert np.array_equal(c.learner.estimates, a.learner.estimates)
        assert c.ledger.summary() == a.ledger.summary() and c.users_planned == a.users_planned


def _drive_open(party, users, plans):
    """Continue a rebuilt party: first release its open rounds (in plan order), then go on."""
    records = []
    while plans:
        for plan in plans:
            if plan.round_id not in party.open:
                continue
            sent, _ = users.respond(plan)
            box = Intermediary(plan, party.mechanism)
            box.receive(sent)
            records.append(party.on_release(box.release()))
        plans = party.next_plans()
    return None, records


def test_a_journal_of_another_task_does_not_replay():
    from privbandit.protocol.parties import ProtocolError

    config, spec = _task("Dist-DP-SE", {})
    party = build_analyzer(spec, analyzer_master_key(config.seed))
    with pytest.raises(ProtocolError, match="unknown-round"):
        replay_releases(party, [[999, 5, 3]])


def test_a_checkpoint_of_another_session_is_refused(tmp_path):
    """Same run id, same experiment, a new session (the observer's nonce differs): refused."""
    from privbandit.services.analyzer import AnalyzerService
    from privbandit.services.bus import BusSettings

    config, spec = _task("Dist-DP-SE", {})
    old, new = {**spec, "session": "aa"}, {**spec, "session": "bb"}
    StateDir(tmp_path, RUN, "analyzer").save(0, spec_fingerprint(old), {"releases": []})
    service = AnalyzerService(BusSettings(run_id=RUN), 1, tmp_path)
    assert service.resumable(old) == {"releases": []}
    with pytest.raises(CheckpointError, match="another session") as info:
        service.resumable(new)
    assert info.value.reason == "checkpoint-wrong-experiment"
    StateDir(tmp_path, RUN, "analyzer").save(4, spec_fingerprint(old), {"releases": []})
    with pytest.raises(CheckpointError, match="another session"):
        AnalyzerService(BusSettings(run_id=RUN), 1, tmp_path).resumable(new)  # task 0 < 4


def test_progress_counts_an_intermediarys_closed_rounds_and_the_analyzers_releases(tmp_path):
    from privbandit.services.checkpoint import progress

    assert progress(tmp_path / "nothing-yet") == (-1, 0)
    StateDir(tmp_path / "a", "r", "analyzer").save(2, "0" * 64, {"releases": [[0, 4, 1], [1, 4, 2]]})
    assert progress(tmp_path / "a") == (2, 2)
    # An intermediary also keeps the last batches' releases: rounds done are its closed ones.
    StateDir(tmp_path / "g", "r", "aggregator").save(1, "0" * 64, {"closed": [0, 1, 2], "releases": [[1, b""]]})
    assert progress(tmp_path / "g") == (1, 3)
