"""LinUCB-JDP with ``tree_noise = "authors-reused"`` (issue #31 item 2): the authors' noise, their
count of draws, the leak it opens (two releases give a block's un-noised sum, exactly), the ledger
that says so, and the in-process look-ahead bit for bit the run of one plan per user."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits.family import FAMILY
from privbandit.protocol.primitives.noise.grid_gaussian import to_grid
from tests.protocol.test_linear_lookahead import _run


def _config(tree_noise: str, horizon: int = 400, runs: int = 1, seed: int = 2, label: str = "LinUCB-JDP",
            algorithm: str = "linucb-jdp"):
    return FAMILY.load({"family": FAMILY.name, "horizon": horizon, "seed": seed, "epsilon": 1.0, "delta": 0.1,
                        "runs": runs, "preset": "paper-code", "environment": {"arms": 20, "dim": 3},
                        "algorithms": {label: {"algorithm": algorithm, "tree_noise": tree_noise}}}, "<test>")


def test_reused_draws_are_the_authors_count():
    """⌊ln(1 + c)⌋ + 1 draws after c observations (their get_arm at t = c), written out as their
    line 215 computes it; the noise changes at c = 2, 7, 20, 54, 148, 403, 1096, 2980, 8103 only."""
    counts = np.arange(1, 20_001)
    theirs = np.array([int(np.floor(np.log(1 + t))) + 1 for t in counts])
    np.testing.assert_array_equal([slb.reused_draws(int(c)) for c in counts], theirs)
    changes = counts[1:][np.diff(theirs) > 0]
    assert changes.tolist() == [2, 7, 20, 54, 148, 403, 1096, 2980, 8103]


def test_reused_noise_is_the_sum_of_the_first_draws():
    """The prefix noise after c steps is N₀ + … + N_{k(c)−1}, one step at a time or a block at once."""
    rng = np.random.default_rng(5)
    draws = [to_grid(rng.normal(0, 3, (2, 4))) for _ in range(12)]
    one, block = (slb.ReusedTreeNoise(3.0, (2, 4), draws.__getitem__) for _ in range(2))
    steps = np.stack([one.step(np.zeros((2, 4))) for _ in range(60)], axis=1)
    np.testing.assert_array_equal(steps, np.concatenate([block.changes(25), block.changes(35)], axis=1))
    for c in (1, 2, 7, 20, 54, 60):
        np.testing.assert_array_equal(steps[:, :c].sum(axis=1), sum(draws[:slb.reused_draws(c)]))
    assert one.prefix_noise() is not None and np.array_equal(one.prefix_noise(), sum(draws[:slb.reused_draws(60)]))


@pytest.mark.parametrize("tree_noise", ["authors-reused", "fresh"])
def test_two_releases_disclose_a_block_sum_exactly(tree_noise):
    """The analyzer's released prefix sums of φy (u_m = Σ ũ, Algorithm 1 line 14) after 20 and 53
    users: with the authors' reused draws (k = 4 at both counts) their difference is users 20 … 52's
    Σ φy rounded to the grid, exactly, the noise cancelled; with the tree's fresh nodes it is not
    (the test that this one can fail)."""
    config = _config(tree_noise, horizon=100)
    server = FAMILY.analyzer(FAMILY.public_task(config, "LinUCB-JDP", [0]), [12345])
    rng = np.random.default_rng(3)
    x = rng.normal(size=(100, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = (rng.random(100) < 0.5).astype(np.float64)
    released = [server.learner.u.copy()]
    for m in range(60):
        server._learn(m, np.concatenate([x[m], [y[m]]])[None, None, :])
        released.append(server.learner.u.copy())
    a, b = 20, 53
    assert slb.reused_draws(a) == slb.reused_draws(b) == 4
    truth = np.zeros(3)
    for i in range(a, b):
        truth = truth + to_grid(x[i] * y[i])
    leaked = released[b][0] - released[a][0]
    if tree_noise == "authors-reused":
        np.testing.assert_array_equal(leaked, truth)
        # and user a's own φy from two consecutive releases
        np.testing.assert_array_equal(released[a + 1][0] - released[a][0], to_grid(x[a] * y[a]))
    else:
        assert np.abs(leaked - truth).min() > 1e-3


def test_ledger_names_the_leak():
    """Reused draws: none proven, the leak named (basis and mechanism warnings); fresh: proven."""
    reused, fresh = _config("authors-reused"), _config("fresh")
    r, _ = _run(reused, "LinUCB-JDP", oracle=True)
    f, _ = _run(fresh, "LinUCB-JDP", oracle=True)
    assert r.privacy["guarantee"] == "none proven" and r.privacy["epsilon_at_delta"] is None
    assert "authors-reused" in r.privacy["basis"][0] and "raw sum, exactly" in r.privacy["basis"][0]
    assert f.privacy["guarantee"] == "proven" and f.privacy["epsilon_at_delta"] > 0
    mech = FAMILY.setup(reused, "LinUCB-JDP").describe()
    assert mech["tree_noise"] == "authors-reused" and any("raw sum" in w for w in mech["warnings"])
    assert FAMILY.audit_targets(reused, "LinUCB-JDP") == []  # no claim to audit
    calibrated = FAMILY.load({**reused.model_dump(), "calibrate": True}, "<test>")
    with pytest.raises(Exception, match="none proven"):  # no ε buys a guarantee: calibration refuses
        FAMILY.algorithm(calibrated, "LinUCB-JDP")


def test_tree_noise_is_for_jdp_only():
    with pytest.raises(ValidationError, match=r"algorithms.LinUCB-LDP.tree_noise = 'authors-reused' applies to "
                                              r"linucb-jdp only"):
        _config("authors-reused", label="LinUCB-LDP", algorithm="linucb-ldp")
    with pytest.raises(ValidationError, match="tree_noise"):
        _config("reused")


@pytest.mark.parametrize("horizon,runs,seed", [(3000, 2, 2), (1200, 1, 7)])
def test_look_ahead_equals_one_user_per_plan(horizon, runs, seed):
    """The reused draws through the look-ahead (their changes a block at a time) against one plan per user."""
    config = _config("authors-reused", horizon, runs, seed)
    fast, fast_plans = _run(config, "LinUCB-JDP", oracle=True)
    ref, ref_plans = _run(config, "LinUCB-JDP", oracle=False)
    assert len(ref_plans) == horizon and len(fast_plans) < horizon / 4
    np.testing.assert_array_equal(fast.pseudo, ref.pseudo)
    np.testing.assert_array_equal(fast.realized, ref.realized)
    assert fast.privacy == ref.privacy and fast.learner == ref.learner
    for field in ("u", "V", "v_inv", "theta"):
        np.testing.assert_array_equal(getattr(fast.final, field), getattr(ref.final, field), err_msg=field)
