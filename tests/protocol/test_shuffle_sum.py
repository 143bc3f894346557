"""The split-and-mix primitive (protocol/primitives/shuffle_sum.py): the shares are uniform and add
up to the input, the closeness bound holds against the exact statistical distance computed by
enumeration, the shuffled multiset is not a pure-DP release, and settings outside the bound are
refused by name."""

import collections
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from privbandit.protocol.primitives import shuffle_sum as ss
from privbandit.protocol.privacy import (ApproxDP, NoneProven, PureDP, SkellamRDP, closeness_budget,
                                         near_secure_sum)
from tests.stats import P_MIN


@settings(max_examples=60, deadline=None)
@given(m=st.integers(2, 2**62), shares=st.integers(2, 9), seed=st.integers(0, 2**32 - 1),
       k=st.integers(0, 40))
def test_shares_are_residues_and_add_up_to_the_input(m, shares, seed, k):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, m, size=(2, k), dtype=np.int64)
    out = ss.split(y, shares, m, rng)
    assert out.shape == (2, k, shares) and out.dtype == np.int64
    assert ((out >= 0) & (out < m)).all()
    # Σ shares ≡ y (mod m), added as Python ints: no int64 overflow can hide a wrong share
    for r in range(2):
        for i in range(k):
            assert sum(int(v) for v in out[r, i]) % m == int(y[r, i])


@pytest.mark.parametrize("y", [0, 6])
def test_every_share_is_uniform_whatever_the_input(y):
    """Each of the s shares, the completing one included, is uniform on Z_m for every input (any
    s − 1 of them are independent uniforms): chi-square at a fixed seed, p > 10⁻³. A split whose
    last share were y itself, or whose first shares skipped m − 1, fails."""
    m, s, n = 7, 3, 70_000
    shares = ss.split(np.full(n, y), s, m, np.random.default_rng(11 + y))
    for j in range(s):
        counts = np.bincount(shares[:, j], minlength=m)
        assert stats.chisquare(counts).pvalue > P_MIN, (j, counts)
    # pairs of distinct shares are jointly uniform too (s − 1 of s are independent)
    pair = np.bincount(shares[:, 0] * m + shares[:, 2], minlength=m * m)
    assert stats.chisquare(pair).pvalue > P_MIN
    # the test can fail: shares drawn on [0, m − 1) (the flaw STYLE.md names) are rejected
    biased = np.random.default_rng(3).integers(0, m - 1, n)
    assert stats.chisquare(np.bincount(biased, minlength=m)).pvalue < P_MIN


def test_the_analyzers_sum_of_the_mixed_shares_is_the_secure_sum():
    rng = np.random.default_rng(5)
    m = 2**61 - 1
    y = rng.integers(0, m, size=(3, 500))
    mixed = ss.split(y, 7, m, rng).reshape(3, -1)
    mixed = np.stack([rng.permutation(row) for row in mixed])
    want = [sum(int(v) for v in row) % m for row in y]
    assert ss.mixed_sum(mixed, m).tolist() == want


# --- the closeness bound against exact enumeration --------------------------------------------------

def _exact_sd(n: int, s: int, q: int, y: tuple) -> float:
    """The statistical distance between the multiset of n users' s shares of y and its simulation
    from Σy (ns − 1 uniforms and one completing the sum), by enumerating every share matrix."""
    view, ideal = collections.Counter(), collections.Counter()
    rows = [[r for r in itertools.product(range(q), repeat=s) if sum(r) % q == v % q] for v in y]
    for combo in itertools.product(*rows):
        view[tuple(sorted(v for r in combo for v in r))] += 1
    total = sum(y) % q
    for flat in itertools.product(range(q), repeat=n * s):
        if sum(flat) % q == total:
            ideal[tuple(sorted(flat))] += 1
    a, b = sum(view.values()), sum(ideal.values())
    return 0.5 * sum(abs(view[k] / a - ideal[k] / b) for k in set(view) | set(ideal))


def _exact_moment(n: int, s: int, q: int) -> float:
    """E[q^{C−1}] − 1 over every matching of the n·s slots: C the components of the bipartite graph."""
    total = count = 0
    for perm in itertools.permutations(range(n * s)):
        parent = list(range(2 * n))

        def find(v):
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        for slot, target in enumerate(perm):
            a, b = find(slot // s), find(n + target // s)
            parent[a] = b
        components = len({find(v) for v in range(2 * n)})
        total += q ** (components - 1)
        count += 1
    return total / count - 1


@pytest.mark.parametrize("n, s, q", [(2, 2, 2), (2, 2, 3), (2, 3, 2), (2, 3, 3), (3, 2, 2), (3, 2, 3),
                                     (2, 4, 2), (3, 3, 2), (2, 4, 3)])
def test_the_closeness_bound_holds_against_the_exact_distance(n, s, q):
    """Lemma 1 (½√(E[q^{C−1}] − 1) ≥ the exact distance, for every input) and Lemma 2 (its series
    ≥ the exact moment E[q^{C−1}] − 1) at every size small enough to enumerate. Lemma 1 is within a
    factor 1.7 of the exact worst distance here, and Lemma 2's series within a factor 4.5 of the
    moment (it counts closed sets, not components: loosest at n = 2), so a bound off by more (a wrong
    constant, a missing term) fails."""
    worst = max(_exact_sd(n, s, q, y) for y in itertools.product(range(q), repeat=n))
    moment = _exact_moment(n, s, q)
    assert worst <= 0.5 * math.sqrt(moment) <= 1.7 * worst, (worst, moment)
    series = math.exp(ss._log_moment_bound(n, s, q))
    assert moment <= series * (1 + 1e-9) and series <= 4.5 * moment, (moment, series)
    assert worst <= ss.closeness(n, s, q) == pytest.approx(min(1.0, 0.5 * math.sqrt(series)), rel=1e-8)


def test_the_closeness_falls_with_shares_and_users():
    m = 10**6
    eta = [ss.closeness(1000, s, m) for s in range(2, 12)]
    assert all(b < a for a, b in zip(eta, eta[1:]) if a < 1)
    assert ss.closeness(10**5, 6, m) < ss.closeness(10**3, 6, m) < ss.closeness(100, 6, m)
    # beyond the exact range the head-and-tail evaluation is still the bound's series (≥ its head)
    big = ss.closeness(10**7, 5, 200)
    assert 0 < big < 1e-10


def test_shares_for_is_the_fewest_that_reach_the_target():
    for n, m, eta in [(16, 200, 1e-8), (1000, 10**6, 1e-9), (10**5, 2**40, 1e-12)]:
        s = ss.shares_for(n, m, eta)
        assert ss.closeness(n, s, m) <= eta < ss.closeness(n, s - 1, m)


def test_settings_outside_the_bound_are_refused_by_name():
    with pytest.raises(ss.ShuffleSumError, match="at least 2 users"):
        ss.shares_for(1, 100, 1e-6)
    with pytest.raises(ss.ShuffleSumError, match=r"n = 2 users mod m = 4611686018427387904 .*64 shares"):
        ss.shares_for(2, 2**62, 1e-30)
    with pytest.raises(ss.ShuffleSumError, match="closeness η"):
        ss.shares_for(100, 100, 0.0)
    with pytest.raises(ss.ShuffleSumError, match="shares = 1"):
        ss.split(np.zeros(3, np.int64), 1, 5, np.random.default_rng(0))
    with pytest.raises(ss.ShuffleSumError, match="residues"):
        ss.split(np.array([5]), 3, 5, np.random.default_rng(0))


# --- what the ledger may say of it ---------------------------------------------------------------------

def test_the_mixed_shares_are_not_a_pure_dp_release():
    """Why the ledger never states a pure ε for split-and-mix: the multiset of all-zero shares is
    possible when every user's value is 0 and impossible when the values are (1, −1) with the same
    sum. Shares of Pólya-noised residues make every y possible, but such a view still pins each
    user's residue, so the likelihood ratio is the local one: here, by enumeration, the exact ratio
    of two inputs with equal sums at the all-zero view is infinite."""
    q, s = 3, 2
    counts = {}
    for y in [(0, 0), (1, 2)]:
        rows = [[r for r in itertools.product(range(q), repeat=s) if sum(r) % q == v] for v in y]
        counts[y] = sum(1 for combo in itertools.product(*rows) if all(v == 0 for r in combo for v in r))
    assert counts[(0, 0)] > 0 and counts[(1, 2)] == 0


def test_near_secure_sum_states_what_the_closeness_proves():
    eta = 1e-9
    pure = near_secure_sum(PureDP(0.5), eta, 1e-6)
    assert isinstance(pure, ApproxDP) and pure.epsilon == 0.5
    assert pure.delta == pytest.approx((1 + math.exp(0.5)) * eta)
    curve = near_secure_sum(SkellamRDP(10, 400.0), eta, 1e-6)
    assert isinstance(curve, ApproxDP) and curve.delta == pytest.approx(5e-7 + (1 + math.exp(curve.epsilon)) * eta)
    assert near_secure_sum(NoneProven("x"), eta, 1e-6) == NoneProven("x")
    # the budget is the largest closeness that still fits δ
    for inner in (PureDP(1.0), SkellamRDP(10, 400.0)):
        budget = closeness_budget(inner, 1e-6)
        assert near_secure_sum(inner, budget, 1e-6).delta <= 1e-6
        assert near_secure_sum(inner, budget * 1.01, 1e-6).delta > 1e-6
