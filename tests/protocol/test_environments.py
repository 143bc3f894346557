import numpy as np
import pytest

from privbandit.families.distributed_dp_mab.world import BanditInstance, uniform_means


def test_clipped_gaussian_expectation_is_exact():
    inst = BanditInstance(np.array([0.02, 0.25, 0.5, 0.97]), sd=0.1)
    rng = np.random.default_rng(0)
    n = 1_000_000
    for arm, mu in enumerate(inst.expected_rewards()):
        x = inst.sample(arm, n, rng)
        assert x.min() >= 0 and x.max() <= 1
        assert abs(x.mean() - mu) < 5 * x.std() / np.sqrt(n)
    # Clipping moves the mean: a test that used the location µ would fail at arm 0.
    assert inst.expected_rewards()[0] > 0.02 + 0.01


def test_bernoulli_and_categorical():
    rng = np.random.default_rng(1)
    b = BanditInstance(np.array([0.1, 0.6]), reward="bernoulli")
    assert set(np.unique(b.sample(1, 1000, rng))) == {0.0, 1.0}
    c = BanditInstance(np.array([0.25, 0.5]), reward="categorical", levels=np.array([0.0, 0.5, 1.0]),
                       probabilities=np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25]]))
    assert abs(c.sample(0, 200_000, rng).mean() - 0.25) < 0.005
    assert c.best_arm == 1 and c.gaps.tolist() == [0.25, 0.0]


def test_uniform_instances():
    m = uniform_means(10, 0.45, 0.55, np.random.default_rng(2))
    assert m.shape == (10,) and m.min() >= 0.45 and m.max() <= 0.55


@pytest.mark.parametrize("kw, match", [
    (dict(means=np.array([0.5])), "at least 2"),
    (dict(means=np.array([0.5, 1.2])), r"\[0, 1\]"),
    (dict(means=np.array([0.5, 0.2]), reward="poisson"), "reward"),
    (dict(means=np.array([0.5, 0.2]), reward="categorical"), "levels"),
])
def test_bad_instances_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        BanditInstance(**kw)
