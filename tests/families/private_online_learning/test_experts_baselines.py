"""The experts baselines of the online family: FTL, Hedge and the naive FTNL (§5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from privbandit.families.private_online_learning import experts, experts_kernels
from privbandit.families.private_online_learning.mechanisms import NoisyMeans
from privbandit.protocol.primitives.noise.grid_laplace import LAPLACE_GRID
from privbandit.runner import run_file
from tests.stats import P_MIN


@pytest.mark.parametrize("name", sorted(experts.EXPERTS))
def test_looking_ahead_equals_one_user_at_a_time(name):
    """Gaussian-like rewards (sums that depend on the order of additions) across a draw block."""
    k, horizon = 4, experts.DRAW_BLOCK + 300
    vectors = np.clip(np.random.default_rng(1).normal(0.5, 0.2, (horizon, k)) + [0.0, 0.01, 0.02, 0.0], 0, 1)
    ahead = experts.ExpertsLearner(name, k, horizon, key=3)
    arms = np.concatenate([ahead.run(1, vectors[:1000]), ahead.run(1001, vectors[1000:])])
    step = experts.ExpertsLearner(name, k, horizon, key=3)
    one = np.empty(horizon, dtype=np.int64)
    for t in range(1, horizon + 1):
        one[t - 1] = step.choose(t)
        step.observe(vectors[t - 1])
    assert np.array_equal(arms, one) and np.array_equal(ahead.sums, step.sums)


def test_ftl_plays_the_leader_lowest_index_on_ties():
    learner = experts.ExpertsLearner("ftl", 3, 100, key=0)
    learner.sums[:] = [2.0, 5.0, 5.0]
    assert learner.choose(10) == 1


def test_hedge_draws_from_the_exponential_weights():
    """At fixed sums G, 20,000 rounds' actions follow softmax(ηG) by chi-square; the same test
    rejects the weights at 2η."""
    k, horizon = 4, 1000
    learner = experts.ExpertsLearner("hedge", k, horizon, key=5)
    learner.sums[:] = [10.0, 30.0, 25.0, 0.0]
    picks = np.array([learner.choose(t) for t in range(1, 20_001)])
    counts = np.bincount(picks, minlength=k)

    def expected(eta):
        w = np.exp(eta * (learner.sums - learner.sums.max()))
        return 20_000 * w / w.sum()

    eta = math.sqrt(8 * math.log(k) / horizon)
    assert stats.chisquare(counts, expected(eta)).pvalue > P_MIN
    assert stats.chisquare(counts, expected(2 * eta)).pvalue < 1e-6


def test_the_naive_ftnl_adds_laplace_k_over_epsilon_to_every_sum():
    """Each coordinate carries the exact grid Laplace at ε/K (scale K/ε in reward units): KS at a
    fixed seed; noise at 2ε/K (half the scale) is rejected. The release is ε-DP (K × ε/K)."""
    eps, k = 0.8, 5
    rnm = NoisyMeans(eps, k)
    rng = np.random.default_rng(0)
    noise = np.concatenate([rnm.release(np.zeros(k), rng)[1] for _ in range(8000)])
    scale = k * (1 + LAPLACE_GRID) / eps
    assert stats.kstest(noise / scale, "laplace").pvalue > P_MIN
    assert stats.kstest(2 * noise / scale, "laplace").pvalue < 1e-6
    assert rnm.privacy_event(k).pure_epsilon == eps


def test_the_baselines_ledgers(tmp_path):
    path = tmp_path / "experts.toml"
    path.write_text("""
family = "private-online-learning"
horizon = 5000
runs = 2
epsilon = 1.0
seed = 3
[environment]
setting = 1
[algorithms.naive-ftnl]
[algorithms."naive-ftnl@distributed"]
trust = "distributed"
[algorithms.ftl]
[algorithms.hedge]
""")
    summary = run_file(path).summary
    p = summary["privacy"]
    assert p["naive-ftnl"]["epsilon_pure"] == 1.0 and p["naive-ftnl@distributed"]["epsilon_pure"] == pytest.approx(1.0)
    assert p["ftl"]["guarantee"] == p["hedge"]["guarantee"] == "non-private"
    assert all(a["regret_final_mean"] < 5000 * 0.05 for a in summary["algorithms"].values())


def test_the_experts_baselines_refuse_what_they_do_not_take(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("""
family = "private-online-learning"
horizon = 100
epsilon = 1.0
[environment]
setting = 1
[algorithms.hedge]
trust = "distributed"
""")
    with pytest.raises(Exception, match="trust: hedge is a non-private baseline"):
        run_file(path)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=2, max_size=6), st.integers(1, 200), st.integers(0, 2**31),
       st.sampled_from(["worst", "uniform", "bernoulli"]))
def test_ftl_decided_users_play_the_leader_whatever_they_report(counts, n, seed, law):
    """Sums with ties and fractions; the block ftl_decided plans is what FTL chooses one user at a
    time, for vectors in [0, 1]^K of any law, the worst included (the leader 0, every rival 1).
    Against the worst vectors it is also as long as it can be: the next user plays another arm."""
    rng = np.random.default_rng(seed)
    k = len(counts)
    sums = np.asarray(counts, dtype=np.float64) + (rng.random(k) * 0.5 if law == "uniform" else 0.0)
    size = experts.ftl_decided(sums.copy(), n)
    learner = experts.ExpertsLearner("ftl", k, 10_000, key=0)
    learner.sums[:] = sums
    j = learner.choose(1)
    assert 1 <= size <= n
    worst = np.ones(k)
    worst[j] = 0.0
    vectors = {"worst": np.tile(worst, (n, 1)), "uniform": rng.random((n, k)),
               "bernoulli": (rng.random((n, k)) < 0.5).astype(np.float64)}[law]
    for t in range(size):
        assert learner.choose(t + 1) == j, (t, size)
        learner.observe(vectors[t])
    if law == "worst" and size < n:
        assert learner.choose(size + 1) != j


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 400), min_size=2, max_size=6), st.floats(0.001, 0.3), st.integers(1, 300),
       st.integers(0, 2**31), st.sampled_from(["zeros", "ones", "uniform", "one-hot", "bernoulli", "first", "last"]))
# weights 36 e-folds apart: the bounds' tail sums, once the total less a prefix, lost the small weight
@example(sums=[121.0, 0.0], eta=0.296875, n=109, seed=45, law="last")
def test_hedge_decided_users_draw_what_the_plan_says_whatever_they_report(sums, eta, n, seed, law):
    """The actions hedge_decided plans are Hedge's draws one user at a time (the same uniforms),
    whatever vectors in [0, 1]^K the block's users report: all 0, all 1, uniform, all on one
    action, Bernoulli, or the extremes (every reward on the first action, on the last: what moves
    every boundary farthest one way). Fails if a bound used the wrong end, a user's pending count
    was off by one, or a draw near a boundary was let through."""
    rng = np.random.default_rng(seed)
    sums = np.asarray(sums, dtype=np.float64)
    k = sums.size
    u = rng.random(n)
    arms = experts.hedge_decided(sums.copy(), eta, u)
    assert 1 <= arms.size <= n
    vectors = {"zeros": np.zeros((n, k)), "ones": np.ones((n, k)), "uniform": rng.random((n, k)),
               "one-hot": np.eye(k)[rng.integers(0, k, n)], "bernoulli": (rng.random((n, k)) < 0.3) * 1.0,
               "first": np.tile(np.eye(k)[0], (n, 1)), "last": np.tile(np.eye(k)[-1], (n, 1))}[law]
    g = sums.copy()
    for t in range(arms.size):
        assert experts_kernels.choose(1, g, eta, u[t]) == arms[t], (t, arms)
        g += vectors[t]


def test_a_hedge_draw_that_one_pending_vector_can_flip_is_not_decided():
    """Two even actions at η = 0.5: user 2's chance of action 0 lies in [1/(1 + e^0.5), 1/(1 + e^−0.5)]
    = [0.378, 0.622] whatever user 1 reports, so u = 0.45 is undecided (a vector (0, 1) from user 1
    makes it action 1) and u = 0.30 is action 0; with two pending the interval is [0.269, 0.731], so
    u = 0.80 is action 1 and u = 0.70 undecided."""
    sums = np.zeros(2)
    assert experts.hedge_decided(sums, 0.5, np.array([0.1, 0.45])).tolist() == [0]
    assert experts_kernels.choose(1, np.array([0.0, 1.0]), 0.5, 0.45) == 1
    assert experts.hedge_decided(sums, 0.5, np.array([0.1, 0.30, 0.80])).tolist() == [0, 0, 1]
    assert experts.hedge_decided(sums, 0.5, np.array([0.1, 0.30, 0.70])).tolist() == [0, 0]  # 2 pending: [0.269, 0.731]


def test_hedge_decided_blocks_are_long_once_hedge_has_settled():
    """Not trivially one user: one action 300 rewards ahead at η = 0.02 (T = 20,000's η is 0.025)."""
    sums = np.array([400.0, 100.0, 100.0, 95.0])
    arms = experts.hedge_decided(sums, 0.02, np.random.default_rng(0).random(500))
    assert arms.size >= 10 and (arms == 0).mean() > 0.9, arms
