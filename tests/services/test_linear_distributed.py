"""Shuffle-model linear bandits end to end: analyzer, shuffler, two user fleets and the observer as
separate processes over the real Mosquitto, against the in-process engine under the same seed."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time

import aiomqtt
import msgpack
import numpy as np

from privbandit.experiment import linear_family as lf
from privbandit.services import codec
from privbandit.services.launcher import plan_parties

# K = 10, d = 3; B = 40 puts 25 batches in a noise block, so both fleets serve batches; T = 1210
# leaves a trailing partial batch of 10 users (served, never aggregated).
EXPERIMENT = """
family = "shuffle-linear-bandits"
name = "linear-e2e"
horizon = 1210
seed = 23
epsilon = 1
delta = 0.1
runs = 2
checkpoints = 60
[environment]
arms = 10
dim = 3
[algorithms.LinUCB-SDP-Vec]
batch = 40
[algorithms.LinUCB-SDP-Amp]
batch = 40
"""


def _publish_junk(url: str, run_id: str, running) -> int:
    """A hostile anonymous client (the system broker has no ACLs): malformed and near-miss linear
    messages on every topic the linear parties read, repeated while ``running()`` holds."""

    async def go():
        host, port = url.removeprefix("mqtt://").split(":")
        t = f"pb/{run_id}"
        reports = codec.LinearReportsMsg(run=run_id, task=0, round=0, width=2, user_ids=np.array([0, 1], "<u4"),
                                         values=np.array([1, 2, 3, 4], "|u1"))
        raw = msgpack.unpackb(codec.encode(reports))
        release = codec.LinearReleaseMsg(run=run_id, task=0, round=10**6, n_reports=40, width=9,
                                         values=np.zeros(9, "<i8"))
        plan = msgpack.unpackb(codec.encode(codec.LinearPlanMsg(
            run=run_id, task=0, round=0, first_user=0, cohort=40, collect=True, theta=np.zeros(3),
            v_inv=np.eye(3).reshape(-1), beta=1.0)))
        variants = {
            f"{t}/report/shuffler": [
                b"\xc1 junk", msgpack.packb([1]), msgpack.packb({**raw, "v": 7}), msgpack.packb({**raw, "width": 3}),
                codec.encode(reports),  # wrong width for d = 3: wrong-shape (or round-closed)
                codec.encode(reports.model_copy(update={"user_ids": np.array([10**6, 10**6 + 1], "<u4")})),
                codec.encode(reports.model_copy(update={"round": 10**6})),  # a batch that never comes
            ],
            f"{t}/plan": [msgpack.packb({**plan, "v_inv": {**plan["v_inv"], "shape": [4]}}),
                          msgpack.packb({**plan, "kind": "nope"})],
            f"{t}/release/shuffler": [codec.encode(release),  # a batch the analyzer never opened
                                      codec.encode(release.model_copy(update={"task": 10**6}))],
        }
        sent = 0
        async with aiomqtt.Client(host, int(port)) as c:
            while running() and sent < 200:
                for topic, payloads in variants.items():
                    for p in payloads:
                        await c.publish(topic, p, qos=1)
                sent += 1
                await asyncio.sleep(0.2)
        return sent

    return asyncio.run(go())


def _await_observer(parties, observer_log, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while parties[0].proc.poll() is None:
        assert time.monotonic() < end, "the distributed run did not finish"
        time.sleep(0.2)
    assert parties[0].proc.returncode == 0, observer_log.read_text()[-3000:]


def test_sdp_vec_and_amp_over_mosquitto_equal_the_inproc_run_despite_hostile_traffic(tmp_path, mosquitto_url):
    path = tmp_path / "linear.toml"
    path.write_text(EXPERIMENT)
    config = lf.load(path)
    lf.write(tmp_path / "inproc", config, lf.run(config, jobs=1))
    out = tmp_path / "mqtt"
    parties = plan_parties(config, path, [], out, mosquitto_url, "l" + secrets.token_hex(4), 2, None,
                           observer_log=tmp_path / "observer.log")
    assert [p.name for p in parties] == ["observer", "analyzer", "shuffler", "users-0", "users-1"]
    try:
        for p in parties:
            p.start()
        sent = _publish_junk(mosquitto_url, parties[0].env["PRIVBANDIT_RUN_ID"], lambda: parties[0].proc.poll() is None)
        _await_observer(parties, tmp_path / "observer.log", 240)
    finally:
        for p in parties:
            p.stop()
    assert sent >= 5, "the run ended before much junk was sent"
    a = json.loads((tmp_path / "inproc" / "summary.json").read_text())
    b = json.loads((out / "summary.json").read_text())
    assert (a["transport"], b["transport"]) == ("inproc", "mqtt")
    for label, alg in a["algorithms"].items():
        assert {k: v for k, v in b["algorithms"][label].items() if k != "users_per_s"} == \
               {k: v for k, v in alg.items() if k != "users_per_s"}, label
        assert b["privacy"][label] == a["privacy"][label]
        for key, value in a["communication"][label].items():
            if key != "bytes_per_user_wire":  # in-process: the count encoding's size; over MQTT: measured
                assert b["communication"][label][key] == value, (label, key)
    # Identical regret at every checkpoint and identical decoded batch sums, bit for bit.
    assert (out / "curves.csv").read_bytes() == (tmp_path / "inproc" / "curves.csv").read_bytes()
    assert (out / "rounds.csv").read_bytes() == (tmp_path / "inproc" / "rounds.csv").read_bytes()
    vec, amp = b["communication"]["LinUCB-SDP-Vec"], b["communication"]["LinUCB-SDP-Amp"]
    # A P_Vec record is an id (4 B) and 9 one-byte counts; P_Amp's is 9 float64 entries.
    # Plus the message envelope (~130 B) shared by the 40 records of a batch.
    assert 13 < vec["bytes_per_user_payload"] < 13 + 5 and 76 < amp["bytes_per_user_payload"] < 76 + 5
    for comm in (vec, amp):
        assert comm["roles"]["analyzer"].get("payload.received.report", 0) == 0  # never sees a report
        assert comm["roles"]["users"]["payload.sent.report"] > 0
    assert b["parties_missing_stats"] == []
    rejected = b["rejected"]
    for reason in ("not-msgpack", "not-a-map", "bad-version", "schema", "unknown-kind", "unknown-round",
                   "wrong-task", "wrong-round"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)
    # Batch 0 of task 0 is open only briefly: junk for it meets the shape or cohort check, or a closed batch.
    assert sum(rejected.get(r, 0) for r in ("wrong-shape", "not-in-cohort", "round-closed")) > 0, rejected


def test_transport_mqtt_refuses_the_per_round_baselines_by_name(tmp_path):
    path = tmp_path / "linear.toml"
    path.write_text(EXPERIMENT + "[algorithms.LinUCB-JDP]\n")
    proc = subprocess.run([sys.executable, "-m", "privbandit", "run", str(path), "--transport", "mqtt"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    message = " ".join(proc.stderr.split())  # rich wraps long lines
    assert "algorithms.LinUCB-JDP: --transport mqtt runs linucb-sdp-amp and linucb-sdp-vec only" in message


def test_killing_and_restarting_a_fleet_mid_run_changes_nothing(tmp_path, mosquitto_url):
    """SIGKILL the fleet hosting the current noise block: on restart it draws the block again,
    serves the batches it missed (the analyzer re-announces), and the numbers are the in-process ones."""
    path = tmp_path / "linear.toml"
    path.write_text(EXPERIMENT.replace("horizon = 1210", "horizon = 4000").replace("runs = 2", "runs = 1")
                    .replace("[algorithms.LinUCB-SDP-Amp]\nbatch = 40\n", ""))
    config = lf.load(path)
    lf.write(tmp_path / "inproc", config, lf.run(config, jobs=1))
    out = tmp_path / "mqtt"
    parties = plan_parties(config, path, [], out, mosquitto_url, "k" + secrets.token_hex(4), 2, None,
                           observer_log=tmp_path / "observer.log")
    fleet = next(p for p in parties if p.name == "users-0")  # hosts noise block 0: batches 0–11
    fleet.env["PRIVBANDIT_LOG_LEVEL"] = "DEBUG"  # it logs each batch it serves
    log = out / "logs" / "users-0.log"
    try:
        for p in parties:
            p.start()
        end = time.monotonic() + 60
        while "serving batch" not in (log.read_text(errors="replace") if log.exists() else ""):
            assert time.monotonic() < end and parties[0].proc.poll() is None, "the session never got under way"
            time.sleep(0.05)
        time.sleep(0.2)
        assert parties[0].proc.poll() is None, "the run must still be going"
        fleet.proc.kill()
        fleet.proc.wait()
        time.sleep(1.0)
        fleet.start()  # same client id: the broker kept its session and the plans it missed
        _await_observer(parties, tmp_path / "observer.log", 180)
    finally:
        for p in parties:
            p.stop()
    assert (out / "curves.csv").read_bytes() == (tmp_path / "inproc" / "curves.csv").read_bytes()
    assert (out / "rounds.csv").read_bytes() == (tmp_path / "inproc" / "rounds.csv").read_bytes()
