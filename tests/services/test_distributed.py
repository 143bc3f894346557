"""End to end: every party its own OS process, talking over a real MQTT broker."""

import asyncio
import csv
import json
import secrets
import signal
import subprocess
import time
from pathlib import Path

import aiomqtt

from privbandit.runner import config as experiment_files, run_file
from privbandit.services import codec
from privbandit.services.hostile import malformed_variants
from privbandit.services.launcher import launch, plan_parties

# The system Mosquitto (conftest.mosquitto_url) lets anyone read: the launcher's probe would refuse
# it (issue #21), and these tests are about the protocol, not the broker's ACL, so they opt out.
OPEN_BROKER = {"insecure_broker": True}

EXPERIMENT = """
name = "e2e"
horizon = {horizon}
seed = 17
epsilon = 0.5
runs = {runs}
[environment]
kind = "uniform"
[algorithms.Dist-DP-SE]
{extra}
"""
MORE = """
[algorithms.DP-SE]
[algorithms.LDP-SE]
[algorithms.Dist-RDP-shuffled]
algorithm = "dist-rdp-se"
intermediary = "shuffler-residues"
"""


def _experiment(tmp_path, horizon=30_000, runs=2, extra=MORE) -> Path:
    path = tmp_path / "e2e.toml"
    path.write_text(EXPERIMENT.format(horizon=horizon, runs=runs, extra=extra))
    return path


def _inproc(path: Path, out: Path) -> dict:
    return run_file(path, out=out).summary


def assert_same_numbers(inproc_dir: Path, mqtt_dir: Path) -> None:
    a = json.loads((inproc_dir / "summary.json").read_text())
    b = json.loads((mqtt_dir / "summary.json").read_text())
    assert b["transport"] == "mqtt" and a["transport"] == "inproc"
    for label, alg in a["algorithms"].items():
        for key, value in alg.items():
            if key != "users_per_s":
                assert b["algorithms"][label][key] == value, (label, key)
        assert b["privacy"][label] == a["privacy"][label]
        for key in ("bits_per_user_protocol", "bits_per_user_protocol_max", "reports_per_run"):
            assert b["communication"][label][key] == a["communication"][label][key]
    # Every decoded sum, wrap-around and regret checkpoint, bit for bit.
    assert (mqtt_dir / "rounds.csv").read_bytes() == (inproc_dir / "rounds.csv").read_bytes()
    assert (mqtt_dir / "curves.csv").read_bytes() == (inproc_dir / "curves.csv").read_bytes()


def refusals(summary: dict) -> dict:
    """What a session refused, but the late copies of reports an intermediary had asked for again
    (``late-resend``): on a loaded machine an honest run can provoke those, never any other."""
    return {reason: n for reason, n in summary["rejected"].items() if reason != "late-resend"}


def test_mqtt_run_reproduces_the_inproc_run_over_mosquitto(tmp_path, mosquitto_url):
    path = _experiment(tmp_path)
    _inproc(path, tmp_path / "inproc")
    family, config = experiment_files.load(path)
    code = launch(family, config, path, [], tmp_path / "mqtt", broker_url=mosquitto_url, shards=2, timeout_s=240,
                  **OPEN_BROKER)
    assert code == 0
    assert_same_numbers(tmp_path / "inproc", tmp_path / "mqtt")
    summary = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    assert summary["broker"] == {"acl": "insecure", "tls": False}  # the probe's verdict, recorded
    comm = summary["communication"]["Dist-DP-SE"]
    # Wire bytes per user within the budget: 2·(⌈log₂ m⌉/8) + 8.
    assert 0 < comm["bytes_per_user_wire"] <= 2 * comm["bits_per_user_protocol_max"] / 8 + 8
    assert comm["roles"]["analyzer"].get("payload.received.report", 0) == 0  # never sees a report
    assert refusals(summary) == {} and summary["parties_missing_stats"] == []


def _publish_junk(url: str, run_id: str, running) -> int:
    """A hostile client: garbage and near-miss messages on every topic the parties read, sent
    over and over while ``running()`` holds. Returns how many rounds of junk it sent."""

    async def go():
        host, port = url.removeprefix("mqtt://").split(":")
        async with aiomqtt.Client(host, int(port)) as c:
            t = f"pb/{run_id}"
            variants = malformed_variants(run_id)
            bad_controls = [  # valid envelopes whose task spec a party cannot act on
                codec.encode(codec.ControlMsg(run=run_id, action="task", task=7, body={"index": "seven"})),
                codec.encode(codec.ControlMsg(run=run_id, action="task", task=9, body={"index": 9})),
            ]
            sent = 0
            while running() and sent < 300:
                for topic in (f"{t}/report/aggregator", f"{t}/plan", f"{t}/release/aggregator", f"{t}/metrics/x"):
                    for v in variants:
                        await c.publish(topic, v, qos=1)
                for v in bad_controls:
                    await c.publish(f"{t}/control", v, qos=1)
                sent += 1
                await asyncio.sleep(0.2)
            return sent

    return asyncio.run(go())


def _start(tmp_path, path, url, run_id):
    family, config = experiment_files.load(path)
    out = tmp_path / "mqtt"
    parties = plan_parties(family, config, path, [], out, url, run_id, 2, None, observer_log=tmp_path / "observer.log")
    for p in parties:
        p.start()
    return parties, out


def _log_tails(parties, chars=1500) -> str:
    """The end of every party's log, so that a stall seen only on CI can be read from its output."""
    out = []
    for p in parties:
        text = p.log.read_text(errors="replace") if p.log and p.log.exists() else "(no log)"
        out.append(f"--- {p.name} ---\n{text[-chars:]}")
    return "\n".join(out)


def _wait(parties, timeout=240):
    end = time.monotonic() + timeout
    while parties[0].proc.poll() is None:
        assert time.monotonic() < end, "the distributed run did not finish\n" + _log_tails(parties)
        time.sleep(0.2)
    for p in parties[1:]:
        try:
            p.proc.wait(60)
        except subprocess.TimeoutExpired:  # say where it waits: its coroutines' stacks to its log
            p.proc.send_signal(signal.SIGUSR2)
            time.sleep(2)
            raise AssertionError(f"{p.name} still runs 60 s after the session ended\n" + _log_tails([p], 6000)) from None
    return parties[0].proc.returncode


def test_parties_survive_malformed_traffic_and_count_it(tmp_path, mosquitto_url):
    path = _experiment(tmp_path, horizon=1_000_000, runs=1, extra="")
    _inproc(path, tmp_path / "inproc")
    run_id = "t" + secrets.token_hex(4)
    parties, out = _start(tmp_path, path, mosquitto_url, run_id)
    try:
        sent = _publish_junk(mosquitto_url, run_id, lambda: parties[0].proc.poll() is None)
        assert sent >= 5, "the run ended before much junk was sent: make it longer"
        assert _wait(parties) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    assert_same_numbers(tmp_path / "inproc", out)
    rejected = json.loads((out / "summary.json").read_text())["rejected"]
    for reason in ("not-msgpack", "not-a-map", "bad-version", "unknown-kind", "schema", "wrong-run",
                   "wrong-round", "wrong-task", "wrong-topic", "invalid-content"):
        assert rejected.get(reason, 0) > 0, (reason, rejected)
    # A junk report for round 0 (plan 0's user 0, no MAC) is refused as missing its tag, open round
    # or closed, or as not joined while plan 0 had not reached the intermediary.
    assert rejected.get("not-joined", 0) + rejected.get("missing-tag", 0) > 0, rejected


def test_killing_and_restarting_a_user_fleet_mid_run(tmp_path, mosquitto_url):
    path = _experiment(tmp_path, horizon=400_000, runs=2, extra="")
    _inproc(path, tmp_path / "inproc")
    parties, out = _start(tmp_path, path, mosquitto_url, "k" + secrets.token_hex(4))
    fleet = next(p for p in parties if p.name == "users-1")
    try:
        time.sleep(2.0)
        assert fleet.proc.poll() is None and parties[0].proc.poll() is None, "the run must still be going"
        fleet.proc.kill()  # SIGKILL: no goodbye, work in flight is lost
        fleet.proc.wait()
        time.sleep(1.0)
        fleet.start()  # same client id: the broker kept its session and queued plans
        assert _wait(parties) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    assert_same_numbers(tmp_path / "inproc", out)


def test_privbandit_demo_on_the_embedded_broker_with_acls_reproduces_inproc(tmp_path):
    """The README's main job, as a user runs it: no broker installed, every role on its own
    account under the generated ACLs; the numbers equal the in-process run's."""
    import subprocess
    import sys

    sets = ["--set", "horizon=40000", "--set", "runs=2"]
    demo = Path(__file__).resolve().parents[2] / "experiments" / "demo.toml"
    proc = subprocess.run([sys.executable, "-m", "privbandit", "demo", "--out", str(tmp_path / "mqtt"), *sets],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wire B/user" in proc.stdout and "Dist-DP-SE" in proc.stdout
    run_file(demo, ["horizon=40000", "runs=2"], out=tmp_path / "inproc")
    assert_same_numbers(tmp_path / "inproc", tmp_path / "mqtt")


def _session_without_users_1(tmp_path, url, horizon, observer_waits_for_it, *observer_args, deadline="3"):
    path = _experiment(tmp_path, horizon=horizon, runs=1, extra="")
    family, config = experiment_files.load(path)
    parties = plan_parties(family, config, path, [], tmp_path / "mqtt", url, "d" + secrets.token_hex(4), 2, None,
                           observer_log=tmp_path / "observer.log")
    started = [p for p in parties if p.name != "users-1"]
    for p in started:
        if p.name == "aggregator":
            p.argv += ["--deadline", deadline]
        if p.name == "observer":
            if not observer_waits_for_it:
                i = p.argv.index("--parties") + 1
                p.argv[i] = p.argv[i].replace(",users-1", "")
            p.argv += list(observer_args)
        p.start()
    try:
        code = _wait(started, timeout=120)
    finally:
        for p in parties:
            p.stop()
    return code, (tmp_path / "observer.log").read_text()


def test_a_round_that_misses_its_deadline_fails_loudly(tmp_path, mosquitto_url):
    """Fleet 1 never comes, so cohorts larger than one block (65,536 users) stay incomplete:
    nothing is released, and the session stops with an error naming the round."""
    code, log = _session_without_users_1(tmp_path, mosquitto_url, 2_000_000, False)
    assert code == 1 and "missed its 3 s deadline" in log and "nothing released" in log
    assert not (tmp_path / "mqtt" / "summary.json").exists()


def test_a_party_that_never_comes_fails_the_session(tmp_path, mosquitto_url):
    code, log = _session_without_users_1(tmp_path, mosquitto_url, 20_000, True, "--ready-timeout", "3")
    assert code == 1 and "never became ready" in log and "users-1" in log


def _rounds_without_graph(path: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("secagg_k", "secagg_t")} for row in csv.DictReader(open(path))]


def test_secure_aggregation_over_mosquitto_matches_the_ideal_sum(tmp_path, mosquitto_url):
    """Real SecAgg rounds between fleet processes and the aggregator, with 10 % of every cohort
    dropping out after sharing: the same decoded sums, regret and ledger as the in-process ideal
    modular sum under the same seed, and the aggregator never receives a residue in clear."""
    extra = 'dropout_rate = 0.1\ndropout_tolerance = 0.1\nintermediary = "secagg"\nsecagg_graph = "complete"\n'
    path = _experiment(tmp_path, horizon=400, runs=1, extra=extra)
    overrides = ["environment.arms=3"]  # complete-graph rounds cost O(n²): keep cohorts ≤ 64
    family, config = experiment_files.load(path, overrides)
    code = launch(family, config, path, overrides, tmp_path / "mqtt", broker_url=mosquitto_url, shards=2, timeout_s=240,
                  **OPEN_BROKER)
    assert code == 0
    run_file(path, overrides + ["algorithms.Dist-DP-SE.intermediary=auto"], out=tmp_path / "inproc")
    a = json.loads((tmp_path / "inproc" / "summary.json").read_text())
    b = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    assert b["algorithms"]["Dist-DP-SE"]["reports_dropped"] > 0
    assert b["privacy"] == a["privacy"] and b["privacy"]["Dist-DP-SE"]["epsilon_pure"] == 0.5  # ρ covers them
    # Every column the same but the graph's (k, t), which only secure rounds have.
    secure, ideal = (_rounds_without_graph(tmp_path / d / "rounds.csv") for d in ("mqtt", "inproc"))
    assert secure == ideal and len(secure) > 10
    assert all(r["secagg_t"] for r in csv.DictReader(open(tmp_path / "mqtt" / "rounds.csv")))  # every round says
    assert (tmp_path / "mqtt" / "curves.csv").read_bytes() == (tmp_path / "inproc" / "curves.csv").read_bytes()
    roles = b["communication"]["Dist-DP-SE"]["roles"]
    assert roles["aggregator"].get("payload.received.report", 0) > 0
    assert roles["analyzer"].get("payload.received.report", 0) == 0
    assert refusals(b) == {}


ATTACKED = """
adversary = {kind = "max-shift", fraction = 0.05}
[algorithms.colluded]
algorithm = "dist-dp-se"
adversary = {kind = "colluders", fraction = 0.2}
[algorithms.shuffled-checked]
algorithm = "dist-rdp-se"
intermediary = "shuffler-residues"
range_check = true
adversary = {kind = "out-of-range", fraction = 0.1, magnitude = 1000}
"""


def test_adversaries_in_fleets_reproduce_the_inproc_attacked_run(tmp_path, mosquitto_url):
    """Attackers live in the fleets, drawn from their own streams: the attacked MQTT run equals
    the attacked in-process run, rejections by reason and the coalition ledger included."""
    path = _experiment(tmp_path, horizon=40_000, runs=1, extra=ATTACKED)
    inproc = _inproc(path, tmp_path / "inproc")
    family, config = experiment_files.load(path)
    assert launch(family, config, path, [], tmp_path / "mqtt", broker_url=mosquitto_url, shards=2, timeout_s=240,
                  **OPEN_BROKER) == 0
    assert_same_numbers(tmp_path / "inproc", tmp_path / "mqtt")
    mqtt = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    assert mqtt["rejected"] == inproc["rejected"] and inproc["rejected"]["out-of-window"] > 0
    assert mqtt["privacy"]["colluded"]["coalition"]["epsilon_pure"] > 0.5
