"""The GLM learners' compiled sums and the arm rule's shortcuts give the numbers of the numpy code
they replace, bit for bit (issue #33: faster, the same results)."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits.kernels import newton_sums


@pytest.mark.parametrize("seed", range(6))
def test_newton_sums_are_the_einsums_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for runs, t, d in [(1, 1, 2), (1, 5000, 3), (3, 777, 5), (10, 2048, 3), (2, 20000, 4), (4, 8193, 6)]:
        t = max(1, t - seed)
        # as GLM-UCB slices them: the first t rows of (R, T, d), not contiguous across runs
        x = rng.normal(size=(runs, t + 11, d))[:, :t]
        wg, wh = rng.normal(size=(runs, t)), rng.uniform(0, 0.4, size=(runs, t))
        grad, hess = newton_sums(wg, wh, x)
        assert np.array_equal(grad, np.einsum("rt,rtd->rd", wg, x))
        assert np.array_equal(hess, np.einsum("rt,rtd,rte->rde", wh, x, x))


def _choose_reference(arms, theta_o, v_inv, threshold, width_o, theta, h_inv, beta):
    """Algorithm 2's rule as it read before the shortcuts (every term computed)."""
    nv = np.sqrt(np.maximum(np.einsum("rkd,rde,rke->rk", arms, v_inv, arms), 0.0))
    explore = (nv**2).max(axis=1) >= threshold
    lin_o = np.einsum("rkd,rd->rk", arms, theta_o)
    with np.errstate(invalid="ignore"):
        ucb_o, lcb_o = lin_o + width_o[:, None] * nv, lin_o - width_o[:, None] * nv
    keep = ~np.isfinite(width_o)[:, None] | (ucb_o >= lcb_o.max(axis=1, keepdims=True))
    nh = np.sqrt(np.maximum(np.einsum("rkd,rde,rke->rk", arms, h_inv, arms), 0.0))
    ucb = np.einsum("rkd,rd->rk", arms, theta) + beta[:, None] * nh
    return np.where(explore, nv.argmax(axis=1), np.where(keep, ucb, -np.inf).argmax(axis=1)), explore


@pytest.mark.parametrize("seed", range(4))
def test_choose_shortcuts_pick_the_same_arms(seed):
    rng = np.random.default_rng(100 + seed)
    runs, k, d = 5, 20, 3
    for _ in range(200):
        arms = rng.normal(size=(runs, k, d)) / 2
        a = rng.normal(size=(runs, d, d))
        v_inv = np.einsum("rij,rkj->rik", a, a) / 10 + np.eye(d)
        theta_o, theta = rng.normal(size=(runs, d)), rng.normal(size=(runs, d))
        beta = rng.uniform(0, 2, size=runs)
        # a baseline's billboard (no Criterion I, no elimination, H⁻¹ = V⁻¹ as one array) ...
        inf = np.full(runs, np.inf)
        got = gl.choose(arms, theta, v_inv, inf, inf, theta, v_inv, beta)
        want = _choose_reference(arms, theta, v_inv.copy(), inf, inf, theta, v_inv.copy(), beta)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        # ... and Private-GLM's, some runs eliminating and some not
        width_o = np.where(rng.uniform(size=runs) < 0.5, np.inf, rng.uniform(0, 1, size=runs))
        threshold = rng.uniform(0.2, 3, size=runs)
        h_inv = v_inv / 2
        got = gl.choose(arms, theta_o, v_inv, threshold, width_o, theta, h_inv, beta)
        want = _choose_reference(arms, theta_o, v_inv, threshold, width_o, theta, h_inv, beta)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
