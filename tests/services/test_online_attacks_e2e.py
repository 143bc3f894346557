"""The private-online-learning family's adversaries on the wire (issue #32 item 8): poisoning users
and colluders live in the fleets, drawn from their own streams, and the family's experiment file
takes the session's traffic adversaries. The attacked MQTT session (every party its own process,
the embedded broker with the generated ACLs, four hostile processes beside it) must equal the
attacked in-process run, the coalition's ledger included, with every forgery refused and counted.
Before, the family's config refused both fields."""

from __future__ import annotations

import json

from privbandit.runner import config as experiment_files
from privbandit.services.launcher import launch
from tests.services.reports import attack_report
from tests.services.test_distributed import _inproc, assert_same_numbers

TRAFFIC = ["replay", "impersonate", "sybil", "curious-analyzer"]
EXPERIMENT = """
family = "private-online-learning"
name = "online-attacked"
horizon = 20000
seed = 3
epsilon = 1.0
runs = 1
[environment]
setting = 2
[algorithms."lazy@distributed"]
algorithm = "anytime-lazy-ucb"
trust = "distributed"
adversary = {kind = "window-edge", fraction = 0.05}
[algorithms."ftnl@analyzer"]
algorithm = "ftnl"
trust = "distributed"
argmax_at = "analyzer"
adversary = {kind = "colluders", fraction = 0.1}
"""


def test_online_adversaries_in_fleets_and_traffic_attackers_reproduce_the_inproc_attacked_run(tmp_path):
    inproc_file, path = tmp_path / "inproc.toml", tmp_path / "online.toml"
    inproc_file.write_text(EXPERIMENT)
    path.write_text(f"traffic_adversaries = {TRAFFIC}\n" + EXPERIMENT)
    inproc = _inproc(inproc_file, tmp_path / "inproc")
    family, config = experiment_files.load(path)
    out = tmp_path / "mqtt"
    assert launch(family, config, path, [], out, broker_url=None, shards=2, timeout_s=240) == 0
    assert_same_numbers(tmp_path / "inproc", out)  # the poisoned regret and the coalition's ledger, bit for bit
    mqtt = json.loads((out / "summary.json").read_text())
    coalition = mqtt["privacy"]["ftnl@analyzer"]["coalition"]
    assert coalition == inproc["privacy"]["ftnl@analyzer"]["coalition"] and coalition["epsilon_pure"] > 5.0
    poisoners = 'adversary = {kind = "window-edge", fraction = 0.05}\n'
    (tmp_path / "honest.toml").write_text(EXPERIMENT.replace(poisoners, ""))
    honest = _inproc(tmp_path / "honest.toml", tmp_path / "honest")
    assert (mqtt["algorithms"]["lazy@distributed"]["regret_final_mean"]
            > honest["algorithms"]["lazy@distributed"]["regret_final_mean"])
    reports = {k: attack_report(out, k) for k in TRAFFIC}
    assert all(reports[k]["plans_seen"] > 0 for k in ("replay", "impersonate", "sybil")), reports
    assert reports["curious-analyzer"]["forbidden_received"] == 0
    rejected = mqtt["rejected"]
    assert rejected.get("not-in-cohort", 0) > 0 and rejected.get("missing-tag", 0) + rejected.get("bad-block-tag", 0) > 0
