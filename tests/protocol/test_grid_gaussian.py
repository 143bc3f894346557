"""The Gaussian mechanism on the grid (the linear family's randomizer R_Amp, its LDP baseline and its
JDP tree): the integer law, releases on the grid whatever the input, and the ledger's ρ with the
rounding's widened sensitivity (no floating-point Gaussian behind a guarantee)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.protocol.primitives.noise.discrete_gaussian import discrete_gaussian_pmf
from privbandit.protocol.primitives.noise.grid_gaussian import (
    GAUSSIAN_GRID,
    grid_gaussian_noise,
    grid_sensitivity,
    sample_discrete_gaussian_fast,
    to_grid,
)
from privbandit.protocol.privacy import ZCDP
from privbandit.protocol.privacy import amplification as amp
from tests.stats import P_MIN, chi_square_pvalue


@pytest.mark.parametrize("sigma", [1.0, 2.5, 7.3])
def test_integer_noise_is_the_discrete_gaussian_by_chi_square(sigma):
    """300k draws against N_Z(0, σ²)'s pmf (tails pooled to ≥ 5 expected), p > 10⁻³ at seed 0; the
    same test rejects the rounded continuous Gaussian of the same σ at σ = 1, where the laws differ
    most (rounding N(0, 1) puts 38 % on 0, N_Z(0, 1) 40 %)."""
    rng = np.random.default_rng(0)
    draws = sample_discrete_gaussian_fast(sigma, 300_000, rng)
    assert draws.dtype == np.int64
    assert chi_square_pvalue(draws, lambda k: discrete_gaussian_pmf(k, sigma**2)) > P_MIN
    if sigma == 1.0:
        rounded = np.rint(rng.normal(0, sigma, 300_000)).astype(np.int64)
        assert chi_square_pvalue(rounded, lambda k: discrete_gaussian_pmf(k, sigma**2)) < P_MIN


def test_large_sigma_matches_the_normal_law_by_ks():
    """At the grid's scale (σ/γ ≈ 2·10⁶) N_Z is the normal law to within e^{−2π²σ²}: KS against
    N(0, σ²) on 10⁶ draws, p > 10⁻³ at seed 1, and the same test rejects a σ 1 % off (at 2·10⁵
    draws it would not reliably: p = 0.007 at seed 1; at 10⁶ seeds 1–6 gave 10⁻⁵ to 10⁻⁸)."""
    sigma = 1.9 / GAUSSIAN_GRID
    draws = sample_discrete_gaussian_fast(sigma, 1_000_000, np.random.default_rng(1)).astype(np.float64)
    assert stats.kstest(draws, "norm", args=(0, sigma)).pvalue > P_MIN
    assert stats.kstest(draws, "norm", args=(0, 1.01 * sigma)).pvalue < P_MIN


def test_randomizer_and_tree_release_on_the_grid_whatever_the_input():
    """Every report of the Gaussian randomizer and every prefix-sum change of the JDP tree is a
    multiple of γ, so the outputs the analyzer can see do not depend on the input's low bits (what
    floating-point Gaussian noise gets wrong, Mironov 2012); the rounding moves an entry by ≤ γ/2."""
    rng = np.random.default_rng(2)
    entries = rng.uniform(-1, 1, (50, 20, 9))
    reports = slb.GaussianRandomizer(0.3).randomize(entries, rng)
    assert np.array_equal(reports / GAUSSIAN_GRID, np.rint(reports / GAUSSIAN_GRID))
    tree = slb.TreeAggregator(0.3, (4, 9))
    for _ in range(37):
        released = tree.step(rng.uniform(-5, 5, (4, 9)), rng)
        assert np.array_equal(released / GAUSSIAN_GRID, np.rint(released / GAUSSIAN_GRID))
    assert np.abs(to_grid(entries) - entries).max() <= GAUSSIAN_GRID / 2
    # The noise has the randomizer's σ (the grid's discrete Gaussian at σ/γ ≈ 3·10⁵ steps).
    noise = grid_gaussian_noise(0.3, (200_000,), rng)
    assert noise.std() == pytest.approx(0.3, rel=0.01)


def test_ledger_charges_the_rounding_and_never_beats_the_continuous_curve():
    """LDP's event is ρ-zCDP at Δ + √D·γ (D = d + d(d+1)/2 entries rounded); P_Amp's amplified ε
    comes from that ρ's local curve, so neither claims more than the continuous Gaussian would."""
    d, sigma, budget = 5, 2.0, lp.batch_budget(1.0, 1e-6, 1)
    sens = lp.report_sensitivity(1.0)
    event = lp.batch_event("linucb-ldp", "theory", budget, 1, 1.0, sigma, None, None, d)
    assert isinstance(event, ZCDP)
    assert event.rho == pytest.approx((sens + math.sqrt(20) * GAUSSIAN_GRID) ** 2 / (2 * sigma**2), rel=1e-12)
    assert event.rho > sens**2 / (2 * sigma**2)
    assert grid_sensitivity(sens, 20) - sens == pytest.approx(math.sqrt(20) * 2**-20)
    shuffled = lp.batch_event("linucb-sdp-amp", "theory", budget, 50, 1.0, sigma, None, None, d)
    continuous = amp.amplified_randomizer(50, lambda d0: amp.gaussian_epsilon(sens, sigma, d0), 1e-6)
    assert shuffled.epsilon >= continuous["epsilon"] and shuffled.delta <= 1e-6
    with pytest.raises(ValueError, match="dimension d"):
        lp.batch_event("linucb-ldp", "theory", budget, 1, 1.0, sigma, None, None)


def test_bad_arguments_are_refused():
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match=r"σ=0.5 .*\[1, 2\^40\]"):
        sample_discrete_gaussian_fast(0.5, 10, rng)
    with pytest.raises(ValueError, match="finite and > 0"):
        grid_gaussian_noise(0.0, (3,), rng)
    with pytest.raises(ValueError, match="below 2\\^33"):
        to_grid(np.array([np.nan]))
    with pytest.raises(ValueError, match="below 2\\^33"):
        slb.GaussianRandomizer(1.0).randomize(np.array([[2.0**34]]), rng)
