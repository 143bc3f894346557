"""RS-GLinUCB's switches (docs/glm-bandits.md, "Table 2's RS-GLinUCB (issue #31)"): the authors' constants,
which preset paper-code takes, and their code's three defects, which exist only to be measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits.config import GLMExperiment
from privbandit.families.glm_bandits.world import mu

D, T, ZETA, S = 3, 400, 0.02, 2.0


def _spec(code, preset="paper-code", ucb_theta="tau", tau_data="unexplored", kappa=(18.0,)):
    return gl.rs_glinucb_spec("probit", D, T, S, 1.0, ZETA, kappa, (1 / 0.39,) * len(kappa), code, preset,
                              ucb_theta, tau_data)


def _unit_arms(rng, n, k=20):
    x = rng.normal(size=(n, k, D))
    return x / np.linalg.norm(x, axis=-1, keepdims=True) * rng.uniform(size=(n, k, 1)) ** (1 / D)


def _run(spec, rounds, seed=0):
    """One run of RS-GLinUCB's server and its user on a probit instance (θ* of norm S): the learner
    after ``rounds`` rounds, each round's broadcast body, and H's exact sum after each round."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=D)
    theta *= S / np.linalg.norm(theta)
    arms = _unit_arms(rng, rounds)
    lr = gl.PrivateGLM(spec, [seed])
    bodies, h_sums = [], [np.zeros((D, D))]
    for t in range(rounds):
        b, _ = lr.broadcast()
        bodies.append(b)
        a, explored = gl.choose(arms[None, t], b["theta_o"], b["v_inv"], b["threshold"], b["width_o"], b["theta"],
                                b["h_inv"], b["beta"])
        x = arms[None, t, a[0]]
        r = (rng.uniform(size=1) < mu("probit", x @ theta)).astype(float)
        lr.update(x, r, explored)
        h_sums.append(lr.tree_h.prefix()[0])
    return lr, bodies, h_sums


def test_presets_take_the_authors_constants_under_paper_code_only():
    code = _spec(None)
    assert code.consts[0].lam == 0.5
    assert code.rs == gl.RSSettings(1.5, 2e-3, False, frozenset())
    ours = _spec(None, preset="paper")
    assert ours.consts[0].lam == pytest.approx(0.75 * D * math.log(4 * T / ZETA))
    assert ours.rs == gl.RSSettings()
    # γ, β and Criterion I's bar are the authors' in both
    for s in (code, ours):
        c = s.consts[0]
        assert c.gamma == pytest.approx(S * math.sqrt(D * math.log(T / ZETA)))
        assert c.beta == pytest.approx(4 * math.sqrt(D * math.log(T / ZETA)))
        assert c.threshold == pytest.approx(1 / (0.01 * 18.0 * S**2 * D))
    assert _spec([], ucb_theta="average", tau_data="all").ucb_theta == "average"
    assert _spec(["rs-head-regulariser"]).rs.reg == 2e-5


def test_bad_rs_code_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="rs_code"):
        _spec(["rs-no-such-thing"])
    with pytest.raises(ValueError, match="take one"):
        _spec(["rs-tiny-regulariser", "rs-head-regulariser"])
    base = {"family": "glm-bandits", "horizon": 100, "epsilon": 1.0, "seed": 1}
    with pytest.raises(ValueError, match=r"algorithms\.gloc\.rs_code .* 'rs-glinucb' only"):
        GLMExperiment.model_validate({**base, "algorithms": {"gloc": {"algorithm": "gloc", "rs_code": []}}})
    with pytest.raises(ValueError, match="rs_code"):
        GLMExperiment.model_validate({**base, "algorithms": {"rs-glinucb": {"algorithm": "rs-glinucb",
                                                                            "rs_code": ["rs-nope"]}}})
    ok = GLMExperiment.model_validate({**base, "algorithms": {"rs-glinucb": {"algorithm": "rs-glinucb",
                                                                            "rs_code": list(gl.RS_DEFECTS)}}})
    assert ok.algorithms["rs-glinucb"].rs_code == list(gl.RS_DEFECTS)


def test_v_leaf_defect_divides_each_explored_leaf_by_one_plus_its_norm():
    """rs-v-leaf: V_{t+1} = V_t + xxᵀ/(1 + ‖x‖²_{V_t⁻¹}) on Criterion I's rounds (their translation of
    Sherman–Morrison); without it V_{t+1} = V_t + xxᵀ."""
    for code, defect in (([*gl.RS_CONSTANTS], False), ([*gl.RS_CONSTANTS, "rs-v-leaf"], True)):
        lr, _, _ = _run(_spec(code), 60)
        explored = lr.explored[0, : lr.t]
        assert 3 <= explored.sum() < 60  # λ = 0.5: Criterion I fires early, then stops
        V = 0.5 * np.eye(D)
        for t in np.flatnonzero(explored):
            x = lr.x[0, t]
            n2 = x @ np.linalg.solve(V, x)
            V = V + np.outer(x, x) / ((1 + n2) if defect else 1.0)
        assert np.allclose(lr.tree_v.prefix()[0] + 0.5 * np.eye(D), V)


def test_frozen_h_defect_switches_once_then_reads_the_live_h():
    """rs-frozen-h: one switch, then H_τ⁻¹ is the live H's inverse every round and θ̂_τ stays put;
    without it the switches go on and H_τ⁻¹ is H's inverse at the last switch."""
    lr, bodies, h_sums = _run(_spec([*gl.RS_CONSTANTS, "rs-frozen-h"]), 300)
    assert lr.count2[0] == 1 and len(lr.switches[0]) == 1
    first = lr.switches[0][0] - 1  # the broadcast (before round t + 1) that switched
    lam = 0.5 * np.eye(D)
    for t in range(first, 300):
        assert np.allclose(bodies[t]["h_inv"][0], np.linalg.inv(h_sums[t] + lam), atol=1e-9)
        assert np.array_equal(bodies[t]["theta"][0], bodies[first]["theta"][0])  # θ̂_τ (ucb_theta "tau")
    free, bodies, h_sums = _run(_spec([*gl.RS_CONSTANTS]), 300)
    assert free.count2[0] >= 3
    last = free.switches[0][-1] - 1
    assert np.allclose(bodies[-1]["h_inv"][0], np.linalg.inv(h_sums[last] + lam), atol=1e-9)
    assert not np.allclose(bodies[-1]["h_inv"][0], np.linalg.inv(h_sums[299] + lam), atol=1e-6)


def test_switch_factor_is_criterion_two_s_determinant_ratio():
    """The switches happen at exactly the broadcasts where det H_t > factor · det H_τ (1.5 theirs, 2 ours)
    and some round is there to fit θ̂_τ on."""
    for code, factor in (([*gl.RS_CONSTANTS[:1]], 2.0), ([*gl.RS_CONSTANTS[:2]], 1.5)):
        lr, bodies, h_sums = _run(_spec(code), 300)
        assert lr.count2[0] >= 2
        lam = lr.lam[0] * np.eye(D)
        tau, want = np.linalg.slogdet(lam)[1], []
        for t in range(300):
            logdet = np.linalg.slogdet(h_sums[t] + lam)[1]
            if logdet > math.log(factor) + tau and (~lr.explored[0, :t]).any():
                tau = logdet
                want.append(t + 1)
        assert lr.switches[0] == want


def test_lbfgs_defect_agrees_with_the_exact_mle_where_its_gradient_is_right():
    """For the logistic link their gradient is the loss's, so L-BFGS-B lands on our MLE's root (same
    penalty, no projection); for probit it is not, and the solver's answer differs from the exact MLE."""
    rng = np.random.default_rng(5)
    x = _unit_arms(rng, 1, 200)[0]
    theta = np.array([1.0, -0.5, 0.3])
    for link in ("logistic", "probit"):
        r = (rng.uniform(size=200) < mu(link, x @ theta)).astype(float)
        got, ok = gl.lbfgs_defect_mle(link, x, r, 0.25, np.zeros(3))
        assert ok
        want = gl.mle(link, x, r, 0.5, math.inf)
        if link == "logistic":
            assert np.allclose(got, want, atol=1e-4)
    # a failed solve keeps the old estimate and still counts as a call
    spec = _spec([*gl.RS_CONSTANTS, "rs-lbfgs"])
    lr = gl.PrivateGLM(spec, [0])
    lr.theta_o[0] = [0.1, 0.2, 0.3]
    orig = gl.lbfgs_defect_mle
    try:
        gl.lbfgs_defect_mle = lambda *a: (np.full(3, 99.0), False)
        got = lr._optimize(0, x[:5], np.ones(5), 0.0, 0.0, 0.5, ("o", 5))
    finally:
        gl.lbfgs_defect_mle = orig
    assert np.allclose(got, [0.1, 0.2, 0.3])


@pytest.mark.parametrize("preset, rs_code, lam, rs", [
    ("paper-code", None, 0.5, gl.RSSettings(1.5, 2e-3, False, frozenset())),
    ("paper", None, None, gl.RSSettings()),
    ("paper-code", ["rs-frozen-h"], None, gl.RSSettings(defects=frozenset({"rs-frozen-h"}))),
])
def test_the_family_builds_rs_glinucb_from_the_preset_and_rs_code(preset, rs_code, lam, rs):
    """parties.setup reads rs_code (None: the preset's), ucb_theta and tau_data for RS-GLinUCB."""
    from privbandit.families.glm_bandits.family import FAMILY
    from privbandit.families.glm_bandits.parties import setup

    table = {"algorithm": "rs-glinucb"} | ({} if rs_code is None else {"rs_code": rs_code})
    config = GLMExperiment.model_validate({"family": "glm-bandits", "horizon": 100, "epsilon": 1.0, "seed": 1,
                                           "preset": preset, "algorithms": {"rs-glinucb": table}})
    spec = setup(FAMILY.public_task(config, "rs-glinucb", [0])).spec
    assert spec.rs == rs
    assert spec.consts[0].lam == pytest.approx(0.75 * 3 * math.log(4 * 100 / 0.02) if lam is None else lam)
    assert (spec.ucb_theta, spec.tau_data) == (("average", "all") if preset == "paper-code" else ("tau", "unexplored"))
