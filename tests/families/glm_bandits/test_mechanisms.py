"""The GLM family's mechanisms: the grid discrete-Gaussian tree, zCDP calibration, the optimizers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.glm_bandits import mechanisms as m
from privbandit.families.glm_bandits.world import mu


def test_zcdp_rho_inverts_the_conversion():
    rho = m.zcdp_rho(4 / 3, 0.02 / 3)
    assert rho + 2 * math.sqrt(rho * math.log(3 / 0.02)) == pytest.approx(4 / 3)


def test_calibration_gives_the_budget_per_user():
    cal = m.calibrate_tree(0.05, 1.0, 5000, 3)
    assert cal.levels == 13  # 5000 < 2^13
    assert 0.05 * (1 - 1e-4) < cal.rho <= 0.05  # σ² is rounded up to whole grid units: never more ρ
    # the rounding term is charged: σ is above the unrounded calibration Δ/√(2ρ/m)
    assert cal.sigma > 1.0 / math.sqrt(2 * 0.05 / 13)


def test_tree_prefix_sums_are_exact_plus_the_noise_of_the_binary_nodes():
    d, T = 2, 37
    cal = m.TreeCalibration(sigma=0.5, sensitivity=1.0, levels=m.tree_levels(T), d=d)
    tree = m.GridGaussianTree(cal, T, [np.random.default_rng(1)])
    rng = np.random.default_rng(2)
    leaves = []
    for t in range(1, T + 1):
        x = rng.uniform(-1, 1, d)
        leaf = np.outer(x, x)[None]
        leaves.append(np.rint(leaf / m.GRID) * m.GRID)
        tree.insert(leaf)
        true = sum(leaves)[0]
        assert np.allclose(tree.true_prefix()[0], true)
        # noise: the nodes of t's binary representation, each drawn once (row = completion time − 1)
        nodes, start = [], 0
        for level in reversed(range(t.bit_length())):
            if t >> level & 1:
                start += 1 << level
                nodes.append(start - 1)
        noise = tree.noise[0, nodes].sum(axis=0) * m.GRID
        got = tree.prefix()[0]
        assert np.allclose(got, got.T)
        iu = np.triu_indices(d)
        assert np.allclose(got[iu] - true[iu], noise)


def _split(cal, upper):
    """(diagonal, off-diagonal) entries of upper-triangle vectors (..., D), in ``to_upper``'s order."""
    iu, ju = np.triu_indices(cal.d)
    return upper[..., iu == ju].ravel(), upper[..., iu != ju].ravel()


def _variance_p(sample, variance):
    """Two-sided p of the sample variance against ``variance`` ((n−1)S²/σ² ~ χ²(n−1) for a normal)."""
    n = sample.size
    stat = (n - 1) * sample.var(ddof=1) / variance
    return 2 * min(stats.chi2.cdf(stat, n - 1), stats.chi2.sf(stat, n - 1))


def test_tree_node_noise_has_app_i1_variances():
    """App. I.1: Z = (Z′ + Z′ᵀ)/2, Z′ i.i.d. N(0, σ²): diagonal σ², off-diagonal σ²/2 (here on the grid,
    N_Z(0, s²) and N_Z(0, s²/2) with s²/2 = ⌈(σ/grid)²/2⌉). Tolerance: p > 10⁻³ at seed 4 (KS against the
    target normal and χ² on the sample variance); the wrong laws (the old i.i.d. σ off the diagonal, or
    σ²/2 on it) must give p < 10⁻⁶ at these sample sizes (16000 diagonal, 24000 off-diagonal draws)."""
    cal = m.TreeCalibration(sigma=3.0, sensitivity=1.0, levels=12, d=4)
    s2 = float(cal.sigma_on_grid_squared)
    assert cal.sigma_on_grid_squared == 2 * cal.off_diagonal_on_grid_squared  # exactly half off the diagonal
    assert s2 >= (3.0 / m.GRID) ** 2
    tree = m.GridGaussianTree(cal, 4000, [np.random.default_rng(4)])
    assert tree.noise.dtype == np.int64
    diag, off = _split(cal, tree.noise)
    for sample, var in ((diag, s2), (off, s2 / 2)):
        assert stats.kstest(sample / math.sqrt(var), "norm").pvalue > 1e-3
        assert _variance_p(sample, var) > 1e-3
    assert stats.kstest(off / math.sqrt(s2), "norm").pvalue < 1e-6  # i.i.d. σ off the diagonal is caught
    assert _variance_p(off, s2) < 1e-6
    assert _variance_p(diag, s2 / 2) < 1e-6


def test_released_prefix_is_exactly_symmetric_with_app_i1_noise():
    """The release itself: after 7 leaves the prefix holds 3 nodes, so its noise has variance 3s² on the
    diagonal and 3s²/2 off it, and the matrix is exactly symmetric (one draw mirrored, not two draws).
    800 stacked runs; tolerance p > 10⁻³ at seed 7 (χ² on the sample variance, KS on the law), and the
    old law (3s² off the diagonal too) must give p < 10⁻⁶."""
    d, T, R = 3, 7, 800
    cal = m.TreeCalibration(sigma=0.05, sensitivity=1.0, levels=m.tree_levels(T), d=d)
    rng = np.random.default_rng(7)
    tree = m.GridGaussianTree(cal, T, list(rng.spawn(R)))
    x = rng.uniform(-0.5, 0.5, (T, d))
    for t in range(T):
        tree.insert(np.broadcast_to(np.outer(x[t], x[t]), (R, d, d)))
    got, true = tree.prefix(), tree.true_prefix()
    assert np.array_equal(got, np.swapaxes(got, 1, 2))
    iu = np.triu_indices(d)
    diag, off = _split(cal, (got - true)[:, iu[0], iu[1]] / m.GRID)
    s2 = float(cal.sigma_on_grid_squared)
    for sample, var in ((diag, 3 * s2), (off, 3 * s2 / 2)):
        assert _variance_p(sample, var) > 1e-3
        assert stats.kstest(sample / math.sqrt(var), "norm").pvalue > 1e-3
    assert _variance_p(off, 3 * s2) < 1e-6


def test_tree_rho_bounds_every_neighbours_loss():
    """The ledger's ρ bounds the exact loss Σ_ij m·Δ_ij²/(2 s_ij²) (Canonne–Kamath–Steinke, per
    independent coordinate) of any two rounded leaves x xᵀ, y yᵀ with ‖x‖, ‖y‖ ≤ 1 at Frobenius
    sensitivity √2: the diagonal pair e₁e₁ᵀ/e₂e₂ᵀ, the off-diagonal pair (1, ±1)/√2 (both reach √2 in
    Frobenius norm) and 2000 random pairs; the two extreme pairs reach ρ to within the rounding term."""
    d = 4
    cal = m.calibrate_tree(0.3, math.sqrt(2), 15000, d)
    iu, ju = np.triu_indices(d)
    var = np.where(iu == ju, float(cal.sigma_on_grid_squared), float(cal.off_diagonal_on_grid_squared))

    def loss(x, y):
        q = [np.rint(np.outer(v, v)[iu, ju] / m.GRID) for v in (x, y)]
        return cal.levels * float(((q[0] - q[1]) ** 2 / (2 * var)).sum())

    e = np.eye(d)
    pairs = [(e[0], e[1]), (np.r_[1, 1, 0, 0] / math.sqrt(2), np.r_[1, -1, 0, 0] / math.sqrt(2))]
    rng = np.random.default_rng(3)
    for _ in range(2000):
        x, y = rng.standard_normal((2, d))
        pairs.append((x / max(1, np.linalg.norm(x)), y / max(1, np.linalg.norm(y))))
    losses = [loss(x, y) for x, y in pairs]
    assert max(losses) <= cal.rho <= 0.3
    # the two extreme pairs spend all but the rounding term's share of ρ
    assert min(losses[:2]) > cal.rho * (math.sqrt(2) / (math.sqrt(2) + d * m.GRID)) ** 2 * (1 - 1e-3)


def test_per_call_budget_composes_back_to_the_total():
    e0, d0 = m.per_call_budget(4 / 3, 0.02 / 3, 40)
    k, dp = 40, 0.01 / 3
    assert e0 * math.sqrt(2 * k * math.log(1 / dp)) + k * e0 * math.expm1(e0) == pytest.approx(4 / 3, rel=1e-6)
    assert d0 * k + dp == pytest.approx(0.02 / 3)
    assert m.per_call_budget(1.0, 0.01, 4) == (0.25, 0.0025)


def test_sgd_noise_multiplier_meets_the_budget_and_is_near_minimal():
    z = m.sgd_noise_multiplier(500, 100, 50, 0.5, 1e-3)
    assert m.sgd_epsilon(500, 100, 50, z, 1e-3) <= 0.5
    assert m.sgd_epsilon(500, 100, 50, z / 1.02, 1e-3) > 0.5


def _logistic_data(n, d, theta, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    x /= np.maximum(1, np.linalg.norm(x, axis=1))[:, None]
    r = (rng.random(n) < mu("logistic", x @ theta)).astype(float)
    return x, r


def test_dp_sgd_with_a_large_budget_approaches_the_mle():
    theta = np.array([1.5, -1.0, 0.5])
    x, r = _logistic_data(4000, 3, theta, 0)
    settings = m.SGDSettings(clip=1.0, lr=10.0, epochs=30)
    est, z = m.dp_sgd("logistic", x, r, 1.0, 3.0, 50.0, 1e-3, settings, np.random.default_rng(1))
    assert np.linalg.norm(est - theta) < 0.3
    tight, _ = m.dp_sgd("logistic", x, r, 1.0, 3.0, 0.01, 1e-3, settings, np.random.default_rng(1))
    assert np.linalg.norm(tight - theta) > np.linalg.norm(est - theta)  # noise costs accuracy


def test_pgd_through_pvec_is_the_papers_schedule_and_converges_with_a_large_budget():
    theta = np.array([1.0, -0.5, 0.8])
    x, r = _logistic_data(3000, 3, theta, 2)
    plan = m.pgd_plan(3000, 3, 200.0, 1e-3, 3.0, 1.0, 300)
    assert plan.iterations == 300 and plan.iterations_formula > 300
    assert plan.step == pytest.approx(2 * 6.0 / math.sqrt(300))
    assert plan.eps_iter == pytest.approx(200 / (2 * math.sqrt(2 * 300 * math.log(1e3))))
    assert plan.vec.b == math.ceil(24e4 * 110**2 * math.log(40 / plan.delta_iter) ** 2 / (plan.eps_iter**2 * 3000))
    # eq. (127)'s constant 24·10⁴ drowns the gradient even at ε = 200; with the constant exposed
    # and set to 1 the same schedule converges, and its P_Vec rounds are unbiased
    weak = m.pgd_plan(3000, 3, 200.0, 1e-3, 3.0, 1.0, 300, vec_constant=1.0)
    est = m.projected_gd_pvec("logistic", x, r, 1.0, 3.0, weak, np.random.default_rng(3))
    assert np.linalg.norm(est - theta) < 0.3
    loud = m.projected_gd_pvec("logistic", x, r, 1.0, 3.0, plan, np.random.default_rng(3))
    assert np.linalg.norm(loud - theta) > np.linalg.norm(est - theta)
    small = m.pgd_plan(50, 3, 1.0, 1e-3, 3.0, 1.0, 300)
    assert small.iterations == 1  # T_it = ε²n²/(d log³(nd/δ)) < 1 is floored at one step
