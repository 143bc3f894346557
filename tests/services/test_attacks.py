"""Traffic adversaries against real sessions: hostile client *processes* (``privbandit attack``)
over Mosquitto, and a curious analyzer against Mosquitto with the generated ACLs."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import uuid

import numpy as np
import pytest

from privbandit.services import codec
from privbandit.services.acl import Role
from privbandit.services.hostile import TrafficAttacker
from tests.services.test_acl import BrokerUnderTest, _mosquitto, connected
from tests.services.test_distributed import _experiment, _inproc, _start, _wait, assert_same_numbers


def _hostile(kind: str, url: str, run_id: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "privbandit", "attack", kind, "--broker", url, "--run", run_id,
                             "--duration", "120", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_replay_sybil_impersonation_and_flood_processes_leave_the_honest_result_unchanged(tmp_path, mosquitto_url):
    """Three hostile processes attack one session from its first plan to its shutdown: every
    forged message is refused and counted by reason, and the numbers equal the honest in-process run's."""
    path = _experiment(tmp_path, horizon=60_000, runs=2, extra="")
    _inproc(path, tmp_path / "inproc")
    run_id = "h" + secrets.token_hex(4)
    hostile = [_hostile(kind, mosquitto_url, run_id) for kind in ("replay", "sybil", "impersonate", "flood")]
    try:
        import time
        time.sleep(1.5)  # connected and subscribed before the first plan
        parties, out = _start(tmp_path, path, mosquitto_url, run_id)
        try:
            assert _wait(parties) == 0, (tmp_path / "observer.log").read_text()[-3000:]
        finally:
            for p in parties:
                p.stop()
        reports = [json.loads(h.communicate(timeout=30)[0]) for h in hostile]
    finally:
        for h in hostile:
            if h.poll() is None:
                h.kill()
    assert all(r["plans_seen"] > 0 and r["messages_sent"] > 0 for r in reports), reports
    assert_same_numbers(tmp_path / "inproc", out)
    rejected = json.loads((out / "summary.json").read_text())["rejected"]
    # sybil and flood ids lie outside every cohort; replays hit closed rounds or a finished task;
    # the flood's junk fails the decoder, its oversized payload the size limit.
    # Impersonated records (invited ids, no MAC or a guessed one) never take a user's place.
    for reason in ("not-in-cohort", "too-large", "not-msgpack", "bad-version", "schema", "wrong-run",
                   "missing-tag", "bad-tag"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)
    assert rejected.get("round-closed", 0) + rejected.get("wrong-task", 0) > 0, rejected


def test_an_experiment_files_traffic_adversaries_run_next_to_the_parties_and_change_nothing(tmp_path):
    """``traffic_adversaries`` in the experiment file: `privbandit run --transport mqtt` starts one
    hostile process per kind on the embedded broker with the generated ACLs. Every forgery is
    refused and counted, the curious analyzer receives nothing it may not, every attacker writes
    its report, and the numbers equal the honest in-process run's."""
    from privbandit.experiment.config import TRAFFIC_ADVERSARY_KINDS, load_experiment
    from privbandit.services.launcher import launch

    kinds = list(TRAFFIC_ADVERSARY_KINDS)
    path = _experiment(tmp_path, horizon=300_000, runs=1, extra="")
    path.write_text(f"traffic_adversaries = {kinds}\n" + path.read_text())
    config, _ = load_experiment(path)
    tmp_honest = tmp_path / "honest.toml"
    tmp_honest.write_text(path.read_text().split("\n", 1)[1])
    _inproc(tmp_honest, tmp_path / "inproc")
    out = tmp_path / "mqtt"
    assert launch(config, path, [], out, broker_url=None, shards=2, timeout_s=240) == 0
    assert_same_numbers(tmp_path / "inproc", out)
    reports = {k: json.loads((out / "adversaries" / f"{k}.json").read_text()) for k in kinds}
    for kind in ("replay", "sybil", "impersonate", "flood"):
        assert reports[kind]["plans_seen"] > 0 and reports[kind]["messages_sent"] > 0, reports[kind]
    curious = reports["curious-analyzer"]
    assert curious["forbidden_received"] == 0 and curious["forged_releases_sent"] == 2, curious
    assert all(r["ended_by"] in ("shutdown", "terminated") for r in reports.values()), reports
    rejected = json.loads((out / "summary.json").read_text())["rejected"]
    for reason in ("not-in-cohort", "missing-tag", "bad-tag", "not-msgpack", "schema", "too-large"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)


def test_traffic_attacker_messages_are_what_each_kind_promises():
    plan = codec.PlanMsg(run="r", task=1, round=5, batch=2, arm=0, first_user=100, cohort=10, collect=True,
                         params=codec.Params(n=10, g=3, tau=9, m=49))
    same_batch = plan.model_copy(update={"round": 6, "arm": 1, "first_user": 110})
    later = plan.model_copy(update={"round": 7, "batch": 3, "first_user": 120})
    sybil = TrafficAttacker("sybil", "r", seed=0)
    ids = codec.decode(sybil.on_plan(plan)[0]).user_ids
    assert ids.min() >= 110  # every id outside the invited cohort 100..109
    assert sybil.on_plan(plan) == []  # a re-announced plan gets nothing new
    replay = TrafficAttacker("replay", "r", seed=0)
    assert replay.on_plan(plan) == []  # nothing earlier to replay yet
    assert replay.on_plan(same_batch) == []  # round 5 is still open: that would be impersonation
    old = codec.decode(replay.on_plan(later)[0])
    assert old.round == 5 and np.array_equal(old.user_ids, np.arange(100, 110))
    forged = [codec.decode(b) for b in TrafficAttacker("impersonate", "r", seed=0).on_plan(plan)]
    assert [f.tags is None for f in forged] == [True, False]
    assert all(np.array_equal(f.user_ids, np.arange(100, 110)) for f in forged)  # invited ids
    flood = TrafficAttacker("flood", "r", seed=0).on_plan(plan)
    assert len(flood) > 30 and max(map(len, flood)) > codec.MAX_MESSAGE_BYTES
    with pytest.raises(ValueError, match="replay, sybil"):
        TrafficAttacker("nope", "r")


@pytest.mark.asyncio
async def test_a_curious_analyzer_is_refused_by_mosquitto_with_the_generated_acls(tmp_path):
    """`privbandit attack curious-analyzer` with the analyzer's credentials subscribes to reports,
    metrics and everything, and forges releases: it receives no report or metric, and no forged
    release reaches a genuine reader."""
    run = "acl-test"
    with _mosquitto(tmp_path, "acl_file") as (port, passwords):
        broker = BrokerUnderTest("mosquitto", port, passwords, __import__("aiomqtt").ProtocolVersion.V5,
                                 refuses_subscribe=False, refusal_code=0x87)
        del run  # the generated ACLs are for test_acl's RUN
        from tests.services.test_acl import RUN as run
        url = f"mqtt://127.0.0.1:{port}"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "privbandit", "attack", "curious-analyzer", "--broker", url, "--run", run,
            "--username", "analyzer", "--password", passwords[Role.ANALYZER], "--duration", "4",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with connected(broker, Role.USERS, Role.AGGREGATOR, Role.ANALYZER) as (users, aggregator, analyzer):
            await aggregator.client.subscribe(f"pb/{run}/report/aggregator", qos=1)
            await analyzer.client.subscribe(f"pb/{run}/release/+", qos=1)
            await asyncio.sleep(1.5)  # the attacker has subscribed and published its forgeries
            secret = f"report-{uuid.uuid4().hex}".encode()
            for _ in range(5):
                await users.client.publish(f"pb/{run}/report/aggregator", secret, qos=1)
                await users.client.publish(f"pb/{run}/metrics/users-0", secret, qos=1)
                await asyncio.sleep(0.2)
            await aggregator.wait_for((f"pb/{run}/report/aggregator", secret))  # the broker routes reports
            out, errs = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, errs.decode()[-2000:]
            report = json.loads(out)
            assert report["forbidden_received"] == 0 and report["forged_releases_sent"] == 2, report
            assert not any(t.startswith(f"pb/{run}/release/") for t, _ in analyzer.messages), analyzer.messages
