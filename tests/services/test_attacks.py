"""Traffic adversaries against real sessions: hostile client *processes* (``privbandit attack``)
over Mosquitto, and a curious analyzer against Mosquitto with the generated ACLs."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
import uuid

import aiomqtt
import numpy as np
import pytest

from privbandit.services import codec
from privbandit.services.acl import Role
from privbandit.services.bus import topic
from privbandit.services.hostile import TrafficAttacker
from tests.services.reports import attack_report
from tests.services.test_acl import BrokerUnderTest, _mosquitto, connected
from tests.services.test_distributed import _experiment, _inproc, _start, _wait, assert_same_numbers

# A second task: its plans tell the replay attacker that every round of the first closed. Within
# one task it can only infer closed rounds from pauses between bursts of plans, and a fast machine
# may have none (CI once saw a 3 s session give it nothing to replay).
SECOND_TASK = """
[algorithms.Dist-DP-SE-again]
algorithm = "dist-dp-se"
"""


def _hostile(kind: str, url: str, run_id: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "privbandit", "attack", kind, "--broker", url, "--run", run_id,
                             "--duration", "120", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow_e2e
def test_replay_sybil_impersonation_and_flood_processes_leave_the_honest_result_unchanged(tmp_path, mosquitto_url):
    """Three hostile processes attack one session from its first plan to its shutdown: every
    forged message is refused and counted by reason, and the numbers equal the honest in-process run's."""
    path = _experiment(tmp_path, horizon=30_000, runs=2, extra=SECOND_TASK)
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
        outputs = [h.communicate(timeout=30) for h in hostile]
        assert all(o for o, _ in outputs), [e[-2000:] for _, e in outputs]  # an attacker that crashed is loud
        reports = [json.loads(o) for o, _ in outputs]
    finally:
        for h in hostile:
            if h.poll() is None:
                h.kill()
    assert all(r["plans_seen"] > 0 and r["messages_sent"] > 0 for r in reports), reports
    assert_same_numbers(tmp_path / "inproc", out)
    rejected = json.loads((out / "summary.json").read_text())["rejected"]
    # sybil and flood ids lie outside every cohort; replays hit closed rounds or a finished task;
    # the flood's junk fails the decoder, its oversized payload the size limit.
    # Impersonated records (invited ids, no MAC or a guessed one) never take a user's place: a
    # message no fleet signed is refused whole (missing-tag, or bad-block-tag for a guessed block
    # tag), its ids outside the cohort as not-in-cohort.
    for reason in ("not-in-cohort", "too-large", "not-msgpack", "bad-version", "schema", "wrong-run",
                   "missing-tag", "bad-block-tag"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)
    assert rejected.get("round-closed", 0) + rejected.get("wrong-task", 0) > 0, rejected


@pytest.mark.slow_e2e
def test_an_experiment_files_traffic_adversaries_run_next_to_the_parties_and_change_nothing(tmp_path):
    """``traffic_adversaries`` in the experiment file: `privbandit run --transport mqtt` starts one
    hostile process per kind on the embedded broker with the generated ACLs. Every forgery is
    refused and counted, the curious analyzer receives nothing it may not, every attacker writes
    its report, and the numbers equal the honest in-process run's."""
    from privbandit.families.distributed_dp_mab.config import TRAFFIC_ADVERSARY_KINDS
    from privbandit.runner.config import load
    from privbandit.services.launcher import launch

    kinds = list(TRAFFIC_ADVERSARY_KINDS)
    path = _experiment(tmp_path, horizon=150_000, runs=1, extra=SECOND_TASK)
    path.write_text(f"traffic_adversaries = {kinds}\n" + path.read_text())
    family, config = load(path)
    tmp_honest = tmp_path / "honest.toml"
    tmp_honest.write_text(path.read_text().split("\n", 1)[1])
    _inproc(tmp_honest, tmp_path / "inproc")
    out = tmp_path / "mqtt"
    assert launch(family, config, path, [], out, broker_url=None, shards=2, timeout_s=240) == 0
    assert_same_numbers(tmp_path / "inproc", out)
    reports = {k: attack_report(out, k) for k in kinds}
    for kind in ("replay", "sybil", "impersonate", "flood"):
        assert reports[kind]["plans_seen"] > 0 and reports[kind]["messages_sent"] > 0, reports[kind]
    curious = reports["curious-analyzer"]
    assert curious["forbidden_received"] == 0 and curious["forged_releases_sent"] == 2, curious
    assert all(r["ended_by"] in ("shutdown", "terminated", "disconnected") for r in reports.values()), reports
    rejected = json.loads((out / "summary.json").read_text())["rejected"]
    for reason in ("not-in-cohort", "missing-tag", "bad-block-tag", "not-msgpack", "schema", "too-large"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)
    assert rejected.get("round-closed", 0) + rejected.get("wrong-task", 0) > 0, rejected  # the replays


def _plan(plan_id: int, first: int, round_id: int, task: int = 1) -> codec.PlanMsg:
    """A plan of 10 users that opens one modular round at the aggregator and joins all 10 to it."""
    rnd = codec.RoundSpec(id=round_id, intermediary="aggregator", rule="sum", expected=10, m=49)
    return codec.PlanMsg(run="r", task=task, plan=plan_id, first_user=first, cohort=10, opens=[rnd],
                         joins=[codec.JoinSpec(round=round_id, first=first, count=10, reports=10)])


def test_traffic_attacker_messages_are_what_each_kind_promises():
    plan = _plan(5, 100, 5)
    same_wave = _plan(6, 110, 6)
    later = _plan(7, 120, 7)
    sybil = TrafficAttacker("sybil", "r", seed=0)
    (box, payload), = sybil.on_plan(plan)
    ids = codec.decode(payload).user_ids
    assert box == "aggregator" and ids.min() >= 110  # every id outside the invited cohort 100..109
    assert sybil.on_plan(plan) == []  # a re-announced plan gets nothing new
    replay = TrafficAttacker("replay", "r", seed=0)
    assert replay.on_plan(plan, wave=0) == []  # nothing earlier to replay yet
    assert replay.on_plan(same_wave, wave=0) == []  # round 5 may still be open: that would be impersonation
    old = codec.decode(replay.on_plan(later, wave=2)[0][1])
    assert old.round == 5 and old.plan == 5 and np.array_equal(old.user_ids, np.arange(100, 110))
    forged = [codec.decode(b) for _, b in TrafficAttacker("impersonate", "r", seed=0).on_plan(plan)]
    assert [f.tags is None for f in forged[:2]] == [True, False]
    assert all(np.array_equal(f.user_ids, np.arange(100, 110)) for f in forged[:2])  # invited ids
    assert forged[2].user_ids.size == 0 and forged[2].block_tag is not None  # a forged "block complete"
    flood = TrafficAttacker("flood", "r", seed=0).on_plan(plan)
    assert len(flood) > 30 and max(len(b) for _, b in flood) > codec.MAX_MESSAGE_BYTES
    rejected = 0
    for _, b in flood:
        try:
            codec.decode(b)
        except codec.DecodeError:
            rejected += 1
    assert rejected >= 6  # the garbage and the oversized payload fail the decoder itself
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


def test_the_launcher_starts_a_session_only_once_its_adversaries_are_subscribed(tmp_path):
    """An experiment's traffic adversary signals its subscription with a ready file; the launcher
    waits for it (a session that began first once left the replay attacker only the last 9 plans of
    its first task, and nothing to replay). One that exits first, or never signals, stops the launch
    loudly, naming it."""
    from privbandit.services.embedded_broker import free_port
    from privbandit.services.launcher import Party, wait_subscribed

    # Subscribed on a live broker (the machine's Mosquitto): the file appears, and the wait ends.
    ready = tmp_path / "replay.subscribed"
    live = Party("hostile-replay", ["attack", "replay", "--broker", "mqtt://127.0.0.1:1883", "--run", "r1",
                                    "--duration", "30", "--ready-file", str(ready)], {}, tmp_path / "live.log",
                 hostile=True, ready_file=ready)
    live.start()
    try:
        wait_subscribed([live], timeout_s=30)
        assert ready.exists() and live.proc.poll() is None
    finally:
        live.stop()
    # No broker: the attack exits before it subscribes.
    dead = Party("hostile-flood", ["attack", "flood", "--broker", f"mqtt://127.0.0.1:{free_port()}", "--run", "r1",
                                   "--ready-file", str(tmp_path / "flood.subscribed")], {}, tmp_path / "dead.log",
                 hostile=True, ready_file=tmp_path / "flood.subscribed")
    dead.start()
    with pytest.raises(RuntimeError, match="hostile-flood exited with 1 before it subscribed"):
        wait_subscribed([dead], timeout_s=30)
    # Never subscribed, never exits: a deadline.
    stuck = Party("hostile-sybil", [], {}, tmp_path / "stuck.log", hostile=True, ready_file=tmp_path / "never")
    stuck.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(TimeoutError, match="hostile-sybil not subscribed within 1 s"):
            wait_subscribed([stuck], timeout_s=1)
    finally:
        stuck.stop()


def test_an_attacker_the_broker_cuts_off_still_writes_its_report(tmp_path):
    """A broker that drops the attacker's connection (here: a Mosquitto whose packet cap is below
    the volley's 8-MiB report) is the defence working, not a crash of the attack: the process
    writes its report with ``ended_by: disconnected`` and exits 0. It once raised instead, and an
    experiment's volley cut off at the session's end left no report (CI, 2026-11-29)."""
    from privbandit.services.mosquitto_process import start_on_free_port, write_open_conf

    def conf(port: int):
        path = write_open_conf(tmp_path / "broker", port)
        path.write_text(path.read_text().replace("max_packet_size", "max_packet_size 65536\n#"))
        return path

    broker = start_on_free_port(conf)
    report = tmp_path / "volley.json"
    try:
        run_id = "r" + secrets.token_hex(3)
        ready = tmp_path / "ready"
        proc = subprocess.Popen([sys.executable, "-m", "privbandit", "attack", "volley", "--broker", broker.url,
                                 "--run", run_id, "--duration", "60", "--report", str(report),
                                 "--ready-file", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(300):
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists(), proc.communicate()

        async def announce():
            host, port = broker.url.removeprefix("mqtt://").split(":")
            async with aiomqtt.Client(host, int(port)) as c:
                plan = _plan(0, 0, 0).model_copy(update={"run": run_id})
                await c.publish(topic(run_id, "plan"), codec.encode(plan), qos=1)

        asyncio.run(announce())
        out, err = proc.communicate(timeout=60)
    finally:
        broker.stop()
    assert proc.returncode == 0, err[-2000:]
    got = json.loads(report.read_text())
    assert got["ended_by"] == "disconnected" and got["plans_seen"] == 1 and got["messages_sent"] >= 1, got


# A process that, told to stop, takes ``argv[2]`` seconds to write its report (``argv[1]``).
SLOW_TO_LEAVE = r"""
import signal, sys, time
from pathlib import Path

def leave(*_):
    time.sleep(float(sys.argv[2]))
    Path(sys.argv[1]).write_text("report")
    sys.exit(0)

signal.signal(signal.SIGTERM, leave)
Path(sys.argv[1] + ".ready").touch()
while True:
    time.sleep(0.05)
"""


def _slow_to_leave(tmp_path, name: str, delay_s: float) -> tuple[subprocess.Popen, Path]:
    report = tmp_path / name
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TO_LEAVE, str(report), str(delay_s)])
    deadline = time.monotonic() + 30
    while not (tmp_path / f"{name}.ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.05)
    return proc, report


def test_traffic_adversaries_are_told_to_stop_together_and_get_the_whole_grace(tmp_path):
    """The launcher stops its traffic adversaries with one ``stop_process(*procs, grace_s=…)``: each
    gets SIGTERM at once and the whole grace to write its report, so two that take 2 s each both
    write theirs in about 2 s (one after the other with a 5 s grace each, as before, a loaded
    machine's slow writer was killed reportless: a CI failure); one slower than the grace is killed."""
    from privbandit.services.launcher import HOSTILE_STOP_S, stop_process

    first, second = _slow_to_leave(tmp_path, "a", 2.0), _slow_to_leave(tmp_path, "b", 2.0)
    start = time.monotonic()
    stop_process(first[0], second[0], grace_s=HOSTILE_STOP_S)
    took = time.monotonic() - start
    assert first[1].read_text() == second[1].read_text() == "report"
    assert first[0].returncode == second[0].returncode == 0
    assert took < 3.8, took  # together: one 2 s wait, not two
    slow = _slow_to_leave(tmp_path, "c", 30.0)
    stop_process(slow[0], grace_s=1.0)
    assert slow[0].returncode == -9 and not slow[1].exists()
