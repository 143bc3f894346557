"""The supervised-to-bandit conversion of the real sets (privbandit/datasets/real.py, issue #34 item 3):
arms = classes with the disjoint encoding, user t's context a uniformly drawn row, reward the label."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.datasets import real
from privbandit.families.shuffle_linear_bandits.world import ClassContexts


@pytest.mark.parametrize("name", real.DATASETS)
def test_the_class_counts_are_the_loaded_labels(name):
    _, y = real.load(name)
    assert real.CLASSES[name] == real.classes(name) and set(np.unique(y)) == set(range(real.CLASSES[name]))


@pytest.mark.parametrize("name, p", [("digits", 3), ("wine", 3), ("iris", 1)])
def test_the_disjoint_encoding_puts_the_context_in_its_arms_block(name, p):
    """φ(x, a) = e_a ⊗ x: (…, C, C·(p + 1)), block a is x, every other block 0, ‖φ(x, a)‖ = ‖x‖ ≤ 1."""
    c, x = real.CLASSES[name], real.contexts(name, p)
    phi = real.disjoint(x, c)
    assert phi.shape == (x.shape[0], c, c * (p + 1))
    blocks = phi.reshape(x.shape[0], c, c, p + 1)
    for a in range(c):
        assert np.array_equal(blocks[:, a, a], x)
        assert not np.delete(blocks[:, a], a, axis=1).any()
    norms = np.linalg.norm(phi, axis=-1)
    assert np.allclose(norms, np.linalg.norm(x, axis=-1)[:, None], rtol=0, atol=1e-15)
    assert norms.max() <= 1 + 1e-12


def test_a_users_context_is_her_row_whatever_block_draws_it_and_rows_are_uniform():
    """Users' rows come from their run's stream by position: a block split anywhere gives the same
    users; runs differ; over 60,000 users every one of the 178 wines is drawn about equally often
    (a χ² statistic of 177 degrees of freedom: mean 177, sd 18.8; the bound 280 is 5.5 sd)."""
    w = ClassContexts("wine", 3, 12, 7, [0, 1])
    phi, labels = w.users(0, 100)
    a, la = w.users(0, 37)
    b, lb = w.users(37, 63)
    assert np.array_equal(phi, np.concatenate([a, b], axis=1)) and np.array_equal(labels, np.concatenate([la, lb], 1))
    assert not np.array_equal(labels[0], labels[1])
    alone, _ = ClassContexts("wine", 3, 12, 7, [1]).users(0, 100)
    assert np.array_equal(alone[0], phi[1])  # run 1's users do not depend on the runs stacked with it
    x, y = real.contexts("wine", 3), real.load("wine")[1]
    # each user's label is her row's: her arm-a block is x of a row whose label she carries
    for r in range(2):
        for t in range(100):
            row = np.flatnonzero((x == phi[r, t, 0, :4]).all(axis=1))
            assert row.size == 1 and y[row[0]] == labels[r, t]
    rows = np.minimum((w.rows.get(0, 60_000)[0] * x.shape[0]).astype(int), x.shape[0] - 1)
    counts = np.bincount(rows, minlength=x.shape[0])
    expected = 60_000 / x.shape[0]
    assert ((counts - expected) ** 2 / expected).sum() < 280


@pytest.mark.parametrize("arms, dim", [(9, 40), (10, 45), (10, 10), (10, 660)])
def test_bad_class_sizes_name_the_field_and_the_range(arms, dim):
    with pytest.raises(ValueError, match=r"environment: the digits instance has K = 10 arms .*\(d in 20, 30, …, "
                                         rf"650\); got arms = {arms}, dim = {dim}"):
        real.check_classes("digits", arms, dim)


def test_the_least_squares_reference_classifies_far_better_than_chance():
    """The rounds.csv reference θ_LS: argmax_a ⟨φ(x, a), θ_LS⟩ is right on most wines (p = 3)."""
    theta = real.class_fit("wine", 12)
    phi, y = real.disjoint(real.contexts("wine", 3), 3), real.load("wine")[1]
    assert (np.argmax(phi @ theta, axis=1) == y).mean() > 0.9
