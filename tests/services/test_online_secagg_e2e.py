"""Distributed Anytime-Lazy-UCB and FTNL (its K sums) over real secure aggregation, every party
its own OS process over a real Mosquitto (issue #14: the online family's distributed twins through
the real aggregator).

An array of arm j fills with the users who pull j, over many plans, mixed with other arms' users.
Each plan's join names the array's users; the fleets keep those users' residues until the array's
last join comes, then run one Bonawitz et al. round (SecAgg+ graph) among exactly those users with
the aggregator, which never sees a residue. An FTNL epoch is one plan; its users' inputs are K
residues each, and the round releases the K sums. The numbers must be those of the in-process run
with the ideal modular sum, bit for bit.
"""

from __future__ import annotations

import csv
import json
import re

from privbandit.runner import config as experiment_files, run_file
from privbandit.services.launcher import launch
from tests.services.test_distributed import OPEN_BROKER, refusals

EXPERIMENT = """
family = "private-online-learning"
name = "online-secagg"
horizon = 600
seed = 7
epsilon = 1.0
runs = 1
[environment]
setting = 2
[algorithms."anytime-lazy-ucb@distributed"]
algorithm = "anytime-lazy-ucb"
trust = "distributed"
intermediary = "secagg"
[algorithms."ftnl@distributed-analyzer"]
algorithm = "ftnl"
trust = "distributed"
argmax_at = "analyzer"
intermediary = "secagg"
"""
LABEL = "anytime-lazy-ucb@distributed"
FTNL = "ftnl@distributed-analyzer"  # an epoch's K = 5 residues per user, summed by one secure round


def test_secure_lazy_ucb_and_ftnl_over_mosquitto_equal_the_ideal_in_process_run(tmp_path, mosquitto_url):
    path = tmp_path / "online.toml"
    path.write_text(EXPERIMENT)
    family, config = experiment_files.load(path)
    assert launch(family, config, path, [], tmp_path / "mqtt", broker_url=mosquitto_url, shards=2, timeout_s=240,
                  secagg_step_s=60, **OPEN_BROKER) == 0  # the aggregator takes --secagg-step-deadline
    run_file(path, [f"algorithms.{LABEL}.intermediary=auto", f"algorithms.{FTNL}.intermediary=auto"],
             out=tmp_path / "ideal")
    for name in ("curves.csv", "rounds.csv"):
        assert (tmp_path / "mqtt" / name).read_bytes() == (tmp_path / "ideal" / name).read_bytes(), name
    secure = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    ideal = json.loads((tmp_path / "ideal" / "summary.json").read_text())
    assert secure["privacy"] == ideal["privacy"] and secure["privacy"][LABEL]["epsilon_pure"] == 1.0
    assert all(secure["algorithms"][a]["parameters"]["intermediary"] == "secagg" for a in (LABEL, FTNL))
    assert refusals(secure) == {}
    # Every array and epoch of two users or more was a real round among exactly its users, none
    # dropped; the one-user ones (array 0, epoch 0) were the ideal sum of their one report.
    sizes = [int(r["n"]) for r in csv.DictReader(open(tmp_path / "ideal" / "rounds.csv"))]
    log = (tmp_path / "mqtt" / "logs" / "aggregator.log").read_text()
    rounds = re.findall(r"secagg cost: aggregator round \d+ released: users (\d+), survivors (\d+)", log)
    assert sorted(int(n) for n, _ in rounds) == sorted(n for n in sizes if n >= 2)
    assert len(rounds) >= 15 and all(n == kept for n, kept in rounds)
    assert "aborted" not in log
    # The aggregator saw the protocol's messages, never a residue: the analyzer got releases only.
    roles = secure["communication"][LABEL]["roles"]
    assert roles["aggregator"]["payload.sent.relay"] > 0
    assert roles["analyzer"].get("payload.received.report", 0) == 0
