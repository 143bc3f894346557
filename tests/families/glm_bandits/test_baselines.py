"""GLM-UCB's and GLOC's constants under each preset (issue #31): Filippi et al.'s ρ(t) and Jun et al.'s
γ_t with the authors' λ = d under paper-code, our narrower widths with λ = 1 under paper, and the
authors' GLOC defects as named switches that each change exactly what they name."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits.config import GLMExperiment
from privbandit.families.glm_bandits.family import FAMILY
from privbandit.families.glm_bandits.parties import GLMServer, setup
from privbandit.families.glm_bandits.world import mu
from privbandit.runner.config import ConfigError, validate_experiment

TOML = """
family = "glm-bandits"
horizon = 60
seed = 4
delta = 0.02
runs = 2
preset = "{preset}"
[environment]
link = "probit"
dim = 3
arms = 5
norm = 2.0
[algorithms.glm-ucb]
{ucb}
[algorithms.gloc]
{gloc}
"""


def _config(tmp_path, preset="paper-code", ucb="", gloc=""):
    p = tmp_path / "g.toml"
    p.write_text(TOML.format(preset=preset, ucb=ucb, gloc=gloc))
    return validate_experiment(GLMExperiment, p)[0]


def _learner(config, label):
    return GLMServer(setup(FAMILY.public_task(config, label, [0, 1])), [1, 2]).learner


def _x(rng, R=2, d=3):
    x = rng.normal(size=(R, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True) * rng.random((R, 1))


def test_filippi_width_is_2_kmu_kappaF_R_kappa_root():
    """ρ(t) = 2k_μκ_FRκ√(2d log t log(2dT/ζ)), k_μ = 1/√(2π) (probit), κ_F = √(3 + 2log(1 + 2/λ)):
    0 in round 1 (log 1), and the value below in round 3."""
    d, T, zeta, lam, kappa = 3, 5000, 0.02, 3.0, np.array([18.0, 40.0])
    u = gl.GLMUCB("probit", d, T, 2, kappa, np.array([2.6, 2.6]), zeta, lam, 2 * lam, "filippi", 1.0)
    assert np.all(u.broadcast()["beta"] == 0.0)
    rng = np.random.default_rng(0)
    for _ in range(2):
        u.update(_x(rng), np.array([1.0, 0.0]))
    want = 2 / math.sqrt(2 * math.pi) * math.sqrt(3 + 2 * math.log(1 + 2 / 3)) * kappa \
        * math.sqrt(2 * d * math.log(3) * math.log(2 * d * T / zeta))
    assert np.allclose(u.broadcast()["beta"], want, rtol=1e-12)
    assert u.broadcast().get("reward_index") is True  # Filippi's index: μ(⟨x, θ̂⟩) + ρ(t)‖x‖_{V⁻¹}
    ours = gl.GLMUCB("probit", d, T, 2, kappa, np.array([2.6, 2.6]), zeta)
    want = kappa / 2.6 * math.sqrt(2 * d * math.log(2) * math.log(2 * d * T / zeta))
    assert np.allclose(ours.broadcast()["beta"], want)
    assert "reward_index" not in ours.broadcast()


def test_filippi_index_is_on_the_reward_scale():
    """With a large width the reward-scale index μ(⟨x,θ̂⟩) + ρ‖x‖ and the linear one ⟨x,θ̂⟩ + ρ‖x‖ pick
    different arms: here the linear index's larger ⟨x, θ̂⟩ gap outweighs the bonus, the reward one's not."""
    # ⟨x, θ̂⟩ = 2, 0 and ‖x‖_{V⁻¹} = 1, 2: linear 2 + 1.5 > 0 + 3, reward Φ(2) + 1.5 < Φ(0) + 3
    arms = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    theta, v_inv, beta = np.array([[2.0, 0.0]]), np.diag([1.0, 4.0])[None], np.array([1.5])
    inf = np.array([np.inf])
    lin, _ = gl.choose(arms, theta, v_inv, inf, inf, theta, v_inv, beta)
    rew, _ = gl.choose(arms, theta, v_inv, inf, inf, theta, v_inv, beta, "probit")
    assert lin[0] == 0 and rew[0] == 1


def test_glm_ucb_estimate_solves_the_authors_regularised_equation():
    """Under paper-code the estimate is the root of Σ(μ(⟨x,θ⟩) − r)x + 2λθ = 0 (their λ‖θ‖², λ = d)."""
    rng = np.random.default_rng(1)
    u = gl.GLMUCB("probit", 3, 400, 1, np.array([18.0]), np.array([2.6]), 0.02, 3.0, 6.0, "filippi")
    for _ in range(400):
        u.update(_x(rng, 1), (rng.random(1) < 0.5).astype(float))
    X, Y, th = u.x[0], u.r[0], u.theta[0]
    residual = X.T @ (mu("probit", X @ th) - Y)
    assert np.linalg.norm(residual + 6.0 * th) < 1e-6
    assert np.linalg.norm(residual + 3.0 * th) > 1e-3  # not the (λ/2)‖θ‖² of the paper preset


@pytest.mark.parametrize("preset,lam,width,reg", [("paper-code", 3.0, "filippi", 6.0), ("paper", 1.0, "ours", 1.0)])
def test_presets_choose_the_baselines_constants(tmp_path, preset, lam, width, reg):
    config = _config(tmp_path, preset)
    u, g = _learner(config, "glm-ucb"), _learner(config, "gloc")
    assert u.lam == lam and u.reg == reg and np.allclose(np.linalg.inv(u.V[0]), np.eye(3) / lam)
    assert u.shift == (1 if width == "filippi" else 2)
    assert g.lam == lam and g.width == ("jun" if width == "filippi" else "ours") and not g.defects
    assert np.allclose(g.V_inv[0], np.eye(3) / lam)
    kappa = setup(FAMILY.public_task(config, "gloc", [0])).kappa[0]
    assert g.B[0] == pytest.approx(2 * lam * 4.0 / kappa) if width == "filippi" else True


def test_glm_ucb_penalty_goes_with_the_width(tmp_path):
    """`ours` at any λ keeps our (λ/2)‖θ‖²; `published` takes the authors' λ‖θ‖², under either preset."""
    assert _learner(_config(tmp_path, ucb='baseline_width = "ours"'), "glm-ucb").reg == 3.0
    u = _learner(_config(tmp_path, "paper", ucb='baseline_width = "published"\nbaseline_lambda = 2.0'), "glm-ucb")
    assert (u.lam, u.reg, u.shift) == (2.0, 4.0, 1)


def test_jun_radius_is_theorem_1_with_the_data_dependent_ons_bound():
    """γ_t = β_t(B_t) + λS² − (‖z‖² − θ̂ᵀXᵀz), B_t = 2λS²/κ + (κ/2)Σ‖g_s‖²_{A_s⁻¹}, recomputed here
    from the recorded steps."""
    rng = np.random.default_rng(2)
    d, S, lam, zeta, kappa = 3, 2.0, 3.0, 0.02, np.array([18.0])
    g = gl.GLOC("probit", d, 50, 1, kappa, S, zeta, lam, "jun")
    A, Z, X, B = lam * np.eye(d), [], [], 2 * lam * S**2 / kappa[0]
    for _ in range(30):
        x, r = _x(rng, 1), (rng.random(1) < 0.5).astype(float)
        z = float(x[0] @ g.theta_online[0])
        A = A + np.outer(x[0], x[0])
        grad = (0.5 * math.erfc(-z / math.sqrt(2)) - r[0]) * x[0]
        B += kappa[0] / 2 * grad @ np.linalg.solve(A, grad)
        Z.append(z)
        X.append(x[0])
        g.update(x, r)
    X, Z = np.array(X), np.array(Z)
    th = np.linalg.solve(A, X.T @ Z)
    k = kappa[0]
    beta = 1 + 4 * k * B + 8 * k**2 * math.log(2 / zeta * math.sqrt(1 + 2 * k * B + 4 * k**4 / zeta**2))
    assert g.B[0] == pytest.approx(B, rel=1e-10)
    assert np.allclose(g.theta[0], th)
    assert g.radius()[0] == pytest.approx(math.sqrt(beta + lam * S**2 - (Z @ Z - th @ X.T @ Z)), rel=1e-10)


def test_each_gloc_defect_changes_only_what_it_names():
    rng = np.random.default_rng(3)
    kappa = np.array([18.0, 18.0])
    xs = [(_x(rng), (rng.random(2) < 0.5).astype(float)) for _ in range(20)]
    learners = {d: gl.GLOC("probit", 3, 50, 2, kappa, 2.0, 0.02, 3.0, "jun", (d,) if d else ())
                for d in ("",) + gl.GLOC_DEFECTS}
    for x, r in xs:
        for lr in learners.values():
            lr.update(x, r)
    base = learners[""]
    bodies = {d: lr.broadcast() for d, lr in learners.items()}
    sphere = learners["gloc-sphere-projection"]
    assert np.allclose(np.linalg.norm(sphere.theta_online, axis=1), 2.0)
    assert np.all(np.linalg.norm(base.theta_online, axis=1) <= 2.0 + 1e-12)
    assert not np.allclose(sphere.theta_online, base.theta_online)
    assert np.array_equal(bodies["gloc-ons-centre"]["theta"], base.theta_online)
    assert np.array_equal(bodies[""]["theta"], base.theta)
    assert bodies["gloc-reward-scale"].get("reward_index") is True and "reward_index" not in bodies[""]
    assert learners["gloc-l2-noise"].noise == pytest.approx(1 / (2 * math.pi)) and base.noise == 1.0
    assert np.all(learners["gloc-l2-noise"].radius() < base.radius())
    no_terms = learners["gloc-radius-terms"].radius() ** 2
    lam_s2 = 3.0 * 4.0
    z_term = base.zz - np.einsum("rd,rd->r", base.theta, base.b)
    assert np.allclose(no_terms, base.radius() ** 2 - lam_s2 + z_term)
    for d in ("gloc-reward-scale", "gloc-l2-noise", "gloc-radius-terms", "gloc-ons-centre"):
        assert np.array_equal(learners[d].theta_online, base.theta_online)  # the learning is untouched


def test_code_defects_are_for_gloc_only_and_named(tmp_path):
    with pytest.raises(ConfigError, match="code_defects"):
        _config(tmp_path, ucb='code_defects = ["gloc-ons-centre"]')
    with pytest.raises(ConfigError, match="code_defects"):
        _config(tmp_path, gloc='code_defects = ["gloc-typo"]')
    with pytest.raises(ConfigError, match="baseline_lambda"):
        _config(tmp_path, gloc="baseline_lambda = 0")
    config = _config(tmp_path, gloc='code_defects = ["gloc-ons-centre", "gloc-l2-noise"]\nbaseline_lambda = 2.5')
    g = _learner(config, "gloc")
    assert g.defects == {"gloc-ons-centre", "gloc-l2-noise"} and g.lam == 2.5
