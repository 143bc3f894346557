"""Algorithm 4 (concurrent-shuffle private LinUCB) as a vectorized simulation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from privbandit.families.concurrent_shuffle import linucb as L


def test_runs_do_not_depend_on_what_is_stacked_with_them():
    a = L.alg4(3000, 2, 3, 1.0, 0.1, vec_scale=1.0)
    both = L.run(a, 20, 5, [0, 1])
    alone = L.run(a, 20, 5, [1])
    np.testing.assert_array_equal(both["regret_t0"][1], alone["regret_t0"][0])
    again = L.run(a, 20, 5, [0, 1])
    np.testing.assert_array_equal(both["regret_t0"], again["regret_t0"])


def test_exact_sums_learn_and_private_sums_cost_regret():
    """With exact node sums (no privacy) the tree-fed learner is batched LinUCB: its regret is far
    below a uniform choice's; the private run's is above the exact one's at the same batches."""
    a = L.alg4(6000, 2, 3, 1.0, 0.1, vec_scale=1.0)
    exact = dataclasses.replace(a, private=False, lam=1.0, sigma_tilde=0.0)
    r_exact = L.run(exact, 20, 2, [0, 1, 2])["final_regret"]
    r_priv = L.run(a, 20, 2, [0, 1, 2])["final_regret"]
    assert r_exact.mean() < 0.5 * r_priv.mean()
    assert (r_exact < 0.1 * 6000).all()


@pytest.mark.parametrize("scale,status", [(None, "proven"), (1.0, "none proven")])
def test_ledger_composes_the_levels(scale, status):
    a = L.alg4(3 ** 5, 2, 3, 1.0, 0.1, vec_scale=scale)
    s = a.ledger().summary()
    assert s["guarantee"] == status
    if status == "proven":
        assert s["epsilon_at_delta"] == pytest.approx(1.0) and s["delta_from_theorems"] == pytest.approx(0.1)


ALG4 = """
family = "concurrent-shuffle"
name = "a4"
horizon = 700
seed = 5
epsilon = 1.0
delta = 0.1
runs = 3
[environment]
arms = 20
dim = 3
[algorithms."alg4@k2"]
algorithm = "cs-linucb"
k = 2
vec_scale = 1.0
[algorithms."theory@k1"]
algorithm = "cs-linucb"
k = 1
[algorithms."exact@k3"]
algorithm = "cs-linucb-exact"
k = 3
"""


@pytest.mark.parametrize("label", ["alg4@k2", "theory@k1", "exact@k3"])
def test_spine_run_equals_the_simulation(tmp_path, label):
    from privbandit.runner import config as experiment_files
    from privbandit.runner.tasks import Task, execute

    path = tmp_path / "a4.toml"
    path.write_text(ALG4)
    fam, config = experiment_files.load(path)
    _, _, res, _ = execute(Task(fam.name, config, label, (0, 1, 2)))
    a = config.algorithms[label]
    sim = L.run(L.alg4(700, a.k, 3, 1.0, 0.1, vec_scale=a.vec_scale, private=a.algorithm == "cs-linucb"),
                20, 5, [0, 1, 2], label)
    np.testing.assert_allclose(res.pseudo[:, -1], sim["final_regret"], rtol=1e-12)
    _, _, single, _ = execute(Task(fam.name, config, label, (2,)))
    np.testing.assert_array_equal(single.pseudo[0], res.pseudo[2])
    expect = {"alg4@k2": "none proven", "theory@k1": "proven", "exact@k3": "non-private"}[label]
    assert res.privacy["guarantee"] == expect
    if expect == "proven":
        assert res.privacy["epsilon_at_delta"] == pytest.approx(1.0)
    tree = L.alg4(700, a.k, 3, 1.0, 0.1).tree  # every user of a complete node reports once per level
    assert res.reports == sum(tree.nodes(i) * s for i, s in enumerate(tree.sizes, start=1))


def test_alg4_users_are_the_linear_familys_users():
    """User t's reward is 1{U_t < μ} with the linear family's U_t, whatever the label or k (so R6's
    runs are paired with LinUCB, JDP, LDP and SDP-Vec, and `privbandit run` too: the spine's users
    draw the same numbers: test_spine_run_equals_the_simulation); the realized regret
    recomputed from the returned arms and those U_t matches (n = 100 batches of 10: no tail)."""
    from privbandit.families.shuffle_linear_bandits.world import instances, user_uniforms

    n, seed, runs = 1000, 4, [0, 3]
    a = L.alg4(n, 1, 3, 1.0, 0.1, vec_scale=1.0, d_low=10, degree=100)
    out = L.run(a, 20, seed, runs, "one-label")
    inst = instances("paper", 20, 3, seed, runs)
    s1 = a.tree.sizes[0]
    for i, r in enumerate(runs):
        u = user_uniforms(seed, r, 0, n)
        mu = inst.means[i]
        arm = np.repeat(out["actions"][i], s1)
        assert arm.size == n
        realized = (u < mu.max()).sum() - (u < mu[arm]).sum()
        assert out["final_realized"][i] == realized
    # the P_Vec noise stays keyed by label, so the arms may differ; the users' draws may not
    exact = dataclasses.replace(a, private=False, lam=1.0, sigma_tilde=0.0)
    e1 = L.run(exact, 20, seed, runs, "one-label")
    e2 = L.run(exact, 20, seed, runs, "another-label")
    np.testing.assert_array_equal(e1["final_realized"], e2["final_realized"])
