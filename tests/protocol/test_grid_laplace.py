"""The central mechanisms' exact Laplace on a grid: its law, its exactness, and that the
mechanisms use it (no floating-point Laplace behind a pure-ε claim)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privbandit.protocol.primitives.noise import LAPLACE_GRID, discrete_laplace_pmf, grid_laplace, grid_laplace_scale


def test_noise_is_the_discrete_laplace_on_the_grid_by_chi_square():
    """200k draws at a coarse grid (γ = 1/8, ε = 1) against γ·Lap_Z((1 + γ)/(γε)): chi-square over
    the central bins with the tails pooled, α = 10⁻³ at seed 0."""
    grid = 1 / 8
    rng = np.random.default_rng(0)
    released, noise = grid_laplace(np.zeros(200_000), 1.0, 1.0, rng, grid=grid)
    steps = noise / grid
    assert np.array_equal(steps, np.rint(steps)) and np.array_equal(released, noise)
    b = grid_laplace_scale(1.0, 1.0, grid)
    assert b == pytest.approx(9.0)
    edges = np.arange(-40, 41)
    counts = np.array([(steps == k).sum() for k in edges] + [(np.abs(steps) > 40).sum()])
    p = discrete_laplace_pmf(edges, b)
    expected = np.append(p, 1 - p.sum()) * steps.size
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_releases_lie_on_the_grid_whatever_the_input():
    """Every output is a multiple of γ: the set of possible outputs does not depend on the input's
    low bits, which is what floating-point Laplace gets wrong (Mironov 2012)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1000, 10_000)
    released, noise = grid_laplace(x, 1.0, 0.5, rng)
    assert np.array_equal(released / LAPLACE_GRID, np.rint(released / LAPLACE_GRID))
    assert np.abs(released - noise - x).max() <= LAPLACE_GRID / 2
    # Float Laplace, for contrast, leaves values off any such grid.
    floats = x + rng.laplace(0, 2, x.size)
    assert (floats / LAPLACE_GRID != np.rint(floats / LAPLACE_GRID)).mean() > 0.99


def test_privacy_ratio_is_exactly_e_to_the_epsilon_on_neighbouring_sums():
    """Rounded sums 0 and 1 (sensitivity 1): the worst ratio of the two output laws over the grid
    is e^ε exactly (computed from the pmf), not more."""
    eps, grid = 0.7, 1 / 16
    b = grid_laplace_scale(1.0, eps, grid)
    k = np.arange(-400, 400)
    shift = int(round(1.0 / grid))
    ratio = discrete_laplace_pmf(k, b) / discrete_laplace_pmf(k - shift, b)
    assert ratio.max() <= np.exp(eps) + 1e-12
    # Off-grid neighbours (0.03 against 1.03) round at most 1 + γ apart, which the scale covers.
    assert abs(np.rint(1.03 / grid) - np.rint(0.03 / grid)) * grid <= 1 + grid


def test_bad_arguments_are_refused():
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="epsilon"):
        grid_laplace(np.zeros(2), 1.0, 0.0, rng)
    with pytest.raises(ValueError, match="multiple of the grid"):
        grid_laplace(np.zeros(2), 1.0 + 1e-9, 1.0, rng)
    with pytest.raises(ValueError, match="below 2\\^33"):
        grid_laplace(np.array([2.0 ** 40]), 1.0, 1.0, rng)
    with pytest.raises(ValueError, match="finite"):
        grid_laplace(np.array([np.nan]), 1.0, 1.0, rng)


@pytest.mark.parametrize("which", ["dp-se", "array-sum", "report-noisy-max"])
def test_central_mechanisms_release_on_the_grid(which, monkeypatch):
    """DP-SE, Anytime-Lazy-UCB's array sums and FTNL's report noisy max draw grid noise: their
    noisy values are multiples of γ (float Laplace would give none)."""
    import privbandit.families.private_online_learning.mechanisms as online
    from privbandit.families.distributed_dp_mab.mechanisms import CentralLaplace

    rng = np.random.default_rng(3)
    if which == "dp-se":
        m = CentralLaplace(0.5)
        values = [m.analyze(10.123456789, m.params(50), rng).reward_sum for _ in range(200)]
    elif which == "array-sum":
        m = online.ArraySumRelease(0.5)
        values = [m.release(10.123456789, 50, rng) for _ in range(200)]
    else:  # the noisy vector report noisy max ranks, seen through the sampler it calls
        seen = []

        def recording(*args, **kwargs):
            out = grid_laplace(*args, **kwargs)
            seen.append(out[0])
            return out

        monkeypatch.setattr(online, "grid_laplace", recording)
        m = online.ReportNoisyMax(0.5, multiplier=2.0)
        for _ in range(200):
            m.select(np.array([3.3, 2.7, 1.1]), rng)
        values = np.concatenate(seen)
        assert values.size == 600
    v = np.asarray(values) / LAPLACE_GRID
    assert np.array_equal(v, np.rint(v))
    assert np.std(values) > 1.0  # noise of scale ≥ 2 was added
