"""Noise shares sum to their target laws (Fact 1, Definition 5), tested by chi-square at fixed seeds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privbandit.protocol.primitives.noise import (
    discrete_laplace_pmf,
    discrete_laplace_variance,
    sample_discrete_laplace,
    sample_polya,
    sample_polya_shares,
    sample_skellam,
    skellam_pmf,
)
from privbandit.protocol.primitives.noise.polya import poisson_counts
from privbandit.protocol.primitives.seeding import stream
from tests.stats import P_MIN, chi_square_pvalue

SUMS = 40_000  # independent sums per law, each of n users' shares
SHARE_BUDGET = 20_000_000  # shares drawn per test at most, to keep the suite fast


@pytest.mark.parametrize("n, b", [(2, 3.0), (64, 20.0), (1000, 2.5), (4096, 40.0)])
def test_polya_shares_sum_to_discrete_laplace(n, b):
    rng = np.random.default_rng(20230 + n)
    cohorts = min(SUMS, SHARE_BUDGET // n)
    sums = sample_polya_shares(n, b, cohorts * n, rng).reshape(cohorts, n).sum(axis=1)
    assert chi_square_pvalue(sums, lambda x: discrete_laplace_pmf(x, b)) > P_MIN
    # Within 5 standard errors: Var(sample variance) ≈ (µ₄ − σ⁴)/N = 5σ⁴/N for a Laplace law (µ₄ = 6σ⁴).
    var = discrete_laplace_variance(b)
    assert abs(sums.var() - var) < 5 * var * np.sqrt(5 / cohorts)


def test_authors_inverted_polya_scale_fails_the_same_test():
    """The authors' sampler draws Pólya(1/n, 1−β) (Gamma scale inverted). The test above must catch it."""
    rng = np.random.default_rng(5)
    n, b = 64, 20.0
    beta = np.exp(-1 / b)
    shares = sample_polya(1 / n, 1 - beta, SUMS * n, rng) - sample_polya(1 / n, 1 - beta, SUMS * n, rng)
    sums = shares.reshape(SUMS, n).sum(axis=1)
    assert chi_square_pvalue(sums, lambda x: discrete_laplace_pmf(x, b)) < 1e-12
    assert sums.var() < 0.05 * discrete_laplace_variance(b)


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-9, 12.0), st.integers(0, 70_000), st.integers(0, 2**32))
def test_poisson_counts_are_numpys_to_the_bit(lam, size, seed):
    """The bulk-uniform shortcut returns numpy's own Poisson counts and leaves the generator where
    numpy's draw leaves it (the next draws agree), on both its paths: it stands (no nonzero count)
    and it is undone (some count is nonzero)."""
    ours, theirs = stream(seed, "users", 3), stream(seed, "users", 3)
    got = poisson_counts(lam, size, ours)
    want = theirs.poisson(lam, size=size)
    assert got.dtype == want.dtype == np.int64
    assert np.array_equal(got, want)
    assert np.array_equal(ours.random(4), theirs.random(4))


@pytest.mark.parametrize("lam, size", [(1e-7, 65_536), (7e-6, 65_536), (2e-6, 65_536)])
def test_poisson_counts_take_and_undo_the_shortcut(lam, size):
    """Both paths, at the shares' own λ for cohorts of 2²⁵ (λ·size ≈ 0.007), 2²⁰ and 2²¹ (λ·size ≈
    0.1–0.5: some blocks have a nonzero count): 200 blocks each agree with numpy's draws."""
    nonzero_blocks = 0
    for block in range(200):
        ours, theirs = stream(9, "users", block), stream(9, "users", block)
        got = poisson_counts(lam, size, ours)
        assert np.array_equal(got, theirs.poisson(lam, size=size))
        assert ours.integers(2**62) == theirs.integers(2**62)
        nonzero_blocks += bool(got.any())
    if lam * size > 0.1:
        assert nonzero_blocks > 0  # the undo path ran


@pytest.mark.parametrize("r, beta", [(0.01, 0.9), (0.5, 0.3), (1.0, 0.97), (3.7, 0.5)])
def test_polya_matches_negative_binomial_pmf(r, beta):
    from scipy import stats

    x = sample_polya(r, beta, 200_000, np.random.default_rng(int(r * 100)))
    assert chi_square_pvalue(x, lambda k: stats.nbinom.pmf(k, r, 1 - beta)) > P_MIN


@pytest.mark.parametrize("b", [0.3, 1.0, 7.5, 300.0])
def test_discrete_laplace_sampler(b):
    x = sample_discrete_laplace(b, 200_000, np.random.default_rng(11))
    assert chi_square_pvalue(x, lambda k: discrete_laplace_pmf(k, b)) > P_MIN


def test_discrete_laplace_pmf_sums_to_one_and_variance_formula():
    b = 4.0
    k = np.arange(-2000, 2001)
    p = discrete_laplace_pmf(k, b)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert (p * k**2).sum() == pytest.approx(discrete_laplace_variance(b), rel=1e-12)


@pytest.mark.parametrize("n, total_var", [(2, 3.0), (100, 400.0), (4096, 1e4)])
def test_skellam_shares_sum_to_skellam(n, total_var):
    rng = np.random.default_rng(n)
    cohorts = min(SUMS, SHARE_BUDGET // n)
    shares = sample_skellam(total_var / n, cohorts * n, rng)
    sums = shares.reshape(-1, n).sum(axis=1)
    assert chi_square_pvalue(sums, lambda x: skellam_pmf(x, total_var)) > P_MIN


def test_skellam_test_rejects_wrong_variance():
    sums = sample_skellam(1.1 * 400.0, SUMS, np.random.default_rng(3))
    assert chi_square_pvalue(sums, lambda x: skellam_pmf(x, 400.0)) < P_MIN


@pytest.mark.parametrize("bad", [0.0, -1.0, np.inf, np.nan])
def test_bad_scales_are_rejected_by_name(bad):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="scale"):
        sample_discrete_laplace(bad, 3, rng)
    with pytest.raises(ValueError, match="variance"):
        sample_skellam(bad, 3, rng)


def test_discrete_laplace_is_sub_exponential_with_c_2():
    """LDP-SE's τ takes Lemma 5's constant c = 2: log E[e^{λX}] ≤ 2b²λ² for |λ| ≤ 1/(2b)."""
    for b in (0.2, 0.7, 1.0, 3.0, 50.0, 1e4):
        beta = np.exp(-1 / b)
        lam = np.linspace(-1 / (2 * b), 1 / (2 * b), 401)
        # MGF of Lap_Z(b), the difference of two geometrics on {0, 1, …}.
        log_mgf = 2 * np.log1p(-beta) - np.log1p(-beta * np.exp(lam)) - np.log1p(-beta * np.exp(-lam))
        assert np.all(log_mgf <= 2 * b * b * lam**2 + 1e-12)
