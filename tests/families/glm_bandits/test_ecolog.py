"""ECOLog (Faury et al. 2022, ada-OFU-ECOLog): the per-round problems against a direct numerical
solution, the reward-scale index, learning on a small instance, and the refusal of probit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits.config import GLMExperiment
from privbandit.families.glm_bandits.family import FAMILY
from privbandit.runner.config import ConfigError, validate_experiment
from privbandit.runner.tasks import Task, execute


def _direct(V, center, x, k, y, S):
    """argmin_{‖θ‖≤S} k·log(1 + e^s) − y·s + ½‖θ − center‖²_V, s = ⟨x, θ⟩, by SLSQP (slow, one run)."""
    def f(t):
        s = x @ t
        return k * np.logaddexp(0.0, s) - y * s + 0.5 * (t - center) @ V @ (t - center)

    res = minimize(f, center, method="SLSQP", constraints=[{"type": "ineq", "fun": lambda t: S**2 - t @ t}],
                   options={"ftol": 1e-15, "maxiter": 500})
    assert res.success
    return res.x


def _case(seed, R=6, d=3, S=2.0, scale=0.3, ridge=0.2, pull=1.9):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(R, d, d))
    V = np.einsum("rij,rkj->rik", A, A) * scale + ridge * np.eye(d)
    c = rng.normal(size=(R, d))
    c *= pull / np.linalg.norm(c, axis=1, keepdims=True)
    x = c / pull + 0.3 * rng.normal(size=(R, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    r = rng.integers(0, 2, R).astype(float)
    x[r == 0] *= -1  # the loss pulls θ along ±x, out through the ball's boundary for most runs
    return V, c, x, r, S


@pytest.mark.parametrize("k,kind", [(1.0, "theta"), (2.0, "theta-bar")])
@pytest.mark.parametrize("case", [dict(seed=1), dict(seed=2, scale=5.0, ridge=10.0, pull=0.8)])
def test_online_newton_step_is_the_constrained_minimiser(k, kind, case):
    """Both of ECOLog's per-round problems (θ_{t+1}: ℓ(·; r); θ̄_{t+1}: ℓ(·; 0) + ℓ(·; 1)), with the
    ball constraint active (seed 1) and inactive (seed 2), against SLSQP: equal to 1e-6."""
    V, c, x, r, S = _case(**case)
    y = r if kind == "theta" else np.ones_like(r)
    lam, Q = np.linalg.eigh(V)
    got = gl.online_newton_step(lam, Q, c, x, k, y, S)
    for i in range(len(r)):
        assert np.allclose(got[i], _direct(V[i], c[i], x[i], k, y[i], S), atol=1e-6)
    norms = np.linalg.norm(got, axis=1)
    assert (norms <= S * (1 + 1e-12)).all()
    if case["seed"] == 1 and kind == "theta":
        assert (np.abs(norms - S) < 1e-9).sum() >= 3  # the constraint binds: the test covers ν > 0


def test_update_is_ecologs_step_matrix_and_radius():
    """Two rounds of ECOLog.update against the definitions computed directly: θ_{t+1} (SLSQP), θ̄_{t+1}
    around θ_{t+1}, Ṽ_{t+1} = Ṽ_t + μ̇(⟨x, θ_{t+1}⟩)xxᵀ and the radius's loss sum."""
    R, d, S, zeta = 3, 3, 2.0, 0.05
    rng = np.random.default_rng(5)
    eco = gl.ECOLog("logistic", d, R, S, zeta, lam=0.3)  # a small λ: the steps move and reach the boundary
    V = np.broadcast_to(0.3 * np.eye(d), (R, d, d)).copy()
    theta, total = np.zeros((R, d)), np.zeros(R)
    for _ in range(2):
        x = rng.normal(size=(R, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        r = rng.integers(0, 2, R).astype(float)
        eco.update(x, r)
        for i in range(R):
            new = _direct(V[i], theta[i], x[i], 1.0, r[i], S)
            bar = _direct(V[i], new, x[i], 2.0, 1.0, S)
            assert np.allclose(eco.theta[i], new, atol=1e-6)
            s, sb = x[i] @ new, x[i] @ bar
            loss = lambda z: np.logaddexp(0.0, z) - r[i] * z  # noqa: E731
            total[i] += 2 * (1 + S) * (loss(sb) - loss(s)) - 0.5 * math.sqrt((new - bar) @ V[i] @ (new - bar))
            V[i] = V[i] + math.exp(-s) / (1 + math.exp(-s)) ** 2 * np.outer(x[i], x[i])
            theta[i] = new
        assert np.allclose(eco.V, V, atol=1e-8) and np.allclose(eco.cum_loss, total, atol=1e-6)
    lam, t = 0.3, 3
    gamma = math.sqrt(lam) / 2 + 2 * math.log(2 * math.sqrt(1 + t / (4 * lam)) / zeta) / math.sqrt(lam)
    assert np.allclose(eco.radius(), np.sqrt(2 * lam * S**2 + (1 + S) ** 2 * gamma + total))


def test_index_is_in_the_reward_scale():
    """Arm A: ⟨x, θ⟩ = 3, no width; arm B: ⟨x, θ⟩ = 0, width 1. The natural-scale index takes A
    (3 > 1), ECOLog's μ(⟨x, θ⟩) + width takes B (0.5 + 1 > 0.953)."""
    eco = gl.ECOLog("logistic", 2, 1, 5.0, 0.05)
    eco.theta = np.array([[3.0, 0.0]])
    eco.eig = (np.array([[1e12, 1.0]]), np.eye(2)[None])  # Ṽ⁻¹ = diag(0, 1): ‖A‖ = 0, ‖B‖ = 1
    b = eco.broadcast()
    b["beta"] = np.array([1.0])
    arms = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    args = [arms] + [b[k] for k in ("theta_o", "v_inv", "threshold", "width_o", "theta", "h_inv", "beta")]
    assert gl.choose(*args)[0][0] == 0
    assert b["reward_index"] is True and gl.choose(*args, link="logistic")[0][0] == 1


TOML = """
family = "glm-bandits"
horizon = {T}
seed = 11
delta = 0.02
runs = 3
checkpoints = 4
preset = "paper-code"
[environment]
link = "{link}"
dim = 2
arms = 10
norm = 2.0
reuse_contexts = false
[algorithms.ecolog]
"""


def _config(tmp_path, T=2000, link="logistic"):
    p = tmp_path / "e.toml"
    p.write_text(TOML.format(T=T, link=link))
    return validate_experiment(GLMExperiment, p)[0]


def test_ecolog_learns_beats_uniform_play(tmp_path):
    """d = 2, K = 10, S = 2, T = 2000, 3 runs: ECOLog's pseudo-regret is below a third of uniform
    play's expected regret on the same arm sets in every run, and its data-dependent condition held."""
    config = _config(tmp_path)
    _, _, res, _ = execute(Task(FAMILY.name, config, "ecolog", (0, 1, 2)))
    world = FAMILY.world(config, [0, 1, 2])
    uniform = (world.best[..., None] - world.means).mean(axis=-1).sum(axis=-1)
    assert (res.pseudo[:, -1] < uniform / 3).all(), (res.pseudo[:, -1], uniform)
    assert all(r["condition_failed"] == 0 for r in res.learner)


def test_probit_is_refused_naming_the_fields(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithms\.ecolog\.algorithm = 'ecolog' needs environment\.link = "
                                          r"'logistic' \(got 'probit'\)"):
        _config(tmp_path, link="probit")
    with pytest.raises(ValueError, match=r"environment\.link = 'probit' must be 'logistic'"):
        gl.ECOLog("probit", 2, 1, 2.0, 0.05)
