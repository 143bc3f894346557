"""Issue #20: one bad message must never crash, stall or falsify a run.

Each test runs a real session (every party its own OS process) on the embedded broker with the
generated ACLs, and attacks it with a real MQTT client holding only the shared ``users`` account,
as the threat model allows. The session must end as the honest in-process run does, with the
attack counted by reason in ``summary.json``; or, where the attack can only stop the run, fail
loudly, naming what failed, within a deadline."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import aiomqtt
import msgpack
import numpy as np
import pytest

from privbandit.protocol.primitives.report_auth import NONCE_MAC_BYTES
from privbandit.runner.config import load
from privbandit.services import codec
from privbandit.services.bus import topic
from privbandit.services.launcher import launch
from tests.services.test_distributed import _experiment, _inproc, assert_same_numbers

HORIZON = 30_000
PAUSED_HORIZON = 50_000  # the paused sessions': long enough that the pause falls mid-run


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """``honest(horizon)``: the honest in-process results (one run) that a session here must
    reproduce, computed once per horizon for the whole module; the tests only read them."""
    made = {}

    def at(horizon: int) -> Path:
        if horizon not in made:
            tmp = tmp_path_factory.mktemp(f"honest-{horizon}")
            _inproc(_experiment(tmp, horizon=horizon, runs=1, extra=""), tmp / "inproc")
            made[horizon] = tmp / "inproc"
        return made[horizon]

    return at


class Attacker:
    """A hostile client with the users' account, started next to the parties (``launch``'s
    ``started`` hook). ``on_plan(plan) -> [(topic parts, payload)]`` answers each plan it reads;
    ``on_shutdown() -> [...]`` runs when the observer asks everyone to shut down."""

    def __init__(self, on_plan=None, on_shutdown=None):
        self.on_plan = on_plan or (lambda plan: [])
        self.on_shutdown = on_shutdown or (lambda: [])
        self.sent = 0
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def __call__(self, parties) -> None:
        env = next(p.env for p in parties if p.name.startswith("users-"))
        self.run_id = env["PRIVBANDIT_RUN_ID"]
        self.thread = threading.Thread(target=self._main, args=(env,), daemon=True)
        self.thread.start()

    def _main(self, env) -> None:
        try:
            asyncio.run(self._attack(env))
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            self.error = exc

    async def _attack(self, env) -> None:
        host, port = env["PRIVBANDIT_BROKER_URL"].removeprefix("mqtt://").split(":")
        run = self.run_id
        async with aiomqtt.Client(host, int(port), username=env.get("PRIVBANDIT_USERNAME"),
                                  password=env.get("PRIVBANDIT_PASSWORD"), identifier=f"hostile-{run}") as c:  # not a party's id (those are bound to roles)
            await c.subscribe([(topic(run, "plan"), 1), (topic(run, "control"), 1)])
            seen = set()
            async for message in c.messages:
                try:
                    msg = codec.decode(bytes(message.payload))
                except codec.DecodeError:
                    continue
                out = []
                if isinstance(msg, codec.PlanMsg) and (msg.task, msg.plan) not in seen:
                    seen.add((msg.task, msg.plan))
                    out = self.on_plan(msg)
                elif isinstance(msg, codec.ControlMsg) and msg.action == "shutdown":
                    out = self.on_shutdown()
                for parts, payload in out:
                    await c.publish(topic(run, *parts), payload, qos=1)
                    self.sent += 1
                if isinstance(msg, codec.ControlMsg) and msg.action == "shutdown":
                    return


def run_attacked(tmp_path: Path, attacker: Attacker, horizon: int = HORIZON, extra: str = "",
                 timeout_s: float = 60, broker_url: str | None = None) -> tuple[int, Path]:
    """A session on the embedded broker with the generated ACLs, or on ``broker_url`` (anonymous:
    the attacker may then write any topic, as a compromised party could)."""
    path = _experiment(tmp_path, horizon=horizon, runs=1, extra=extra)
    family, config = load(path)
    out = tmp_path / "mqtt"
    code = launch(family, config, path, [], out, broker_url=broker_url, shards=2, timeout_s=timeout_s,
                  started=attacker, insecure_broker=broker_url is not None)  # anonymous on purpose: the probe would refuse it
    attacker.thread.join(10)
    assert attacker.error is None, attacker.error
    return code, out


def rejected(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())["rejected"]


def observer_log(out: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "logs").glob("*.log")))


def _raw_reports(run: str, plan: codec.PlanMsg, ids: np.ndarray, values: np.ndarray, **extra) -> bytes:
    """A reports message for the plan's first join, built as raw msgpack: the codec's own
    validation is what the test exercises, so the attacker must not be held to it."""
    join = plan.joins[0]
    arr = lambda a: {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.tobytes()}  # noqa: E731
    return msgpack.packb({"v": codec.WIRE_VERSION, "run": run, "kind": "reports", "task": plan.task,
                          "round": join.round, "plan": plan.plan, "user_ids": arr(ids), "values": arr(values),
                          **{k: arr(v) if isinstance(v, np.ndarray) else v for k, v in extra.items()}},
                         use_bin_type=True)


def test_item1_reports_whose_arrays_disagree_never_crash_an_intermediary(tmp_path, honest):
    """#20 item 1: user_ids and values (and tags) of different lengths, for a joined round of the
    running plan, from inside and outside the cohort. The codec refuses each (``schema``); the
    aggregator lives on and the result is the honest one."""

    def on_plan(plan):
        if not plan.joins:
            return []
        j = plan.joins[0]
        box = next((r.intermediary for r in plan.opens if r.id == j.round), "aggregator")
        ids = np.arange(j.first, j.first + 8, dtype="<u4")
        return [(("report", box), p) for p in (
            _raw_reports(attacker.run_id, plan, ids, np.ones((1, 5, 1), "<u4")),  # values shorter
            _raw_reports(attacker.run_id, plan, ids[:3], np.ones((1, 8, 1), "<u4")),  # values longer
            _raw_reports(attacker.run_id, plan, ids, np.ones((1, 8, 1), "<u4"),
                         tags=np.ones(3, "<u4"), block=0, block_tag=bytes(NONCE_MAC_BYTES)),  # tags shorter
            _raw_reports(attacker.run_id, plan, ids, np.ones((2, 8, 1), "<u4")),  # two runs of one
        )]

    attacker = Attacker(on_plan)
    code, out = run_attacked(tmp_path, attacker)
    assert code == 0, observer_log(out)
    assert attacker.sent >= 8
    assert_same_numbers(honest(HORIZON), out)
    got = rejected(out)
    # Three of every four disagree within the message (the codec); the fourth's runs axis
    # disagrees with the task's, but it closes no block under the fleets' key, so it is refused
    # whole (missing-tag) before its shape is looked at (a key holder's is refused as wrong-shape:
    # tests/protocol). The last few may still be in flight when the session ends; none may reach
    # a party's logic.
    assert 0 < got.get("schema", 0) <= attacker.sent * 3 // 4, got
    assert got.get("missing-tag", 0) > 0, got
    assert set(got) <= {"schema", "wrong-shape", "round-closed", "missing-tag", "not-in-cohort", "late-resend"}, got
    # Item 10: refusals are counted, and logged as rate-limited summaries (one line per reason per
    # REJECT_LOG_S, with the count so far), not one line each.
    lines = (out / "logs" / "aggregator.log").read_text().count("refused a message")
    assert 0 < lines <= 3 * len(got) and lines < attacker.sent // 10, (lines, got)


def test_item2_forged_metrics_from_the_users_account_are_refused(tmp_path, honest):
    """#20 item 2: with the users' account, on the metrics topics it may write (``metrics/users-0``)
    and the one it may not (``metrics/analyzer``): an error status in the analyzer's name and in a
    fleet's, counters that are not integers, truths for a block that does not exist and a forged
    truth of a real block, and, after the genuine ones, a fleet's final counters full of junk keys.
    Nothing of it reaches the results: the session ends as the honest run does, each refused."""
    run = lambda: attacker.run_id  # noqa: E731

    def status(party, state, **body):
        return codec.encode(codec.StatusMsg(run=run(), party=party, state=state, task=0, body=body))

    def truth(plan, block, first, size, pseudo):
        return codec.encode(codec.TruthMsg(
            run=run(), task=plan.task, plan=plan.plan, block=block, first_user=first, size=size,
            pseudo=np.array([pseudo]), realized=np.array([pseudo]), pseudo_at=np.zeros((1, 0)),
            realized_at=np.zeros((1, 0)), tag=bytes(16)))

    def on_plan(plan):
        if plan.plan != 0:
            return []
        fleet = ("metrics", "users-0")
        return [
            (("metrics", "analyzer"), status("analyzer", "error", reason="forged on the analyzer's topic")),
            (fleet, status("analyzer", "error", reason="forged: the analyzer's name on a fleet's topic")),
            (fleet, status("users-0", "error", reason="forged: a fleet's error")),
            (fleet, status("users-0", "stats", rejected={"x": "many"})),
            (fleet, truth(plan, 10**6, 10**9, 5, 1e9)),  # a block that does not exist
            (fleet, truth(plan, 0, plan.first_user, plan.cohort, -12345.0)),  # a real block, false
        ]

    def on_shutdown():  # after the genuine final counters, so that these would replace them
        junk = {f"junk-{i}": 10**9 for i in range(200)}
        return [(("metrics", "users-0"), status("users-0", "stats", rejected=junk))] * 3

    attacker = Attacker(on_plan, on_shutdown)
    code, out = run_attacked(tmp_path, attacker)
    assert code == 0, observer_log(out)
    assert_same_numbers(honest(HORIZON), out)
    got = rejected(out)
    assert not any(k.startswith("junk-") for k in got), got
    assert got.get("impersonated-status", 0) >= 1 and got.get("bad-truth-tag", 0) == 2, got
    # The error and the non-integer counters (the junk copies race the observer's end: it stops
    # reading once every party's genuine counters are in).
    assert got.get("bad-status-tag", 0) >= 2, got


def test_item3_forged_block_complete_markers_release_nothing_early(tmp_path, honest):
    """#20 item 3: for every plan, the moment it appears, "block complete" markers (reports with a
    block and no records) for every block of its cohort: with a guessed tag, with none, and for a
    block past the cohort. Accepted, they would declare every user that has not reported yet a
    dropout and release the round early over what came (or fail it below its threshold). Each is
    refused (``bad-block-tag`` with a tag, ``missing-tag`` without) and the result is the honest one."""
    none = np.zeros(0, "<u4")

    def on_plan(plan):
        out = []
        for j in plan.joins:
            box = next((r.intermediary for r in plan.opens if r.id == j.round), "aggregator")
            width = next((r.width for r in plan.opens if r.id == j.round), 1)
            blocks = -(-plan.cohort // 65_536)
            for block in range(blocks + 1):
                for tag in (bytes(NONCE_MAC_BYTES), b""):
                    payload = _raw_reports(attacker.run_id, plan, none, np.zeros((1, 0, width), "<u4"),
                                           block=block, block_tag=tag)
                    out.append((("report", box), msgpack.packb({**msgpack.unpackb(payload), "round": j.round})))
        return out

    attacker = Attacker(on_plan)
    code, out = run_attacked(tmp_path, attacker)
    assert code == 0, observer_log(out)
    assert attacker.sent >= 4
    assert_same_numbers(honest(HORIZON), out)
    got = rejected(out)
    # Refused as forgeries whether they beat the fleets' reports to the round or came after its
    # release (once, under load, every one came after); the last few may still be in flight when
    # the session ends. Nothing else may be counted.
    assert 0 < got.get("bad-block-tag", 0) <= attacker.sent // 2, got
    assert 0 < got.get("missing-tag", 0) <= attacker.sent // 2, got
    assert set(got) <= {"bad-block-tag", "missing-tag", "late-resend"}, got


def test_item5_a_malformed_release_leaves_its_round_open_for_the_genuine_one(tmp_path, honest, mosquitto_url):
    """#20 item 5: on an anonymous broker (a compromised intermediary could do the same), for
    every round the moment its plan appears, releases the round's rule cannot produce: NaN, a
    float for a residue, one out of Z_m, the wrong shape, an impossible report count, no values.
    Each is refused and counted; the round stays open and decodes the genuine release, so the
    result is the honest one."""

    def release(task, rnd, n, values):
        msg = codec.ReleaseMsg(run=attacker.run_id, task=task, round=rnd.id, n_reports=n,
                               values=np.zeros((1, 1), np.int64))
        raw = msgpack.unpackb(codec.encode(msg))
        if values is None:
            raw.pop("values")
        else:
            raw["values"] = {"dtype": values.dtype.str, "shape": list(values.shape), "data": values.tobytes()}
        return ("release", rnd.intermediary), msgpack.packb(raw, use_bin_type=True)

    def on_plan(plan):
        out = []
        for rnd in plan.opens:
            w, m, n = rnd.width, rnd.m or 2**31, rnd.expected
            out += [release(plan.task, rnd, n, np.full((1, w), np.nan)),
                    release(plan.task, rnd, n, np.full((1, w), 0.5)),
                    release(plan.task, rnd, n, np.full((1, w), m, np.int64)),
                    release(plan.task, rnd, n, np.zeros((1, w + 1), np.int64)),
                    release(plan.task, rnd, n + 1, np.zeros((1, w), np.int64)),
                    release(plan.task, rnd, n, None)]
        return out

    attacker = Attacker(on_plan)
    code, out = run_attacked(tmp_path, attacker, broker_url=mosquitto_url)
    assert code == 0, observer_log(out)
    assert attacker.sent >= 6
    assert_same_numbers(honest(HORIZON), out)
    got = rejected(out)
    for reason in ("out-of-range", "wrong-shape", "bad-report-count", "schema"):
        assert got.get(reason, 0) > 0, (reason, got)


# --- faults: a paused broker, a paused party ---------------------------------------------------

def _paused_mid_run(tmp_path, pause_s: float | None, victim: str, embedded: bool = False,
                    stall_s: float | None = None, finish_s: float = 45) -> tuple[list, Path, int]:
    """A session over a private Mosquitto, or the embedded broker (amqtt) with the ACLs; once the
    analyzer has released 3 rounds, SIGSTOP the broker (``victim="broker"``) or a party for
    ``pause_s`` (None: for good), then SIGCONT. ``stall_s``: the observer's ``--stall-timeout``.
    Returns the parties, the results directory and the observer's exit status."""
    import os
    import secrets
    import signal
    import time

    from privbandit.services.launcher import plan_parties
    from tests.services.test_faults import _progress, private_mosquitto

    path = _experiment(tmp_path, horizon=PAUSED_HORIZON, runs=1, extra="")
    family, config = load(path)
    run_id, passwords = "p" + secrets.token_hex(4), None
    if embedded:
        from privbandit.services.acl import Role
        from privbandit.services.embedded_broker import start_embedded_broker

        passwords = {r.value: secrets.token_urlsafe(16) for r in Role}
        broker = start_embedded_broker(run_id, passwords)
        broker.proc = broker.process
    else:
        broker = private_mosquitto(tmp_path / "broker")
    out = tmp_path / "mqtt"
    parties = plan_parties(family, config, path, [], out, broker.url, run_id, 2, passwords,
                           observer_log=tmp_path / "observer.log")
    if stall_s is not None:
        parties[0].argv += ["--stall-timeout", str(stall_s)]
    try:
        for p in parties:
            p.start()
        try:
            end = time.monotonic() + 60
            while _progress(out, "analyzer") < (0, 3):
                assert parties[0].proc.poll() is None and time.monotonic() < end, "never reached round 3"
                time.sleep(0.05)
            pid = broker.proc.pid if victim == "broker" else next(p.proc.pid for p in parties if p.name == victim)
            os.kill(pid, signal.SIGSTOP)
            if pause_s is not None:
                time.sleep(pause_s)
                os.kill(pid, signal.SIGCONT)
            crashed = [p.name for p in parties if p.proc.poll() not in (None, 0)]
            assert not crashed, f"{crashed} died during the pause:\n" + observer_log(out)
            end = time.monotonic() + finish_s
            while parties[0].proc.poll() is None:
                assert time.monotonic() < end, "the session neither finished nor failed:\n" + observer_log(out)
                time.sleep(0.2)
            code = parties[0].proc.returncode
            if code == 0:
                for p in parties[1:]:
                    p.proc.wait(30)
        finally:
            if pause_s is None:
                os.kill(pid, signal.SIGCONT)
            for p in parties:
                p.stop()
    finally:
        if embedded:
            (tmp_path / "broker.log").write_text(broker.stderr())
        broker.stop()
    return parties, out, code


@pytest.mark.slow_e2e
def test_item6_a_broker_paused_for_10_s_crashes_no_party(tmp_path, honest):
    """#20 item 6: SIGSTOP of Mosquitto for 10 s, past the 5-s publish timeout: every party's
    publishes time out and it drops the connection while its timers run on. None may crash; the
    session completes with the honest numbers."""
    parties, out, code = _paused_mid_run(tmp_path, 10, "broker")
    assert code == 0 and [p.proc.returncode for p in parties] == [0] * len(parties), observer_log(out)
    assert_same_numbers(honest(PAUSED_HORIZON), out)


@pytest.mark.slow_e2e
def test_item7_a_session_on_a_paused_embedded_broker_finishes_with_the_honest_numbers(tmp_path, honest):
    """#20 item 7: SIGSTOP of the embedded broker (amqtt) for 15 s. The parties reconnect while the
    paused broker still holds their old connections; amqtt took each persistent session over, then
    let the old connection's end mark the shared session disconnected, so it queued everything for
    that party as if it were away: a fleet connected, acknowledged and deaf for ever (measured: the
    session stalled, `no metrics … from users-0`). With the broker's fix the session finishes with
    the honest numbers; on the old broker it failed at the stall deadline."""
    parties, out, code = _paused_mid_run(tmp_path, 15, "broker", embedded=True, stall_s=25, finish_s=45)
    assert code == 0, (tmp_path / "observer.log").read_text()[-2000:]
    assert_same_numbers(honest(PAUSED_HORIZON), out)


@pytest.mark.slow_e2e
def test_item10_a_hung_analyzer_fails_the_session_loudly_within_the_stall_deadline(tmp_path):
    """#20 item 10 (liveness): the analyzer SIGSTOPped for good mid-run. The session fails at the
    observer's stall deadline, naming the task, the rounds recorded and the silent analyzer."""
    import time

    started = time.monotonic()
    parties, out, code = _paused_mid_run(tmp_path, None, "analyzer", stall_s=5, finish_s=30)
    assert code == 1
    text = (tmp_path / "observer.log").read_text()
    assert "the session failed: task 0 (Dist-DP-SE, run 0) made no progress for 5 s" in text, text[-2000:]
    assert "analyzer" in text.split("no metrics for as long from:")[1], text[-2000:]
    assert time.monotonic() - started < 40


def test_item10_run_over_mqtt_takes_a_timeout_and_fails_loudly_at_it(tmp_path):
    """#20 item 10: ``privbandit run --transport mqtt --timeout S`` stops every party and exits 1,
    naming the timeout, when the session has not ended in S seconds (here a T = 10⁶ session
    against 2 s); a timeout that is not positive is refused by name."""
    import subprocess
    import sys

    path = _experiment(tmp_path, horizon=1_000_000, runs=1, extra="")
    cmd = [sys.executable, "-m", "privbandit", "run", str(path), "--transport", "mqtt", "--out", str(tmp_path / "o")]
    proc = subprocess.run([*cmd, "--timeout", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "did not finish in 2 s" in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([*cmd, "--timeout", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--timeout 0.0: must be > 0 seconds" in proc.stderr, proc.stderr[-2000:]
