"""Hu, Huang & Mehta: Anytime-Lazy-UCB, Hybrid-UCB, FTNL and their central/distributed releases."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats
from hypothesis import given, settings
from hypothesis import strategies as st


from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.families.private_online_learning import FAMILY
from privbandit.families.private_online_learning import parties as online_parties
from privbandit.families.private_online_learning.anytime_lazy_ucb import AnytimeLazyUCB
from privbandit.families.private_online_learning.ftnl import FTNL, epoch_of, epoch_rounds
from privbandit.families.private_online_learning.hybrid_streaks import _Log2Rounds, leader_streak
from privbandit.families.private_online_learning.hybrid_ucb import HybridUCB
from privbandit.families.private_online_learning.mechanisms import (
    BinaryMechanism,
    DistributedArraySum,
    DistributedNoisyMax,
    ReportNoisyMax,
    array_of_pull,
    binary_nodes,
    binary_prefix_noise,
    hybrid_epsilon,
    refresh_count,
)
from privbandit.protocol.primitives.encoding import modular_sum
from privbandit.protocol.primitives.noise import LAPLACE_GRID, discrete_laplace_pmf
from privbandit.protocol.primitives.noise.grid_laplace import grid_step, sample_grid_steps
from privbandit.protocol.spine import engine
from privbandit.protocol.spine.events import Join, Plan, Reports, Round
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.one_user import OneUserPlans
from privbandit.runner.tasks import parties
from tests.stats import P_MIN, chi_square_pvalue

SETTING1 = BanditInstance(np.array([0.75, 0.70, 0.70, 0.70, 0.70]), "bernoulli")


def run_task(algorithm: str, horizon: int, epsilon: float = 1.0, means=(0.75, 0.70, 0.70, 0.70, 0.70),
             seed: int = 0, run: int = 0, reward: str = "bernoulli", oracle: bool = True, **table):
    """One run of one algorithm through the spine's engine, as privbandit run does it."""
    config = FAMILY.load({"family": FAMILY.name, "horizon": horizon, "seed": seed, "epsilon": epsilon,
                          "runs": run + 1, "environment": {"means": list(means), "reward": reward},
                          "algorithms": {"x": {"algorithm": algorithm, **table}}}, "<test>")
    _, analyzer, users, boxes, observer = parties(FAMILY, config, "x", [run], oracle=oracle)
    engine.run(analyzer, users, boxes, observer)
    result = observer.result([run], analyzer.ledger.summary(), analyzer.logic.summary(),
                             FAMILY.row_maker(config, "x"))
    return result, analyzer

# --- Anytime-Lazy-UCB ----------------------------------------------------------------------------


def drive_lazy(n_arms, rewards, horizon, noise, eps=1.0):
    """Algorithm 1 through its sans-I/O API, one user at a time. ``rewards(arm, count)`` is the
    reward of arm's count-th pull; ``noise(arm, r)`` the Laplace draw of arm's array r.
    Returns the arms pulled and the (round, arm, pull count) of each release."""
    learner = AnytimeLazyUCB(n_arms, eps)
    arrays: dict[int, float] = {}
    arms, releases = [], []
    t = 1
    while t <= horizon:
        cohort = learner.plan_cohort(t, horizon, chunk=7)  # a tiny chunk: the cohort must not care
        for i, j in enumerate(cohort.tolist()):
            count = int(learner.pulls[j]) + 1 + int(np.sum(cohort[:i] == j))
            arrays[j] = arrays.get(j, 0.0) + rewards(j, count)
        for j in learner.record_pulls(cohort):
            r, n = learner.filling(j)
            learner.on_release(j, arrays.pop(j) + noise(j, r), n)
            releases.append((t + cohort.size - 1, j, int(learner.pulls[j])))
        arms.extend(cohort.tolist())
        t += cohort.size
    return np.array(arms), releases, learner


def test_schedule_refreshes_at_3_7_15():
    assert [refresh_count(r) for r in range(6)] == [1, 3, 7, 15, 31, 63]
    counts = np.arange(1, 5000)
    arrays = array_of_pull(counts)
    assert np.all((2 ** arrays <= counts) & (counts < 2 ** (arrays + 1)))
    rng = np.random.default_rng(0)
    _, releases, learner = drive_lazy(3, lambda j, c: float(rng.random() < 0.5), 3000, lambda j, r: 0.0)
    for j in range(3):
        at = [c for _, a, c in releases if a == j]
        assert at == [2 ** (k + 1) - 1 for k in range(len(at))], at
        assert learner.pulls[j] < 2 ** (len(at) + 1) - 1  # the next array is not full yet


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), horizon=st.integers(20, 400), victim=st.integers(0, 10_000),
       eps=st.sampled_from([0.5, 2.0, 50.0]))
def test_partial_arrays_never_influence_decisions(seed, horizon, victim, eps):
    """Theorem 2's invariant (spec §7 item 22): change one observation; every decision up to and
    including the round its array fills is unchanged (if it never fills, the whole run is)."""
    base = np.random.default_rng(seed).random((4, 2 * horizon + 2))
    arms, releases, _ = drive_lazy(4, lambda j, c: base[j, c], horizon, lambda j, r: 0.1 * (j - r), eps)
    j = int(arms[victim % horizon])
    count = int(np.sum(arms[: victim % horizon + 1] == j))
    r = int(array_of_pull(count))
    fill = next((t for t, a, c in releases if a == j and c == refresh_count(r)), horizon)
    flipped = base.copy()
    flipped[j, count] = 1.0 - flipped[j, count] + 3.0  # any change, even out of range
    arms2, _, _ = drive_lazy(4, lambda a, c: flipped[a, c], horizon, lambda a, rr: 0.1 * (a - rr), eps)
    np.testing.assert_array_equal(arms2[:fill], arms[:fill])


def test_index_is_eq4_and_ties_go_low():
    learner = AnytimeLazyUCB(3, 2.0)
    for t in (1, 2, 3):
        cohort = learner.plan_cohort(t, 100)
        assert cohort.tolist() == [t - 1]
        (j,) = learner.record_pulls(cohort)
        learner.on_release(j, 0.5, 1)
    pol = learner.policy()
    t = np.array([4, 100])
    want = 0.5 + np.sqrt(3 * np.log(t) / 1) + 3 * np.log(t) / (2.0 * 1)
    np.testing.assert_allclose(pol.index(t), np.repeat(want[:, None], 3, axis=1))
    assert pol.arms(t).tolist() == [0, 0]


def test_cohort_never_overruns_a_completion():
    learner = AnytimeLazyUCB(2, 1.0)
    with pytest.raises(ValueError, match="overran"):
        learner.record_pulls(np.array([0, 0]))


# --- Hybrid-UCB ------------------------------------------------------------------------------------


def test_binary_nodes_cover_the_prefix_exactly():
    for c in range(1, 300):
        names, used = binary_nodes(np.array(c), 10)
        spans = [(int(nm) - (1 << lv), int(nm)) for lv, (nm, u) in enumerate(zip(names, used)) if u]
        covered = sorted(i for lo, hi in spans for i in range(lo, hi))
        assert covered == list(range(c))  # disjoint dyadic blocks, union [0, c)
        assert len(spans) == bin(c).count("1")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 200))
def test_hybrid_tree_sums_are_true_sums_plus_cached_node_noise(seed, n):
    """After each pull, μ̃·O = Σ arrays + their cached Z + tree prefix + the noise of exactly the
    dyadic nodes of the prefix (each node's draw made once, when the node completed), up to the
    rounding of each released sum to its grid (at most half a step each)."""
    rng = np.random.default_rng(seed)
    eps = 0.7
    h = HybridUCB(1, eps)
    ga = grid_step(2 / eps)
    x0, z0 = rng.random(), float(sample_grid_steps(1, rng)[0])
    h.observe(0, x0, 0.0, z0)
    logged_sum, logged_noise, roundings = x0, ga * z0, ga / 2
    tree_x, node_y = [], [0.0]
    for _ in range(n):
        x, (y, z) = rng.random(), sample_grid_steps(2, rng)
        r = h.r[0]
        g = grid_step(BinaryMechanism(eps / 2).scale(r))
        tree_x.append(x)
        node_y.append(y * g)
        filled = h.observe(0, x, y, z)
        c = len(tree_x)
        expect = logged_sum + logged_noise + sum(tree_x) + binary_prefix_noise(np.array(c), np.array(node_y))
        assert h.means[0] * h.pulls[0] == pytest.approx(expect, abs=roundings + g * c.bit_length() / 2 + 1e-9)
        if filled:
            assert c == 2 ** r
            logged_sum += sum(tree_x)
            logged_noise += ga * z
            roundings += ga / 2
            tree_x, node_y = [], [0.0]
            assert h.r[0] == r + 1


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 4), eps=st.sampled_from([0.05, 0.5, 8.0]),
       n=st.integers(1, 300))
def test_hybrid_releases_lie_on_their_grids(seed, k, eps, n):
    """Every noisy node sum Hybrid-UCB keeps, and each arm's first array release, is an integer
    times its grid step (exact discrete Laplace, #13 item 2): a function of an integer only, where
    floating-point Laplace leaves values off any grid. (Sums of several releases are
    post-processing and need not be.)"""
    rng = np.random.default_rng(seed)
    h = HybridUCB(k, eps)
    ga = grid_step(2 / eps)
    for t in range(1, n + 1):
        j = h.choose(t)
        node, array = sample_grid_steps(2, rng)
        first = h.pulls[j] == 0
        h.observe(j, float(rng.random()), node, array)
        if first:
            assert h.arrays_noisy[j] == np.rint(h.arrays_noisy[j] / ga) * ga
        g = h.node_grid[j]
        assert g == grid_step(h.tree.scale(h.r[j]))
        v = np.array(h.alpha_noisy[j])
        assert np.array_equal(v, np.rint(v / g) * g)


def test_hybrid_server_draws_integer_grid_steps():
    """The analyzer's noise blocks are integers with the law Lap_Z(2²⁰), by chi-square over 16 bins
    (the continuous law's sixteenths) of 2·65536 draws at key 7, α = 10⁻³."""
    server = online_parties.HybridServer(3, 0.5, "r", 100, key=7)
    steps = server.noise(1, 65536).ravel()
    assert np.array_equal(steps, np.rint(steps))
    b = 1 / LAPLACE_GRID
    p = np.arange(1, 16) / 16
    inner = np.where(p < 0.5, b * np.log(2 * p), -b * np.log(2 * (1 - p)))
    counts = np.histogram(steps, bins=np.concatenate([[-np.inf], inner, [np.inf]]))[0]
    beta = np.exp(-1 / b)

    def at_most(k):  # P[L ≤ k], k integer
        return np.where(k < 0, beta ** (-k) / (1 + beta), 1 - beta ** (k + 1) / (1 + beta))

    # np.histogram's bins are [e_i, e_{i+1}): P[e_i ≤ L < e_{i+1}] = P[L ≤ ⌈e_{i+1}⌉ − 1] − P[L ≤ ⌈e_i⌉ − 1]
    cum = np.concatenate([[0.0], at_most(np.ceil(inner) - 1), [1.0]])
    assert stats.chisquare(counts, np.diff(cum) * steps.size).pvalue > 1e-3
    assert np.abs(steps).mean() > 1000  # not the unit-scale float Laplace drawn before


@settings(max_examples=200, deadline=None)
@given(v=st.floats(0, 1e6), d=st.floats(-1, 1), scale=st.floats(0.01, 5e5))
def test_grid_step_release_loses_at_most_one_over_scale(v, d, scale):
    """Neighbouring sums (|v − v′| ≤ 1) round at most 1/g + 1 steps apart, and unit steps
    Lap_Z(1/γ) lose γ per step: at most 1/b, the continuous Laplace's ε."""
    g = grid_step(scale)
    shift = abs(np.rint(v / g) - np.rint((v + d) / g))
    assert shift * LAPLACE_GRID <= 1 / scale * (1 + 1e-12)


def test_grid_step_refuses_a_scale_beyond_its_grid():
    with pytest.raises(ValueError, match="epsilon is too small"):
        grid_step(2.0 ** 20)
    with pytest.raises(ValueError, match="epsilon is too small"):
        HybridUCB(2, 1e-6)


def test_hybrid_index_is_eq35():
    h = HybridUCB(2, 1.0)
    h.observe(0, 1.0, 0.0, 0.0)
    h.observe(1, 0.0, 0.0, 0.0)
    for _ in range(5):
        h.observe(1, 0.0, 0.0, 0.0)
    o, t = 6, 50
    u1 = 0.0 + math.sqrt(3 * math.log2(t) / o) + 6 * math.sqrt(8) * math.log2(t) * math.floor(math.log2(o + 1)) / o
    u0 = 1.0 + math.sqrt(3 * math.log2(t)) + 6 * math.sqrt(8) * math.log2(t) * 1
    assert h.choose(t) == (0 if u0 >= u1 else 1)
    assert h.means[1] == 0.0 and h.pulls[1] == 6


def _hybrid_state(h: HybridUCB) -> dict:
    return {k: v for k, v in vars(h).items() if k != "tree"}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 5), eps=st.sampled_from([0.1, 1.0, 128.0]),
       warm=st.integers(5, 300), want=st.integers(2, 300), gaussian=st.booleans())
def test_leader_streak_equals_stepping_observe(seed, k, eps, warm, want, gaussian):
    """One speculative window leaves the learner exactly where choose()/observe() would: the same
    number of pulls of the leader (it stops at the first round the leader loses, ties to the lower
    index), and every field (means, p-sums in S, their noise, bonuses) bit for bit. Rewards are
    Bernoulli or arbitrary floats in [0, 1] (whose sums depend on the order of additions); the
    window may end right before an array fill."""
    rng = np.random.default_rng(seed)
    h = HybridUCB(k, eps)
    t = 1
    for _ in range(warm):  # any history: arms by choose(), but perturbed so no arm is starved
        j = h.choose(t) if rng.random() < 0.7 or t <= k else int(rng.integers(k))
        h.observe(j, float(rng.random()), *sample_grid_steps(2, rng))
        t += 1
    j = h.choose(t)
    room = refresh_count(h.r[j]) - h.pulls[j] - 1
    if room < 2:
        return
    w = min(want, room)
    x = rng.random(w) if gaussian else (rng.random(w) < 0.6).astype(float)
    y = sample_grid_steps(w, rng)
    lt = np.array([math.log2(t + i) for i in range(w)])
    ref = HybridUCB(k, eps)
    ref.__dict__.update(copy.deepcopy(_hybrid_state(h)))
    won = leader_streak(h, j, x, y, lt, np.sqrt(lt))
    steps = 0
    while steps < w and (steps == 0 or ref.choose(t + steps) == j):
        ref.observe(j, float(x[steps]), float(y[steps]), 0.0)
        steps += 1
    assert won == steps
    assert _hybrid_state(h) == _hybrid_state(ref)


@pytest.mark.parametrize(("leader", "ties_won"), [(1, 0), (0, 1)])
def test_leader_streak_ties_go_to_the_lower_index(leader, ties_won):
    """Noise-free, all-ones rewards: the leader (8 pulls) catches up with the other arm (10 pulls);
    at 10 pulls both indices are equal to the bit. Arm 0 wins that tie, as in choose()."""
    h = HybridUCB(2, 1.0)
    for j, n in ((leader, 8), (1 - leader, 10)):
        for _ in range(n):
            h.observe(j, 1.0, 0.0, 0.0)
    t = 100
    assert h.choose(t) == leader
    ref = HybridUCB(2, 1.0)
    ref.__dict__.update(copy.deepcopy(_hybrid_state(h)))
    lt = np.log2(np.arange(t, t + 6, dtype=float))
    won = leader_streak(h, leader, np.ones(6), np.zeros(6), lt, np.sqrt(lt))
    assert won == 2 + ties_won  # pulls 9 and 10, then 11 if it wins the tie at 10
    for i in range(won):
        assert ref.choose(t + i) == leader
        ref.observe(leader, 1.0, 0.0, 0.0)
    assert ref.choose(t + won) != leader
    assert _hybrid_state(h) == _hybrid_state(ref)


@pytest.mark.parametrize("off_by_an_ulp", [False, True])
def test_log2_of_rounds_is_math_log2(off_by_an_ulp):
    """The streak driver's log2 t is choose()'s math.log2(t) to the bit: numpy's is used only on
    rounds where it was checked equal, and a disagreeing vectorized log2 is dropped for good."""
    vec = (lambda a: np.nextafter(np.log2(a), np.inf)) if off_by_an_ulp else np.log2
    log2 = _Log2Rounds(vec)
    for t0, n in ((1, 1000), (1001, 24), (1, 1024), (500, 600), (5000, 10)):
        got = log2(t0, n)
        assert got.tolist() == [math.log2(t) for t in range(t0, t0 + n)]
    assert log2.numpy_ok is not off_by_an_ulp
    assert log2.checked == (0 if off_by_an_ulp else 1099)  # 5000… is not contiguous: not checked


def test_leader_streak_refuses_a_window_across_a_fill():
    h = HybridUCB(2, 1.0)
    h.observe(0, 1.0, 0.0, 0.0)
    h.observe(1, 0.0, 0.0, 0.0)
    h.observe(0, 1.0, 0.0, 0.0)  # pulls 2 of tree 1, which fills at 3
    lt = np.log2(np.arange(4.0, 6.0))
    with pytest.raises(ValueError, match="array fill"):
        leader_streak(h, 0, np.ones(2), np.zeros(2), lt, np.sqrt(lt))


@pytest.mark.parametrize(("setting", "eps", "seed", "horizon", "reward"), [
    ((0.75, 0.70, 0.70, 0.70, 0.70), 0.1, 0, 9_000, "bernoulli"),  # short streaks; 5 noise blocks
    ((0.75, 0.70, 0.70, 0.70, 0.70), 1.0, 1, 6_000, "bernoulli"),
    ((0.75, 0.70, 0.70, 0.70, 0.70), 128.0, 2, 9_000, "bernoulli"),  # long streaks
    ((0.75, 0.625, 0.5, 0.375, 0.25), 0.25, 3, 6_000, "bernoulli"),
    ((0.75, 0.15, 0.15, 0.15, 0.15), 8.0, 4, 6_000, "bernoulli"),
    ((0.6, 0.6, 0.5), 64.0, 5, 6_000, "bernoulli"),  # two equal best arms: ties matter
    ((0.75, 0.70, 0.70, 0.70, 0.70), 2.0, 6, 6_000, "gaussian"),  # float sums: order matters
])
def test_hybrid_streaks_equal_one_user_per_plan(setting, eps, seed, horizon, reward, monkeypatch):
    """The analyzer looking ahead (in-process), the analyzer planning the blocks that no reward can
    change (what it does over MQTT) and the analyzer serving one user per plan, stepwise: same
    pulls, same regret curves, same ledger, bit for bit. The analyzer's noise blocks are shrunk to
    2048 rounds so that streaks cross several block boundaries at a horizon the one-user-per-plan
    reference (about 0.3 ms a user through the whole spine) covers in seconds."""
    monkeypatch.setattr(online_parties, "NOISE_BLOCK", 2048)
    fast, a = run_task("hybrid-ucb", horizon, eps, setting, seed, reward=reward)
    decided, b = run_task("hybrid-ucb", horizon, eps, setting, seed, reward=reward, oracle=False)
    with monkeypatch.context() as m:
        m.setattr(online_parties.HybridServer, "decided", OneUserPlans.decided)
        ref, c = run_task("hybrid-ucb", horizon, eps, setting, seed, reward=reward, oracle=False)
    assert a.logic.streaks.stats["streak_rounds"] > 0 and c.logic.streaks.stats["streak_rounds"] == 0
    # The decided blocks are real: fewer plans than users (at ε = 128 the fewest, 1.3×).
    assert b.logic.plans_made < horizon / 1.2, b.logic.plans_made
    assert c.logic.plans_made == horizon
    for got in (fast, decided):
        assert got.learner[0]["pulls"] == ref.learner[0]["pulls"]
        np.testing.assert_array_equal(got.pseudo, ref.pseudo)
        np.testing.assert_array_equal(got.realized, ref.realized)
        assert got.privacy == ref.privacy and got.privacy["releases"] == horizon


def test_hybrid_ledger_paper_depth_spends_1_5_eps():
    assert hybrid_epsilon(1.0, "r", 20) == pytest.approx(1.5)
    assert hybrid_epsilon(1.0, "r+1", 20) == pytest.approx(1.0)


# --- FTNL -------------------------------------------------------------------------------------------


def test_ftnl_epoch_boundaries():
    assert [epoch_of(t) for t in range(1, 17)] == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4]
    for s in range(12):
        assert all(epoch_of(t) == s for t in epoch_rounds(s)) and len(epoch_rounds(s)) == 2**s
    f = FTNL(3)
    assert f.action == 0 and f.epoch_length == 1
    f.conclude_epoch(2)
    assert (f.epoch, f.action, f.epoch_length) == (1, 2, 2)
    f.conclude_epoch(None)
    assert f.action == 2


def test_ftnl_run_plays_previous_epochs_noisy_leader():
    T = 2**10 + 100  # a truncated last epoch
    res, _ = run_task("ftnl", T, 1e6, (0.2, 0.9, 0.5), seed=3)
    assert [r["epoch"] for r in res.rounds] == list(range(10))  # epoch 10 is cut at T: no release
    assert [r["played"] for r in res.rounds][0] == 0
    for prev, cur in zip(res.rounds, res.rounds[1:]):
        assert cur["played"] == prev["next"]
    assert res.rounds[-1]["next"] == 1
    assert sum(r["n"] for r in res.rounds) == 2**10 - 1


@pytest.mark.parametrize("c", [1.0, 2.0])
def test_report_noisy_max_law(c):
    """P(argmax = 0) for sums (d, 0) is P(L2 − L1 < d) = 1 − ½e^{−d/b}(1 + d/(2b)), b = c/ε."""
    eps, d, n = 1.0, 0.8, 40_000
    rnm = ReportNoisyMax(eps, c)
    rng = np.random.default_rng(11)
    wins = sum(rnm.select(np.array([d, 0.0]), rng) == 0 for _ in range(n))
    b = c / eps
    p = 1 - 0.5 * math.exp(-d / b) * (1 + d / (2 * b))
    z = (wins - n * p) / math.sqrt(n * p * (1 - p))
    assert abs(z) < 4, z
    # Power: the other multiplier's law is rejected.
    b2 = (3 - c) / eps
    p2 = 1 - 0.5 * math.exp(-d / b2) * (1 + d / (2 * b2))
    assert abs((wins - n * p2) / math.sqrt(n * p2 * (1 - p2))) > 4
    assert rnm.privacy_event(5).pure_epsilon == pytest.approx(2 * eps / c)


# --- distributed variants ---------------------------------------------------------------------------


def test_distributed_array_sum_is_central_sum_plus_discrete_laplace():
    """Decoded sum − true sum, on the integer scale, follows Lap_Z(g/ε): chi-square at a fixed seed,
    with power against the continuous mechanism's rounding-free scale being twice as large."""
    eps, n, trials = 0.5, 16, 6000
    rel = DistributedArraySum(eps, p=1e-6)
    q = rel.params(n)
    rng = np.random.default_rng(5)
    errors = []
    for i in range(trials):
        x = (rng.random(n) < 0.6).astype(float)  # Bernoulli: randomized rounding is exact
        noisy, _ = rel.decode(modular_sum(rel.randomize(x, q, rng), q.m), q, rng)
        errors.append(round((noisy - x.sum()) * q.g))
    errors = np.array(errors)
    assert chi_square_pvalue(errors, lambda k: discrete_laplace_pmf(k, q.g / eps)) > P_MIN
    assert chi_square_pvalue(errors, lambda k: discrete_laplace_pmf(k, 2 * q.g / eps)) < P_MIN


@pytest.mark.parametrize("where", ["intermediary", "analyzer"])
def test_distributed_noisy_max_coordinates_are_lap_z(where):
    eps, c, n, k, trials = 1.0, 2.0, 8, 3, 3000
    rnm = DistributedNoisyMax(eps, 1e-6, c, where)
    q = rnm.params(n)
    rng = np.random.default_rng(9)
    errs = []
    for _ in range(trials):
        x = (rng.random((n, k)) < 0.5).astype(float)
        y = rnm.randomize(x, q, rng)
        released = np.array([modular_sum(y[:, i], q.m) for i in range(k)])
        sums = rnm.decode(released, q, rng)
        errs.extend(np.round((sums - x.sum(0)) * q.g).astype(int))
        j, leaked = rnm.select(released, q, rng)
        assert (leaked is None) == (where == "intermediary")
    assert chi_square_pvalue(np.array(errs), lambda v: discrete_laplace_pmf(v, c * q.g / eps)) > P_MIN
    want = 2 * eps / c if where == "intermediary" else k * eps / c
    assert rnm.privacy_event(k).pure_epsilon == pytest.approx(want)


def test_an_argmax_round_releases_only_the_index_of_the_decoded_maximum():
    """FTNL's secure report-noisy-max: the intermediary reads each sum in [−τ, n·g + τ] (the
    decode's underflow correction) and releases the index alone."""
    m, tau = 101, 5
    rnd = Round(0, "aggregator", "argmax", expected=2, width=3, m=m, decode=(-tau, 2 * 10 + tau))
    box = Intermediary("aggregator")
    box.open(rnd)
    plan = Plan(0, 0, 2, {}, (rnd,), (Join(0, 0, 2, 2),))
    box.open_plan(plan)
    # Sums per entry: −3 (≡ 98), 20, 7: the largest representative is entry 1, though 98 is largest mod m.
    box.receive(Reports(0, 0, np.array([0, 1]), np.array([[[m - 4, 10, 3], [1, 10, 4]]])))
    rel = box.release(0)
    assert rel.values.tolist() == [[1]] and rel.n_reports == 2


# --- end to end ----------------------------------------------------------------------------------


@pytest.mark.parametrize("trust", ["central", "distributed"])
def test_lazy_ucb_run_is_reproducible_and_private_per_array(trust):
    T = 20_000
    a, _ = run_task("anytime-lazy-ucb", T, 1.0, seed=4, trust=trust)
    b, _ = run_task("anytime-lazy-ucb", T, 1.0, seed=4, trust=trust)
    np.testing.assert_array_equal(a.pseudo, b.pseudo)
    pulls = np.array(a.learner[0]["pulls"])
    assert pulls.sum() == T
    assert a.privacy["epsilon_pure"] == 1.0 and a.privacy["guarantee"] == "proven"
    # every reward enters exactly one release, except those of the arrays still filling
    released = sum(r["n"] for r in a.rounds)
    assert released == sum(refresh_count(int(array_of_pull(int(o + 1))) - 1) for o in pulls)
    assert np.all(np.diff(a.pseudo[0]) >= 0)


def test_large_epsilon_lazy_ucb_beats_uniform_play():
    T = 50_000
    res, _ = run_task("anytime-lazy-ucb", T, 64.0, (0.75, 0.15, 0.15, 0.15, 0.15), seed=1)
    assert res.pseudo[0, -1] < 0.05 * 0.6 * T * 4 / 5  # uniform play: 0.6·T·4/5


def test_hybrid_and_dp_se_runs():
    T = 5_000
    h, _ = run_task("hybrid-ucb", T, 8.0, seed=2)
    assert sum(h.learner[0]["pulls"]) == T and h.privacy["epsilon_pure"] == pytest.approx(12.0)
    d, _ = run_task("dp-se", T, 8.0, seed=2, trust="distributed")
    assert d.privacy["epsilon_pure"] == 8.0 and d.pseudo[0, -1] > 0
    with pytest.raises(ValueError, match="central model only"):
        run_task("hybrid-ucb", T, 8.0, seed=2, trust="distributed")


@pytest.mark.parametrize(("table", "why"), [
    ({"algorithm": "anytime-lazy-ucb", "intermediary": "secagg"}, "needs trust = 'distributed'"),
    ({"algorithm": "ftnl", "trust": "distributed", "intermediary": "secagg"}, "needs argmax_at = .analyzer."),
    ({"algorithm": "dp-se", "trust": "distributed", "intermediary": "secagg", "secagg_graph": "ring"},
     "secagg_graph"),
    ({"algorithm": "dp-se", "trust": "distributed", "intermediary": "secagg", "corrupt_fraction": 1.5},
     "corrupt_fraction"),
    ({"algorithm": "anytime-lazy-ucb", "trust": "distributed", "intermediary": "secagg", "horizon": 2**20 + 1},
     "up to horizon 1,048,576"),
])
def test_secure_aggregation_options_are_refused_where_they_cannot_hold(table, why):
    fam = FAMILY
    table = dict(table)
    horizon = table.pop("horizon", 100)
    with pytest.raises(ValueError, match=why):
        fam.load({"family": fam.name, "horizon": horizon, "epsilon": 1.0, "environment": {"setting": 1},
                  "algorithms": {"a": table}}, "x.toml")


def test_secure_dp_se_opens_secure_rounds_with_the_threat_models_graph():
    """DP-SE's distributed twin under intermediary = "secagg": every batch is one cohort round
    (the distributed-DP MAB family's secure path), its graph the one the users accept."""
    fam = FAMILY
    config = fam.load({"family": fam.name, "horizon": 5000, "epsilon": 1.0, "environment": {"setting": 2},
                       "algorithms": {"a": {"algorithm": "dp-se", "trust": "distributed", "intermediary": "secagg",
                                            "secagg_graph": "complete"}}}, "x.toml")
    analyzer = fam.analyzer(fam.public_task(config, "a", [0]), [1])
    (plan, *_) = analyzer.plans()
    (rnd,) = plan.opens
    assert rnd.secagg == "complete" and rnd.secagg_threshold == (2 * rnd.expected) // 3 + 1
    fam.check_secure_round(config, "a", rnd)
    ideal = fam.load({**config.model_dump(), "algorithms": {"a": {"algorithm": "dp-se", "trust": "distributed"}}},
                     "x.toml")
    with pytest.raises(ValueError, match="intermediary = 'auto'"):
        fam.check_secure_round(ideal, "a", rnd)  # users running the ideal sum refuse a secure round


def test_the_secure_horizon_limit_is_the_codecs_array_limit():
    from privbandit.families.private_online_learning.config import SECURE_HORIZON_MAX
    from privbandit.services.codec import MAX_ARRAY_ELEMENTS

    assert SECURE_HORIZON_MAX == MAX_ARRAY_ELEMENTS  # a plan must carry the names of a whole array


@pytest.mark.parametrize("name", ["ftl", "hedge"])
def test_experts_decided_blocks_equal_one_user_per_plan(name, monkeypatch):
    """FTL and Hedge through the spine: looked ahead (in-process), decided blocks (over MQTT) and one
    user per plan give the same actions and regret, bit for bit."""
    fast, _ = run_task(name, 3000, seed=4)
    decided, b = run_task(name, 3000, seed=4, oracle=False)
    with monkeypatch.context() as m:
        m.setattr(online_parties.ExpertsServer, "decided", OneUserPlans.decided)
        ref, c = run_task(name, 3000, seed=4, oracle=False)
    assert c.logic.plans_made == 3000
    assert b.logic.plans_made < (400 if name == "ftl" else 600), b.logic.plans_made
    for got in (fast, decided):
        assert got.learner == ref.learner
        np.testing.assert_array_equal(got.pseudo, ref.pseudo)
        np.testing.assert_array_equal(got.realized, ref.realized)
