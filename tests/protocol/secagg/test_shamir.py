"""Shamir t-of-n sharing: reconstruction from any t shares, secrecy of t − 1, input validation."""

from __future__ import annotations

import itertools
import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privbandit.protocol.primitives.secagg.errors import ShareError
from privbandit.protocol.primitives.secagg.shamir import (
    PRIME,
    combine_field,
    combine_many,
    combine_secret,
    lagrange_at_zero,
    split_field,
    split_field_many,
    split_secret,
    split_secrets,
    limbs_to_secrets,
)


@st.composite
def sharing_case(draw):
    n = draw(st.integers(1, 12))
    t = draw(st.integers(1, n))
    xs = draw(st.lists(st.integers(1, PRIME - 1), min_size=n, max_size=n, unique=True))
    k = draw(st.integers(t, n))
    subset = sorted(draw(st.permutations(range(n)))[:k])
    secret = draw(st.binary(min_size=1, max_size=40))
    return n, t, xs, subset, secret


@settings(max_examples=150, deadline=None)
@given(sharing_case())
def test_any_t_shares_reconstruct(case):
    n, t, xs, subset, secret = case
    shares = split_secret(secret, t, xs)
    assert shares.shape[0] == n and shares.min() >= 0 and shares.max() < PRIME
    sub_x = [xs[i] for i in subset]
    assert combine_secret(sub_x, shares[subset], t, len(secret), holders=xs) == secret


@settings(max_examples=60, deadline=None)
@given(sharing_case())
def test_fewer_than_t_shares_raise(case):
    _n, t, xs, subset, secret = case
    if t == 1:
        return
    shares = split_secret(secret, t, xs)
    few = subset[: t - 1]
    with pytest.raises(ShareError, match=f"at least {t} needed"):
        combine_secret([xs[i] for i in few], shares[few], t, len(secret))


def test_t_minus_1_shares_are_exactly_uniform_small_field():
    """Exhaustive over GF(7), t = 3: for every secret, the joint law of any 2 shares is uniform.

    Enumerating all 7² polynomials, each pair of share values must occur exactly once — for every
    secret, so the shares carry no information about it (the standard argument, checked exactly).
    """
    p, t, xs = 7, 3, [1, 2, 5]
    for secret in range(p):
        for pair in itertools.combinations(range(3), 2):
            seen = Counter()
            for a, b in itertools.product(range(p), repeat=2):
                s = split_field([secret], t, xs, prime=p, coefficients=np.array([[a], [b]]))
                seen[tuple(s[list(pair), 0])] += 1
            assert len(seen) == p * p and set(seen.values()) == {1}
    # ...while t shares determine the secret: the check above is not vacuous.
    s = split_field([4], t, xs, prime=p, coefficients=np.array([[1], [2]]))
    assert combine_field(xs, s, t, prime=p).tolist() == [4]


def test_t_minus_1_shares_look_uniform_with_real_randomness():
    """Statistical companion on the production field: a single share's top bits are uniform."""
    from scipy import stats

    xs = list(range(1, 6))
    vals = np.concatenate([split_field([123], 3, xs)[:2, 0] for _ in range(4000)])
    counts = np.bincount(vals >> 27, minlength=16)  # 16 buckets of 2^27; the last misses one value
    assert stats.chisquare(counts).pvalue > 1e-3


def test_duplicate_foreign_and_zero_x_rejected():
    xs = [1, 2, 3, 4]
    shares = split_secret(os.urandom(32), 2, xs)
    with pytest.raises(ShareError, match="duplicate"):
        combine_secret([1, 1], shares[[0, 0]], 2, 32)
    with pytest.raises(ShareError, match="never issued"):
        combine_secret([1, 9], shares[[0, 1]], 2, 32, holders=xs)
    with pytest.raises(ShareError, match=r"\[1, "):
        combine_secret([0, 1], shares[[0, 1]], 2, 32)
    with pytest.raises(ShareError, match="duplicate"):
        split_secret(b"x" * 32, 2, [3, 3, 4])
    with pytest.raises(ShareError, match="threshold"):
        split_secret(b"x" * 32, 5, xs)


def test_wrong_shares_do_not_silently_reconstruct_a_secret():
    xs = [1, 2, 3]
    secret = os.urandom(32)
    shares = split_secret(secret, 2, xs)
    shares[1, 0] = (shares[1, 0] + 1) % PRIME
    # A corrupted limb leaves the 24-bit range or the zero padding with overwhelming probability;
    # whatever happens, the original secret must not come back.
    try:
        out = combine_secret(xs[:2], shares[:2], 2, 32)
    except ShareError:
        return
    assert out != secret


def test_lagrange_large_set_matches_python_ints():
    xs = list(range(1, 3001, 3))
    lam = lagrange_at_zero(xs)
    for i in [0, 7, len(xs) - 1]:
        num = den = 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * xj % PRIME
                den = den * (xj - xs[i]) % PRIME
        assert int(lam[i]) == num * pow(den, PRIME - 2, PRIME) % PRIME


@pytest.mark.parametrize("xmax", [2**8, 2**15, PRIME - 1])
def test_dealer_matches_python_int_horner(xmax):
    # The dealer skips reductions while int64 cannot overflow; any slip shows up against exact ints.
    rng = np.random.default_rng(xmax)
    t, L = 60, 5
    xs = rng.choice(np.arange(max(1, xmax - 5000), xmax + 1), size=80, replace=False)
    coeffs = rng.integers(0, PRIME, size=(t - 1, L))
    secret = rng.integers(0, PRIME, size=L)
    shares = split_field(secret, t, xs, coefficients=coeffs)
    for r in [0, 41, 79]:
        for col in range(L):
            poly = [int(secret[col])] + [int(c) for c in coeffs[:, col]]
            assert int(shares[r, col]) == sum(a * int(xs[r]) ** i for i, a in enumerate(poly)) % PRIME


def test_split_secrets_share_each_secret_independently():
    secrets = [os.urandom(32), os.urandom(7), os.urandom(32)]
    xs = np.arange(1, 31)
    parts = split_secrets(secrets, 20, xs)
    assert [p.shape for p in parts] == [(30, 11), (30, 3), (30, 11)]
    for secret, part in zip(secrets, parts):
        assert combine_secret(xs[5:25], part[5:25], 20, len(secret)) == secret
    # t − 1 shares of one secret are unrelated to another's: the limbs' polynomials differ.
    assert not np.array_equal(parts[0][:, :3], parts[1])


@pytest.mark.parametrize("t", [1, 2, 7, 20])
def test_batched_reconstruction_equals_one_at_a_time(t):
    """combine_many: many secrets, each with its own x set (a SecAgg aggregator's b_v of every
    survivor), the same secrets as combine_field one by one; and the secrets' bytes round-trip."""
    rng = np.random.default_rng(t)
    secrets = [os.urandom(32) for _ in range(30)]
    xs, ys = [], []
    for secret in secrets:
        holders = rng.choice(np.arange(1, 2**16), size=t + 3, replace=False)
        shares = split_secret(secret, t, holders)
        pick = rng.permutation(t + 3)[:t]  # any t of them
        xs.append(holders[pick])
        ys.append(shares[pick])
    limbs = combine_many(np.stack(xs), np.stack(ys))
    for row, x, y in zip(limbs, xs, ys):
        np.testing.assert_array_equal(row, combine_field(x, y, t))
    assert limbs_to_secrets(limbs, 32) == secrets
    wrong = np.stack(ys).copy()
    wrong[0, 0, 0] += 1  # one share altered: that secret (only) comes out different
    out = combine_many(np.stack(xs), wrong)
    assert (out[0] != limbs[0]).any() and (out[1:] == limbs[1:]).all()
    with pytest.raises(ShareError, match="duplicate"):
        combine_many(np.stack([np.full(t + 1, 5)]), np.zeros((1, t + 1, 11), dtype=np.int64))


def test_many_dealers_in_one_pass_equal_each_dealing_alone():
    """split_field_many (a fleet dealing all its users' secrets at once, each at its own x set) is
    split_field per dealer with the same coefficients, large x included (no int64 overflow)."""
    rng = np.random.default_rng(5)
    dealers, h, t, L = 6, 9, 5, 4
    xs = np.stack([rng.choice(PRIME - 1, size=h, replace=False) + 1 for _ in range(dealers)])
    xs[1] = np.arange(1, h + 1)  # small x: the lazy reduction path
    values = rng.integers(0, PRIME, size=(dealers, L))
    coeffs = rng.integers(0, PRIME, size=(t - 1, dealers, L))
    many = split_field_many(values, t, xs, coefficients=coeffs)
    assert many.shape == (dealers, h, L)
    for d in range(dealers):
        np.testing.assert_array_equal(many[d], split_field(values[d], t, xs[d], coefficients=coeffs[:, d]))
    # Fresh coefficients: any t shares of each dealer give back its own values.
    shares = split_field_many(values, t, xs)
    for d in range(dealers):
        np.testing.assert_array_equal(combine_field(xs[d, 2:2 + t], shares[d, 2:2 + t], t), values[d])
    # Two dealers may use the same x; one dealer may not use an x twice.
    split_field_many(values[:2], t, np.stack([np.arange(1, h + 1)] * 2))
    twice = xs[:2].copy()
    twice[1, 3] = twice[1, 4]
    with pytest.raises(ShareError, match="duplicate"):
        split_field_many(values[:2], t, twice)
    with pytest.raises(ShareError, match="threshold"):
        split_field_many(values, h + 1, xs)
