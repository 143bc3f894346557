"""The GLM family's supervised-to-bandit conversion (``environment.conversion = "classes"``, issue #34
item 3): user t's arm set is the disjoint encoding of a real row x_t, her reward the label's 1{a = y_t},
the regret the mistake count, and κ, κ* the bounds eq. (4) allows from S (no θ* makes these rewards)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privbandit.datasets import real
from privbandit.families.glm_bandits.world import kappa_bounds, world_of
from privbandit.runner import load_experiment
from privbandit.runner.config import ConfigError

BASE = {"family": "glm-bandits", "name": "t", "horizon": 400, "seed": 5, "epsilon": 4, "runs": 2,
        "environment": {"link": "logistic", "theta": "wine", "conversion": "classes", "arms": 3, "dim": 12,
                        "norm": 2.0}}


def _load(env: dict | None = None, algorithms: dict | None = None):
    data = json.loads(json.dumps(BASE))
    data["environment"].update(env or {})
    data["algorithms"] = algorithms or {"glm-ucb": {}}
    return load_experiment(data, [])


@pytest.mark.parametrize("env, message", [
    ({"theta": "sphere"}, r"environment.conversion = 'classes' needs a real dataset in environment.theta .* "
                          r"not theta = 'sphere'"),
    ({"arms": 4}, r"the wine instance has K = 3 arms .* got arms = 4, dim = 12"),
    ({"dim": 13}, r"got arms = 3, dim = 13"),
    ({"conversion": "labels"}, r"conversion")])
def test_a_bad_conversion_is_refused_when_read(env, message):
    with pytest.raises(ConfigError, match=message):
        _load(env)


def test_rewards_are_the_labels_and_kappas_the_bounds():
    """Same rows as the model conversion (same stream), but means one-hot of the rows' labels, the best
    arm's mean 1, and κ, κ* = eq. (4)'s bounds from S, whatever the rows."""
    model = world_of("logistic", "wine", 5, [0, 1], 400, 3, 12, 2.0, False)
    labels = world_of("logistic", "wine", 5, [0, 1], 400, 3, 12, 2.0, False, "classes")
    np.testing.assert_array_equal(model.arms, labels.arms)
    assert set(np.unique(labels.means)) == {0.0, 1.0}
    np.testing.assert_array_equal(labels.means.sum(axis=-1), 1.0)  # one class per row
    np.testing.assert_array_equal(labels.best, 1.0)
    # each user's row x_t sits in arm 0's first block: find it in the dataset, read its label
    x = real.contexts("wine", 3)
    _, y = real.load("wine")
    xs = labels.arms[0, :, 0, :4]
    idx = [int(np.flatnonzero(np.all(np.isclose(x, v), axis=1))[0]) for v in xs]
    np.testing.assert_array_equal(labels.means[0], (y[idx][:, None] == np.arange(3)).astype(float))
    k = labels.kappas(1)
    assert (k.kappa, k.kappa_star) == kappa_bounds("logistic", 2.0)
    assert model.kappas(1).kappa < k.kappa  # the data's own κ is below the bound


def test_a_run_counts_mistakes():
    """A run's pseudo-regret is an integer mistake count equal to its realized regret (rewards are
    deterministic), and the analyzer is told the bounds, not a θ*'s κ."""
    import privbandit

    (out,) = privbandit.run(json.loads(json.dumps({**BASE, "algorithms": {"glm-ucb": {}}}))).results["glm-ucb"]
    pseudo, realized = np.asarray(out.pseudo), np.asarray(out.realized)
    np.testing.assert_array_equal(pseudo, realized)
    np.testing.assert_array_equal(pseudo, np.round(pseudo))
    assert (pseudo[:, -1] > 0).all() and (pseudo[:, -1] <= 400).all()
