"""The bus across a broker that dies (SIGKILL) and comes back, on a private Mosquitto: a publish
never cuts its caller short, what could not be sent goes first and in order on the next
connection, and what paho already acknowledged is still delivered."""

from __future__ import annotations

import asyncio
import os
import re
import time

import aiomqtt
import pytest

from privbandit.services import codec
from privbandit.services.bus import BusSettings, Outbox, Traffic, connect
from privbandit.services.mosquitto_process import (MosquittoProcess, mosquitto_binary, start_on_free_port,
                                                   write_persistent_conf)

RUN = "bus"
TOPIC = f"pb/{RUN}/metrics/test"


def private_mosquitto(directory) -> MosquittoProcess:
    """A started Mosquitto of our own on a free port, persisting its sessions and queues to
    ``directory``, so that it can be SIGKILLed and started again on the same port. Without the
    mosquitto binary the test fails when CI=true (CI installs it) and skips otherwise."""
    if mosquitto_binary() is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("mosquitto is required when CI=true but was not found (install mosquitto)", pytrace=False)
        pytest.skip("mosquitto not installed")
    return start_on_free_port(lambda port: write_persistent_conf(directory, port))


def _status(i: int) -> codec.StatusMsg:
    return codec.StatusMsg(run=RUN, party="test", state="ready", body={"i": i})


async def _received(bus, n: int, timeout: float = 10) -> list[int]:
    got = []
    try:
        async with asyncio.timeout(timeout):
            async for _, msg in bus.messages():
                got.append(msg.body["i"])
                if len(got) == n:
                    break
    except TimeoutError:
        pass
    return got


@pytest.mark.asyncio
async def test_a_publish_to_a_dead_broker_waits_in_the_outbox_and_goes_first_on_the_next_connection(tmp_path):
    broker = private_mosquitto(tmp_path / "broker")
    settings = BusSettings(broker_url=broker.url, run_id=RUN, connect_timeout_s=10)
    outbox, traffic = Outbox(), Traffic()  # a party's: they outlive its connections
    try:
        async with connect(settings, "listener", [TOPIC]):
            pass  # a persistent session: the broker queues for it while it is away
        async with connect(settings, "sender", [], traffic, outbox=outbox) as bus:
            await bus.publish(TOPIC, _status(0))
            assert bus.lost is None and len(outbox) == 0
            await asyncio.to_thread(broker.saved)  # the listener's session, holding message 0, is on disk
            broker.kill()
            start = time.monotonic()
            for i in (1, 2, 3):
                await bus.publish(TOPIC, _status(i))  # neither raises nor waits out the PUBACK timeout
            assert time.monotonic() - start < 2.0
            assert isinstance(bus.lost, aiomqtt.MqttError)
            assert [codec.decode(p).body["i"] for _, p, _ in outbox.pending] == [1, 2, 3]
            assert bus.traffic.messages["sent.metrics"] == 1  # counted when acknowledged, not before
        broker.start()
        async with connect(settings, "sender", [], traffic, outbox=outbox) as bus:
            assert len(outbox) == 0  # connecting sent them
            assert bus.traffic.messages["sent.metrics"] == 4
            await bus.publish(TOPIC, _status(4))
        async with connect(settings, "listener", [TOPIC]) as listener:
            got = await _received(listener, 5, timeout=4)
            assert got == [0, 1, 2, 3, 4]
    finally:
        broker.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("publish_fails_first", [False, True])
async def test_messages_paho_acknowledged_before_the_connection_dropped_are_still_delivered(tmp_path, publish_fails_first):
    """The broker will not send them again (they were acknowledged), so the bus must hand over what
    its client had queued when the connection dropped, then raise: whether the party notices the
    loss by reading (aiomqtt hands the queue over; this would catch a release that did not) or
    because a publish of its own failed while it handled the first message."""
    broker = private_mosquitto(tmp_path / "broker")
    settings = BusSettings(broker_url=broker.url, run_id=RUN, connect_timeout_s=10)
    try:
        async with connect(settings, "listener", [TOPIC]) as listener:
            async with connect(settings, "sender", []) as sender:
                for i in range(5):
                    await sender.publish(TOPIC, _status(i))
            async with asyncio.timeout(10):
                while len(listener.client.messages) < 5:  # received and acknowledged, not yet handed over
                    await asyncio.sleep(0.01)
            broker.kill()
            await asyncio.sleep(0.3)  # the client notices
            got = []
            with pytest.raises(aiomqtt.MqttError):
                async for _, msg in listener.messages():
                    got.append(msg.body["i"])
                    if publish_fails_first and len(got) == 1:
                        await listener.publish(TOPIC, _status(99))  # fails: the bus is lost, the message queued
                        assert listener.lost is not None and len(listener.outbox) == 1
            assert got == [0, 1, 2, 3, 4]
    finally:
        broker.stop()


@pytest.mark.asyncio
async def test_a_finished_party_reconnects_until_its_outbox_is_sent(tmp_path):
    """A party that finished (its last stats queued, say) while the broker was down does not exit
    with them unsent: serve() waits for the next connection, which sends them."""
    from privbandit.services.party import PartyService

    broker = private_mosquitto(tmp_path / "broker")
    settings = BusSettings(broker_url=broker.url, run_id=RUN, connect_timeout_s=20)
    try:
        async with connect(settings, "listener", [TOPIC]):
            pass
        await asyncio.to_thread(broker.saved)
        broker.kill()
        party = PartyService(settings, name="test")
        party.outbox.pending.append((TOPIC, codec.encode(_status(7)), party.traffic))
        party.finished = True
        serving = asyncio.create_task(party.serve())
        await asyncio.sleep(2 * party.tick_s)  # the timer task has ended by now; the pump must not have
        assert not serving.done()
        broker.start()
        await asyncio.wait_for(serving, 20)
        assert len(party.outbox) == 0 and party.connections == 1
        async with connect(settings, "listener", [TOPIC]) as listener:
            assert await _received(listener, 1, timeout=4) == [7]
    finally:
        broker.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("ended", [False, True])
async def test_ending_a_session_makes_the_broker_drop_its_queue(tmp_path, ended):
    """A party that finished ends its persistent session: what the broker still queued for it is
    dropped, not kept for a client that will never return. Without end_session (the control)
    the queued message is still delivered."""
    from privbandit.services.bus import end_session

    broker = private_mosquitto(tmp_path / "broker")
    settings = BusSettings(broker_url=broker.url, run_id=RUN, connect_timeout_s=10)
    try:
        async with connect(settings, "gone", [TOPIC]):
            pass
        async with connect(settings, "sender", []) as sender:
            await sender.publish(TOPIC, _status(1))
        if ended:
            await end_session(settings, "gone")
        async with connect(settings, "gone", [TOPIC]) as again:
            assert await _received(again, 1, timeout=1.5) == ([] if ended else [1])
    finally:
        broker.stop()


@pytest.mark.asyncio
async def test_aiomqtt_internals_are_where_the_bus_reads_them(mosquitto_url):
    """The bus reads three aiomqtt internals (AiomqttInternals): on the installed aiomqtt each is
    what the bus takes it for, against a real broker; a client without one is refused at connect,
    naming it, rather than losing messages later."""
    import socket
    import uuid

    from privbandit.services.bus import AiomqttInternals

    host, port = mosquitto_url.removeprefix("mqtt://").split(":")
    topic = f"pb/internals-{uuid.uuid4().hex[:8]}/x"
    client = aiomqtt.Client(host, int(port), identifier=f"t-{uuid.uuid4().hex[:8]}")
    AiomqttInternals.check(client)
    async with client:
        await client.subscribe(topic, qos=1)
        await client.publish(topic, b"held", qos=1)
        for _ in range(100):  # received and acknowledged by paho, not yet handed over by aiomqtt
            if not client._queue.empty():
                break
            await asyncio.sleep(0.02)
        assert [bytes(m.payload) for m in AiomqttInternals.drain(client)] == [b"held"]
        assert AiomqttInternals.drain(client) == []
        assert isinstance(AiomqttInternals.paho(client).socket(), socket.socket)
        dropped = AiomqttInternals.disconnected(client)
        assert not dropped.done()
        AiomqttInternals.paho(client).disconnect()
        await asyncio.wait_for(asyncio.shield(dropped), timeout=5)  # resolves when the connection drops
    stripped = aiomqtt.Client(host, int(port))
    del stripped._queue
    with pytest.raises(RuntimeError, match="lacks _queue"):
        AiomqttInternals.check(stripped)


@pytest.mark.asyncio
async def test_a_party_s_socket_sends_without_nagle_s_delay(mosquitto_url):
    """Every party's connection sets TCP_NODELAY: with paho's default (Nagle on) a small message
    waits for the ACK of the previous one, which Linux delays by up to 40 ms, and each hop of a
    plan → report → release chain cost that (benchmarks/bench_latency.py: 44 ms against 0.9 ms per
    two hops on the generated Mosquitto). Then one at a time, 20 trips through a real broker: well
    under the 40 ms the delay would add to every one."""
    import socket

    from privbandit.services.bus import AiomqttInternals

    settings = BusSettings(broker_url=mosquitto_url, run_id=RUN)
    async with connect(settings, "listener", [TOPIC]) as listener, connect(settings, "sender", []) as sender:
        for bus in (listener, sender):
            sock = AiomqttInternals.paho(bus.client).socket()
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        trips = []
        for i in range(20):
            start = time.perf_counter()
            await sender.publish(TOPIC, _status(i))
            assert await _received(listener, 1) == [i]
            trips.append(time.perf_counter() - start)
    assert sorted(trips)[10] < 0.02, trips  # the median; Nagle's delayed ACK makes it ~0.04 s


def test_a_connected_party_marks_itself_alive_and_the_healthcheck_reads_it(tmp_path):
    """PRIVBANDIT_HEALTH_FILE: touched every tick while the party is connected, not while its broker
    is lost; `privbandit health` is healthy on a fresh mark and unhealthy on a stale or missing one."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    from privbandit.services.party import PartyService

    alive = tmp_path / "alive"
    party = PartyService(BusSettings(run_id="r1", health_file=str(alive)), name="analyzer")
    party.tick_s = 0.01

    async def ticks(lost) -> None:
        party.bus, party.task_spec, party.finished = SimpleNamespace(lost=lost), {}, False
        runner = asyncio.create_task(party._ticker())
        await asyncio.sleep(0.1)
        party.finished = True
        await runner

    asyncio.run(ticks(lost=aiomqtt.MqttError("gone")))
    assert not alive.exists()  # a party without its broker is not healthy
    asyncio.run(ticks(lost=None))
    assert alive.exists()

    def health(*extra) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "privbandit", "health", str(alive), *extra],
                              capture_output=True, text=True, timeout=60)

    assert health().returncode == 0
    os.utime(alive, (time.time() - 60, time.time() - 60))
    started = time.monotonic()
    stale = health("--max-age", "15")
    took = time.monotonic() - started  # the process's start-up (seconds under load) ages the mark too
    age = re.search(r"last marked ([0-9.]+) s ago", stale.stderr)
    assert stale.returncode == 1 and age and "hung" in stale.stderr, stale.stderr
    assert 60 <= float(age[1]) <= 60 + took + 0.1
    alive.unlink()
    assert health().returncode == 1


@pytest.mark.asyncio
async def test_pipelined_and_acknowledged_publishes_reach_the_broker_in_the_order_they_were_made(mosquitto_url):
    """A round's chain is published without waiting for its PUBACK, the rest with: interleaved,
    they still leave in the order of the calls (a status saying a task is done must not overtake
    the task's last record), through a real broker to one subscriber."""
    settings = BusSettings(broker_url=mosquitto_url, run_id=RUN)
    async with connect(settings, "listener", [TOPIC]) as listener, connect(settings, "sender", []) as sender:
        for i in range(40):
            await sender.publish(TOPIC, _status(i), wait=i % 3 == 2)  # two pipelined, one waited, …
        assert await _received(listener, 40) == list(range(40))
        await sender.flush()
        # flush leaves what is in flight to its own PUBACK, which may come after the listener has
        # the message (the broker forwards before it acknowledges): wait for those, then nothing is left.
        if sender.inflight:
            await asyncio.wait(set(sender.inflight.values()), timeout=10)
            await asyncio.sleep(0)  # their done callbacks, which empty inflight
        assert not sender.inflight and not sender.outbox.pending
