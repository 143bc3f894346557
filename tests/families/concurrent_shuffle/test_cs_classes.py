"""Algorithm 4 with the supervised-to-bandit conversion (``environment.conversion = "classes"``, issue
#34 item 3): each user scores her own arm set with the broadcast (step 3), reports her own φ(c_t, a_t)
and the label's reward, and the regret is her mistake count."""

from __future__ import annotations

import json

import numpy as np
import pytest

import privbandit
from privbandit.families.shuffle_linear_bandits.world import ClassContexts
from privbandit.protocol.spine.events import Plan
from privbandit.runner import load_experiment
from privbandit.runner.config import ConfigError

BASE = {"family": "concurrent-shuffle", "name": "t", "horizon": 600, "seed": 5, "epsilon": 1.0, "runs": 2,
        "environment": {"generator": "wine", "conversion": "classes", "arms": 3, "dim": 12}}


def _data(algorithms: dict, **env):
    data = json.loads(json.dumps(BASE))
    data["environment"].update(env)
    data["algorithms"] = algorithms
    return data


@pytest.mark.parametrize("env, message", [
    ({"generator": "paper"}, r"environment.conversion = 'classes' needs a real dataset in environment.generator "
                             r".* not generator = 'paper'"),
    ({"arms": 4}, r"the wine instance has K = 3 arms .* got arms = 4, dim = 12"),
    ({"conversion": "labels"}, r"conversion")])
def test_a_bad_conversion_is_refused_when_read(env, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_data({"a": {"algorithm": "cs-linucb-exact", "k": 1}}, **env), [])


def test_users_score_their_own_arms_report_their_own_phi_and_count_mistakes():
    """One lowest-level batch under a random broadcast: each user's arm is the argmax of her own
    ⟨φ, θ̂⟩ + β‖φ‖_{V⁻¹}, the truth is the running mistake count, and the exact-sum report carries her
    own φ(c_t, a_t)·y and φφᵀ."""
    fam, config = load_experiment(_data({"a": {"algorithm": "cs-linucb-exact", "k": 1}}), [])
    users = fam.users(config, "a", [0, 1])
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(2, 12))
    m = rng.normal(size=(2, 12, 12))
    v_inv = np.linalg.inv(np.eye(12) + m @ np.swapaxes(m, 1, 2))
    plan = users.schedule.plans(0, {"theta": theta, "v_inv": v_inv, "beta": 0.5})[0]
    n = plan.cohort
    answer = users.act(plan, 0, plan.first_user, n, None)
    own, labels = ClassContexts("wine", 3, 12, 5, [0, 1]).users(plan.first_user, n)
    scores = np.einsum("rnkd,rd->rnk", own, theta) + 0.5 * np.sqrt(np.einsum("rnkd,rde,rnke->rnk", own, v_inv, own))
    picks = scores.argmax(axis=-1)
    mistakes = (picks != labels).sum(axis=1)
    np.testing.assert_array_equal(answer.truth.pseudo, mistakes)
    np.testing.assert_array_equal(answer.truth.realized, mistakes)
    (_, offsets, values, _), = answer.reports
    phi = np.take_along_axis(own, picks[:, :, None, None], axis=2)[:, :, 0]
    y = (picks == labels).astype(float)
    np.testing.assert_allclose(values[:, :, :12], phi * y[:, :, None])


def test_a_run_learns_with_exact_sums_and_random_play_does_not():
    """Exact sums (non-private Algorithm 4) make fewer mistakes than uniformly random arms, whose
    mistakes are near T·2/3 (binomial, 4 sd)."""
    res = privbandit.run(_data({"exact": {"algorithm": "cs-linucb-exact", "k": 1},
                                "random": {"algorithm": "cs-random", "k": 1}}, ), horizon=1200)
    exact = np.asarray(res.results["exact"][0].pseudo)[:, -1]
    rand = np.asarray(res.results["random"][0].pseudo)[:, -1]
    assert (np.abs(rand - 800) < 4 * np.sqrt(1200 * 2 / 9)).all()
    assert (exact < rand).all()


def test_the_policy_refuses_a_classes_world():
    with pytest.raises(Exception, match="conversion = 'classes' is a simulated world"):
        privbandit.Policy(_data({"a": {"algorithm": "cs-linucb", "k": 1}}), "a", contexts=np.zeros((3, 12)))
