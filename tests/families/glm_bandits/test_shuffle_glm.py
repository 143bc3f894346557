"""Algorithm 1's building blocks: batch schedule (eqs. 6–7), G-optimal design, arm scaling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.families.glm_bandits import shuffle_glm as sg
from privbandit.families.glm_bandits.world import mu_dot, unit_ball


def test_batches_follow_eq_7_and_add_up_to_T():
    T, M = 100_000, 4
    b = sg.batch_schedule(T, M, kappa=1.0, S=0.1, d=2, gamma=0.1)
    alpha = T ** (1 / (2 * (1 - 2.0**-3)))
    assert sum(b) == T
    assert b[1] == math.ceil(alpha)
    assert b[2] == math.ceil(alpha * math.sqrt(math.ceil(alpha)) - 1e-9) or abs(b[2] - alpha * math.sqrt(alpha)) < 2
    # B_M = α^{2(1−2^{−(M−1)})} = T under eq. (7): the last batch is the one cut
    assert len(b) <= M


def test_a_huge_warm_up_takes_the_whole_horizon():
    assert sg.batch_schedule(1000, 3, kappa=50.0, S=3.0, d=5, gamma=10.0) == [1000]


def test_g_optimal_design_reaches_the_2d_bound_and_beats_uniform():
    rng = np.random.default_rng(0)
    arms = unit_ball(rng, (50, 20), 4)
    arms[:, 0] *= 0.05  # a short arm the uniform design over-weights
    pi, gmax = sg.g_optimal_design(arms)
    assert np.allclose(pi.sum(axis=1), 1) and (pi >= 0).all()
    assert (gmax <= 2 * 4 + 1e-9).all()
    uniform = np.full((50, 20), 1 / 20)
    A = np.einsum("nk,nki,nkj->nij", uniform, arms, arms) + 1e-6 * np.eye(4)
    g_uniform = np.einsum("nki,nij,nkj->nk", arms, np.linalg.inv(A), arms).max(axis=1)
    assert (gmax <= g_uniform + 1e-9).all()
    assert (gmax[g_uniform > 8] < g_uniform[g_uniform > 8]).all() and (g_uniform > 8).sum() >= 5
    # run on towards the optimum d (Kiefer–Wolfowitz): within 10 % of it
    _, near = sg.g_optimal_design(arms[:10], tol=1.1, max_steps=5000)
    assert (near <= 4.4 + 1e-9).all()


def test_g_optimal_design_of_the_standard_basis_is_uniform():
    arms = np.eye(3)[None]
    pi, gmax = sg.g_optimal_design(arms, tol=1.0 + 1e-9)
    assert np.allclose(pi, 1 / 3, atol=1e-6) and gmax[0] == pytest.approx(3, rel=1e-5)


def test_scaled_weights_are_eq_12_and_never_exceed_one_over_kappa_star():
    rng = np.random.default_rng(1)
    arms = unit_ball(rng, (30, 10), 3)
    theta1 = np.array([0.5, -0.2, 0.1])
    v_inv = np.eye(3) * 0.04
    x_tilde, w = sg.scaled_arms("logistic", arms, theta1, v_inv, gamma=2.0, kappa=9.0, kappa_star=4.5, S=2.0)
    norm = np.sqrt(0.04) * np.linalg.norm(arms, axis=-1)
    expected = mu_dot("logistic", arms @ theta1) / np.exp(np.minimum(4.0, 2.0 * 3.0 * norm))
    assert np.allclose(w, np.minimum(expected, 1 / 4.5))
    assert np.allclose(x_tilde, np.sqrt(w)[..., None] * arms)
    _, w_clipped = sg.scaled_arms("logistic", arms, theta1, v_inv * 0, gamma=2.0, kappa=9.0, kappa_star=8.0, S=2.0)
    assert w_clipped.max() <= 1 / 8.0 and (w_clipped == 1 / 8.0).any()
