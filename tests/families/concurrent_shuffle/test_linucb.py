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
