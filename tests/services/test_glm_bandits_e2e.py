"""The GLM family end to end over a real Mosquitto: every party its own OS process, against the
in-process engine on the same experiment: the same bytes (curves.csv, rounds.csv, the ledger).

Algorithm 2 is sequential (one user per plan), so every round is a broker round trip: the horizon
is small. Both optimizers and the three baselines run; the analyzer holds the users' raw reports (the
central model) and releases only the billboard.
"""

from __future__ import annotations

import json
import secrets

from tests.services.test_distributed import _inproc, _start, _wait, assert_same_numbers

EXPERIMENT = """
family = "glm-bandits"
name = "glm-e2e"
horizon = 60
seed = 17
epsilon = 6.0
delta = 0.02
runs = 1
checkpoints = 8
preset = "paper-code"
[environment]
link = "logistic"
dim = 3
arms = 6
norm = 2.0
[algorithms.private-glm]
# a low Criterion I bar so that θ̂_o's optimizer runs inside the short horizon
[algorithms."private-glm@pgd"]
algorithm = "private-glm"
optimizer = "pgd-pvec"
epsilon = 60.0
[algorithms.rs-glinucb]
[algorithms.glm-ucb]
[algorithms.gloc]
"""


def test_glm_over_mosquitto_equals_in_process(tmp_path, mosquitto_url):
    path = tmp_path / "glm.toml"
    path.write_text(EXPERIMENT)
    _inproc(path, tmp_path / "inproc")
    parties, out = _start(tmp_path, path, mosquitto_url, "g" + secrets.token_hex(4))
    try:
        assert _wait(parties, timeout=300) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    assert_same_numbers(tmp_path / "inproc", out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["privacy"]["private-glm"]["guarantee"] == "proven"
    assert summary["privacy"]["glm-ucb"]["guarantee"] == "non-private"
