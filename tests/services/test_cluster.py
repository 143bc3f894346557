"""The broker cluster (privbandit cluster, docs/cluster.md): three NATS nodes with the project's
accounts and ACLs; a session with its parties on different nodes; the ACL through every node.

Needs nats-server: fails, never skips, when CI=true. One cluster for the module (its start-up is
most of the time); every test uses the cluster's run id (the ACL is written for it) and its own
client ids.
"""

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time

import aiomqtt
import pytest

from privbandit.runner import config as experiment_files
from privbandit.services import acl
from privbandit.services.acl.broker_files import check_passwords
from privbandit.services.acl.nats_files import (MQTT_OPTIONS, QOS1_DELIVERY, NatsNode, jetstream_dir, nats_permissions,
                                                nats_subjects, render_nats_conf)
from privbandit.services.broker_probe import ANONYMOUS, canary_topics, may_read, probe
from privbandit.services.bus import BusSettings
from privbandit.services.cluster import NatsCluster, nats_binary, spread
from privbandit.services.launcher import plan_parties
from tests.services.test_distributed import _experiment, _inproc, _wait, assert_same_numbers
from tests.needs import missing

RUN = "c" + secrets.token_hex(4)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if nats_binary() is None:
        missing("nats-server is not installed (apt install nats-server)")
    with NatsCluster(tmp_path_factory.mktemp("cluster"), RUN, 3) as c:
        yield c


def _passwords(cluster) -> dict[str, str]:
    return {str(a): pw for a, pw in cluster.files.passwords.items()}


def _endpoint(url: str) -> tuple[str, int]:
    return BusSettings(broker_url=url).endpoint()


# ---------------------------------------------------------------------------------------------
# the rules, translated (no broker)


def _nats_match(subject_pattern: str, subject: str) -> bool:
    """NATS subject matching: '*' one token, '>' one or more trailing tokens."""
    p, s = subject_pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def test_nats_permissions_grant_exactly_what_the_acl_rules_allow():
    """For every account and every concrete topic of the run (the probe's canaries and their
    parents), the NATS allow/deny lists decide as :func:`acl.allowed` does."""
    instances = ("shuffler-1", "shuffler-2")
    perms = nats_permissions(RUN, instances)
    topics = set(canary_topics(RUN, instances)) | {t.rsplit("/", 1)[0] for t in canary_topics(RUN, instances)}
    topics |= {f"pb/{RUN}/metrics/users-3", f"pb/{RUN}/report/aggregator/a/b", "pb/other/plan"}
    checked = 0
    for account in (*acl.Role, *instances):
        for action, kind in (("read", "subscribe"), ("write", "publish")):
            rules = perms[str(account)][kind]
            for topic in topics:
                subject = topic.replace("/", ".")
                granted = any(_nats_match(a, subject) for a in rules["allow"]) and not any(
                    _nats_match(d, subject) for d in rules.get("deny", []))
                assert granted == acl.allowed(account, action, topic, RUN, instances), (account, action, topic)
                checked += 1
    assert checked > 300
    assert nats_subjects(f"pb/{RUN}/report/shuffler/#") == (f"pb.{RUN}.report.shuffler", f"pb.{RUN}.report.shuffler.>")
    assert nats_subjects("pb/x/metrics/+") == ("pb.x.metrics.*",)
    with pytest.raises(ValueError, match="level 'a.b'"):
        nats_subjects("pb/a.b/plan")
    assert all(QOS1_DELIVERY in p["subscribe"]["allow"] for p in perms.values())


def test_mqtt_options_reach_the_mqtt_block_and_unknown_ones_are_refused(tmp_path):
    node = NatsNode("n0", "127.0.0.1", 4222, 1883, 6222)
    conf = json.loads(render_nats_conf(node, [node], RUN, check_passwords(None), tmp_path, stream_replicas=1,
                                       mqtt_options={"consumer_memory_storage": True, "max_ack_pending": 64})
                      .split("\n", 1)[1])
    assert conf["mqtt"] == {"listen": "127.0.0.1:1883", "stream_replicas": 1, "consumer_memory_storage": True,
                            "max_ack_pending": 64}
    with pytest.raises(ValueError, match=r"unknown \['consumer_memory'\]"):
        render_nats_conf(node, [node], RUN, check_passwords(None), tmp_path, mqtt_options={"consumer_memory": True})


def test_nats_server_accepts_every_mqtt_option_and_keeps_its_store_where_asked(tmp_path):
    """nats-server refuses a field it does not know (exit 1, "unknown field"): one node started with
    every key of MQTT_OPTIONS shows that 2.9 knows them all; its JetStream store is under ``store``."""
    if nats_binary() is None:
        missing("nats-server is not installed (apt install nats-server)")
    options = {"consumer_replicas": 1, "consumer_memory_storage": True, "max_ack_pending": 100, "ack_wait": "10s"}
    assert set(options) == MQTT_OPTIONS
    with NatsCluster(tmp_path / "files", "o" + RUN[1:], 1, mqtt_options=options, store=tmp_path / "store") as c:
        store = jetstream_dir(tmp_path / "store", c.nodes[0])
        assert store.is_dir() and any(store.rglob("*")), "the node's JetStream store is not under store"
        assert not jetstream_dir(tmp_path / "files", c.nodes[0]).exists()


# ---------------------------------------------------------------------------------------------
# a session over three nodes


def test_a_session_spread_over_three_nodes_reproduces_the_inproc_run(tmp_path, cluster):
    path = _experiment(tmp_path, horizon=20_000, runs=1, extra="")
    _inproc(path, tmp_path / "inproc")
    family, config = experiment_files.load(path)
    out = tmp_path / "mqtt"
    parties = plan_parties(family, config, path, [], out, cluster.urls[0], RUN, 2, _passwords(cluster),
                           observer_log=tmp_path / "observer.log", broker_acl="enforced")
    where = spread(parties, cluster.urls)
    assert len(set(where.values())) == 3 and where["analyzer"] != where["aggregator"] != where["users-0"]
    try:
        for p in parties:
            p.start()
        assert _wait(parties, timeout=120) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    assert_same_numbers(tmp_path / "inproc", out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parties_missing_stats"] == []
    assert cluster.dead() == []


# ---------------------------------------------------------------------------------------------
# the ACL through every node


def test_the_probe_finds_the_acl_enforced_on_every_node(cluster):
    for url in cluster.urls:
        result = asyncio.run(probe(BusSettings(broker_url=url, run_id=RUN), RUN, _passwords(cluster)))
        assert result.enforced and result.refused == [ANONYMOUS], (url, result)
        assert sorted(result.accounts) == sorted(r.value for r in acl.Role)


async def _cross_node_leaks(cluster, reader: str, writer_url: str, reader_url: str) -> tuple[list, list, list]:
    """``reader``'s client on ``reader_url`` subscribes to every canary topic and to ``#`` (what
    it may not read must be refused or never delivered); writers on ``writer_url`` publish one
    canary per topic. Returns (refused subscriptions, leaked topics, topics it read and may)."""
    pw = _passwords(cluster)
    nonce = secrets.token_hex(4).encode()
    topics = canary_topics(RUN)
    clients = {}
    try:
        for who, url in [(reader, reader_url)] + [(w, writer_url) for w in pw if w != reader]:
            host, port = _endpoint(url)
            clients[who] = aiomqtt.Client(host, port, username=who, password=pw[who], identifier=f"x{nonce.decode()}{who}")
            await clients[who].__aenter__()
        sub = clients[reader]
        wanted = topics + ["#", f"pb/{RUN}/#", "$MQTT/sub/#"]
        codes = await sub.subscribe([(t, 1) for t in wanted], timeout=5)
        refused = [t for t, c in zip(wanted, codes) if getattr(c, "value", c) >= 0x80]
        for t in topics:
            writer = next((w for w in pw if w != reader and acl.allowed(w, "write", t, RUN)), None)
            if writer is not None:
                await clients[writer].publish(t, b"canary " + nonce, qos=1)
        got = set()
        try:
            async with asyncio.timeout(2.0):
                async for message in sub.messages:
                    if message.payload == b"canary " + nonce:
                        got.add(message.topic.value)
        except TimeoutError:
            pass
        leaked = sorted(t for t in got if not may_read(reader, t, RUN))
        return refused, leaked, sorted(got - set(leaked))
    finally:
        for c in clients.values():
            await c.__aexit__(None, None, None)


@pytest.mark.parametrize("reader", ["users", "analyzer"])
def test_no_role_reads_another_roles_topics_through_another_node(cluster, reader):
    refused, leaked, read = asyncio.run(_cross_node_leaks(cluster, reader, cluster.urls[0], cluster.urls[2]))
    assert leaked == []
    assert "#" in refused and f"pb/{RUN}/#" in refused and "$MQTT/sub/#" in refused
    # the refusals are the ACL's, not a broken node: what the role may read crossed the nodes
    expected = sorted(t for t in canary_topics(RUN) if may_read(reader, t, RUN)
                      and any(acl.allowed(w, "write", t, RUN) for w in _passwords(cluster) if w != reader))
    assert read == expected and read
    assert sorted(set(canary_topics(RUN)) - set(refused)) == sorted(t for t in canary_topics(RUN)
                                                                      if may_read(reader, t, RUN))


def test_a_forbidden_publish_is_dropped_on_every_node(cluster):
    """A users client on node 0 publishes a plan (the analyzer's alone): NATS acknowledges it and
    drops it, so the aggregator on node 1 gets nothing; the analyzer's own plan gets through."""
    pw = _passwords(cluster)

    async def plans_from(who: str) -> list[bytes]:
        host, port = _endpoint(cluster.urls[0])
        ahost, aport = _endpoint(cluster.urls[1])
        async with aiomqtt.Client(ahost, aport, username="aggregator", password=pw["aggregator"],
                                  identifier="p" + secrets.token_hex(4)) as agg:
            await agg.subscribe(acl.plan_topic(RUN), qos=1)
            async with aiomqtt.Client(host, port, username=who, password=pw[who],
                                      identifier="p" + secrets.token_hex(4)) as client:
                await client.publish(acl.plan_topic(RUN), b"plan from " + who.encode(), qos=1, timeout=5)
            got = []
            try:
                async with asyncio.timeout(2.0):
                    async for message in agg.messages:
                        got.append(message.payload)
            except TimeoutError:
                pass
            return got

    assert asyncio.run(plans_from("users")) == []
    assert asyncio.run(plans_from("analyzer")) == [b"plan from analyzer"]


def test_a_will_on_a_forbidden_topic_is_never_delivered(cluster):
    """A users client whose will names the plan topic (analyzer's alone) vanishes: the aggregator,
    subscribed to the plan on another node, gets nothing; the same will on a report topic (the
    users' own) is delivered, so the check can see a will at all."""
    pw = _passwords(cluster)

    async def vanish_with_will(topic: str) -> bytes | None:
        host, port = _endpoint(cluster.urls[1])
        ahost, aport = _endpoint(cluster.urls[0])
        async with aiomqtt.Client(ahost, aport, username="aggregator", password=pw["aggregator"],
                                  identifier="w" + secrets.token_hex(4)) as agg:
            await agg.subscribe([(acl.plan_topic(RUN), 1), (acl.report_topic(RUN, "aggregator") + "/#", 1)])
            client = aiomqtt.Client(host, port, username="users", password=pw["users"], keepalive=1,
                                    identifier="w" + secrets.token_hex(4), will=aiomqtt.Will(topic, b"will", qos=1))
            try:
                await client.__aenter__()
            except aiomqtt.MqttError:
                return None  # refused at CONNECT: no will either
            client._client.socket().shutdown(socket.SHUT_RDWR)  # vanish: no DISCONNECT, so the will fires
            try:  # a will is published at once when the broker sees the connection close
                async with asyncio.timeout(3.0):
                    async for message in agg.messages:
                        return message.payload
            except TimeoutError:
                return None

    assert asyncio.run(vanish_with_will(acl.report_topic(RUN, "aggregator", "w"))) == b"will"
    assert asyncio.run(vanish_with_will(acl.plan_topic(RUN))) is None


def test_a_roles_password_does_not_open_the_nats_protocol_port(cluster):
    """Every account may subscribe to the QoS 1 delivery subjects ($MQTT.sub.>): a NATS-protocol
    client with a role's password would read every session's deliveries, so it is refused."""
    node = cluster.nodes[0]
    with socket.create_connection((node.host, node.client_port), timeout=5) as sock:
        sock.recv(4096)  # INFO
        sock.sendall(b'CONNECT {"user":"users","pass":"%s","verbose":true}\r\nSUB $MQTT.sub.> 1\r\nPING\r\n'
                     % _passwords(cluster)["users"].encode())
        reply = b""
        end = time.monotonic() + 5
        while b"\r\n" not in reply and time.monotonic() < end:
            reply += sock.recv(4096)
    assert reply.startswith(b"-ERR 'Authorization Violation'"), reply


def test_privbandit_cluster_prints_the_nodes_and_stops_on_ctrl_c(tmp_path):
    if nats_binary() is None and os.environ.get("CI") != "true":
        pytest.skip("nats-server is not installed")
    proc = subprocess.Popen([sys.executable, "-m", "privbandit", "cluster", "--out", str(tmp_path), "--run-id", "cli1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not any("Ctrl-C" in ln for ln in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        urls = [ln.split(": ", 1)[1].strip() for ln in lines if ln.strip().startswith("n") and "mqtt://" in ln]
        assert len(urls) == 3, "".join(lines)
        assert all(socket.create_connection(_endpoint(u), timeout=2) for u in urls)
        proc.send_signal(2)  # Ctrl-C
        assert proc.wait(20) == 0
        for u in urls:
            with pytest.raises(OSError):
                socket.create_connection(_endpoint(u), timeout=1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
