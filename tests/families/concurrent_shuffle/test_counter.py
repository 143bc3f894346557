"""The concurrent-shuffle counter: the trees of Alg. 2/3, V_t (Definition 3.1), the server, the noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.families.concurrent_shuffle import counter as cnt
from privbandit.families.concurrent_shuffle import mechanisms as mech
from privbandit.families.concurrent_shuffle import world
from privbandit.families.concurrent_shuffle.tree import MODES, prefix_estimates, tree_for
from privbandit.protocol.spine.errors import ProtocolError

# (mode, n, k, d_low, D): exact CSTA trees, truncated ones, and every binary shape.
TREES = [("csta_k", 8, 2, 2, 2), ("csta_k", 1000, 1, None, None), ("csta_k", 1024, 2, None, None),
         ("csta_k", 2187, 3, None, None), ("csta_k", 512, 4, None, None), ("csta_k", 700, 2, None, None),
         ("csta_k", 999, 3, 2, 8), ("sequential", 300, None, None, None), ("csta_binary", 64, None, None, None),
         ("csta_binary", 100, None, None, None), ("lowest_k_binary", 128, 3, None, None),
         ("highest_k_binary", 128, 3, None, None), ("central_tree", 37, None, None, None),
         ("ldp", 20, None, None, None)]


def test_figure_2_node_sets():
    """Figure 2 (n = 8, k = 2 shufflers of sizes 2 and 4): V_6 = V_7 = {v_1^4, v_5^6}, V_8 = {v_1^4, v_5^8}."""
    for tree in (tree_for("csta_k", 8, 2, d_low=2, degree=2), tree_for("csta_binary", 8)):
        assert tree.sizes == (2, 4)
        v = {t: {(a, b) for _, a, b in tree.node_set(t)} for t in range(1, 9)}
        assert v[6] == v[7] == {(1, 4), (5, 6)}
        assert v[8] == {(1, 4), (5, 8)}
        assert v[1] == set() and v[2] == {(1, 2)} and v[4] == {(1, 4)}


@pytest.mark.parametrize("mode,n,k,d_low,degree", TREES)
def test_node_sets_tile_the_prefix(mode, n, k, d_low, degree):
    """For every t: V_t's nodes are complete, disjoint, cover exactly [1, t0] (t0 = s_1⌊t/s_1⌋), and
    are the highest possible (no level holds a full parent's worth of siblings, except the top)."""
    tree = tree_for(mode, n, k, d_low, degree)
    s1 = tree.sizes[0]
    for t in range(1, n + 1):
        nodes = tree.node_set(t)
        t0 = s1 * (t // s1)
        covered = np.zeros(n + 2, int)
        per_level = {}
        for level, a, b in nodes:
            size = tree.sizes[level - 1]
            assert b - a + 1 == size and (a - 1) % size == 0 and b <= t
            assert (a - 1) // size < tree.nodes(level)  # an opened node
            covered[a:b + 1] += 1
            per_level[level] = per_level.get(level, 0) + 1
        assert (covered[1:t0 + 1] == 1).all() and covered[t0 + 1:].sum() == 0
        for level, c in per_level.items():
            if level < tree.k:
                assert c < tree.sizes[level] // tree.sizes[level - 1]
        if tree.degree is not None:  # |V_t| ≤ k(d − 1), the root's d children only at t = d_low·d^k
            bound = tree.k * (tree.degree - 1) + (1 if t0 == tree.full else 0)
            assert len(nodes) <= bound
        assert tree.node_count(np.array([t0]))[0] == len(nodes)


def test_root_children_at_the_full_horizon():
    tree = tree_for("csta_k", 2 * 4**2, 2, d_low=2, degree=4)
    assert [(lvl, a, b) for lvl, a, b in tree.node_set(32)] == [(2, 1, 8), (2, 9, 16), (2, 17, 24), (2, 25, 32)]


@pytest.mark.parametrize("n,k", [(2 * 4**3, 3), (3**5, 2), (10**3, 1)])
def test_each_user_in_exactly_k_mechanisms(n, k):
    tree = tree_for("csta_k", n, k)
    assert not tree.truncated
    assert all(len(tree.memberships(u)) == k for u in range(1, n + 1))
    assert [len({j for lvl, j in (m for u in range(1, n + 1) for m in tree.memberships(u)) if lvl == i})
            for i in range(1, k + 1)] == [tree.nodes(i) for i in range(1, k + 1)]


def test_truncation_opens_only_complete_nodes():
    tree = tree_for("csta_k", 700, 2)  # d_low = 4, d = 16: n' = 1024
    assert tree.truncated and tree.full == 1024 and tree.sizes == (4, 64)
    assert tree.nodes(2) == 10 and tree.nodes(1) == 175
    assert len(tree.memberships(640)) == 2 and len(tree.memberships(641)) == 1
    assert all(len(tree.memberships(u)) <= 2 for u in range(1, 701))


@pytest.mark.parametrize("mode", MODES)
def test_vectorized_estimates_equal_the_server_step_by_step(mode):
    spec = cnt.counter_spec(mode, 200, 2 if mode in ("csta_k", "lowest_k_binary", "highest_k_binary") else None,
                            1.0, 1e-4)
    bits = cnt.stream_bits("iid", 0.3, spec, 7, [0, 1])
    run = cnt.simulate(spec, bits, 7, "x", [0, 1], keys=[11, 12])
    server = cnt.CounterServer(spec, 2, keys=[11, 12])
    s1 = spec.tree.sizes[0]
    for level in range(1, spec.k + 1):
        for j in range(spec.tree.nodes(level)):
            server.on_node(level, j, run.totals[level - 1][:, j])
    for t in range(1, spec.n + 1):
        got = server.estimate(t)
        want = run.estimates[:, t // s1 - 1] if t >= s1 else np.zeros(2)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("mode,k", [("csta_k", 3), ("csta_binary", None), ("lowest_k_binary", 2)])
def test_server_is_deterministic(mode, k, monkeypatch):
    """Same shuffler outputs → same estimates, in any order the nodes execute; and the server never
    draws: every numpy generator is disabled while it runs."""
    spec = cnt.counter_spec(mode, 500, k, 1.0, 1e-4)
    bits = cnt.stream_bits("iid", 0.5, spec, 3, [0])
    run = cnt.simulate(spec, bits, 3, "x", [0])
    jobs = [(lvl, j) for lvl in range(1, spec.k + 1) for j in range(spec.tree.nodes(lvl))]

    def no_randomness(*a, **kw):
        raise AssertionError("the server drew randomness")

    monkeypatch.setattr(np.random, "default_rng", no_randomness)
    monkeypatch.setattr(np.random, "Generator", no_randomness)
    monkeypatch.setattr(cnt, "stream", no_randomness)
    results = []
    for order in (jobs, jobs[::-1], [jobs[i] for i in np.random.RandomState(0).permutation(len(jobs))]):
        server = cnt.CounterServer(spec, 1)
        for lvl, j in order:
            server.on_node(lvl, j, run.totals[lvl - 1][:, j])
        results.append(server.estimates().tobytes())
    assert results[0] == results[1] == results[2]
    np.testing.assert_array_equal(np.frombuffer(results[0]), run.estimates[0])


def test_server_waits_for_every_node_of_v_t():
    spec = cnt.counter_spec("csta_k", 8, 2, 1.0, 1e-3, d_low=2, degree=2)
    server = cnt.CounterServer(spec, 1)
    server.on_node(1, 2, np.array([3]))  # v_5^6 in, v_1^4 not yet
    assert not server.ready(6)
    with pytest.raises(ProtocolError):
        server.estimate(6)
    server.on_node(2, 0, np.array([5]))
    assert server.ready(6) and server.ready(7) and not server.ready(8)
    with pytest.raises(ProtocolError, match="already"):
        server.on_node(2, 0, np.array([5]))


# Variance of the sample variance of N draws ~ σ⁴(2/(N−1) + κ/N), κ the excess kurtosis; every law here
# has |κ| ≤ 3 at these parameters, so 5 such standard deviations is a < 1e-4 false alarm at any fixed seed.
@pytest.mark.parametrize("mode,protocol,k", [("csta_k", "bin-a", 2), ("csta_binary", "bin-a", None),
                                             ("csta_k", "pvec", 2), ("central_tree", "bin-a", None),
                                             ("ldp", "bin-a", None)])
def test_node_noise_variance_matches_its_law(mode, protocol, k):
    spec = cnt.counter_spec(mode, 4096, k, 1.0, 1e-5, protocol=protocol, vec_scale=1.0)
    bits = cnt.stream_bits("iid", 0.5, spec, 21, list(range(8)))
    run = cnt.simulate(spec, bits, 21, "var", list(range(8)), keys=list(range(100, 108)))
    for row in cnt.node_noise_variance(run)[:2]:
        n = 8 * row["nodes"]
        if n < 200:
            continue
        tol = 5 * math.sqrt(2 / (n - 1) + 3 / n)
        assert abs(row["empirical"] / row["law"] - 1) < tol, row
        assert abs(row["mean"]) < 5 * math.sqrt(row["law"] / n), row


def test_binomial_delta_against_brute_force():
    from scipy.stats import binom

    trials, q, eps = 12, 0.5, 0.3
    p = binom.pmf(np.arange(trials + 1), trials, q)
    P = np.concatenate([p, [0]])
    Q = np.concatenate([[0], p])
    brute = max(np.clip(P - math.exp(eps) * Q, 0, None).sum(), np.clip(Q - math.exp(eps) * P, 0, None).sum())
    assert mech.binomial_delta(trials, q, eps) == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize("m", [2, 9, 81, 5000])
def test_binomial_calibration_meets_its_budget(m):
    b = mech.BinomialSum.make(m, 0.5, 1e-6)
    assert b.delta_achieved <= 1e-6
    assert mech.binomial_delta(m * b.ell, b.q, 0.5) == pytest.approx(b.delta_achieved)
    if b.ell == 1 and b.q_num > 1:  # the smallest grid q: one step less is not private
        assert mech.binomial_delta(m, (b.q_num - 1) / mech.Q_GRID, 0.5) > 1e-6


def test_binomial_event_never_states_more_than_computed():
    b = mech.BinomialSum.make(9, 0.5, 1e-6)
    assert b.event().status == "proven"
    weak = mech.BinomialSum(9, 0.5, 1e-6, 1, mech.Q_GRID // 2, mech.binomial_delta(9, 0.5, 0.5))
    assert weak.delta_achieved > 1e-6 and weak.event().status == "none proven"


@pytest.mark.parametrize("protocol", ["split-mix", "bin-a"])
@pytest.mark.parametrize("n,k", [(3**5, 2), (2 * 4**3, 3)])
def test_ledger_composes_k_levels_to_epsilon_delta(n, k, protocol):
    """k levels at (ε/k, δ/k) compose to (ε, δ): bin-a's δ is calibrated to exactly δ/k per level,
    split-mix's is the closeness term its shares reach, at most δ/k."""
    spec = cnt.counter_spec("csta_k", n, k, 1.0, 1e-5, protocol)
    book = cnt.ledger(spec)
    cnt.record_levels(spec, book)
    s = book.summary()
    assert s["guarantee"] == "proven" and s["epsilon_pure"] is None
    assert s["epsilon_at_delta"] == pytest.approx(1.0)
    if protocol == "bin-a":
        assert s["delta_from_theorems"] == pytest.approx(1e-5)
    else:
        assert 0 < s["delta_from_theorems"] <= 1e-5
    assert spec.level_epsilon == pytest.approx(1 / k) and spec.level_delta == pytest.approx(1e-5 / k)


def test_pvec_below_theory_constant_is_none_proven():
    spec = cnt.counter_spec("csta_k", 243, 2, 1.0, 1e-5, protocol="pvec", vec_scale=1.0)
    book = cnt.ledger(spec)
    cnt.record_levels(spec, book)
    assert book.summary()["guarantee"] == "none proven" and book.summary()["epsilon_at_delta"] is None


def test_hard_inputs_repeat_each_fresh_bit():
    n, k, eps = 5000, 2, 1.0
    r = world.rep(n, k, eps)
    b = world.bits("hard", 0.5, n, k, eps, 4, 0, 0, n)
    assert (b[:r] == 0).all()
    body = b[r:]
    for seg in range(len(body) // (r + 1)):
        block = body[seg * (r + 1) + 1:(seg + 1) * (r + 1)]
        assert (block == block[0]).all()
    assert 0.4 < body.mean() < 0.6
    # Any window of users draws the same bits as the whole stream.
    np.testing.assert_array_equal(world.bits("hard", 0.5, n, k, eps, 4, 0, 1234, 4321), b[1234:4321])
    np.testing.assert_array_equal(world.bits("iid", 0.5, n, k, eps, 4, 0, 4000, 4500),
                                  world.bits("iid", 0.5, n, k, eps, 4, 0, 0, n)[4000:4500])


def test_user_reports_do_not_depend_on_the_window():
    spec = cnt.counter_spec("csta_k", 10000, 2, 1.0, 1e-5)
    bits = cnt.stream_bits("iid", 0.5, spec, 2, [0])
    whole = cnt.user_reports(spec, 1, bits, 2, "x", [0], 0)
    part = cnt.user_reports(spec, 1, bits[:, 5000:9000], 2, "x", [0], 5000)
    np.testing.assert_array_equal(whole[:, 5000:9000], part)


@pytest.mark.parametrize("kwargs,match", [
    (dict(mode="csta_k", n=100, k=0), "k = 0 must lie in"),
    (dict(mode="csta_k", n=100, k=9), "k = 9 must lie in"),
    (dict(mode="nope", n=100, k=1), "mode = 'nope'"),
    (dict(mode="highest_k_binary", n=64, k=6), "k = 6 must lie in"),
    (dict(mode="csta_k", n=100, k=2, d_low=5, degree=30), "exceed the horizon"),
    (dict(mode="csta_k", n=999, k=3, d_low=2, degree=5), "must be ≥ n = 999"),
])
def test_bad_trees_are_refused_with_the_parameter_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tree_for(**kwargs)


def test_prefix_estimates_shape():
    tree = tree_for("csta_k", 8, 2, d_low=2, degree=2)
    est = prefix_estimates(tree, [np.array([[1.0, 2, 3, 4]]), np.array([[10.0, 20]])])
    np.testing.assert_array_equal(est, [[1, 10, 13, 30]])
