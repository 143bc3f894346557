"""The MAB family's sequential baselines (privbandit/families/distributed_dp_mab/sequential.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.distributed_dp_mab import sequential as seq
from privbandit.families.distributed_dp_mab import sequential_kernels as kernels
from privbandit.families.distributed_dp_mab.sequential_parties import SequentialServer, SequentialUsers
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID, grid_step
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Release
from privbandit.runner import run_file
from privbandit.runner.config import ConfigError

KINDS = sorted(seq.KINDS)


def _candidates(n: int, k: int, local: bool, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.random((n, k))
    return x + rng.laplace(0, 2.0, (n, 1)) if local else x


@pytest.mark.parametrize("name", KINDS)
def test_looking_ahead_equals_one_user_at_a_time(name):
    """The in-process driver (a block looked ahead at, one compiled loop) and the MQTT driver (choose,
    then observe, per user) make the same choices and end in the same state, bit for bit, across a
    draw block's boundary."""
    k, horizon = 5, seq.NOISE_BLOCK + 700
    cand = _candidates(horizon, k, seq.TRUST[name] == "local")
    ahead = seq.SequentialLearner(name, k, 0.7, horizon, key=99)
    arms = np.concatenate([ahead.run(t0, cand[t0 - 1:t1]) [0] for t0, t1 in ((1, 300), (301, seq.NOISE_BLOCK + 5),
                                                                           (seq.NOISE_BLOCK + 6, horizon + 1))])
    step = seq.SequentialLearner(name, k, 0.7, horizon, key=99)
    one = np.empty(horizon, dtype=np.int64)
    for t in range(1, horizon + 1):
        one[t - 1] = step.choose(t)
        step.observe(t, int(one[t - 1]), cand[t - 1, one[t - 1]])
    assert np.array_equal(arms, one)
    assert np.array_equal(ahead.est, step.est) and np.array_equal(ahead.pulls, step.pulls)
    assert np.bincount(arms, minlength=k).max() < horizon  # it explored


@pytest.mark.parametrize("name", ["mt-ucb", "dp-ucb-bound", "dp-ucb"])
def test_the_counters_hold_the_arm_sum_within_their_noise(name):
    """With the noise steps set to zero a counter's released prefix is the arm's true sum up to the
    rounding of each released node to its grid (≤ g/2 per node): a counter that dropped or double
    counted a node would miss by a reward."""
    k, horizon, eps = 3, 5000, 1.0
    learner = seq.SequentialLearner(name, k, eps, horizon, key=1)
    learner.draws = lambda t0, n: (np.zeros((n, k)), np.zeros((n, 2)))
    rng = np.random.default_rng(2)
    truth = np.zeros(k)
    for t in range(1, horizon + 1):
        arm = int(rng.integers(k))
        x = float(rng.random())
        learner.observe(t, arm, x)
        truth[arm] += x
        if t % 97 == 0:
            slack = 70 * grid_step(2 * (learner.levels + 1) / eps)  # at most 64 nodes and a block each
            assert np.all(np.abs(learner.est - truth) <= slack), (t, learner.est - truth)
    assert learner.pulls.sum() == horizon


def test_the_tree_noise_is_at_the_scale_the_ledger_charges():
    """Mishra & Thakurta's counter: a leaf enters at most L = ⌊log₂ T⌋ + 1 released nodes, and each
    node carries the exact grid Laplace at scale L/ε, so each arm's stream is ε-DP."""
    for horizon in (2, 3, 1000, 2**20, 2**20 + 1):
        learner = seq.SequentialLearner("mt-ucb", 2, 0.3, horizon, key=0)
        deepest = max(1, horizon).bit_length()
        assert learner.levels == deepest
        assert kernels.grid(learner.params[1]) == grid_step(deepest / 0.3)


@pytest.mark.parametrize("name", ["dp-ucb-bound", "dp-ucb"])
def test_the_hybrid_counters_noise_is_at_the_scales_the_ledger_charges(name):
    """The hybrid counter's releases (ε/2 + ε/2): with every reward 0, an arm's first release is its
    block 0, Lap(2/ε); its second adds the open block's (r = 1) tree leaf, Lap(2(r + 1)/ε) = Lap(4/ε);
    its third closes block 1 (the tree's node leaves, the block's sum Lap(2/ε) enters); its fourth
    adds block 2's first tree node, Lap(6/ε). Across 4,000 arms pulled in turn each increment, over
    its scale, is Laplace(1) by KS at a fixed seed (p > 10⁻³; the grid's discreteness is ~10⁻⁶); the
    same increments over 1.5× the scale are rejected (p < 10⁻⁶), so a counter at the wrong scale (or
    a node's noise dropped) fails."""
    k, eps = 4000, 0.8
    learner = seq.SequentialLearner(name, k, eps, 4 * k, key=7)
    est = np.zeros((5, k))
    t = 0
    for pull in range(1, 5):
        for j in range(k):
            t += 1
            learner.observe(t, j, 0.0)
        est[pull] = learner.est
    assert np.array_equal(learner.pulls, np.full(k, 4))
    third = est[3] - est[1]  # the tree leaf of pull 2 is gone: only block 1's release remains
    for got, scale in ((est[1], 2 / eps), (est[2] - est[1], 4 / eps), (third, 2 / eps), (est[4] - est[3], 6 / eps)):
        assert stats.kstest(got / scale, "laplace").pvalue > 1e-3, scale
        assert stats.kstest(got / (1.5 * scale), "laplace").pvalue < 1e-6, scale


def test_dp_ucb_is_ucb1s_index_on_the_noisy_mean():
    """DP-UCB's index is µ̃ + sqrt(2 ln t/n), no noise bound: on 3,000 random states its choice is the
    argmax of that formula, while DP-UCB-Bound's (which adds B/n) differs on some of them."""
    rng = np.random.default_rng(5)
    k = 4
    learner = seq.SequentialLearner("dp-ucb", k, 0.5, 10**6, key=0)
    normals = np.zeros(k)
    differ = 0
    for _ in range(3000):
        pulls = rng.integers(1, 2000, k).astype(np.int64)
        est = pulls * rng.random(k) + rng.laplace(0, 5, k)
        t = int(pulls.sum()) + int(rng.integers(0, 100))
        opened = np.array([max(1, int(n + 1).bit_length() - 1) for n in pulls], dtype=np.int64)
        want = int(np.argmax(est / pulls + np.sqrt(2 * math.log(t) / pulls)))
        got = kernels.choose(seq.KINDS["dp-ucb"], t, pulls, est, opened, normals, learner.params)
        assert got == want
        differ += got != kernels.choose(seq.KINDS["dp-ucb-bound"], t, pulls, est, opened, normals, learner.params)
    assert differ > 100


def test_local_reports_carry_the_grid_laplace_of_epsilon():
    """LDP-UCB's reports: ⌊x⌉_γ plus γ·Lap_Z((1 + γ)/(γε)), the exact grid Laplace (ε-DP alone). The
    steps, divided by their scale, are Laplace(1) by KS at a fixed seed (at a scale of 2²¹ the
    discrete law is within 10⁻⁶ of the continuous one); half the noise is rejected by the same test."""
    eps = 0.5
    inst = BanditInstance(np.array([0.3, 0.6]), "bernoulli")
    users = SequentialUsers(inst, "ldp-ucb", eps, seed=4, prefix=(0, "ldp-ucb"), checkpoints=np.array([10]))
    x = np.random.default_rng(0).random(50_000)
    reports = users.reports(1, x)
    steps = reports / LAPLACE_GRID - np.rint(x / LAPLACE_GRID)
    assert np.array_equal(steps, np.rint(steps))
    scale = (1 + LAPLACE_GRID) / (LAPLACE_GRID * eps)
    assert stats.kstest(steps / scale, "laplace").pvalue > 1e-3
    assert stats.kstest(2 * steps / scale, "laplace").pvalue < 1e-6
    # keyed by the user's index: users 1001 … read the same draws however they are grouped
    assert np.array_equal(users.local_steps(1001, 10), users.local_steps(1, 2000)[1000:1010])


def test_a_release_the_analyzer_did_not_look_at_is_refused():
    inst = BanditInstance(np.array([0.3, 0.6, 0.5]), "bernoulli")
    users = SequentialUsers(inst, "ucb1", None, seed=4, prefix=(0, "ucb1"), checkpoints=np.array([50]))
    server = SequentialServer("ucb1", 3, None, 50, key=3, oracle=users.oracle)
    (plan,) = server.plans()
    answer = users.act(plan, 0, 0, plan.cohort, None)
    (_, _, values, _) = answer.reports[0]
    rnd = plan.opens[0]
    forged = values.copy()
    forged[0, 0, 0] = 1.0 - forged[0, 0, 0]
    with pytest.raises(ProtocolError, match="looked ahead"):
        server.on_release(rnd, Release(rnd.id, plan.cohort, forged))
    body, spend = server.on_release(rnd, Release(rnd.id, plan.cohort, values))  # the round stayed open
    assert spend.releases == 50 and spend.event.status == "non-private"


def test_each_baselines_ledger(tmp_path):
    path = tmp_path / "seq.toml"
    path.write_text("""
family = "distributed-dp-mab"
horizon = 3000
seed = 1
epsilon = 0.5
runs = 2
[environment]
arms = 4
[algorithms.ucb1]
[algorithms.thompson]
[algorithms.mt-ucb]
[algorithms.dp-ucb-bound]
[algorithms.dp-ucb]
[algorithms.ldp-ucb]
""")
    summary = run_file(path).summary
    privacy = summary["privacy"]
    assert privacy["ucb1"]["guarantee"] == privacy["thompson"]["guarantee"] == "non-private"
    for label, trust in (("mt-ucb", "central"), ("dp-ucb-bound", "central"), ("dp-ucb", "central"),
                         ("ldp-ucb", "local")):
        assert privacy[label]["trust_model"] == trust and privacy[label]["epsilon_pure"] == 0.5
        assert privacy[label]["guarantee"] == "proven" and privacy[label]["basis"] == [seq.BASIS[label]]
    assert "hybrid counter" in privacy["dp-ucb"]["basis"][0] and "ε/2 + ε/2" in privacy["dp-ucb"]["basis"][0]
    for label, a in summary["algorithms"].items():
        assert a["runs"] == 2 and a["regret_final_mean"] < 3000 * 0.5, label


def test_sequential_baselines_refuse_the_protocol_options(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("""
family = "distributed-dp-mab"
horizon = 300
epsilon = 0.5
[algorithms.ucb1]
intermediary = "shuffler"
""")
    with pytest.raises((ConfigError, ValueError), match="intermediary: ucb1 is a baseline"):
        run_file(path)


@pytest.mark.parametrize("name", ["ucb1", "thompson"])
@pytest.mark.parametrize("law", ["zeros", "ones", "uniform", "bernoulli", "ones-then-zeros"])
def test_a_decided_block_is_what_one_user_at_a_time_chooses_whatever_the_rewards(name, law):
    """From 30 states along a run, the block SequentialLearner.decided plans is what choose() picks
    one user at a time, whatever rewards in [0, 1] the block's users report (the worst, all 0,
    included); and unless it ran to n, the next user fed rewards of 0 goes elsewhere (the block is
    as long as it can be). Some blocks are longer than one user (UCB-type indices stay close by
    design, so they are short: 2–16 users per plan on average at T = 20,000)."""
    k, horizon = 4, 8000
    rng = np.random.default_rng(5)
    means = np.array([0.7, 0.6, 0.5, 0.45])
    longest = 0
    for start in np.linspace(1, 6000, 30).astype(int):
        learner = seq.SequentialLearner(name, k, None, horizon, key=int(start))
        for t in range(1, start):
            j = learner.choose(t)
            learner.observe(t, j, float(rng.random() < means[j]))
        n = 500
        arms = learner.decided(int(start), n)
        assert 1 <= arms.size <= n and (arms == arms[0]).all()
        x = {"zeros": np.zeros(n), "ones": np.ones(n), "uniform": rng.random(n),
             "bernoulli": (rng.random(n) < 0.6) * 1.0, "ones-then-zeros": (np.arange(n) < n // 3) * 1.0}[law]
        for i, t in enumerate(range(int(start), int(start) + arms.size)):
            assert learner.choose(t) == arms[i], (start, i)
            learner.observe(t, int(arms[i]), float(x[i]))
        if law == "zeros" and arms.size < n:
            assert learner.choose(int(start) + arms.size) != arms[0]
        longest = max(longest, arms.size)
    assert longest >= 5


@pytest.mark.parametrize("name", ["ucb1", "thompson", "dp-ucb"])
def test_decided_blocks_over_the_spine_equal_one_user_per_plan(name, tmp_path):
    """The MQTT driver (no oracle: decided blocks for UCB1 and Thompson, one user per plan for the
    counters) and the in-process look-ahead give the same arms, bit for bit."""
    inst = BanditInstance(np.array([0.3, 0.6, 0.5]), "bernoulli")
    got = {}
    for oracle in (True, False):
        users = SequentialUsers(inst, name, 1.0, seed=4, prefix=(0, name), checkpoints=np.array([3000]))
        server = SequentialServer(name, 3, 1.0, 3000, key=3, oracle=users.oracle if oracle else None)
        while not server.done:
            (plan,) = server.plans()
            answer = users.act(plan, 0, plan.first_user, plan.cohort, None)
            (_, _, values, _) = answer.reports[0]
            rnd = plan.opens[0]
            server.on_release(rnd, Release(rnd.id, plan.cohort, values, user_ids=np.arange(plan.cohort)))
        got[oracle] = (server.learner.pulls.copy(), server.learner.est.copy(), server.plans_made)
    assert np.array_equal(got[True][0], got[False][0]) and np.array_equal(got[True][1], got[False][1])
    if name == "dp-ucb":  # its counter's noisy sums are not exactly monotone: one user per plan
        assert got[False][2] == 3000
    else:
        assert got[False][2] < 3000 / 1.5, got[False][2]
