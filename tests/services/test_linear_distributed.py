"""Shuffle-model linear bandits end to end through the generic services: analyzer, aggregator,
shuffler, two user fleets and the observer as separate processes over the real Mosquitto, against
the in-process engine (which steps the runs stacked) under the same seed: the same bytes."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path

import aiomqtt

from privbandit.runner import config as experiment_files, run_file
from privbandit.services.hostile import malformed_variants
from privbandit.services.launcher import launch, plan_parties

# Every algorithm of the family. K = 10, d = 3; T = 36 leaves SDP a trailing partial batch of 6
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


def _experiment(tmp_path: Path, horizon: int = 36, runs: int = 2, extra: str = PER_ROUND) -> Path:
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


def test_every_algorithm_over_mosquitto_equals_the_inproc_run(tmp_path, mosquitto_url):
    path = _experiment(tmp_path)
    run_file(path, out=tmp_path / "inproc")
    family, config = experiment_files.load(path)
    assert family.intermediaries(config) == ["aggregator", "shuffler"]
    code = launch(family, config, path, [], tmp_path / "mqtt", broker_url=mosquitto_url, shards=2, timeout_s=240)
    assert code == 0
    b = assert_same_bytes(tmp_path / "inproc", tmp_path / "mqtt")
    guarantees = {label: p["guarantee"] for label, p in b["privacy"].items()}
    assert guarantees == {"LinUCB-SDP-Vec": "none proven", "LinUCB-SDP-Amp": "proven", "LinUCB": "non-private",
                          "LinUCB-JDP": "proven", "LinUCB-LDP": "proven"}
    for label in b["algorithms"]:
        comm = b["communication"][label]
        assert comm["roles"]["analyzer"].get("payload.received.report", 0) == 0  # never sees a report
        assert comm["roles"]["users"]["payload.sent.report"] > 0
    assert b["rejected"] == {} and b["parties_missing_stats"] == []
    rows = (tmp_path / "mqtt" / "rounds.csv").read_text().splitlines()
    assert len(rows) > 2 * 5  # diagnostic batches of every algorithm and run
