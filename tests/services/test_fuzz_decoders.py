"""Hypothesis against every decoder a peer, a file or an operator can feed: the wire codec (every
kind, every SecAgg step), the SecAgg chunk assembler and both step machines, experiment files and
key text. Random bytes and mutated valid inputs: no exception but the decoder's own escapes, and
every rejection carries a reason (a countable key, or a message naming the file or field)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privbandit.cli import parse_key
from privbandit.protocol.primitives.report_auth import ReportAuthenticator
from privbandit.protocol.primitives.secagg.batch import BatchError, UserIdentities
from privbandit.protocol.spine.events import Round
from privbandit.runner.config import ConfigError, load
from privbandit.services import codec
from privbandit.services.secagg_rounds import AggregatorSecAgg, FleetSecAgg, from_messages
from tests.services.test_codec import SAMPLES

M = 2**31 - 1
AUTH = ReportAuthenticator(12345)
DECODE_REASONS = {"not-msgpack", "not-a-map", "bad-version", "unknown-kind", "schema", "too-large", "over-limit",
                  "wrong-topic"}


def _mutations(blob: bytes):
    """Flip, drop or insert up to four bytes of ``blob``."""
    n = len(blob)
    op = st.tuples(st.sampled_from(["flip", "drop", "insert"]), st.integers(0, max(n - 1, 0)), st.integers(1, 255))

    def apply(ops):
        b = bytearray(blob)
        for kind, i, x in ops:
            i = min(i, len(b) - 1) if b else 0
            if kind == "flip" and b:
                b[i] ^= x
            elif kind == "drop" and b:
                del b[i]
            else:
                b.insert(i, x)
        return bytes(b)

    return st.lists(op, min_size=1, max_size=4).map(apply)


def _field_mutations(blob: bytes):
    """Replace one top-level field of a valid message with a value of another type or range."""
    obj = msgpack.unpackb(blob, raw=False)
    values = st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=6), st.none(), st.binary(max_size=12),
                       st.booleans(), st.floats(), st.lists(st.integers(-5, 5), max_size=3),
                       st.fixed_dictionaries({"dtype": st.sampled_from(["<u8", "|u1", "<f8", "|O", "<i4"]),
                                              "shape": st.lists(st.integers(-1, 40), max_size=2),
                                              "data": st.binary(max_size=40)}))
    return st.tuples(st.sampled_from(sorted(obj) + ["extra"]), values).map(
        lambda kv: msgpack.packb({**obj, kv[0]: kv[1]}, use_bin_type=True))


# --- valid messages of every kind, SecAgg chunks captured from a real round --------------------------

class _Round:
    """A real secure round (two fleets, one aggregator) wired through the codec, keeping every
    message it sends. ``rejected`` collects reasons the machines return."""

    def __init__(self, cohort: int = 6):
        self.round = Round(3, "aggregator", "sum", cohort, m=M, secagg="complete")
        self.values = {u: (u * 7919) % M for u in range(cohort)}
        self.sent: list[tuple[str, bytes]] = []
        self.queue: list[tuple[str, codec.SecAggMsg]] = []
        self.released, self.aborted, self.reasons = [], [], Counter()

        async def up(msg):
            self.sent.append(("agg", codec.encode(msg)))
            self.queue.append(("agg", codec.decode(codec.encode(msg))))

        async def down(msg):
            self.sent.append(("fleets", codec.encode(msg)))
            self.queue.append(("fleets", codec.decode(codec.encode(msg))))

        async def release(round_id, value, n):
            self.released.append((value, n))

        async def abort(round_id, reason):
            self.aborted.append(reason)

        self.agg = AggregatorSecAgg("r1", 0, 30.0, down, release, abort, Counter(), AUTH)
        ident = UserIdentities(b"f" * 32)
        self.fleets = [FleetSecAgg("r1", 0, i, 2, ident, up, AUTH) for i in range(2)]

    async def start(self):
        cohort = np.arange(self.round.expected)
        self.agg.open(self.round, cohort)
        for i, fleet in enumerate(self.fleets):  # user u on fleet u mod 2 (secure_host)
            await fleet.start(self.round, cohort, {u: v for u, v in self.values.items() if u % 2 == i}, [])

    async def deliver(self, where: str, msg) -> None:
        targets = [self.agg] if where == "agg" else self.fleets
        for target in targets:
            reason = await target.on_message(msg)
            assert reason is None or (isinstance(reason, str) and reason), reason
            if reason:
                self.reasons[reason] += 1

    async def drain(self):
        while self.queue:
            await self.deliver(*self.queue.pop(0))


def _captured() -> list[tuple[str, bytes]]:
    r = _Round()

    async def go():
        await r.start()
        await r.drain()

    asyncio.run(go())
    assert r.released == [(sum(r.values.values()) % M, 6)]  # the capture is of an honest, complete round
    return r.sent


CAPTURED = _captured()
SECAGG = [blob for _, blob in CAPTURED]
assert {codec.decode(b).step for b in SECAGG} == set(codec.SECAGG_STEPS)
# every other kind, as test_codec builds them (plans with rounds and joins, reports with MACs, …)
OTHERS = [codec.encode(m) for m in SAMPLES] + [codec.encode(m) for m in (
    codec.StatusMsg(run="r1", party="analyzer", state="task-done", task=0, body={"privacy": {}, "learner": [{}]}),
    codec.ControlMsg(run="r1", action="resync", task=0),
)]
VALID = OTHERS + SECAGG


def _check_decode(data: bytes):
    """Decode; a rejection must carry a known reason, and a schema rejection must name kind.field."""
    try:
        return codec.decode(data)
    except codec.DecodeError as exc:
        assert exc.reason in DECODE_REASONS, exc.reason
        if exc.reason == "schema":
            kind, _, rest = exc.detail.partition(".")
            assert kind in codec.KINDS and ":" in rest, exc.detail
        return None


def test_every_kind_and_every_secagg_step_round_trips():
    kinds = {codec.decode(b).kind for b in VALID}
    assert kinds == set(codec.KINDS)
    for blob in VALID:
        assert codec.encode(codec.decode(blob)) == blob


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(VALID))).flatmap(lambda i: st.one_of(_mutations(VALID[i]), _field_mutations(VALID[i]))))
def test_fuzz_mutated_messages_of_every_kind(data):
    msg = _check_decode(data)
    if isinstance(msg, codec.SecAggMsg):
        try:  # a chunk that passed the codec: the assembler refuses it with BatchError or accepts it
            from_messages(msg.step, [msg])
        except BatchError as exc:
            assert str(exc)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    _check_decode(data)


@settings(max_examples=int(os.environ.get("FUZZ_SECAGG_EXAMPLES", 60)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(CAPTURED) - 1), st.data()), min_size=1, max_size=6),
       st.integers(0, 40))
def test_fuzz_the_secagg_step_machines(injections, when):
    """Mutated or replayed chunks (from another real round) injected into a fresh round at a random
    point, to the aggregator and to the fleets: every call returns None or a reason, nothing raises.
    While the aggregator refuses every injected chunk, the round releases the exact sum or aborts
    with a reason naming its step. Chunks toward the aggregator carry their fleet's MAC, so one it
    *accepts* is a genuine chunk replayed (the captured round has this round's context): then only
    robustness is asserted; so too for chunks toward the fleets, which only the aggregator's
    account may publish (test_acl_relay.py)."""
    r = _Round()
    toward_fleets = False
    accepted = 0

    async def go():
        await r.start()
        nonlocal toward_fleets, accepted
        steps = 0
        while r.queue:
            if steps == when:
                for i, data in injections:
                    where, blob = CAPTURED[i]
                    msg = _check_decode(data.draw(st.one_of(_mutations(blob), _field_mutations(blob),
                                                            st.just(blob))))
                    if isinstance(msg, codec.SecAggMsg):
                        before = sum(r.reasons.values())
                        await r.deliver(where, msg)
                        accepted += where == "agg" and sum(r.reasons.values()) == before
                        await r.deliver("agg" if where == "fleets" else "fleets", msg)  # the wrong way
                        toward_fleets |= where == "fleets"
            await r.deliver(*r.queue.pop(0))
            steps += 1
        # a step whose fleets all answered has advanced; one still waiting would go on at its deadline
        await r.agg.tick()

    asyncio.run(go())
    assert len(r.released) + len(r.aborted) <= 1
    if r.released and not toward_fleets and not accepted:
        value, n = r.released[0]
        assert n <= 6 and (n < 6 or value == sum(r.values.values()) % M)
    for reason in r.aborted:
        assert reason.startswith("secure aggregation aborted a") and "step " in reason, reason


# --- files and operator input -------------------------------------------------------------------

EXPERIMENT = b"""name = "fz"
horizon = 1000
seed = 3
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
arms = 3
[algorithms.Dist-DP-SE]
"""


EXPERIMENT_POL = b"""family = "private-online-learning"
name = "fz"
horizon = 1000
seed = 3
epsilon = 0.5
[environment]
means = [0.9, 0.5]
[algorithms."anytime-lazy-ucb@distributed"]
trust = "distributed"
"""


@pytest.mark.parametrize(("sample", "family"), [(EXPERIMENT, "distributed-dp-mab"),
                                                (EXPERIMENT_POL, "private-online-learning")])
def test_the_experiment_samples_are_valid(tmp_path, sample, family):
    (tmp_path / "e.toml").write_bytes(sample)
    fam, config = load(tmp_path / "e.toml")
    assert fam.name == family and config.horizon == 1000


def _line_edits(sample: bytes):
    """One line's value replaced by any text."""
    return st.tuples(st.sampled_from([ln for ln in sample.split(b"\n") if b"=" in ln]), st.text(max_size=12)).map(
        lambda t: sample.replace(t[0], t[0].split(b"=")[0] + b"= " + t[1].encode(), 1))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200), _mutations(EXPERIMENT), _mutations(EXPERIMENT_POL),
                 _line_edits(EXPERIMENT), _line_edits(EXPERIMENT_POL)))
def test_fuzz_experiment_files(tmp_path, data):
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data)
    try:
        load(path)
    except ConfigError as exc:
        assert str(path) in str(exc)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.integers(-2**300, 2**300).map(hex)))
def test_fuzz_key_text(text):
    try:
        key = parse_key("PRIVBANDIT_ANALYZER_KEY", text)
    except ValueError as exc:
        assert "PRIVBANDIT_ANALYZER_KEY" in str(exc)
    else:
        assert 0 <= key < 2**256


@pytest.mark.parametrize("text", ["0x1f", "1f", " 0xABC\n"])
def test_valid_keys_parse(text):
    assert parse_key("K", text) == int(text.strip(), 16)


def test_a_conflicting_chunk_aborts_the_round_loudly():
    """A second, different chunk under a fleet's (shard, chunk) (a replay from another round or an
    impersonation) must not be dropped as a duplicate while the first stands: the round aborts."""
    r = _Round()
    foreign = next(codec.decode(b) for w, b in CAPTURED if w == "agg" and codec.decode(b).step == "advertise"
                   and codec.decode(b).shard == 0)

    async def go():
        await r.start()
        where, genuine = r.queue.pop(0)
        assert (where, genuine.step, genuine.shard) == ("agg", "advertise", 0)
        assert await r.agg.on_message(genuine) is None
        assert await r.agg.on_message(genuine) == "duplicate"  # a redelivered copy is harmless
        assert await r.agg.on_message(foreign) == "secagg-conflicting-chunk"

    asyncio.run(go())
    assert r.released == [] and len(r.aborted) == 1
    assert "at step 'advertise'" in r.aborted[0] and "two different chunks" in r.aborted[0]


# --- the compose file and the credentials file ------------------------------------------------------

from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from privbandit.services import compose  # noqa: E402
from privbandit.services.bus import BusSettings  # noqa: E402

COMPOSE = (Path(__file__).resolve().parents[2] / "docker-compose.yml").read_bytes()


def _compose_with(service: str, field: str, value) -> bytes:
    doc = yaml.safe_load(COMPOSE)
    doc["services"][service][field] = value
    return yaml.safe_dump(doc).encode()


def _yaml_values():
    scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8))
    return st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                        max_leaves=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(
    st.binary(max_size=200), _mutations(COMPOSE),
    # one field of one service replaced by any YAML value
    st.tuples(st.sampled_from(["observer", "analyzer", "aggregator", "broker", "config"]),
              st.sampled_from(["command", "environment", "env_file", "volumes", "depends_on", "restart",
                               "image", "entrypoint", "build"]), _yaml_values()).map(lambda t: _compose_with(*t)),
    _yaml_values().map(lambda v: yaml.safe_dump(v).encode()),
))
def test_fuzz_compose_files(tmp_path, data):
    path = tmp_path / "docker-compose.yml"
    path.write_bytes(data)
    try:
        services = compose.load(path, tmp_path)
    except compose.ComposeError as exc:
        assert str(exc)
    else:
        assert all(isinstance(s.command, list) for s in services.values())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=120), st.text(max_size=120).map(str.encode),
                 st.text(max_size=20).map(lambda pw: f"PRIVBANDIT_USERS_PASSWORD={pw}\n".encode())))
def test_fuzz_credentials_files(tmp_path, data):
    path = tmp_path / "credentials.env"
    path.write_bytes(data)
    try:
        settings_ = BusSettings(username="users", credentials_file=str(path), password=None)
    except ValueError as exc:
        assert "credentials_file" in str(exc)
    else:
        assert isinstance(settings_.password, str)


# --- the parties behind the decoder: a message that decodes must never end a party -----------------
#
# What passes the codec is a wire value of the right shape; what it *means* (a plan's arm, a
# release's sum, a truth's extras) is the family's to judge. Each party of a running task (the
# analyzer, the aggregator, a user fleet, for both families) is handed mutated copies of real
# messages of its session, with any field, nested body values included, replaced: it must refuse
# or accept each, and go on (PartyService.handle counts what it cannot act on), never raise.

from privbandit import registry  # noqa: E402
from privbandit.protocol.primitives.seeding import analyzer_master_key  # noqa: E402
from privbandit.services.analyzer import AnalyzerService  # noqa: E402
from privbandit.services.intermediary import IntermediaryService  # noqa: E402
from privbandit.services.users import UserFleetService  # noqa: E402


def _family_config(name: str):
    fam = registry.family(name)
    if name == "distributed-dp-mab":
        data = {"name": "fz", "horizon": 3000, "seed": 3, "epsilon": 0.5, "runs": 1,
                "environment": {"kind": "uniform", "arms": 3}, "algorithms": {"Dist-DP-SE": {}}}
    else:
        data = {"family": name, "name": "fz", "horizon": 3000, "seed": 3, "epsilon": 1.0, "runs": 1,
                "environment": {"means": [0.9, 0.5, 0.4]},
                "algorithms": {"A": {"algorithm": "anytime-lazy-ucb", "trust": "distributed"}}}
    config = fam.load(data, "fz.toml")
    return fam, config, fam.labels(config)[0]


class _Sink:
    """A bus that keeps what a party publishes."""

    def __init__(self):
        from privbandit.services.bus import Traffic

        self.traffic = Traffic()
        self.lost = None
        self.sent: list[tuple[str, bytes]] = []

    async def publish(self, topic: str, msg) -> None:
        self.sent.append((topic, codec.encode(msg)))


async def _parties(fam, config, label):
    settings = BusSettings(run_id="fz")
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name,
                          public=fam.public_task(config, label, [0])).model_dump()
    parties = [AnalyzerService(settings, analyzer_master_key(config.seed)),
               IntermediaryService(settings, 0xF22, "aggregator"),  # the session's users' key: any one
               UserFleetService(settings, fam, config, 0, 1, report_key=0xF22)]
    for p in parties:
        p.bus = _Sink()
        await p.start_task(spec)
    return parties


def _session_messages(name: str) -> list[bytes]:
    """Real messages of a few rounds of a session (plans, reports, releases, truths, records)."""
    fam, config, label = _family_config(name)

    async def go():
        analyzer, aggregator, fleet = await _parties(fam, config, label)
        out = []
        for _ in range(6):
            sent = [m for p in (analyzer, aggregator, fleet) for m in p.bus.sent]
            for p in (analyzer, aggregator, fleet):
                p.bus.sent = []
            out += [data for _, data in sent]
            for topic, data in sent:
                msg = codec.decode(data)
                for p in (analyzer, aggregator, fleet):
                    if any(topic.startswith(f"pb/fz/{s.split('/')[2]}") for s in p.subscriptions()):
                        await p.handle(topic, msg)
        return out

    msgs = asyncio.run(go())
    kinds = {codec.decode(m).kind for m in msgs}
    assert {"plan", "reports", "release", "truth", "record"} <= kinds, kinds
    return msgs


PARTY_FAMILIES = ["distributed-dp-mab", "private-online-learning"]
SESSION = {name: _session_messages(name) for name in PARTY_FAMILIES}


def _paths(obj, prefix=()):
    """Every field of a decoded msgpack map, nested maps and lists included (not inside arrays)."""
    if isinstance(obj, dict) and set(obj) != {"dtype", "shape", "data"}:
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _deep_mutations(blob: bytes):
    obj = msgpack.unpackb(blob, raw=False)
    paths = sorted(_paths(obj), key=repr)
    values = st.one_of(st.integers(-3, 12), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=False),
                       st.text(max_size=6), st.none(), st.booleans(), st.lists(st.integers(-2, 9), max_size=3),
                       st.dictionaries(st.sampled_from(["arm", "kind", "n", "m"]), st.integers(-2, 9), max_size=2))

    def apply(choice):
        path, value = choice
        out = msgpack.unpackb(blob, raw=False)
        node = out
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
        return msgpack.packb(out, use_bin_type=True)

    return st.tuples(st.sampled_from(paths), values).map(apply)


@pytest.mark.parametrize("name", PARTY_FAMILIES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_parties_never_end_on_a_message_that_decodes(name, data):
    by_kind: dict[str, list[bytes]] = {}
    for b in SESSION[name]:
        by_kind.setdefault(codec.decode(b).kind, []).append(b)
    blobs = by_kind[data.draw(st.sampled_from(sorted(by_kind)))]  # every kind as often
    blob = blobs[data.draw(st.integers(0, len(blobs) - 1))]
    mutated = data.draw(st.one_of(_deep_mutations(blob), _field_mutations(blob), _mutations(blob)))
    msg = _check_decode(mutated)
    if msg is None:
        return
    fam, config, label = _family_config(name)

    async def go():
        for party in await _parties(fam, config, label):
            await party.handle(f"pb/fz/{msg.kind}", msg)  # raises only if the party would die

    asyncio.run(go())


@pytest.mark.parametrize(("name", "field", "value"), [
    ("distributed-dp-mab", "arm", 7), ("distributed-dp-mab", "arm", 1.5), ("distributed-dp-mab", "params", {"n": 0}),
    ("private-online-learning", "kind", "epoch"), ("private-online-learning", "arms", None),
])
def test_a_plan_a_fleet_cannot_act_on_is_counted_and_the_fleet_goes_on(name, field, value):
    """An arm out of range (say) decodes: the family's users fail on it; the fleet counts it as
    ``invalid-content`` and serves the next plan as if it had never come."""
    fam, config, label = _family_config(name)
    plans = [m for m in map(codec.decode, SESSION[name]) if m.kind == "plan"]
    plan = next(p for p in plans if field in p.body)
    bad = plan.model_copy(update={"body": {**plan.body, field: value}})

    async def go():
        _, _, fleet = await _parties(fam, config, label)
        await fleet.handle("pb/fz/plan", codec.decode(codec.encode(bad)))
        assert fleet.rejected["invalid-content"] + fleet.rejected["bad-plan"] == 1, fleet.rejected
        fleet.served.pop(plan.plan, None)  # the bad copy may have been half served: as if it had not
        fleet.bus.sent = []
        await fleet.handle("pb/fz/plan", plan)
        return [codec.decode(d).kind for _, d in fleet.bus.sent]

    kinds = asyncio.run(go())
    assert "truth" in kinds
