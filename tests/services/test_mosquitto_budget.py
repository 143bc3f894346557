"""Issue #32 item 3 on Mosquitto: the budget plugin (privbandit/services/acl/budget_plugin.c),
built here with cc and loaded by the generated mosquitto.conf, refuses what one connection of the
users' account publishes past its budget, and leaves every other account alone.

Each test runs a real Mosquitto with the plugin on a free port. Without Mosquitto they skip, unless
CI=true, where they fail; a plugin that cannot be built fails them everywhere (BudgetPluginError
names the missing compiler or headers)."""

from __future__ import annotations

import asyncio
import re

import aiomqtt
import numpy as np
import pytest

from privbandit.services import acl, codec
from privbandit.services.hostile import decoding_bombs
from privbandit.services.mosquitto_process import (BudgetPluginError, build_budget_plugin, mosquitto_binary,
                                                   start_with_broker_config)
from tests.needs import missing

RUN = "mbudget"
# No refill worth counting within a test: what gets through is the burst, exactly.
SMALL = acl.PublishBudget(bytes_per_s=1.0, burst_bytes=acl.MAX_PACKET_BYTES, messages_per_s=0.01,
                          burst_messages=5, connections=2)


@pytest.fixture
def broker(tmp_path):
    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    mosquitto, files = start_with_broker_config(tmp_path / "broker", RUN, publish_budgets={"users": SMALL})
    try:
        yield mosquitto, files
    finally:
        mosquitto.stop()


def _client(mosquitto, files, account: str, ident: str) -> aiomqtt.Client:
    return aiomqtt.Client("127.0.0.1", mosquitto.port, username=account, password=files.password(account),
                          identifier=f"{ident}-{account}")


async def _count(sub: aiomqtt.Client, topic: str, got: list[int]) -> None:
    await sub.subscribe(topic, qos=1)
    async for message in sub.messages:
        got.append(len(message.payload))


async def _publish_and_count(mosquitto, files, senders: list[tuple[str, str, str, list[int]]],
                             reader: tuple[str, str]) -> list[int]:
    """Each sender (account, client id, topic, payload sizes) publishes its messages at QoS 1, one
    after the other; ``reader`` (account, topic) counts what reaches it. Returns the sizes read."""
    got: list[int] = []
    async with _client(mosquitto, files, reader[0], "reader") as sub:
        task = asyncio.create_task(_count(sub, f"pb/{RUN}/{reader[1]}", got))
        await asyncio.sleep(0.2)  # subscribed
        clients = [_client(mosquitto, files, account, ident) for account, ident, _, _ in senders]
        for c in clients:
            await c.__aenter__()
        try:
            for c, (_, _, topic, sizes) in zip(clients, senders):
                for size in sizes:
                    await c.publish(f"pb/{RUN}/{topic}", b"x" * size, qos=1, timeout=10)
            await asyncio.sleep(0.5)  # the last accepted message reaches the reader
        finally:
            for c in reversed(clients):
                await c.__aexit__(None, None, None)
            task.cancel()
    return got


def test_a_users_connection_past_its_message_burst_is_refused_and_another_account_is_not(broker):
    """20 messages from one users connection: the burst of 5 reaches the aggregator, 15 are dropped
    (each still PUBACKed, so the publisher is not stalled); 20 plans from the analyzer's account,
    which has no budget, all reach a users subscriber. Without the plugin (or with the budget not
    enforced) the aggregator would get all 20."""
    mosquitto, files = broker
    got = asyncio.run(_publish_and_count(mosquitto, files, [("users", "flood", "report/aggregator", [100] * 20)],
                                         ("aggregator", "report/aggregator")))
    assert len(got) == SMALL.burst_messages, got
    plans = asyncio.run(_publish_and_count(mosquitto, files, [("analyzer", "a", "plan", [100] * 20)],
                                           ("users", "plan")))
    assert len(plans) == 20
    log = mosquitto.log.read_text()
    assert re.search(r"privbandit budget: users \(flood-users\) publishes past its account's budget", log), log[-2000:]
    assert "disconnected after 15 messages" in log, log[-2000:]


def test_a_users_connection_past_its_byte_burst_is_refused(broker):
    """Messages of 3 MiB against a byte burst of one largest packet (8.1 MiB): two fit, the third
    and fourth do not, a 1-KiB one after them still does (what is refused spends nothing)."""
    mosquitto, files = broker
    sizes = [3 * 2**20] * 4 + [1024]
    got = asyncio.run(_publish_and_count(mosquitto, files, [("users", "big", "report/aggregator", sizes)],
                                         ("aggregator", "report/aggregator")))
    assert got == [3 * 2**20, 3 * 2**20, 1024]


def test_the_message_budget_refills_at_its_rate(tmp_path):
    """A burst of 1 message refilled at 20 a second: a connection publishing every 10 ms or so for
    about 1 s gets at most 1 + 20·(its time) messages through (+1 for the clocks of client and
    broker), and at least one per 50 ms plus the gap to its next PUBLISH (the token that fills
    between two PUBLISHes waits for the next one; twice the mean gap allowed). Without refill 1
    would get through; without the budget, about 80."""
    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    rate = acl.PublishBudget(bytes_per_s=1e9, burst_bytes=acl.MAX_PACKET_BYTES, messages_per_s=20,
                             burst_messages=1, connections=1)
    mosquitto, files = start_with_broker_config(tmp_path / "broker", RUN, publish_budgets={"users": rate})
    got: list[int] = []

    async def go() -> tuple[float, int]:
        async with _client(mosquitto, files, "aggregator", "reader") as sub:
            task = asyncio.create_task(_count(sub, f"pb/{RUN}/report/aggregator", got))
            await asyncio.sleep(0.2)
            async with _client(mosquitto, files, "users", "steady") as pub:
                loop = asyncio.get_running_loop()
                start, sent = loop.time(), 0
                while loop.time() - start < 1.0:
                    await pub.publish(f"pb/{RUN}/report/aggregator", b"x", qos=1, timeout=10)
                    sent += 1
                    await asyncio.sleep(0.01)
                took = loop.time() - start
            await asyncio.sleep(0.5)
            task.cancel()
            return took, sent

    try:
        took, sent = asyncio.run(go())
    finally:
        mosquitto.stop()
    gap = took / sent
    assert took / (0.05 + 2 * gap) <= len(got) <= 2 + 20 * took, (len(got), took, sent)


def test_connections_past_the_accounts_cap_buy_no_budget(broker):
    """The account may hold 2 publishing connections: a third one's messages are all refused while
    the first two's bursts go through."""
    mosquitto, files = broker
    senders = [("users", f"c{i}", "report/aggregator", [100] * 3) for i in range(3)]
    got = asyncio.run(_publish_and_count(mosquitto, files, senders, ("aggregator", "report/aggregator")))
    assert len(got) == 6
    assert "users (c2-users) is a connection past its account's 2" in mosquitto.log.read_text()


def _over_limit(payload: bytes) -> bool:
    try:
        codec.unpack(payload)
    except codec.DecodeError as exc:
        return exc.reason == "over-limit"
    return False


def test_a_users_publish_the_unpacker_would_refuse_is_dropped_before_it_is_routed(tmp_path):
    """The plugin's limits line (codec.unpack's bounds): of the decoding bombs (hostile.py) and the
    largest honest messages of the users' account, those the parties' unpacker refuses as
    over-limit (the 500,000-key map, 4 M nested lists, lists of 4,096 lists, maps, ints or floats,
    the deepest nesting) never reach the aggregator; the others do, in order (a bin of 8 MiB, 4 KB
    strings and unknown keys are the schema's to refuse; an honest block of 65,536 reports, a list of
    4,096 items). A budget that lets everything through, so the limits alone decide; the analyzer's
    account has no limits. Without the limits line every bomb gets through."""
    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    roomy = acl.PublishBudget(bytes_per_s=1e9, burst_bytes=2**30, messages_per_s=1e6, burst_messages=10**6,
                              connections=4)
    mosquitto, files = start_with_broker_config(tmp_path / "broker", RUN, publish_budgets={"users": roomy})
    ids = np.arange(65_536)
    honest = codec.encode(codec.ReportsMsg(run=RUN, task=0, round=1, plan=1, user_ids=codec.ids_on_wire(ids),
                                           values=codec.packed(np.ones((1, 65_536, 4)), None), block=0,
                                           tags=ids.astype("<u4"), block_tag=bytes(28)))
    widest = codec.encode(codec.StatusMsg(run=RUN, party="users-0", state="stats",
                                          body={"x": list(range(codec.MAX_CONTAINER_ITEMS))}))
    payloads = [p for _, where, p in decoding_bombs(RUN) if where == "report"] + [honest, widest]
    try:
        got = asyncio.run(_publish_and_count_payloads(mosquitto, files, payloads))
        plans = asyncio.run(_publish_and_count(mosquitto, files, [("analyzer", "a", "plan", [10])], ("users", "plan")))
    finally:
        mosquitto.stop()
    refused = [p for p in payloads if _over_limit(p)]
    assert len(refused) == 7 and not _over_limit(honest) and not _over_limit(widest)
    passed = [p for p in payloads if not _over_limit(p)]
    assert [len(p) for p in got] == [len(p) for p in passed]  # sizes first: pytest's diff of 8 MiB would not end
    assert got == passed
    assert plans == [10]
    log = mosquitto.log.read_text()
    assert "privbandit budget: each PUBLISH of users past the unpacker's limits (4096 items a map or list" in log
    assert "disconnected after 7 messages" in log and "7 of them over-limit" in log, log[-2000:]


async def _publish_and_count_payloads(mosquitto, files, payloads: list[bytes]) -> list[bytes]:
    got: list[bytes] = []

    async def read(sub):
        await sub.subscribe(f"pb/{RUN}/report/aggregator", qos=1)
        async for message in sub.messages:
            got.append(bytes(message.payload))

    async with _client(mosquitto, files, "aggregator", "reader") as sub:
        task = asyncio.create_task(read(sub))
        await asyncio.sleep(0.2)
        async with _client(mosquitto, files, "users", "bombs") as pub:
            for p in payloads:
                await pub.publish(f"pb/{RUN}/report/aggregator", p, qos=1, timeout=20)
        await asyncio.sleep(1.0)
        task.cancel()
    return got


def test_the_generated_conf_loads_the_embedded_brokers_budgets(tmp_path):
    """The default budgets (acl.PUBLISH_BUDGETS) are written as the plugin parses them: Mosquitto
    starts with them and logs the same figures; a bad option stops it, saying why."""
    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    mosquitto, files = start_with_broker_config(tmp_path / "ok", RUN)
    mosquitto.stop()
    b = acl.PUBLISH_BUDGETS["users"]
    assert (f"privbandit budget: each connection of users: {b.bytes_per_s:.0f} B/s (burst {b.burst_bytes}), "
            f"{b.messages_per_s:.0f} messages/s (burst {b.burst_messages}), at most {b.connections} connections"
            ) in mosquitto.log.read_text()
    conf = files.conf.read_text()
    assert f"plugin {build_budget_plugin()}" in conf
    files.conf.write_text(conf.replace("connections=64", "connections=0"))
    from privbandit.services.mosquitto_process import MosquittoError, MosquittoProcess

    with pytest.raises(MosquittoError, match="connections=0: expected bytes_per_s=R"):
        MosquittoProcess(files.conf, mosquitto.port, log=tmp_path / "bad.log").start()


def test_a_missing_compiler_or_header_is_named(tmp_path, monkeypatch):
    with pytest.raises(BudgetPluginError, match="no C compiler"):
        build_budget_plugin(tmp_path, compiler="no-such-cc")
    from privbandit.services import mosquitto_process

    monkeypatch.setattr(mosquitto_process, "_INCLUDE_DIRS", (str(tmp_path),))
    with pytest.raises(BudgetPluginError, match="mosquitto_broker.h, mosquitto_plugin.h, mosquitto.h not found.*"
                                                "mosquitto-dev libmosquitto-dev"):
        build_budget_plugin(tmp_path)


def test_broker_config_builds_the_plugin_or_says_it_wrote_none(tmp_path, capsys):
    """`privbandit broker-config`: ``build`` loads the plugin built here; ``none`` writes none and
    says so; a relative path is refused, naming the option."""
    from privbandit.services.broker_cli import broker_config_main

    assert broker_config_main(tmp_path / "b", RUN, 1883, budget_plugin="build") == 0
    conf = (tmp_path / "b" / "mosquitto.conf").read_text()
    assert f"plugin {build_budget_plugin()}\nplugin_opt_budget_users bytes_per_s=16777216.0," in conf
    assert broker_config_main(tmp_path / "n", RUN, 1883, budget_plugin="none") == 0
    assert not re.search(r"^plugin", (tmp_path / "n" / "mosquitto.conf").read_text(), re.M)
    assert "budget       none (--budget-plugin none)" in capsys.readouterr().out
    assert broker_config_main(tmp_path / "r", RUN, 1883, budget_plugin="x.so") == 2
    assert "--budget-plugin 'x.so': must be build, auto, none or an absolute path" in capsys.readouterr().err


# The pacing tests' budget: a burst of 5 messages, 20 a second; 40 messages take ≥ (40 − 4.5)/18 s paced.
PACED = acl.PublishBudget(bytes_per_s=1e9, burst_bytes=acl.MAX_PACKET_BYTES, messages_per_s=20, burst_messages=5,
                          connections=4)


def _paced_broker(tmp_path):
    """A Mosquitto from the generated config with the plugin, the users' account on :data:`PACED`;
    and the users' bus settings."""
    from privbandit.services.bus import BusSettings

    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    mosquitto, files = start_with_broker_config(tmp_path / "broker", RUN, publish_budgets={"users": PACED})
    return mosquitto, files, BusSettings(broker_url=mosquitto.url, username="users",
                                         password=files.password("users"), run_id=RUN)


def test_a_fleets_bus_keeps_to_its_budget_so_the_plugin_drops_none_of_its_messages(tmp_path):
    """A party's bus paces its publishes a little under its account's budget
    (``budget.PublishBucket.pacing``): 40 messages through a budget of 5 at once and 20 a second all
    reach the reader, spread over at least (40 − 4.5) / 18 s, where the same 40 published unpaced
    lose all but about the burst. Before, an honest fleet at T = 10⁸ sent a round's reports as fast
    as it could, the plugin dropped what passed the budget, and the aggregator asked for it again:
    a 10⁸-user session took 3 min 25 s on the generated Mosquitto instead of about 20 s."""
    from privbandit.services.bus import connect

    mosquitto, files, settings = _paced_broker(tmp_path)
    n = 40
    status = codec.StatusMsg(run=RUN, party="users-0", state="stats")

    async def go(budget) -> tuple[int, float]:
        got: list[int] = []
        async with _client(mosquitto, files, "observer", "reader") as sub:
            task = asyncio.create_task(_count(sub, f"pb/{RUN}/metrics/users-0", got))
            await asyncio.sleep(0.2)
            loop = asyncio.get_running_loop()
            start = loop.time()
            async with connect(settings, f"{RUN}-users-0", [], budget=budget) as bus:
                for _ in range(n):
                    await bus.publish(f"pb/{RUN}/metrics/users-0", status, wait=True)
            took = loop.time() - start
            await asyncio.sleep(0.5)
            task.cancel()
        return len(got), took

    try:
        paced, took = asyncio.run(go(PACED))
        unpaced, _ = asyncio.run(go(None))
    finally:
        mosquitto.stop()
    assert paced == n and took >= (n - 4.5) / 18 - 0.1, (paced, took)
    assert unpaced <= 5 + 20 * 1.0, unpaced  # the burst and about a second's refill, at most


def test_a_reconnecting_partys_backlog_is_paced_too(tmp_path):
    """What an earlier connection left in the outbox (40 messages a party could not send before its
    broker went away) goes first on the next connection, through the same pacer: all 40 reach the
    reader, over at least (40 − 4.5) / 18 s. Before, ``Bus.flush`` sent the backlog at once and
    the plugin dropped all but about the burst (each one PUBACKed, so lost until a resync)."""
    from privbandit.services.bus import Outbox, Traffic, connect

    mosquitto, files, settings = _paced_broker(tmp_path)
    n = 40
    topic = f"pb/{RUN}/metrics/users-0"
    payload = codec.encode(codec.StatusMsg(run=RUN, party="users-0", state="stats"))

    async def go() -> tuple[int, float, int]:
        got: list[int] = []
        outbox = Outbox()
        outbox.pending.extend((topic, payload, Traffic()) for _ in range(n))
        async with _client(mosquitto, files, "observer", "reader") as sub:
            task = asyncio.create_task(_count(sub, topic, got))
            await asyncio.sleep(0.2)
            loop = asyncio.get_running_loop()
            start = loop.time()
            async with connect(settings, f"{RUN}-users-0", [], outbox=outbox, budget=PACED):
                took = loop.time() - start  # connect flushes the backlog before it yields
            await asyncio.sleep(0.5)
            task.cancel()
        return len(got), took, len(outbox)

    try:
        got, took, left = asyncio.run(go())
    finally:
        mosquitto.stop()
    assert left == 0
    assert got == n and took >= (n - 4.5) / 18 - 0.1, (got, took)
