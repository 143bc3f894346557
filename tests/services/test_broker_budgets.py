"""Issue #32 item 3: per-account budgets at the broker, and plan re-announcements that do not
invite a volley.

The issue's attack: about 15 forged reports per plan announcement (one of 8 MiB), sent again on
every re-announcement; the aggregator, busy refusing them, released late, the analyzer re-announced
every 3 s, each re-announcement drew another volley, and the session failed at its stall deadline.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from types import SimpleNamespace

import aiomqtt
import pytest

from privbandit.runner.config import load
from privbandit.services import acl, analyzer as analyzer_mod, codec
from privbandit.services.budget import PublishBucket
from privbandit.services.embedded_broker import start_embedded_broker
from privbandit.services.launcher import launch
from tests.services.reports import attack_report
from tests.services.test_distributed import _experiment, _inproc, assert_same_numbers

RUN = "budget"


def test_a_bucket_holds_a_connection_back_to_its_rate_past_its_burst(monkeypatch):
    """The token bucket of one connection, on a clock the test moves: the burst goes through at
    once, then each PUBLISH waits as long as its bytes (or its one message) take at the rate."""
    clock = {"t": 0.0}
    waits: list[float] = []

    async def sleep(s):
        waits.append(s)
        clock["t"] += s

    monkeypatch.setattr(time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(asyncio, "sleep", sleep)
    budget = acl.PublishBudget(bytes_per_s=1e6, burst_bytes=acl.MAX_PACKET_BYTES, messages_per_s=10,
                               burst_messages=3, connections=1)
    bucket = PublishBucket(budget, "users (test)")

    async def go():
        for size in (2**20, 2**20, 10):  # within both bursts: no wait
            await bucket.spend(size)
        assert waits == []
        await bucket.spend(10)  # the fourth message: 1/10 s
        assert waits == [pytest.approx(0.1)]
        clock["t"] += 100  # refilled, to the bursts only
        await bucket.spend(acl.MAX_PACKET_BYTES)  # the whole byte burst: no wait
        await bucket.spend(2 * 10**6)  # 2 MB past it at 1 MB/s
        assert waits[1:] == [pytest.approx(2.0)]

    asyncio.run(go())
    with pytest.raises(ValueError, match="at least one packet"):
        acl.PublishBudget(1e6, 1000, 10, 3, 1)


def test_the_analyzer_waits_twice_as_long_before_each_re_announcement(monkeypatch):
    """With nothing released for two minutes, the analyzer announces its open plans again after 3,
    6, 12 and then every 24 s: 6 times, not 34 (every 3 s, each drawing a volley); a release
    resets the wait to 3 s."""
    clock = {"t": 1000.0}
    monkeypatch.setattr(analyzer_mod.time, "monotonic", lambda: clock["t"])
    published = []

    class Bus:
        async def publish(self, topic, msg):
            published.append(clock["t"])

    svc = analyzer_mod.AnalyzerService.__new__(analyzer_mod.AnalyzerService)
    svc.bus, svc.t, svc.run_id, svc.task_spec, svc.done = Bus(), lambda *p: "/".join(p), "r1", {"index": 0}, False
    svc.party = SimpleNamespace(open={1: None}, done=False, next_plans=lambda: [])
    msg = codec.PlanMsg(run="r1", task=0, plan=1, first_user=0, cohort=1, joins=[codec.JoinSpec(round=1, first=0, count=1, reports=1)])
    svc.announced = [msg]
    asyncio.run(svc.advance([]))  # the last progress: now
    start = clock["t"]

    async def two_minutes():
        while clock["t"] < start + 120:
            clock["t"] += 0.5
            await svc.tick()

    asyncio.run(two_minutes())
    assert [round(t - start, 1) for t in published] == [3.5, 10.0, 22.5, 47.0, 71.5, 96.0]
    asyncio.run(svc.advance([]))  # a release came
    published.clear()
    clock["t"] += 3.5
    asyncio.run(svc.tick())
    assert len(published) == 1


async def _connect_many(url: str, password: str, n: int) -> list:
    """``n`` users connections; what each CONNECT got (a client, or the error)."""
    host, port = url.removeprefix("mqtt://").split(":")
    out = []
    for i in range(n):
        client = aiomqtt.Client(host, int(port), username="users", password=password, identifier=f"many-{i}")
        try:
            await client.__aenter__()
            out.append(client)
        except aiomqtt.MqttError as exc:
            out.append(exc)
    return out


def test_the_users_account_holds_at_most_its_budgets_connections():
    """Opening more connections does not buy more budget: past the users' budget's count the
    embedded broker answers CONNACK 3 (server unavailable); once one closes, a new one gets in."""
    cap = acl.PUBLISH_BUDGETS["users"].connections
    passwords = {r.value: secrets.token_urlsafe(12) for r in acl.Role}
    with start_embedded_broker(RUN, passwords) as broker:

        async def go():
            got = await _connect_many(broker.url, passwords["users"], cap + 1)
            assert all(not isinstance(c, Exception) for c in got[:cap]), [c for c in got if isinstance(c, Exception)][:1]
            assert isinstance(got[cap], aiomqtt.MqttError), "a connection past the budget was accepted"
            await got[0].__aexit__(None, None, None)
            await asyncio.sleep(0.3)
            again = await _connect_many(broker.url, passwords["users"], 1)
            assert not isinstance(again[0], Exception), again
            for c in got[1:cap] + again:
                await c.__aexit__(None, None, None)

        asyncio.run(go())


def test_a_users_flood_past_its_burst_is_held_back_and_the_analyzer_is_not():
    """Past the users' byte burst (64 MiB) a flooding connection is held back by the embedded
    broker, which says so; the analyzer's account has no budget and is never held."""
    passwords = {r.value: secrets.token_urlsafe(12) for r in acl.Role}
    budget = acl.PUBLISH_BUDGETS["users"]
    payload = b"\0" * (8 * 2**20)
    n = budget.burst_bytes // len(payload) + 4  # past the burst by 32 MiB: 2 s at 16 MiB/s
    with start_embedded_broker(RUN, passwords) as broker:
        host, port = broker.url.removeprefix("mqtt://").split(":")

        async def flood(account: str, topic: str) -> None:
            async with aiomqtt.Client(host, int(port), username=account, password=passwords[account],
                                      identifier=f"flood-{account}") as c:
                for _ in range(n):
                    await c.publish(f"pb/{RUN}/{topic}", payload, qos=1, timeout=30)

        asyncio.run(flood("analyzer", "plan"))
        assert "publishes past its account's budget" not in broker.stderr()
        asyncio.run(flood("users", "report/aggregator"))
        said = broker.stderr()
    assert "users (flood-users) publishes past its account's budget" in said, said[-2000:]


def test_the_generated_configs_carry_the_budgets_the_brokers_have(tmp_path):
    """Mosquitto's and NATS's: the number of connections and a subscriber's queued bytes (NATS has
    no per-account publish rate; Mosquitto's is its budget plugin: test_mosquitto_budget.py)."""
    files = acl.write_broker_config(tmp_path / "m", RUN, 18830)
    conf = files.conf.read_text()
    assert f"max_connections {acl.MAX_CONNECTIONS}" in conf and f"max_queued_bytes {acl.MAX_QUEUED_BYTES}" in conf
    from privbandit.services.acl.nats_files import NatsNode, render_nats_conf

    node = NatsNode("n0", "127.0.0.1", 14222, 11883, 16222)
    text = render_nats_conf(node, [node], RUN, {r: "pw" for r in acl.Role}, tmp_path / "js")
    assert json.loads(text.split("\n", 1)[1])["max_connections"] == acl.MAX_CONNECTIONS


def test_the_issues_volley_and_a_stream_of_decoding_bombs_change_no_number(tmp_path):
    """Two traffic adversaries with the users' account next to one session on the embedded broker:
    ``volley`` (every plan message answered, re-announcements too, with 15 forged reports, one of
    8 MiB) and ``bombs`` (each plan answered by the next of the costliest messages to decode, to the
    round's intermediary or to the observer, issue #32 item 2). The session ends with the honest
    numbers; the forged reports are refused whole (``missing-tag``: no fleet signed them), the bombs ``over-limit`` and ``schema`` (a body
    that decodes is a status or truth without the fleets' MAC); the analyzer re-announced its plans
    at most a few times. (On the code before issue #32 this session too ended with the honest
    numbers on this machine, 2–4× slower: the test guards the outcome, the benchmarks measure the
    time, benchmarks/bench_broker_budgets.py and bench_decode_bombs.py.)"""
    path = _experiment(tmp_path, horizon=30_000, runs=1, extra="")
    text = path.read_text()
    _inproc(path, tmp_path / "inproc")
    path.write_text('traffic_adversaries = ["volley", "bombs"]\n' + text)
    family, config = load(path)
    out = tmp_path / "mqtt"
    assert launch(family, config, path, [], out, shards=2, timeout_s=240) == 0
    assert_same_numbers(tmp_path / "inproc", out)
    for kind in ("volley", "bombs"):
        report = attack_report(out, kind)
        assert report["messages_sent"] >= 13, report
    rejected = json.loads((out / "summary.json").read_text())["rejected"]
    assert rejected.get("missing-tag", 0) > 10**5 and rejected.get("over-limit", 0) >= 4, rejected
    assert (out / "logs" / "analyzer.log").read_text().count("announcing plans") <= 4
