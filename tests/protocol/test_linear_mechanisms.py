"""P_Amp, P_Vec, the tree and the shufflers of the shuffle-model linear bandits (Chowdhury & Zhou 2022).

Statistical tests run at fixed seeds; thresholds are p > 1e-3 (tests/stats.py) unless stated, and each
variance test also checks that a plausible wrong formula is rejected, so it can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits.mechanisms import VecParams
from privbandit.protocol.spine.events import Join, Plan, Reports, Round
from privbandit.protocol.spine.intermediary import Intermediary
from tests.stats import P_MIN

D = 3
TRIALS = 20_000
B = 20


def _entries(rng, trials=TRIALS, n=B, d=D):
    x = rng.uniform(-1, 1, size=(n, d)) / math.sqrt(d)  # ‖φ‖ ≤ 1
    y = rng.integers(0, 2, size=n).astype(float)
    e = slb.user_entries(x, y)
    return np.broadcast_to(e, (trials,) + e.shape)


def _variance_pvalues(errors: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """Two-sided χ² test of the sample variance of each column against ``variance``."""
    n = errors.shape[0]
    stat = (n - 1) * errors.var(axis=0, ddof=1) / variance
    cdf = stats.chi2.cdf(stat, n - 1)
    return 2 * np.minimum(cdf, 1 - cdf)


def _mean_pvalues(errors: np.ndarray, variance: np.ndarray) -> np.ndarray:
    z = errors.mean(axis=0) / np.sqrt(variance / errors.shape[0])
    return 2 * stats.norm.sf(np.abs(z))


def test_entries_layout_round_trip():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 5)), rng.normal(size=4)
    vec, mat = slb.split_entries(slb.user_entries(x, y), 5)
    np.testing.assert_allclose(vec, x * y[:, None])
    np.testing.assert_allclose(mat, x[:, :, None] * x[:, None, :])
    w = rng.normal(size=(3, 4, 4))
    w = w + np.swapaxes(w, 1, 2)
    np.testing.assert_array_equal(slb.from_upper(slb.to_upper(w), 4), w)


@pytest.mark.parametrize("span", ["2delta", "delta"])
def test_vec_analyzer_unbiased_with_formula_variance(span):
    rng = np.random.default_rng(11)
    params = VecParams(g=9, b=3, p=0.25, shift=1.0, span=2.0 if span == "2delta" else 1.0)
    entries = _entries(rng)
    counts = slb.BitSumRandomizer(params).randomize(entries, rng)
    totals = slb.LabelCountShuffler().release(counts)
    analyzer = slb.BitSumAnalyzer(params)
    errors = analyzer.analyze(totals, B) - entries.sum(axis=-2)
    variance = analyzer.error_variance(entries[0])
    assert _mean_pvalues(errors, variance).min() > P_MIN / errors.shape[1]
    assert _variance_pvalues(errors, variance).min() > P_MIN / errors.shape[1]
    # Power: the paper's noise-only variance (Δ/g)²·B·b·p(1−p), without the rounding term, is rejected.
    noise_only = params.scale**2 * B * params.b * params.p * (1 - params.p)
    assert _variance_pvalues(errors, np.full_like(variance, noise_only)).min() < 1e-6


def test_vec_without_the_b_delta_correction_is_biased():
    """Cheu et al.'s "subtract Δ" instead of the paper's "subtract BΔ" is off by (B−1)Δ per label."""
    rng = np.random.default_rng(12)
    params = VecParams(g=9, b=3, p=0.25, shift=1.0, span=2.0)
    entries = _entries(rng, trials=200)
    totals = slb.LabelCountShuffler().release(slb.BitSumRandomizer(params).randomize(entries, rng))
    est = slb.BitSumAnalyzer(params).analyze(totals, B)
    cheu = est + (B - 1) * params.shift
    assert abs((est - entries.sum(-2)).mean()) < 0.2
    assert abs((cheu - entries.sum(-2)).mean() - (B - 1)) < 0.2


def test_vec_counts_stay_in_range():
    """span = 2Δ (our fix of spec item 8) keeps every count ≤ g + b; Algorithm 5 as printed reaches 2g + b."""
    rng = np.random.default_rng(13)
    ones = np.ones((1000, 1, 1))
    fixed = VecParams(g=9, b=3, p=0.25, shift=1.0, span=2.0)
    printed = VecParams(g=9, b=3, p=0.25, shift=1.0, span=1.0)
    assert slb.BitSumRandomizer(fixed).randomize(ones, rng).max() <= fixed.g + fixed.b
    assert slb.BitSumRandomizer(printed).randomize(ones, rng).max() > printed.g + printed.b
    assert printed.max_count == 2 * printed.g + printed.b


def test_amp_analyzer_unbiased_with_formula_variance():
    rng = np.random.default_rng(21)
    sigma = 0.7
    entries = _entries(rng)
    reports = slb.GaussianRandomizer(sigma).randomize(entries, rng)
    release = slb.PermutationShuffler(D).release(reports, rng)
    errors = slb.SumAnalyzer().analyze(release) - entries.sum(axis=-2)
    variance = np.full(errors.shape[1], B * sigma**2)
    assert _mean_pvalues(errors, variance).min() > P_MIN / errors.shape[1]
    assert _variance_pvalues(errors, variance).min() > P_MIN / errors.shape[1]
    assert _variance_pvalues(errors, variance * 1.1).min() < 1e-6  # a 10% wrong σ² is caught


def test_amp_matrix_noise_is_symmetric():
    rng = np.random.default_rng(22)
    reports = slb.GaussianRandomizer(1.0).randomize(_entries(rng, trials=3), rng)
    _, mat = slb.split_entries(slb.SumAnalyzer().analyze(reports), D)
    np.testing.assert_array_equal(mat, np.swapaxes(mat, -1, -2))


@pytest.mark.parametrize("independent", [True, False])
def test_shuffler_permutation_is_uniform(independent):
    """Each user's report lands in each position with probability 1/n: χ² over the n×n position table."""
    n, trials = 6, 12_000
    rng = np.random.default_rng(31)
    ids = np.broadcast_to(np.arange(n, dtype=float)[:, None], (trials, n, 1 + 1))  # d = 1: [vec | matrix]
    out = slb.PermutationShuffler(1, independent).release(ids, rng)
    for col in (0, 1):
        table = np.zeros((n, n))
        np.add.at(table, (out[:, :, col].astype(int), np.broadcast_to(np.arange(n), (trials, n))), 1)
        assert stats.chisquare(table.ravel(), np.full(n * n, trials / n)).pvalue > P_MIN
    linked = (out[:, :, 0] == out[:, :, 1]).mean()
    if independent:  # the vector and matrix of a user are unlinked: they coincide w.p. 1/n
        assert abs(linked - 1 / n) < 4 * math.sqrt((1 / n) * (1 - 1 / n) / (trials * n))
    else:
        assert linked == 1.0
    # the release is the multiset of reports, nothing more: same shape, same sorted values
    np.testing.assert_array_equal(np.sort(out[..., 0], axis=1), np.sort(ids[..., 0], axis=1))


def test_spine_shuffle_of_p_amp_permutes_s1_and_s2_independently_and_uniformly():
    """What LinUCB-SDP-Amp's users report into: the spine's shuffler round with the column groups
    (d, D − d). Each user's vector lands in each position w.p. 1/n, her matrix independently of it."""
    n, trials, d, width = 5, 3000, 1, 2
    rnd = Round(0, "shuffler", "shuffle", expected=n, width=width, integer=False, groups=(d, width - d))
    table = np.zeros((2, n, n))
    linked = 0
    values = np.broadcast_to(np.arange(n, dtype=float)[None, :, None], (1, n, width)).copy()
    for t in range(trials):
        box = Intermediary("shuffler", 1, [t])
        plan = Plan(0, 0, n, {}, (rnd,), (Join(0, 0, n, n),))
        box.open_plan(plan)
        assert box.receive(Reports(0, 0, np.arange(n), values)) == n
        out = box.release(0).values[0]
        assert out.shape == (n, width) and sorted(out[:, 0]) == list(range(n)) == sorted(out[:, 1])
        for col in (0, 1):
            table[col, out[:, col].astype(int), np.arange(n)] += 1
        linked += int((out[:, 0] == out[:, 1]).sum())
    for col in (0, 1):
        assert stats.chisquare(table[col].ravel(), np.full(n * n, trials / n)).pvalue > P_MIN
    rate = linked / (trials * n)
    assert abs(rate - 1 / n) < 4 * math.sqrt((1 / n) * (1 - 1 / n) / (trials * n)), rate


def test_label_count_shuffler_releases_only_totals():
    rng = np.random.default_rng(32)
    counts = rng.integers(0, 10, size=(4, B, 7))
    release = slb.LabelCountShuffler().release(counts)
    assert release.shape == (4, 7)
    np.testing.assert_array_equal(release, counts.sum(axis=1))
    # invariant under any re-ordering of users: the sender and order are not in the release
    np.testing.assert_array_equal(release, slb.LabelCountShuffler().release(counts[:, ::-1]))


def test_tree_prefix_noise_is_the_binary_decomposition():
    sigma, shape = 1.0, (4000, 2)
    rng = np.random.default_rng(41)
    tree = slb.TreeAggregator(sigma, shape)
    released = np.zeros(shape)
    for c in range(1, 14):
        released += tree.step(np.zeros(shape), rng)
        np.testing.assert_allclose(released, tree.prefix_noise(), atol=1e-9)
        live = sum(n is not None for n in tree.nodes)
        assert live == bin(c).count("1")
        # prefix noise variance = popcount(c)·σ²
        pv = _variance_pvalues(released, np.full(shape[1], live * sigma**2))
        assert pv.min() > P_MIN / 2
    assert slb.tree_levels(20000) == 15
