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


def test_tree_noise_is_the_discrete_gaussian_of_its_sigma():
    cal = m.TreeCalibration(sigma=3.0, sensitivity=1.0, levels=12, d=3)
    tree = m.GridGaussianTree(cal, 4000, [np.random.default_rng(4)])
    z = tree.noise.ravel() * m.GRID / 3.0
    assert tree.noise.dtype == np.int64
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert stats.kstest(z / 1.1, "norm").pvalue < 1e-6  # a 10% wrong σ is caught


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
