"""Shuffle-model linear bandits end to end through the generic services: analyzer, aggregator,
shuffler, two user fleets and the observer as separate processes over the real Mosquitto, against
the in-process engine (which steps the runs stacked) under the same seed: the same bytes."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import aiomqtt

from privbandit.runner import config as experiment_files, run_file
from privbandit.services.hostile import malformed_variants
from privbandit.services.launcher import plan_parties
from tests.services.test_distributed import refusals

# Every algorithm of the family. K = 10, d = 3; T = 24 leaves SDP a trailing partial batch of 4
# users (served, never aggregated); LinUCB, JDP and LDP plan one user at a time.
EXPERIMENT = """
family = "shuffle-linear-bandits"
name = "linear-e2e"
horizon = {horizon}
seed = 23
epsilon = 1
delta = 0.1
runs = {runs}
checkpoints = 8
[environment]
arms = 10
dim = 3
[algorithms.LinUCB-SDP-Vec]
batch = 10
[algorithms.LinUCB-SDP-Amp]
batch = 10
{extra}"""
PER_ROUND = "[algorithms.LinUCB]\n[algorithms.LinUCB-JDP]\n[algorithms.LinUCB-LDP]\n"


def _experiment(tmp_path: Path, horizon: int = 24, runs: int = 2, extra: str = PER_ROUND) -> Path:
    path = tmp_path / "linear.toml"
    path.write_text(EXPERIMENT.format(horizon=horizon, runs=runs, extra=extra))
    return path


def assert_same_bytes(inproc: Path, mqtt: Path) -> dict:
    a = json.loads((inproc / "summary.json").read_text())
    b = json.loads((mqtt / "summary.json").read_text())
    assert (a["transport"], b["transport"]) == ("inproc", "mqtt")
    assert a["algorithms"].keys() == b["algorithms"].keys()
    for label, alg in a["algorithms"].items():
        assert {k: v for k, v in b["algorithms"][label].items() if k != "users_per_s"} == \
               {k: v for k, v in alg.items() if k != "users_per_s"}, label
        assert b["privacy"][label] == a["privacy"][label], label
        for key in ("bits_per_user_protocol", "bits_per_user_protocol_max", "reports_per_run"):
            assert b["communication"][label][key] == a["communication"][label][key], (label, key)
    # Regret at every checkpoint, and every diagnostic batch's λ_min, θ̂ error and decoding error.
    assert (mqtt / "curves.csv").read_bytes() == (inproc / "curves.csv").read_bytes()
    assert (mqtt / "rounds.csv").read_bytes() == (inproc / "rounds.csv").read_bytes()
    return b


def test_every_algorithm_over_mqtt_equals_the_inproc_run(tmp_path):
    """``privbandit run FILE --transport mqtt``, as a user runs it (the embedded broker, every role on
    its own account under the generated ACLs), against the in-process run (``privbandit run FILE``'s
    :func:`~privbandit.runner.run_file`, runs stacked): the same bytes."""
    # and JDP with the authors' reused draws (issue #31 item 2): the analyzer's own draws, over MQTT too
    path = _experiment(tmp_path, extra=PER_ROUND + '[algorithms.JDP-reused]\nalgorithm = "linucb-jdp"\n'
                                                    'tree_noise = "authors-reused"\n')
    family, config = experiment_files.load(path)
    assert family.intermediaries(config) == ["aggregator", "shuffler"]
    run_file(path, out=tmp_path / "inproc")
    done = subprocess.run([sys.executable, "-m", "privbandit", "run", str(path), "--out", str(tmp_path / "mqtt"),
                           "--transport", "mqtt"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    b = assert_same_bytes(tmp_path / "inproc", tmp_path / "mqtt")
    guarantees = {label: p["guarantee"] for label, p in b["privacy"].items()}
    assert guarantees == {"LinUCB-SDP-Vec": "none proven", "LinUCB-SDP-Amp": "proven", "LinUCB": "non-private",
                          "LinUCB-JDP": "proven", "LinUCB-LDP": "proven", "JDP-reused": "none proven"}
    for label in b["algorithms"]:
        comm = b["communication"][label]
        assert comm["roles"]["analyzer"].get("payload.received.report", 0) == 0  # never sees a report
        assert comm["roles"]["users"]["payload.sent.report"] > 0
    assert refusals(b) == {} and b["parties_missing_stats"] == []
    rows = (tmp_path / "mqtt" / "rounds.csv").read_text().splitlines()
    assert len(rows) > 2 * 5  # diagnostic batches of every algorithm and run

def _attack(url: str, run_id: str, running, done: dict) -> None:
    """A hostile anonymous client (the system broker has no ACLs): for every plan it reads, reports
    under the invited users' ids with forged MACs and with none, at the round's intermediary; and
    garbage on every topic the parties read, over and over while ``running()`` holds."""
    import numpy as np

    from privbandit.services import codec

    async def go():
        host, port = url.removeprefix("mqtt://").split(":")
        t = f"pb/{run_id}"
        junk = malformed_variants(run_id)
        done.update(plans=0, junk=0)
        rng = np.random.default_rng(0)
        async with aiomqtt.Client(host, int(port)) as c:
            await c.subscribe(f"{t}/plan", qos=1)

            async def spray():
                while running():
                    for topic in (f"{t}/report/shuffler", f"{t}/report/aggregator", f"{t}/plan",
                                  f"{t}/release/shuffler", f"{t}/metrics/users-0"):
                        for v in junk:
                            await c.publish(topic, v, qos=1)
                    done["junk"] += 1
                    await asyncio.sleep(0.3)

            async def forge():
                async for message in c.messages:
                    try:
                        plan = codec.decode(message.payload)
                    except codec.DecodeError:
                        continue
                    if not isinstance(plan, codec.PlanMsg) or not plan.opens:
                        continue
                    rnd, join = plan.opens[0], plan.joins[0]
                    ids = np.arange(join.first, join.first + join.count, dtype="<u4")
                    values = codec.packed(np.zeros((1, ids.size, rnd.width), np.int64 if rnd.integer else np.float64),
                                          rnd.m, rnd.high, rnd.integer)
                    base = codec.ReportsMsg(run=run_id, task=plan.task, round=rnd.id, plan=plan.plan, user_ids=ids,
                                            values=values)
                    tags = rng.integers(0, 2**32, ids.size, dtype=np.uint64).astype("<u4")
                    forged = base.model_copy(update={"tags": tags})
                    for msg in (forged, base):
                        await c.publish(f"{t}/report/{rnd.intermediary}", codec.encode(msg), qos=1)
                    done["plans"] += 1

            forger = asyncio.create_task(forge())
            await spray()
            forger.cancel()

    asyncio.run(go())


def test_forged_reports_junk_and_killed_parties_change_nothing(tmp_path, mosquitto_url):
    """What the generic services give this family: report MACs (forged and untagged reports under
    invited users' ids are refused, the users' own counted), hardened decoders, a fleet that is
    SIGKILLed mid-run and restarted serves again what it missed, drawing the same noise blocks, and an
    analyzer SIGKILLed mid-run resumes from its checkpoint (its logic replays the releases)."""
    import threading

    path = _experiment(tmp_path, horizon=700, runs=1, extra="[algorithms.LinUCB-LDP]\nbatch = 10\n")
    run_file(path, out=tmp_path / "inproc")
    family, config = experiment_files.load(path)
    out = tmp_path / "mqtt"
    run_id = "l" + secrets.token_hex(4)
    parties = plan_parties(family, config, path, [], out, mosquitto_url, run_id, 2, None,
                           observer_log=tmp_path / "observer.log")
    assert [p.name for p in parties] == ["observer", "analyzer", "aggregator", "shuffler", "users-0", "users-1"]
    running = lambda: parties[0].proc.poll() is None  # noqa: E731
    attacked = {}
    try:
        for p in parties:
            p.start()
        attacker = threading.Thread(target=_attack, args=(mosquitto_url, run_id, running, attacked), daemon=True)
        attacker.start()
        fleet = next(p for p in parties if p.name == "users-0")  # hosts noise block 0: every batch here (B = 10)
        end = time.monotonic() + 90
        while attacked.get("plans", 0) == 0 and not (out / "state" / "analyzer").exists():
            assert time.monotonic() < end and running(), "the session never got under way"
            time.sleep(0.1)
        time.sleep(3.0)
        assert running(), "the run must still be going: make it longer"
        fleet.proc.kill()  # SIGKILL: no goodbye, work in flight is lost
        fleet.proc.wait()
        time.sleep(1.0)
        fleet.start()  # same client id: the broker kept its session and the plans it missed
        time.sleep(2.0)
        assert running(), "the run must still be going: make it longer"
        analyzer = next(p for p in parties if p.name == "analyzer")
        analyzer.proc.kill()  # it rebuilds itself from its checkpoint: the releases it consumed, replayed
        analyzer.proc.wait()
        time.sleep(0.5)
        analyzer.start()
        end = time.monotonic() + 240
        while running():
            assert time.monotonic() < end, "the distributed run did not finish"
            time.sleep(0.2)
        attacker.join(60)
        assert parties[0].proc.returncode == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    b = assert_same_bytes(tmp_path / "inproc", out)
    assert attacked["plans"] > 10 and attacked["junk"] >= 3, attacked
    rejected = b["rejected"]
    # Forged reports (guessed record tags, none at all) close no block under the fleets' key:
    # refused whole, before any record's MAC is computed.
    assert rejected.get("missing-tag", 0) > 0 and "bad-tag" not in rejected, str(rejected)
    for reason in ("not-msgpack", "not-a-map", "bad-version", "unknown-kind", "schema", "wrong-run"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)
