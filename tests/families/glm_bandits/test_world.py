"""Links, κ-parameters and the arm/θ* generators of the GLM family (spec §2, §9.1–9.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.glm_bandits import world as w


@pytest.mark.parametrize("link", w.LINKS)
def test_mu_dot_is_the_derivative_of_mu(link):
    z = np.linspace(-8, 8, 401)
    h = 1e-5
    numeric = (w.mu(link, z + h) - w.mu(link, z - h)) / (2 * h)
    assert np.max(np.abs(numeric - w.mu_dot(link, z))) < 1e-9
    assert w.mu_dot(link, z).max() <= w.mu_dot_max(link) + 1e-15
    assert abs(w.mu_dot(link, np.array([0.0]))[0] - w.mu_dot_max(link)) < 1e-15


def test_links_are_the_papers():
    assert w.mu("logistic", np.array([0.0]))[0] == 0.5
    assert abs(w.mu("logistic", np.array([2.0]))[0] - 1 / (1 + math.exp(-2))) < 1e-15
    assert abs(w.mu("probit", np.array([1.0]))[0] - stats.norm.cdf(1.0)) < 1e-15
    with pytest.raises(ValueError, match="link"):
        w.mu("poisson", np.array([0.0]))


def test_kappas_follow_eqs_3_and_4():
    arms = np.array([[[1.0, 0.0], [0.0, 1.0]], [[-1.0, 0.0], [0.0, 0.5]]])  # T=2, K=2, d=2
    theta = np.array([2.0, 0.0])
    k = w.kappas("logistic", arms, theta)
    md = w.mu_dot("logistic", np.array([2.0, 0.0, -2.0, 0.0]))
    assert k.kappa == pytest.approx(1 / md.min())           # max 1/μ̇ over every arm
    assert k.kappa_star == pytest.approx(1 / md.max())      # 1 / max μ̇ = 4 (an arm at z = 0)
    assert k.kappa_star == pytest.approx(4.0)
    # κ̂: rounds' optimal arms are (1,0) (z=2) and (0,0.5) (z=0)
    assert k.kappa_hat == pytest.approx(1 / np.mean([md[0], md[3]]))
    assert k.kappa >= k.kappa_hat >= k.kappa_star


def test_arms_are_uniform_in_the_unit_ball():
    rng = np.random.default_rng(3)
    d = 3
    x = w.unit_ball(rng, (20000,), d)
    r = np.linalg.norm(x, axis=1)
    assert r.max() <= 1 + 1e-12
    # ‖x‖^d is U[0, 1] for the uniform law on the ball; a radius uniform in [0, 1] would fail
    assert stats.kstest(r**d, "uniform").pvalue > 1e-3
    assert stats.kstest(r, "uniform").pvalue < 1e-6
    # directions uniform: each coordinate of x/‖x‖ in 3-d is U[−1, 1] (Archimedes)
    assert stats.kstest((x[:, 0] / r + 1) / 2, "uniform").pvalue > 1e-3


def test_theta_generators_have_norm_S_and_different_direction_laws():
    rng = np.random.default_rng(5)
    S, d = 2.5, 3
    sph = np.array([w.theta_star("sphere", rng, d, S) for _ in range(6000)])
    cube = np.array([w.theta_star("normalised-cube", rng, d, S) for _ in range(6000)])
    assert np.allclose(np.linalg.norm(sph, axis=1), S) and np.allclose(np.linalg.norm(cube, axis=1), S)
    assert stats.kstest((sph[:, 0] / S + 1) / 2, "uniform").pvalue > 1e-3
    assert stats.kstest((cube[:, 0] / S + 1) / 2, "uniform").pvalue < 1e-6  # the cube's corners pull


def test_world_is_per_run_and_reuse_repeats_run_zero():
    a = w.world_of("probit", "sphere", 7, [0, 1], 50, 4, 3, 2.0, False)
    b = w.world_of("probit", "sphere", 7, [1], 50, 4, 3, 2.0, False)
    assert np.array_equal(a.arms[1], b.arms[0]) and np.array_equal(a.uniforms[1], b.uniforms[0])
    assert not np.array_equal(a.arms[0], a.arms[1])
    c = w.world_of("probit", "sphere", 7, [0, 1], 50, 4, 3, 2.0, True)
    assert np.array_equal(c.arms[0], c.arms[1]) and not np.array_equal(c.uniforms[0], c.uniforms[1])
    assert np.allclose(a.means, w.mu("probit", np.einsum("rtkd,rd->rtk", a.arms, a.theta)))
