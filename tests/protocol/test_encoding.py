"""Randomized rounding is unbiased; encode → noise → mod → sum → decode is exact when |Ση| ≤ τ."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privbandit.protocol.primitives.encoding import (
    EncodingError,
    decode,
    modular_sum,
    randomized_round,
    reduce_mod,
)


@pytest.mark.parametrize("x", [0.0, 0.13, 0.5, 0.777, 1.0])
@pytest.mark.parametrize("g", [1, 3, 52])
def test_randomized_rounding_is_unbiased(x, g):
    n = 400_000
    enc = randomized_round(np.full(n, x), g, np.random.default_rng(g))
    assert set(np.unique(enc)) <= {int(np.floor(x * g)), int(np.ceil(x * g))}
    frac = x * g - np.floor(x * g)
    # Each draw is floor + Bernoulli(frac): the mean is within 5 standard errors of x·g.
    se = np.sqrt(frac * (1 - frac) / n)
    assert abs(enc.mean() - x * g) <= 5 * se + 1e-12


def test_rounding_bias_would_be_caught():
    """Plain rounding (the naive alternative) is biased by up to 1/2; the same bound rejects it."""
    x, g, n = 0.13, 3, 400_000
    naive = np.round(np.full(n, x) * g)
    se = np.sqrt(0.39 * 0.61 / n)
    assert abs(naive.mean() - x * g) > 5 * se


@pytest.mark.parametrize("bad", [-0.01, 1.01, np.nan])
def test_rounding_rejects_rewards_outside_unit_interval(bad):
    with pytest.raises(EncodingError, match=r"\[0, 1\]"):
        randomized_round(np.array([0.5, bad]), 4, np.random.default_rng(0))


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 60),
    g=st.integers(1, 10_000),
    tau=st.integers(0, 10**6),
    data=st.data(),
)
def test_decode_inverts_encode_whenever_noise_is_within_tau(n, g, tau, data):
    m = n * g + 2 * tau + 1
    x_hat = np.array(data.draw(st.lists(st.integers(0, g), min_size=n, max_size=n)), dtype=np.int64)
    total_noise = data.draw(st.integers(-tau, tau))
    # Split the noise across users arbitrarily (shares may be far larger than τ individually).
    shares = np.array(data.draw(st.lists(st.integers(-10**9, 10**9), min_size=n, max_size=n)), dtype=np.int64)
    shares[-1] += total_noise - shares.sum()
    y = reduce_mod(x_hat + shares, m)
    assert np.all((0 <= y) & (y < m))
    d = decode(modular_sum(y, m), n=n, g=g, tau=tau, m=m)
    assert d.noisy_sum == int(x_hat.sum()) + total_noise
    assert d.wrapped == (d.noisy_sum < 0)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 30), g=st.integers(1, 100), tau=st.integers(0, 500), excess=st.integers(1, 10**4))
def test_decode_is_off_by_m_when_noise_exceeds_tau(n, g, tau, excess):
    """A decode failure (|Ση| > τ) lands exactly one modulus away from the truth, as the proof says."""
    m = n * g + 2 * tau + 1
    true_sum = -tau - min(excess, m - 1)  # just past the lower end: wraps to the top
    d = decode(true_sum % m, n=n, g=g, tau=tau, m=m)
    assert d.noisy_sum - true_sum == m


def test_modular_sum_is_exact_for_moduli_beyond_32_bits():
    rng = np.random.default_rng(1)
    m = 13_422_552_931  # Skellam s = 100, n = 2^18 (spec §4 table)
    y = rng.integers(0, m, size=300_000, dtype=np.int64)
    assert modular_sum(y, m) == sum(int(v) for v in y) % m


def test_modular_sum_at_the_largest_modulus():
    m = 2**62
    y = np.full(1000, m - 1, dtype=np.int64)
    assert modular_sum(y, m) == (1000 * (m - 1)) % m


@pytest.mark.parametrize("m", [1, 0, 2**62 + 1])
def test_bad_modulus_is_rejected(m):
    with pytest.raises(EncodingError, match="modulus"):
        reduce_mod(np.array([1]), m)


def test_decode_rejects_a_release_outside_z_m():
    with pytest.raises(EncodingError, match="residue"):
        decode(53, n=2, g=1, tau=25, m=53)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), max_size=50), st.integers(2, 2**40))
def test_reduce_mod_is_numpys_mod(values, m):
    """The range check's shortcut gives np.mod's residues, whether or not the input holds residues."""
    v = np.array(values, dtype=np.int64)
    got = reduce_mod(v.copy(), m)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.mod(v, m))


def test_reduce_mod_takes_its_shortcut_only_for_residues():
    m = 97
    inside = np.array([0, 5, 96], dtype=np.int64)
    assert reduce_mod(inside, m) is inside  # residues already: nothing computed, nothing copied
    for edge in ([97], [-1], [0, 96, 97]):
        v = np.array(edge, dtype=np.int64)
        assert reduce_mod(v, m) is not v
        assert np.array_equal(reduce_mod(v, m), np.mod(v, m))
