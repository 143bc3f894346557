"""Every algorithm of every registered family, end to end: each party its own OS process over a
real Mosquitto, against the in-process engine on the same experiment. The numbers must be the
same bytes (curves.csv, rounds.csv, the ledger, the communication counts). A party killed with
SIGKILL mid-run and started again must leave them unchanged: test_families_restart_e2e.py, a file
of its own so that the two test workers share these sessions.

These are the one-spine proofs of issue #14: no family has its own services, so a family passes
here only through the generic analyzer, users, intermediary and observer processes. Horizons are
small because over MQTT every plan is a broker round trip with a checkpoint: Hybrid-UCB, one user
per plan, runs 100 users. The MAB family's real secure aggregation (``intermediary = "secagg"``)
costs milliseconds of CPU per user per round and has its own end-to-end test
(``test_distributed.py::test_secure_aggregation_over_mosquitto_matches_the_ideal_sum``).
"""

from __future__ import annotations

import secrets

import pytest

from privbandit.registry import family_names
from tests.services.test_distributed import _inproc, _start, _wait, assert_same_numbers

# One small experiment per family with every algorithm (and every trust model) it offers.
EXPERIMENTS = {
    "distributed-dp-mab": """
family = "distributed-dp-mab"
name = "every-mab"
horizon = 4000
seed = 11
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
arms = 4
[algorithms.SE]
[algorithms.DP-SE]
[algorithms.CDP-SE]
[algorithms.Dist-DP-SE]
[algorithms.Dist-RDP-SE]
[algorithms.Dist-CDP-SE]
[algorithms.LDP-SE]
[algorithms.shuffled]
algorithm = "dist-rdp-se"
intermediary = "shuffler-residues"
[algorithms.mixed]
algorithm = "dist-dp-se"
intermediary = "shuffler"
[algorithms.mixed-cdp]
algorithm = "dist-cdp-se"
intermediary = "shuffler"
""",
    "private-online-learning": """
family = "private-online-learning"
name = "every-online"
horizon = 1000
seed = 5
epsilon = 1.0
runs = 1
[environment]
setting = 2
reward = "bernoulli"
[algorithms.anytime-lazy-ucb]
[algorithms."anytime-lazy-ucb@distributed"]
algorithm = "anytime-lazy-ucb"
trust = "distributed"
[algorithms.dp-se]
[algorithms."dp-se@distributed"]
algorithm = "dp-se"
trust = "distributed"
[algorithms.ftnl]
[algorithms."ftnl@distributed"]
algorithm = "ftnl"
trust = "distributed"
[algorithms."ftnl@distributed-analyzer"]
algorithm = "ftnl"
trust = "distributed"
argmax_at = "analyzer"
""",
    "shuffle-linear-bandits": """
family = "shuffle-linear-bandits"
name = "every-linear"
horizon = 60
seed = 23
epsilon = 1
delta = 0.1
runs = 1
checkpoints = 8
[environment]
arms = 10
dim = 3
[algorithms.LinUCB]
[algorithms.LinUCB-JDP]
[algorithms.LinUCB-LDP]
[algorithms.LinUCB-SDP-Vec]
batch = 10
[algorithms.LinUCB-SDP-Amp]
batch = 10
""",
    "concurrent-shuffle": """
family = "concurrent-shuffle"
name = "every-counter"
horizon = 300
seed = 15
epsilon = 1.0
runs = 1
checkpoints = 8
[algorithms.sequential]
[algorithms."csta@k2"]
algorithm = "csta_k"
k = 2
[algorithms.csta_binary]
[algorithms."lowest@k2"]
algorithm = "lowest_k_binary"
k = 2
[algorithms."highest@k2"]
algorithm = "highest_k_binary"
k = 2
[algorithms.central_tree]
[algorithms.ldp]
[algorithms."pvec@k2"]
algorithm = "csta_k"
k = 2
protocol = "pvec"
vec_scale = 1.0
[algorithms."bin@k2"]
algorithm = "csta_k"
k = 2
protocol = "bin-a"
""",
    "concurrent-shuffle@alg4": """
family = "concurrent-shuffle"
name = "alg4"
horizon = 150
seed = 5
epsilon = 1.0
delta = 0.1
runs = 1
checkpoints = 8
[environment]
arms = 10
dim = 3
[algorithms."alg4@k2"]
algorithm = "cs-linucb"
k = 2
[algorithms."exact@k2"]
algorithm = "cs-linucb-exact"
k = 2
[algorithms.random]
algorithm = "cs-random"
k = 1
""",
    # Algorithm 4 under the exact count accountant: fair noise bits, the fewest that make each node private
    "concurrent-shuffle@alg4-exact": """
family = "concurrent-shuffle"
name = "alg4-exact"
horizon = 150
seed = 5
epsilon = 1.0
delta = 0.1
runs = 1
checkpoints = 8
preset = "exact"
[environment]
arms = 10
dim = 3
[algorithms."alg4@k2"]
algorithm = "cs-linucb"
k = 2
""",
    # The MAB family's baselines: the sequential ones (one user per plan over MQTT, a looked-ahead
    # block in-process: a few users each, every plan a broker round trip) and VB-SDP-AE's bits
    # through the shuffler.
    "distributed-dp-mab@sequential": """
family = "distributed-dp-mab"
name = "mab-sequential"
horizon = 60
seed = 13
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
arms = 4
[algorithms.ucb1]
[algorithms.thompson]
[algorithms.mt-ucb]
[algorithms.dp-ucb-bound]
[algorithms.dp-ucb]
[algorithms.ldp-ucb]
[algorithms.vb-sdp-ae]
""",
    # The experts baselines: over MQTT FTL and Hedge plan the users no vector can send elsewhere;
    # the naive FTNL's epochs release every action's noisy sum (central, and through the aggregator).
    "private-online-learning@experts": """
family = "private-online-learning"
name = "experts"
horizon = 100
seed = 5
epsilon = 1.0
runs = 1
[environment]
setting = 1
[algorithms.ftl]
[algorithms.hedge]
[algorithms.naive-ftnl]
[algorithms."naive-ftnl@distributed"]
trust = "distributed"
""",
    # Returning users (App. I): each user in up to 3 batches, every round's noise calibrated so that
    # she is (ε, δ)-DP by RDP or by advanced composition; the ledger is the observer's finish().
    "distributed-dp-mab@returning": """
family = "distributed-dp-mab"
name = "mab-returning"
horizon = 4000
seed = 19
epsilon = 1.0
runs = 1
calibrate = true
returning = 3
[environment]
kind = "uniform"
arms = 4
[algorithms.rdp]
algorithm = "dist-rdp-se"
[algorithms.advanced]
algorithm = "dist-rdp-se"
composition = "advanced"
[algorithms.vb]
algorithm = "vb-sdp-ae"
composition = "advanced"
""",
    "private-online-learning@hybrid": """
family = "private-online-learning"
name = "hybrid"
horizon = 100
seed = 5
epsilon = 1.0
runs = 1
[environment]
setting = 2
reward = "bernoulli"
[algorithms.hybrid-ucb]
""",
    # Private-GLM (Algorithm 2) is sequential, one user per plan: every round is a broker round
    # trip, so the horizon is small. Both optimizers and the three non-private baselines.
    "glm-bandits": """
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
# Algorithm 1: a warm-up of 20 users, three gradient rounds to the same users, then 40 more users
[algorithms.shuffle-glm]
batches = 2
warmup = 20
max_iterations = 3
""",
}
def _write(tmp_path, case: str, keep: str | None = None, horizon: int | None = None, runs: int = 1):
    text = EXPERIMENTS[case]
    if keep is not None:  # only one algorithm's table, at another horizon and number of runs
        head, *tables = text.split("[algorithms.")
        tables = [t for t in tables if t.split("]")[0].strip('"') == keep]
        head = head.replace(f"horizon = {head.split('horizon = ')[1].split(chr(10))[0]}\n", f"horizon = {horizon}\n")
        text = head.replace("runs = 1\n", f"runs = {runs}\n") + "[algorithms." + tables[0]
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    return path


def test_every_registered_family_is_covered():
    """A family registered in privbandit's own pyproject but missing here would go untested."""
    own = {name for name in family_names() if name != "coin"}
    covered = {case.split("@")[0] for case in EXPERIMENTS}
    assert own <= covered, own - covered


@pytest.mark.parametrize("case", sorted(EXPERIMENTS))
def test_every_algorithm_over_mosquitto_equals_in_process(case, tmp_path, mosquitto_url):
    path = _write(tmp_path, case)
    _inproc(path, tmp_path / "inproc")
    parties, out = _start(tmp_path, path, mosquitto_url, "f" + secrets.token_hex(4))
    try:
        assert _wait(parties, timeout=300) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    assert_same_numbers(tmp_path / "inproc", out)
