"""The switches that put one ingredient of the authors' repository into Private-GLM (docs/glm-bandits.md,
"Figure 1"): the defective tree query of their initial commit, their HEAD's Criterion II and DP-SGD
schedule."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits import mechanisms as mech


def _unit_prefixes(T, n):
    tree = mech.BuggyHeapTreeDefect(mech.TreeCalibration(1e-9, 1.0, 5, 2), T, [np.random.default_rng(0)])
    out = []
    for _ in range(n):
        tree.insert(np.eye(2)[None])
        out.append(tree.prefix()[0, 0, 0])
    return np.array(out), tree


def test_buggy_tree_returns_the_repositorys_values_and_keeps_the_true_sum():
    """Unit leaves: 2, 3, 5, 5, 9, 9, 9, 9, 17, … (spec §9.2) while the left half fills, and the right
    half drops it (T = 8: 4, 3, 2, 1). The node noise is one grid step here (σ rounded up on the grid)."""
    got, _ = _unit_prefixes(100, 11)
    assert np.allclose(got, [2, 3, 5, 5, 9, 9, 9, 9, 17, 17, 17], atol=0.05)
    got, tree = _unit_prefixes(8, 8)
    assert np.allclose(got, [2, 3, 5, 5, 4, 3, 2, 1], atol=0.05)
    assert np.allclose(tree.true_prefix()[0], 8 * np.eye(2))


def test_buggy_tree_is_calibrated_for_its_path_length():
    """Each leaf sits in ⌈log₂ T⌉ + 1 heap nodes (15 at T = 15000, where the dyadic tree has 14): the
    σ for a given ρ grows accordingly, so the ledger's ρ still holds."""
    assert mech.buggy_tree_levels(15000) == 15 and mech.tree_levels(15000) == 14
    ours = mech.calibrate_tree(0.5, 1.0, 15000, 3)
    buggy = mech.calibrate_tree(0.5, 1.0, 15000, 3, mech.buggy_tree_levels(15000))
    assert buggy.rho == pytest.approx(ours.rho, rel=1e-3)
    assert buggy.sigma == pytest.approx(ours.sigma * (15 / 14) ** 0.5)


def test_psd_growth_is_the_largest_generalised_eigenvalue():
    rng = np.random.default_rng(3)
    A, B = rng.normal(size=(2, 4, 5, 5))
    h_prev = np.einsum("rij,rkj->rik", A, A) + np.eye(5)
    h = np.einsum("rij,rkj->rik", B, B) + np.eye(5)
    got = gl.psd_growth(np.linalg.inv(h_prev), h)
    want = [scipy.linalg.eigh(h[i], h_prev[i], eigvals_only=True)[-1] for i in range(4)]
    assert np.allclose(got, want)


def test_head_epochs_follow_the_per_call_epsilon():
    assert [gl.head_epochs(e) for e in (0.05, 0.1, 0.2, 0.44, 1.5, 2.67)] == [15, 15, 25, 50, 75, 100]


def test_add_remove_tree_noise_is_the_repositorys_sigma_and_the_ledger_charges_what_it_spends():
    """The repository's σ is calibrated at a leaf's add/remove sensitivity (1; 1/κ* for H), √2 below
    the replace-one √2 a user's changed leaf can move; the ρ it really gives is then twice the budget."""
    from privbandit.families.glm_bandits.parties import tree_calibration

    ours = tree_calibration(0.3, 2**0.5, 15000, 5, None, {})
    defect = tree_calibration(0.3, 2**0.5, 15000, 5, None, {"tree_noise": "paper-code-add-remove-defect"})
    repo = mech.calibrate_tree(0.3, 1.0, 15000, 5)
    assert defect.sigma == repo.sigma < ours.sigma and ours.rho == pytest.approx(0.3, rel=1e-3)
    assert defect.sensitivity == 2**0.5 and defect.rho == pytest.approx(2 * 0.3, rel=0.02)
