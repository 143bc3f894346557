"""Statistical and exactness tests for the exact discrete Gaussian sampler.

All randomness is seeded, so every test is deterministic; the 1e-3 p-value
thresholds are about how unlucky a *correct* sampler could be at some other
seed, and `test_checks_reject_a_slightly_wrong_sampler` shows they have teeth.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privbandit.protocol.primitives.noise import discrete_gaussian as dg
from privbandit.protocol.primitives.noise.discrete_gaussian import (
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
    sample_discrete_gaussian,
)

SIGMA2S = [0.25, 1, 2.7, 100, 1e4]
N = 1_000_000  # ≈0.4 s per σ²; enough for the 5-SE moment checks to resolve < 1% errors
ALPHA = 1e-3


@functools.lru_cache(maxsize=None)
def _samples(sigma2: float) -> np.ndarray:
    return sample_discrete_gaussian(sigma2, N, np.random.default_rng(20240531))


def _chisquare_pvalue(x: np.ndarray, sigma2: float) -> float:
    """χ² GOF against N_Z(0, sigma2); tails pooled into ±K where K is the last |k| with expected count ≥ 5."""
    support = np.arange(-int(40 * math.sqrt(sigma2) + 10), int(40 * math.sqrt(sigma2) + 10) + 1)
    pmf = discrete_gaussian_pmf(support, sigma2)
    big = np.flatnonzero(x.size * pmf >= 5)
    k = int(support[big[-1]])  # symmetric and unimodal, so the ≥5 region is [-k, k]
    centre = slice(big[0] + 1, big[-1])
    tail = (1.0 - pmf[centre].sum()) / 2  # the pooled edge bins hold at least pmf(±k), so ≥ 5 expected
    expected = x.size * np.concatenate([[tail], pmf[centre], [tail]])
    observed = np.bincount(np.clip(x, -k, k) + k, minlength=2 * k + 1)
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


def _moments_z(x: np.ndarray, sigma2: float) -> tuple[float, float]:
    """(mean, sample variance) errors in units of their standard errors under N_Z(0, sigma2)."""
    support = np.arange(-int(40 * math.sqrt(sigma2) + 10), int(40 * math.sqrt(sigma2) + 10) + 1)
    pmf = discrete_gaussian_pmf(support, sigma2)
    var = discrete_gaussian_variance(sigma2)
    mu4 = float(np.sum(support.astype(float) ** 4 * pmf))
    mean_z = x.mean() / math.sqrt(var / x.size)
    var_z = (x.var(ddof=1) - var) / math.sqrt((mu4 - var**2) / x.size)
    return mean_z, var_z


@pytest.mark.parametrize("sigma2", SIGMA2S)
def test_chisquare_goodness_of_fit(sigma2):
    # At a fixed seed the p-value is a fixed number; 1e-3 only guards against
    # having picked an unlucky seed.  With 1e6 samples it rejects a sampler whose
    # variance is 1% off for σ² ≤ 2.7 (10/10 seeds), but only ~1–3/10 seeds for
    # σ² ≥ 100, where the 5-SE variance check below catches ~9/10 and a 3% error
    # is caught by both (test_checks_reject_a_slightly_wrong_sampler).
    assert _chisquare_pvalue(_samples(sigma2), sigma2) > ALPHA


@pytest.mark.parametrize("sigma2", SIGMA2S)
def test_mean_and_variance_within_five_standard_errors(sigma2):
    mean_z, var_z = _moments_z(_samples(sigma2), sigma2)
    assert abs(mean_z) < 5, f"mean off by {mean_z:.2f} SE"
    assert abs(var_z) < 5, f"variance off by {var_z:.2f} SE"


@pytest.mark.parametrize("sigma2", SIGMA2S)
def test_symmetry(sigma2):
    # Given n_k + n_{-k}, n_k ~ Binomial(., 1/2) under symmetry; sum the χ²(1) terms.
    x = _samples(sigma2)
    k = np.arange(1, int(np.abs(x).max()) + 1)
    pos = np.bincount(x[x > 0], minlength=k.size + 1)[1:]
    neg = np.bincount(-x[x < 0], minlength=k.size + 1)[1:]
    m = pos + neg >= 20
    statistic = float(np.sum((pos[m] - neg[m]) ** 2 / (pos[m] + neg[m])))
    assert stats.chi2.sf(statistic, df=int(m.sum())) > ALPHA
    assert abs(int(pos.sum()) - int(neg.sum())) < 5 * math.sqrt(pos.sum() + neg.sum())


def test_checks_reject_a_slightly_wrong_sampler():
    # A sampler with 3% too much variance, or a 52/48 sign bias, must fail the checks above.
    wide = sample_discrete_gaussian(Fraction(103), N, np.random.default_rng(1))
    assert _chisquare_pvalue(wide, 100) < ALPHA
    assert abs(_moments_z(wide, 100)[1]) > 5
    biased = np.abs(_samples(100)) * np.where(np.random.default_rng(2).random(N) < 0.52, 1, -1)
    assert abs(_moments_z(biased, 100)[0]) > 5


def test_pmf_and_variance_helpers():
    k = np.arange(-40, 41)
    assert discrete_gaussian_pmf(k, 1).sum() == pytest.approx(1, abs=1e-14)
    # Poisson summation: Var N_Z(0, 1) = 1 - 8π² Σ_m m² e^{-2π²m²} / (1 + 2 Σ_m e^{-2π²m²}), m ≥ 1.
    q = math.exp(-2 * math.pi**2)
    assert discrete_gaussian_variance(1) == pytest.approx(1 - 8 * math.pi**2 * q / (1 + 2 * q), rel=1e-12)
    assert discrete_gaussian_variance(0.25) < 0.25


@pytest.mark.parametrize(
    "sigma2, message",
    [(0, "sigma2"), (-1, "sigma2"), (Fraction(-1, 3), "sigma2"), (float("nan"), "sigma2"),
     (float("inf"), "sigma2"), (-float("inf"), "sigma2"), ("1", "sigma2"),
     (Fraction(10**24 + 1), r"\(0, 1e24\]")],
)
def test_bad_sigma2(sigma2, message):
    with pytest.raises(ValueError, match=message):
        sample_discrete_gaussian(sigma2, 10, np.random.default_rng(0))


@pytest.mark.parametrize("size", [-1, 2.5, None])
def test_bad_size(size):
    with pytest.raises(ValueError, match="size"):
        sample_discrete_gaussian(1, size, np.random.default_rng(0))


def test_size_zero_and_types():
    rng = np.random.default_rng(0)
    assert sample_discrete_gaussian(1, 0, rng).shape == (0,)
    x = sample_discrete_gaussian(Fraction(7, 3), np.int64(5), rng)
    assert x.dtype == np.int64 and x.shape == (5,)


@pytest.mark.parametrize("p", [Fraction(1, 3), Fraction(2, 7), Fraction(10**20, 3 * 10**20 + 1), Fraction(1), Fraction(0)])
def test_bernoulli_of_rational_is_exact_in_expectation(p):
    n = 400_000
    draws = dg._bernoulli([p.numerator], [p.denominator], np.zeros(n, dtype=np.intp), np.random.default_rng(7))
    assert stats.binomtest(int(draws.sum()), n, float(p)).pvalue > ALPHA


def test_bernoulli_tie_path_uses_exact_remainder():
    # Force U == ⌊(2/7)·2^64⌋ on every vector draw; the outcome must then be
    # Bernoulli(frac((2/7)·2^64)) = Bernoulli(4/7), decided by the scalar refinement.
    real = np.random.default_rng(11)
    threshold = (2 << 64) // 7

    class TiedRng:
        def integers(self, low, high, size=None, dtype=np.int64):
            if size is None:
                return real.integers(low, high, dtype=dtype)
            return np.full(size, threshold, dtype=np.uint64)

    n = 20_000
    draws = dg._bernoulli([2], [7], np.zeros(n, dtype=np.intp), TiedRng())
    assert stats.binomtest(int(draws.sum()), n, 4 / 7).pvalue > ALPHA
    assert dg._bernoulli_residual(1, 1, real) and not dg._bernoulli_residual(0, 5, real)


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(7, 3)])
def test_bernoulli_exp_is_exact_in_expectation(gamma):
    n = 400_000
    key = np.zeros(n, dtype=np.intp)
    draws = dg._bernoulli_exp([gamma.numerator], [gamma.denominator], key, np.random.default_rng(3))
    assert stats.binomtest(int(draws.sum()), n, math.exp(-gamma)).pvalue > ALPHA


def test_same_seed_same_output():
    a = sample_discrete_gaussian(Fraction(100), 10_000, np.random.default_rng(42))
    b = sample_discrete_gaussian(Fraction(100), 10_000, np.random.default_rng(42))
    c = sample_discrete_gaussian(Fraction(100), 10_000, np.random.default_rng(43))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
