"""Issue #21 §2 end to end: the quickstart's Dist-DP-SE on the sparse SecAgg+ graph with 10 %
dropouts, between real processes over Mosquitto.

With the old graph (k = 2⌈log₂ n⌉, t = ⌊2(k + 1)/3⌋ + 1 whatever the dropout rate) this session
failed: "round 53: secure aggregation aborted after step 'unmask': round 4: 8 shares of s^SK of
user 837, threshold 9; nothing released" (the run id below; the graphs of 30 of the 40 run ids
tried would have aborted). With (k, t) derived from the threat model it completes, and every
number equals the in-process run's.
"""

import json

from privbandit.protocol.primitives.secagg.parameters import ThreatModel, derive
from privbandit.runner import config as experiment_files, run_file
from privbandit.services.launcher import launch
from tests.services.test_distributed import OPEN_BROKER, assert_same_numbers, refusals
from tests.services.test_faults import private_mosquitto

# experiments/quickstart.toml's world and Dist-DP-SE, one run, the secure-aggregation settings.
QUICKSTART_SPARSE = """
name = "quickstart"
horizon = 2000
seed = 1
epsilon = 0.5
runs = 1
preset = "paper"

[environment]
kind = "uniform"
arms = 10
low = 0.25
high = 0.75
reward = "gaussian"
sd = 0.1

[algorithms.Dist-DP-SE]
intermediary = "secagg"
secagg_graph = "sparse"
dropout_rate = 0.1
dropout_tolerance = 0.1
"""
# Fixed, so the graphs (seeded by run, task and round) are ones the old code aborted on. So the
# session has a Mosquitto of its own: on a shared one, another session under this run id (a second
# suite, a killed run's queued messages) would talk into it.
RUN_ID = "r21sparse3"


def test_sparse_secagg_with_dropouts_completes_over_mosquitto_and_equals_inproc(tmp_path):
    path = tmp_path / "quickstart-sparse.toml"
    path.write_text(QUICKSTART_SPARSE)
    family, config = experiment_files.load(path)
    broker = private_mosquitto(tmp_path / "broker")
    try:
        code = launch(family, config, path, [], tmp_path / "mqtt", broker_url=broker.url, shards=2, timeout_s=120,
                      run_id=RUN_ID, **OPEN_BROKER)
    finally:
        broker.stop()
    assert code == 0, (tmp_path / "mqtt" / "logs")
    run_file(path, out=tmp_path / "inproc")
    assert_same_numbers(tmp_path / "inproc", tmp_path / "mqtt")
    summary = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    alg = summary["algorithms"]["Dist-DP-SE"]
    assert alg["reports_dropped"] > 0 and refusals(summary) == {}
    # The summary prints the graph every cohort size used: the derivation's, meeting both targets.
    block = alg["secagg"]
    assert (block["corrupt_fraction"], block["dropout_rate"], block["security_bits"], block["failure_bits"]) == \
        (0.05, 0.1, 40.0, 20.0)
    threat = ThreatModel(0.05, 0.1)
    assert [r["n"] for r in block["rounds"]] == [2, 4, 8, 16, 32, 64, 128]
    for r in block["rounds"]:
        want = derive(r["n"], threat)
        assert (r["k"], r["t"]) == (want.k, want.t)
        assert r["log2_insecurity"] is None or r["log2_insecurity"] <= -40
        assert r["log2_failure"] is None or r["log2_failure"] <= -20
    # and the analyzer's log says it when it first opens a round of each size
    log = (tmp_path / "mqtt" / "logs" / "analyzer.log").read_text()
    assert f"secure aggregation (sparse graph) for {derive(128, threat).describe()}" in log
