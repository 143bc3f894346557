"""Secure aggregation as the services run it: batches ⇄ chunked wire messages, fleets ⇄ aggregator.

These drive the real step machines with every message encoded to bytes and decoded again, but
without a broker; tests/services/test_distributed.py runs the same code between processes.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np
import pytest

from privbandit.protocol.primitives.report_auth import FleetKeys, ReportAuthenticator, fleet_key
from privbandit.protocol.primitives.secagg.batch import Adverts, BatchError, Masked, UserIdentities
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine.events import Round
from privbandit.services import codec, secagg_rounds
from privbandit.services.secagg_rounds import AggregatorSecAgg, FleetSecAgg, from_messages, to_messages

M = 2**40 + 15
IDENTITY = UserIdentities(b"k" * 32)
FLEET_MASTER = 12345
FLEETS = FleetKeys(FLEET_MASTER)  # the aggregator's: every fleet's chunk key


def fleet_auth(shard: int) -> ReportAuthenticator:
    """What fleet ``shard`` holds: its own key, no other fleet's."""
    return ReportAuthenticator(fleet_key(FLEET_MASTER, shard))


def _secure_round(round_id: int, cohort: int, mode: str = "complete", m: int = M) -> Round:
    return Round(round_id, "aggregator", "sum", cohort, m=m, secagg=mode)


def _wire(msg):
    return codec.decode(codec.encode(msg))  # every message crosses the codec, bytes and all


class _Session:
    """Two fleets and an aggregator, wired by in-memory queues through the codec."""

    def __init__(self, cohort: int, mode: str, values: dict, dropouts=(), tamper=None, fleets=2, first_user=0,
                 hosting="id"):
        self.round = _secure_round(7, cohort, mode)
        self.first_user = first_user
        self.queue: list = []
        self.released, self.aborted = [], []
        self.rejected = Counter()
        self.tamper = tamper

        async def up(msg):
            self.queue.append(("agg", _wire(msg)))

        async def down(msg):
            msg = _wire(msg)
            if self.tamper:
                msg = self.tamper(msg)
            self.queue.append(("fleets", msg))

        async def release(round_id, value, n):
            self.released.append((round_id, value, n))

        async def abort(round_id, reason):
            self.aborted.append(reason)

        self.agg = AggregatorSecAgg("r1", 0, 30.0, down, release, abort, self.rejected, FLEETS, hosting=hosting)
        self.fleets = [FleetSecAgg("r1", 0, i, fleets, IDENTITY, up, fleet_auth(i), hosting=hosting)
                       for i in range(fleets)]
        self.values, self.dropouts, self.hosting = values, set(dropouts), hosting

    def cohort(self) -> np.ndarray:
        return np.arange(self.first_user, self.first_user + self.round.expected)

    async def run(self):
        cohort = self.cohort()
        self.agg.open(self.round, cohort)
        for i, fleet in enumerate(self.fleets):
            # secure_host; the ring rule needs the whole cohort, so each fleet is handed every input
            mine = lambda u: self.hosting == "ring" or u % len(self.fleets) == i  # noqa: E731
            await fleet.start(self.round, cohort, {u: v for u, v in self.values.items() if mine(u)},
                              [u for u in self.dropouts if mine(u)])
        while self.queue:
            where, msg = self.queue.pop(0)
            if where == "agg":
                assert await self.agg.on_message(msg) is None
            else:
                for fleet in self.fleets:
                    reason = await fleet.on_message(msg)
                    assert reason is None, reason
        return self


def _run(*args, **kw):
    return asyncio.run(_Session(*args, **kw).run())


@pytest.mark.parametrize("mode", ["complete", "sparse"])
def test_the_wire_round_releases_the_exact_sum(mode):
    rng = np.random.default_rng(1)
    values = {u: int(v) for u, v in enumerate(rng.integers(0, M, 40))}
    s = _run(40, mode, values)
    assert s.aborted == [] and s.released == [(7, sum(values.values()) % M, 40)]
    assert s.rejected == Counter()


def test_dropouts_after_sharing_are_recovered():
    values = {u: u * 1000 + 1 for u in range(30) if u not in (3, 17)}
    s = _run(30, "complete", values, dropouts=[3, 17])
    assert s.released == [(7, sum(values.values()) % M, 28)]


def test_fleets_route_mail_by_the_public_host_rule():
    """User u runs its side of a secure round on fleet u mod N (secure_host), whatever block of
    whatever plan it came in: the aggregator routes each ciphertext to its recipient's fleet."""
    s = _Session(12, "complete", {u: 1 for u in range(12)})
    shares = []

    async def capture(msg):
        shares.append(_wire(msg))

    recipients = np.array([5, 6, 5 + USER_BLOCK, 8 + 3 * USER_BLOCK])  # over several blocks
    cohort = np.sort(np.concatenate([recipients, 10 + np.arange(8)]))
    s.agg.open(s.round, cohort)
    s.agg.shards = 2
    s.agg.send = capture
    from privbandit.protocol.primitives.secagg.batch import CIPHERTEXT_BYTES, Shares

    asyncio.run(s.agg._deliver(7, Shares(np.zeros(4, np.int64), recipients, b"c" * CIPHERTEXT_BYTES * 4)))
    got = {m.shard: np.asarray(m.peers).tolist() for m in shares}
    assert got == {0: [6, 8 + 3 * USER_BLOCK], 1: [5, 5 + USER_BLOCK]}


@pytest.mark.parametrize("agg_rule", ["ring", "id"])
@pytest.mark.parametrize("fleets", [1, 2, 3])
def test_ring_hosting_releases_the_exact_sum_and_routes_mail_to_each_arc(fleets, agg_rule):
    """Issue #33: users hosted by arcs of the masking graph's ring (secagg_rounds.round_hosts
    "ring"); every fleet is handed every input and runs its arc's users only, the aggregator routes
    each ciphertext to its recipient's arc (to the fleet that advertised it, whatever rule the
    aggregator itself was given), and the sum is exact under dropouts after sharing."""
    from privbandit.protocol.primitives.secagg.batch import round_setup
    from privbandit.protocol.primitives.secagg.graph import contiguous_hosts

    n = 60
    rng = np.random.default_rng(fleets)
    dropouts = [3, 31, 44]
    values = {u: int(v) for u, v in enumerate(rng.integers(0, M, n)) if u not in dropouts}
    s = _Session(n, "sparse", values, dropouts=dropouts, fleets=fleets, hosting="ring")
    s.round = Round(7, "aggregator", "sum", n, m=M, secagg="sparse", secagg_degree=8, secagg_threshold=4)
    s.agg.hosting = agg_rule
    mail = Counter()
    fleet_send = s.agg.send

    async def watch(msg):
        if msg.step == "delivery":
            mail[msg.shard] += len(msg.peers)
        await fleet_send(msg)

    s.agg.send = watch
    asyncio.run(s.run())
    assert s.aborted == [] and s.released == [(7, sum(values.values()) % M, n - len(dropouts))]
    _, graph = round_setup("r1", 0, 7, np.arange(n), M, "sparse", 8, 4)
    arcs = contiguous_hosts(graph, np.arange(n), fleets)
    assert [f.finished[-1].users for f in s.fleets] == np.bincount(arcs, minlength=fleets).tolist()
    assert dict(mail) == {f: 8 * int((arcs == f).sum()) for f in range(fleets)}  # k shares in per user
    assert s.agg.origins == {}  # forgotten with the round
    with pytest.raises(ValueError, match="hosting must be one of"):
        FleetSecAgg("r1", 0, 0, 1, IDENTITY, watch, fleet_auth(0), hosting="block")


def test_a_substituted_key_is_detected_and_nothing_is_released():
    """A corrupt aggregator swaps user 4's mask key in the directory it relays: every neighbour's
    signature check fails, they abort, and the round cannot complete."""
    def swap(msg):
        if msg.step != "directory":
            return msg
        adverts = from_messages("directory", [msg]).unpack()
        forged = [a if a.user_id != 4 else type(a)(4, a.c_public, bytes(32 - 1) + b"\x09", a.signature)
                  for a in adverts]
        return to_messages("directory", Adverts.of(forged), run="r1", task=0, round_id=7, shard=0, shards=1)[0]

    s = _run(12, "complete", {u: 1 for u in range(12)}, tamper=swap)
    aborted = sum((f.rounds[7].aborted if 7 in f.rounds else Counter()).get("round 1: KeySubstitutionError", 0)
                  for f in s.fleets) + sum(f.aborted.get("round 1: KeySubstitutionError", 0) for f in s.fleets)
    assert aborted == 11  # everyone but user 4 itself
    assert s.released == [] and len(s.aborted) == 1 and "threshold" in s.aborted[0]


def test_chunks_cover_the_batch_and_only_the_last_is_final(monkeypatch):
    monkeypatch.setattr(secagg_rounds, "CHUNK_BYTES", 1000)
    ids = np.arange(100, 131)
    batch = Adverts(ids, bytes(range(256)) * (128 * 31 // 256) + bytes(128 * 31 % 256))
    msgs = [_wire(m) for m in to_messages("advertise", batch, run="r1", task=0, round_id=1, shard=1, shards=2)]
    assert len(msgs) == 31 // (1000 // 136) + 1 and [m.final for m in msgs] == [False] * (len(msgs) - 1) + [True]
    assert all(len(codec.encode(m)) < 2000 for m in msgs)
    back = from_messages("advertise", msgs)
    assert back.ids.tolist() == ids.tolist() and back.records == batch.records


def test_an_empty_step_is_one_final_chunk():
    msgs = to_messages("survivors", np.zeros(0, np.int64), run="r1", task=0, round_id=1, shard=0, shards=1)
    assert len(msgs) == 1 and msgs[0].final and from_messages("survivors", msgs).size == 0


def test_malformed_and_misdirected_chunks_are_refused_by_reason():
    s = _Session(6, "complete", {u: 1 for u in range(6)})
    s.agg.open(s.round, s.cohort())

    def msg(signer=None, **kw):
        base = dict(run="r1", task=0, round=7, step="advertise", shard=0, shards=1, chunk=0, final=True,
                    ids=np.array([1, 2], dtype="<u8"), records=b"short")
        m = codec.SecAggMsg(**(base | kw))  # signed as its fleet (or ``signer``) signs it
        key = fleet_auth(m.shard if signer is None else signer)
        return m.model_copy(update={"tag": key.mac("secagg-chunk", "r1", 0, m.shard, payload=codec.encode(m))})

    # A chunk without its fleet's MAC, or signed by another fleet with the key it holds (issue #20
    # item 9: the keys derived from the world seed let any fleet sign as any other), or under the
    # users' report master every fleet derives from the seed, is refused before anything else.
    unsigned = msg(records=b"\0" * 256).model_copy(update={"tag": b""})
    assert asyncio.run(s.agg.on_message(unsigned)) == "secagg-bad-tag"
    assert asyncio.run(s.agg.on_message(msg(signer=1, records=b"\0" * 256))) == "secagg-bad-tag"
    seeded = msg(records=b"\0" * 256)
    seeded = seeded.model_copy(update={"tag": ReportAuthenticator(FLEET_MASTER).mac(
        "secagg-chunk", "r1", 0, 0, payload=codec.encode(seeded.model_copy(update={"tag": b""})))})
    assert asyncio.run(s.agg.on_message(seeded)) == "secagg-bad-tag"
    tampered = msg(records=b"\0" * 256).model_copy(update={"records": b"\1" * 256})
    assert asyncio.run(s.agg.on_message(tampered)) == "secagg-bad-tag"
    assert asyncio.run(s.agg.on_message(msg())) == "secagg-malformed"  # 2 adverts need 256 bytes
    assert asyncio.run(s.agg.on_message(msg(step="directory"))) == "secagg-wrong-direction"
    assert asyncio.run(s.agg.on_message(msg(step="masked", values=np.array([1, 2], "<u8")))) == "secagg-wrong-step"
    assert asyncio.run(s.agg.on_message(msg(round=99))) == "secagg-unknown-round"
    good = msg(records=b"\0" * 256, final=False)
    assert asyncio.run(s.agg.on_message(good)) is None
    assert asyncio.run(s.agg.on_message(good)) == "duplicate"  # QoS 1 may deliver twice
    assert asyncio.run(s.agg.on_message(msg(records=b"\0" * 256, shards=3, chunk=1))) == "secagg-shard-count"


def test_each_party_logs_what_a_round_cost_it(caplog):
    """One 'secagg cost:' line per fleet and one for the aggregator when a round ends (what
    benchmarks/bench_secagg.py --fleets reads): the users each fleet hosts, the bytes each party
    sent equal to its chunks' encoded sizes, CPU per step, and the aggregator's survivors."""
    import importlib.util
    import logging
    from pathlib import Path

    values = {u: 3 * u for u in range(40) if u != 9}
    s = _Session(40, "sparse", values, dropouts=[9])
    sent = Counter()

    def counting(send, party):
        async def wrapped(msg):
            sent[party] += len(codec.encode(msg))
            await send(msg)
        return wrapped

    for f in s.fleets:
        f.send = counting(f.send, f"users-{f.shard}")
    s.agg.send = counting(s.agg.send, "aggregator")
    with caplog.at_level(logging.INFO, logger="privbandit.secagg"):
        asyncio.run(s.run())
    assert s.released == [(7, sum(values.values()) % M, 39)]
    costs = {f"users-{f.shard}": f.finished[-1] for f in s.fleets} | {"aggregator": s.agg.finished[-1]}
    assert {p: c.users for p, c in costs.items()} == {"users-0": 20, "users-1": 20, "aggregator": 40}  # u mod 2
    assert {p: sum(c.sent.values()) for p, c in costs.items()} == sent
    assert costs["aggregator"].survivors == 39 and costs["users-0"].cpu["shares"] > 0
    assert len({(c.degree, c.threshold) for c in costs.values()}) == 1  # the round's one public graph
    # The benchmark's parser reads the same figures back from the log.
    spec = importlib.util.spec_from_file_location("bench_secagg", Path(__file__).parents[2] / "benchmarks" / "bench_secagg.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    parsed = {m["party"]: m for m in bench.COST_LINE.finditer(caplog.text)}
    assert set(parsed) == set(costs) and parsed["aggregator"]["outcome"] == "released"
    for party, cost in costs.items():
        row = parsed[party]
        assert int(row["users"]) == cost.users and int(row["sent"]) == sent[party]
        assert (int(row["k"]), int(row["t"])) == (cost.degree, cost.threshold) and cost.degree > 0
        assert abs(float(row["cpu"]) - sum(cost.cpu.values())) < 2e-3


def test_a_round_of_several_residues_per_user_releases_each_sum():
    """FTNL's epochs (argmax_at = "analyzer") sum K residues per user: the masked inputs travel
    flat, K per id, and the release is the K sums; a chunk whose values are not K per id is refused."""
    k = 3
    rng = np.random.default_rng(4)
    values = {u: rng.integers(0, M, k) for u in range(12) if u != 5}
    s = _Session(12, "complete", values, dropouts=[5])
    s.round = Round(7, "aggregator", "sum", 12, width=k, m=M, secagg="complete")
    asyncio.run(s.run())
    ((rid, value, n),) = s.released
    assert rid == 7 and n == 11 and s.aborted == []
    np.testing.assert_array_equal(value, np.sum(list(values.values()), axis=0) % M)
    good = to_messages("masked", Masked(np.array([1, 2]), np.arange(6).reshape(2, 3)), run="r1", task=0, round_id=7,
                       shard=0, shards=1)
    assert np.asarray(from_messages("masked", good).values).shape == (2, 3)
    for bad in (np.arange(5), np.zeros(0)):  # 5 values for 2 ids; none for 2
        with pytest.raises(BatchError, match="residues per id"):
            from_messages("masked", [good[0].model_copy(update={"values": bad.astype("<u8")})])
    narrower = good[0].model_copy(update={"chunk": 1, "values": np.arange(4).astype("<u8")})  # 2 per id
    with pytest.raises(BatchError, match="differ in residues per user"):
        from_messages("masked", [good[0], narrower])
