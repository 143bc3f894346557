"""Faults with real processes over a real broker: SIGKILL a party mid-run, restart it, and get
the in-process run's numbers, bit for bit (no accepted report lost, none counted twice)."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

from privbandit.runner import config as experiment_files
from privbandit.services.checkpoint import progress
from privbandit.services.launcher import plan_parties
from privbandit.services.mosquitto_process import (MosquittoProcess, mosquitto_binary, start_on_free_port,
                                                   write_persistent_conf)
from tests.services.test_distributed import _experiment, _inproc, _wait, assert_same_numbers

SHUFFLED = """
name = "faults-shuffled"
horizon = 60000
seed = 23
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
[algorithms.Dist-RDP-shuffled]
algorithm = "dist-rdp-se"
intermediary = "shuffler-residues"
"""
POLL_S = 0.05


def _progress(out, name: str) -> tuple[int, int]:
    """(task, rounds done) in a party's checkpoint; (-1, 0) before the first one."""
    return progress(out / "state" / name)


def _kill_and_restart(parties, out, name: str, task: int, rounds: int, timeout: float = 60) -> None:
    """SIGKILL ``name`` once its checkpoint shows ``rounds`` rounds of ``task`` done, then start it
    again (same client id, same state directory)."""
    party = next(p for p in parties if p.name == name)
    end = time.monotonic() + timeout
    while _progress(out, name) < (task, rounds):
        assert parties[0].proc.poll() is None, "the session ended before the fault was injected"
        assert time.monotonic() < end, f"{name} never reached task {task}, {rounds} rounds"
        time.sleep(POLL_S)
    party.proc.kill()  # SIGKILL: no goodbye, messages in flight are lost
    party.proc.wait()
    assert parties[0].proc.poll() is None, "the session must still be running when the party dies"
    party.start()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-process results every fault test must reproduce: (experiment file, results dir)."""
    tmp = tmp_path_factory.mktemp("reference")
    path = _experiment(tmp, horizon=HORIZON, runs=1, extra="")
    _inproc(path, tmp / "inproc")
    return path, tmp / "inproc"


HORIZON = 50_000  # ~110 rounds: the kills (after 3 to 12) come early; start-up, not users, sets the time


def _launch_parties(tmp_path, path, url, prefix):
    family, config = experiment_files.load(path)
    out = tmp_path / "mqtt"
    parties = plan_parties(family, config, path, [], out, url, prefix + secrets.token_hex(4), 2, None,
                           observer_log=tmp_path / "observer.log")
    for p in parties:
        p.start()
    return parties, out


def _finish(tmp_path, parties) -> None:
    try:
        assert _wait(parties, timeout=120) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()


@pytest.mark.slow_e2e
def test_killing_the_shuffler_mid_run(tmp_path, mosquitto_url):
    path = tmp_path / "shuffled.toml"
    path.write_text(SHUFFLED)
    _inproc(path, tmp_path / "inproc")
    parties, out = _launch_parties(tmp_path, path, mosquitto_url, "h")
    try:
        _kill_and_restart(parties, out, "shuffler", 0, 3)
    finally:
        _finish(tmp_path, parties)
    assert_same_numbers(tmp_path / "inproc", out)
    assert "resumed task 0" in (out / "logs" / "shuffler.log").read_text()


def test_the_launcher_restarts_crashed_parties_when_asked(tmp_path, mosquitto_url, reference):
    """``privbandit run --transport mqtt --restart-on-crash N``: the analyzer, then the aggregator,
    then the observer are SIGKILLed mid-run; the launcher starts each again, each resumes from its
    checkpoint, and the run completes with the in-process numbers."""
    import threading

    from privbandit.services.launcher import launch

    path, inproc = reference
    family, config = experiment_files.load(path)
    out, box = tmp_path / "mqtt", {}
    ready = threading.Event()

    def started(parties):
        box["parties"] = parties
        ready.set()

    result = {}
    worker = threading.Thread(target=lambda: result.update(code=launch(
        family, config, path, [], out, broker_url=mosquitto_url, shards=2, timeout_s=150, restart_on_crash=3,
        started=started, insecure_broker=True)), daemon=True)  # the open system broker: the probe would refuse it
    worker.start()
    assert ready.wait(30)
    named = {p.name: p for p in box["parties"]}
    first = {}
    end = time.monotonic() + 90
    for victim, watched, rounds in (("analyzer", "analyzer", 3), ("aggregator", "aggregator", 8),
                                    ("observer", "aggregator", 12)):
        while _progress(out, watched) < (0, rounds):
            assert time.monotonic() < end and worker.is_alive(), f"the session ended before {victim} was killed"
            time.sleep(POLL_S)
        first[victim] = named[victim].proc
        first[victim].kill()
        # One crash at a time: the launcher must have started this one again before the next kill
        # (else one poll sees several crashes at once and the restart log's order is arbitrary).
        while named[victim].proc is first[victim]:
            assert time.monotonic() < end and worker.is_alive(), f"{victim} was not started again"
            time.sleep(POLL_S)
    worker.join(150)
    assert not worker.is_alive() and result["code"] == 0
    for victim, proc in first.items():
        assert named[victim].proc is not proc, f"{victim} was not started again"
    assert "launcher: analyzer exited with -9; restarting it (2 restarts left)" in (
        out / "logs" / "analyzer.log").read_text()
    for victim in ("analyzer", "aggregator"):  # the restarts really went through the checkpoints
        assert "resumed task 0" in (out / "logs" / f"{victim}.log").read_text(), victim
    assert_same_numbers(inproc, out)


def test_a_state_dir_of_another_run_stops_the_party_with_a_clear_error(tmp_path):
    """A checkpoint left by another session is refused at start (exit 2), never resumed."""
    import os
    import subprocess
    import sys

    from privbandit.services.checkpoint import StateDir

    StateDir(tmp_path / "s", "old-run", "analyzer").save(0, "0" * 64, {"releases": []})
    env = {**os.environ, "PRIVBANDIT_ANALYZER_KEY": "0x1", "PRIVBANDIT_RUN_ID": "new-run",
           "PRIVBANDIT_BROKER_URL": "mqtt://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-m", "privbandit", "analyzer", "--state-dir", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "checkpoint-wrong-run" in proc.stderr and "old-run" in proc.stderr and "new-run" in proc.stderr


# --- the broker itself ----------------------------------------------------------------------------

def private_mosquitto(directory) -> MosquittoProcess:
    """A started Mosquitto of our own on a free port, persisting its sessions and queues to
    ``directory``, so that it can be SIGKILLed and started again on the same port."""
    from tests.services.test_acl import _missing

    if mosquitto_binary() is None:
        _missing("mosquitto")
    return start_on_free_port(lambda port: write_persistent_conf(directory, port))


async def _sessions_left(url: str, run_id: str, names: list[str]) -> list[str]:
    """The parties whose persistent session the broker still keeps: a message on the control topic,
    which every party but the observer subscribes to, and one on the metrics topics, which the
    observer subscribes to, are queued for each such session and delivered when its client id
    connects again. A party that finished must have ended its session (bus.end_session)."""
    from privbandit.services import codec
    from privbandit.services.bus import BusSettings, connect, topic

    settings = BusSettings(broker_url=url, run_id=run_id, connect_timeout_s=10)
    async with connect(settings, f"{run_id}-probe", []) as bus:
        await bus.publish(topic(run_id, "control"), codec.ControlMsg(run=run_id, action="resync", task=0))
        await bus.publish(topic(run_id, "metrics", "probe"), codec.StatusMsg(run=run_id, party="probe", state="ready"))

    async def kept(name: str) -> bool:
        async with connect(settings, f"{run_id}-{name}", []) as bus:
            try:
                async with asyncio.timeout(1.5):
                    async for _ in bus.messages():
                        return True
            except TimeoutError:
                return False

    found = await asyncio.gather(*(kept(n) for n in names))
    return [n for n, k in zip(names, found) if k]


@pytest.mark.slow_e2e
def test_killing_and_restarting_the_broker_mid_run(tmp_path, reference):
    """Mosquitto is SIGKILLed twice mid-run and started again from what it had saved. Every party
    loses messages it sent or was sent; the outboxes and the protocol's retries make the run
    complete with the in-process numbers."""
    path, inproc = reference
    family, config = experiment_files.load(path)
    out, run_id = tmp_path / "mqtt", "b" + secrets.token_hex(4)
    broker = private_mosquitto(tmp_path / "broker")
    parties = plan_parties(family, config, path, [], out, broker.url, run_id, 2, None,
                           observer_log=tmp_path / "observer.log")
    try:
        for p in parties:
            p.start()
        end, rounds = time.monotonic() + 90, 3
        for _ in range(2):
            while _progress(out, "analyzer") < (0, rounds):
                assert parties[0].proc.poll() is None and time.monotonic() < end, f"never reached round {rounds}"
                time.sleep(POLL_S)
            broker.kill()  # SIGKILL: what it had not saved (up to 2 s of traffic) is gone
            time.sleep(0.5)  # every party notices and retries meanwhile
            assert parties[0].proc.poll() is None
            broker.start()
            rounds = _progress(out, "analyzer")[1] + 6  # the next kill waits for the session to move again
        assert _wait(parties, timeout=120) == 0, (tmp_path / "observer.log").read_text()[-3000:]
        assert asyncio.run(_sessions_left(broker.url, run_id, [p.name for p in parties])) == []
    finally:
        for p in parties:
            p.stop()
        broker.stop()
    assert_same_numbers(inproc, out)
    for name in ("analyzer", "aggregator"):  # the session moved between the kills: both hit them
        assert (out / "logs" / f"{name}.log").read_text().count("lost the broker") >= 2, name


def test_killing_and_restarting_the_observer_mid_run(tmp_path, mosquitto_url):
    """The observer checkpoints at task boundaries; restarted, it resumes the same session,
    announces the running task again and asks the parties to resend its metrics (resync)."""
    path = _experiment(tmp_path, horizon=50_000, runs=2, extra="")
    _inproc(path, tmp_path / "inproc")
    parties, out = _launch_parties(tmp_path, path, mosquitto_url, "o")
    observer = parties[0]
    try:
        end = time.monotonic() + 60
        while _progress(out, "observer")[0] < 1:  # task 1 started: task 0's results are in the checkpoint
            assert observer.proc.poll() is None and time.monotonic() < end
            time.sleep(POLL_S)
        observer.proc.kill()
        observer.proc.wait()
        observer.start()
    finally:
        _finish(tmp_path, parties)
    assert_same_numbers(tmp_path / "inproc", out)
    assert "resumed the session at task 1" in (tmp_path / "observer.log").read_text()


class _RecordingBus:
    """Stands in for the bus in a unit test of one party's timers: records what it publishes."""

    def __init__(self):
        self.sent, self.lost, self.traffic = [], None, None

    async def publish(self, topic_name, msg):
        self.sent.append((topic_name, msg))


async def _intermediary(role: str = "aggregator", label: str = "Dist-DP-SE"):
    """An intermediary service of run r1 on a recording bus, running task 0 (one run)."""
    from privbandit.services.bus import BusSettings
    from privbandit.services.intermediary import IntermediaryService

    svc = IntermediaryService(BusSettings(run_id="r1"), report_key=1, role=role)
    svc.bus, svc.task_spec = _RecordingBus(), {"index": 0, "runs": [0], "label": label}
    await svc.on_task(svc.task_spec)
    return svc


@pytest.mark.asyncio
async def test_an_intermediary_asks_for_a_round_again_until_it_completes():
    """A fleet whose broker session was lost with the broker misses a resend request sent before
    it resubscribed: the intermediary asks again every RESEND_S while the round stays open, and
    stops once it is released."""
    import numpy as np

    from privbandit.protocol.spine.events import Round
    from privbandit.services import codec
    from privbandit.services.intermediary import RESEND_S

    svc = await _intermediary()
    for rid in (20, 21):
        svc.box.open(Round(rid, "aggregator", "sum", expected=3, m=16))
        svc.opened[rid] = time.monotonic()

    def resends():
        return [m.round for _, m in svc.bus.sent if isinstance(m, codec.ResendMsg)]

    await svc.ask_again(20)
    await svc.tick()
    assert resends() == [20]  # not yet due
    svc.asked[20] -= RESEND_S + 0.1
    await svc.tick()
    assert resends() == [20, 20]
    await svc.publish_release(20, codec.ReleaseMsg(run="r1", task=0, round=20, n_reports=3,
                                                   values=np.array([[5]], dtype=np.int64)))
    for rid in (20, 21):  # however long it waits, neither is asked for again
        svc.opened[rid] = time.monotonic()
    svc.asked = {r: at - RESEND_S - 0.1 for r, at in svc.asked.items()}
    await svc.tick()
    assert resends() == [20, 20] and 20 not in svc.asked  # round 21 was never asked for: left alone


@pytest.mark.asyncio
async def test_a_round_whose_reports_are_arriving_is_not_asked_for_again(monkeypatch):
    """The analyzer announces a plan again after 3 s without a release; a round of 2^25 users takes
    longer than that to arrive. Asking the fleets again then made them send the whole plan twice
    (at T = 10⁸: 33 M late copies, +50 % report traffic). A re-announced plan makes the party ask
    only for a round that has been idle for IDLE_S."""
    import numpy as np

    from privbandit.protocol.primitives.report_auth import ReportAuthenticator
    from privbandit.protocol.spine.events import Join, Plan, Round
    from privbandit.services import codec
    from privbandit.services.intermediary import IDLE_S

    from privbandit.protocol.spine.events import Reports
    from privbandit.services import intermediary
    from privbandit.services.users import reports_message

    monkeypatch.setattr(intermediary, "USER_BLOCK", 4)  # the plan's 8 users in two blocks, as a big plan's are
    svc = await _intermediary()
    plan = Plan(4, 0, 8, opens=(Round(4, "aggregator", "sum", expected=8, m=16),), joins=(Join(4, 0, 8, 8),))

    def resends():
        return [m.round for _, m in svc.bus.sent if isinstance(m, codec.ResendMsg)]

    await svc.open_plan(plan)
    svc.opened[4] -= 10  # opened long ago ...
    values = np.ones((1, 4, 1), np.int64)
    first = Reports(4, 4, np.arange(4), values)  # block 0, as its fleet sends it
    await svc.collect(reports_message(ReportAuthenticator(1), "r1", 0, plan, plan.opens[0], 0, first))
    assert svc.box.rounds[4].received == 4, dict(svc.rejected)  # ... but its reports are arriving
    await svc.open_plan(plan)  # the analyzer's re-announcement
    assert resends() == []
    svc.moved[4] -= IDLE_S + 0.1  # then nothing for IDLE_S ...
    forged = codec.ReportsMsg(run="r1", task=0, round=4, plan=4, user_ids=np.arange(4, 8, dtype="<u4"),
                              values=values.astype("<u1"), tags=np.zeros(4, "<u4"), block=1, block_tag=bytes(28))
    await svc.collect(forged)  # ... but refused junk, which must not keep the round looking alive
    assert svc.rejected["bad-block-tag"] == 4 and svc.box.rounds[4].received == 4
    await svc.open_plan(plan)
    assert resends() == [4]


@pytest.mark.asyncio
async def test_late_answers_to_a_request_are_told_apart_from_replays():
    """A fleet answers a request with every round of the plan, so copies arrive after their round
    closed: counted as ``late-resend``, not as ``round-closed``, the refusal a replay of another
    plan's reports gets (an honest run under load once showed 18 "refusals" this way)."""
    import numpy as np

    from privbandit.protocol.primitives.report_auth import ReportAuthenticator
    from privbandit.protocol.spine.events import Join, Plan, Reports, Round
    from privbandit.services import codec
    from privbandit.services.users import reports_message

    svc = await _intermediary()
    plans = {pid: Plan(pid, 0, 3, opens=(Round(pid, "aggregator", "sum", expected=3, m=16),),
                       joins=(Join(pid, 0, 3, 3),)) for pid in (1, 2)}
    for plan in plans.values():
        await svc.open_plan(plan)
    await svc.ask_again(1)
    for rid in (1, 2):
        await svc.publish_release(rid, codec.ReleaseMsg(run="r1", task=0, round=rid, n_reports=3,
                                                        values=np.array([[5]], dtype=np.int64)))

    def late(rid: int, tagged: bool = True) -> codec.ReportsMsg:
        """Plan rid's block 0 as its fleet sends it (every record MAC'd, the block tag), or forged
        without any tag."""
        values = np.ones((1, 3, 1), np.int64)
        if tagged:
            return reports_message(ReportAuthenticator(1), "r1", 0, plans[rid], plans[rid].opens[0], 0,
                                   Reports(rid, rid, np.arange(3), values))
        return codec.ReportsMsg(run="r1", task=0, round=rid, plan=rid, user_ids=np.arange(3, dtype="<u4"),
                                values=values.astype("<u4"))

    await svc.collect(late(1))
    await svc.collect(late(2))
    assert {k: n for k, n in svc.rejected.items() if n} == {"late-resend": 3, "round-closed": 3}
    # A forged copy is refused for what it is, after the release as before it: not as a late copy.
    await svc.collect(late(2, tagged=False))
    assert {k: n for k, n in svc.rejected.items() if n} == {"late-resend": 3, "round-closed": 3, "missing-tag": 3}
    # So is a forged "block complete" marker (#20 item 3), whoever won the race to the round (no tag:
    # missing-tag; a wrong one: bad-block-tag); a genuine late one is a late copy.
    auth = ReportAuthenticator(1)
    marker = codec.ReportsMsg(run="r1", task=0, round=2, plan=2, user_ids=np.zeros(0, "<u4"),
                              values=np.zeros((1, 0, 1), "<u4"), block=0)
    genuine = auth.nonce_mac("block", "r1", 0, 2, 2, 0, payload=codec.encode(marker))
    for tag in (b"", bytes(28), genuine):
        await svc.collect(marker.model_copy(update={"block_tag": tag}))
    assert {k: n for k, n in svc.rejected.items() if n} == {"late-resend": 3, "round-closed": 4, "missing-tag": 4,
                                                             "bad-block-tag": 1}


@pytest.mark.asyncio
async def test_a_restarted_intermediary_asks_again_for_a_round_whose_plan_is_announced_again():
    """After a restart, the re-announced plans and the fleets' queued reports interleave: a round
    can open after the first release has ended recovery, though its reports went to the party that
    died. The analyzer, waiting in vain, announces its plan again; that must make the intermediary
    ask the fleets for it (the session otherwise stalls for good)."""
    import numpy as np

    from privbandit.protocol.spine.events import Join, Plan, Round
    from privbandit.services import codec
    from privbandit.services.intermediary import IDLE_S

    svc = await _intermediary("shuffler", "Dist-RDP-shuffled")
    svc.recovering = True  # as after a restart from a checkpoint

    def plan(pid: int, rid: int) -> Plan:
        return Plan(pid, 4 * pid, 3, opens=(Round(rid, "shuffler", "shuffle", expected=3, m=16),),
                    joins=(Join(rid, 4 * pid, 3, 3),))

    def resends():
        return [m.round for _, m in svc.bus.sent if isinstance(m, codec.ResendMsg)]

    await svc.open_plan(plan(3, 3))
    assert resends() == [3]  # opened while recovering: its reports may be lost
    await svc.publish_release(3, codec.ReleaseMsg(run="r1", task=0, round=3, n_reports=3,
                                                  values=np.array([[[1], [2], [3]]], dtype=np.int64)))
    await svc.open_plan(plan(6, 6))  # after the first release: it cannot tell this is a re-announcement
    await svc.open_plan(plan(7, 7))
    assert resends() == [3]
    svc.opened = {r: at - IDLE_S - 0.1 for r, at in svc.opened.items()}  # no report came for IDLE_S
    await svc.open_plan(plan(6, 6))  # announced again: the analyzer is still waiting for round 6
    assert resends() == [3, 6]
    await svc.open_plan(plan(6, 6))  # already asked: the timer repeats it (every RESEND_S), not each plan
    assert resends() == [3, 6]


@pytest.mark.asyncio
async def test_late_copies_of_the_last_tasks_plans_asked_again_are_not_counted_as_wrong_task():
    """An analyzer that re-announced its plans under load gets them served again; the copies can
    arrive after the next task started. Those of plans this party asked for again, with valid MACs,
    are ``late-resend`` as within a task; another plan's, or a forged copy, are refused as before."""
    import numpy as np

    from privbandit.protocol.primitives.report_auth import ReportAuthenticator
    from privbandit.protocol.spine.events import Join, Plan, Reports, Round
    from privbandit.services import codec
    from privbandit.services.users import reports_message

    svc = await _intermediary()
    plans = {pid: Plan(pid, 0, 3, opens=(Round(pid, "aggregator", "sum", expected=3, m=16),),
                       joins=(Join(pid, 0, 3, 3),)) for pid in (1, 2)}
    for plan in plans.values():
        await svc.open_plan(plan)
    await svc.ask_again(1)
    svc.task_spec = {"index": 1, "runs": [0], "label": "Dist-DP-SE"}
    await svc.on_task(svc.task_spec)  # task 1 starts; task 0's copies are still on their way

    def late(rid: int, tagged: bool = True) -> codec.ReportsMsg:
        """Plan rid's block 0 as its fleet sends it (every record MAC'd, the block tag), or forged
        without any tag."""
        values = np.ones((1, 3, 1), np.int64)
        if tagged:
            return reports_message(ReportAuthenticator(1), "r1", 0, plans[rid], plans[rid].opens[0], 0,
                                   Reports(rid, rid, np.arange(3), values))
        return codec.ReportsMsg(run="r1", task=0, round=rid, plan=rid, user_ids=np.arange(3, dtype="<u4"),
                                values=values.astype("<u4"))

    await svc.on_message("pb/r1/report/aggregator", late(1))
    assert {k: n for k, n in svc.rejected.items() if n} == {"late-resend": 3}
    await svc.on_message("pb/r1/report/aggregator", late(1, tagged=False))  # forged: refused for that
    await svc.on_message("pb/r1/report/aggregator", late(2))  # never asked for: a replay
    assert {k: n for k, n in svc.rejected.items() if n} == {"late-resend": 3, "missing-tag": 3, "wrong-task": 1}
    assert not svc.box.rounds  # nothing of task 0 reached task 1's rounds
