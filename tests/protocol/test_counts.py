"""The exact accountant of shuffled bit counts (protocol/privacy/counts.py) against brute force:
its δ(ε) bounds the hockey-stick divergence summed over the whole support, one label and two labels
composed, and only by its discretization; larger shifts dominate smaller ones; the calibration gives
the fewest noise bits; the exact preset's fair bits are Bin(b, ½)."""

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.protocol.privacy import counts
from tests.stats import P_MIN


@pytest.mark.parametrize("trials, shift, epsilon", [(30, 1, 0.5), (200, 1, 1.0), (400, 3, 1.0), (1000, 7, 0.3),
                                                    (64, 4, 2.0)])
def test_one_label_is_the_exact_hockey_stick_up_to_discretization(trials, shift, epsilon):
    exact = counts.binomial_count_delta(trials, shift, epsilon)
    got = counts.count_delta(trials, shift, 1, epsilon)
    assert exact <= got <= exact * 1.01 + 1e-12, (exact, got)


def _product_delta(trials: int, shift: int, epsilon: float) -> float:
    """Two labels by brute force: the hockey-stick divergence of the product pair over the 2-D grid."""
    x = np.arange(trials + shift + 1)
    p = stats.binom.pmf(x, trials, 0.5)
    q = stats.binom.pmf(x - shift, trials, 0.5)
    pp, qq = np.outer(p, p), np.outer(q, q)
    return float(np.clip(pp - math.exp(epsilon) * qq, 0, None).sum())


@pytest.mark.parametrize("trials, shift, epsilon", [(40, 1, 0.7), (120, 3, 1.0)])
def test_labels_compose_as_the_product_pair(trials, shift, epsilon):
    exact = _product_delta(trials, shift, epsilon)
    got = counts.count_delta(trials, shift, 2, epsilon)
    assert exact <= got <= exact * 1.02 + 1e-12, (exact, got)


def test_the_largest_shift_and_either_sign_is_the_worst_case():
    """Log-concave and symmetric noise: δ grows with |shift| and is the same for ±shift."""
    trials, eps = 300, 0.8
    deltas = [counts.binomial_count_delta(trials, c, eps) for c in range(1, 8)]
    assert all(a < b for a, b in zip(deltas, deltas[1:]))
    x = np.arange(-10, trials + 11)
    p = stats.binom.pmf(x, trials, 0.5)
    for c in (1, 4):
        up, down = stats.binom.pmf(x - c, trials, 0.5), stats.binom.pmf(x + c, trials, 0.5)
        assert np.clip(p - math.exp(eps) * up, 0, None).sum() == pytest.approx(
            np.clip(p - math.exp(eps) * down, 0, None).sum(), rel=1e-9)


def test_the_calibration_gives_the_fewest_noise_bits():
    for users, shift, labels, eps, delta in [(13, 1, 1, 1 / 3, 1e-5), (200, 30, 1, 2.0, 0.01), (500, 45, 20, 0.5, 0.03)]:
        b = counts.fewest_noise_bits(users, shift, labels, eps, delta)
        assert counts.count_delta(users * b, shift, labels, eps) <= delta
        assert b == 1 or counts.count_delta(users * (b - 1), shift, labels, eps) > delta
    with pytest.raises(ValueError, match="more than 4 fair noise bits"):
        counts.fewest_noise_bits(2, 50, 20, 0.1, 1e-9, most=4)


def test_exact_p_vec_replaces_the_proof_constant():
    """P_Vec for a batch of 1,000 users, d = 5 (20 labels), (ε, δ) = (1/3, 1/30): the proof constant
    24·10⁴ asks for ~10⁸ noise bits per label, the exact accountant for ~10³, and its event states
    at most the target ε at δ."""
    budget = lp.Budget(1 / 3, 0.1 / 3, 1)
    theory = lp.vec_params("theory", budget, 1000, 5, 1.0, 1.0, None, "2delta")
    exact = lp.exact_vec_params(budget, 1000, 5)
    assert exact.g == theory.g and exact.p == 0.5 and theory.b / exact.b > 1e4
    event = lp.exact_vec_event(budget, 1000, exact, slb.n_entries(5))
    assert event.status == "proven" and event.delta == budget.delta and event.epsilon <= budget.epsilon
    with pytest.raises(ValueError, match="fair noise bits"):
        lp.exact_vec_event(budget, 1000, theory, slb.n_entries(5))


@pytest.mark.parametrize("b", [5, 64, 130])
def test_fair_noise_bits_are_binomial(b):
    """The exact preset's noise bits: popcounts of uniform words, exactly Bin(b, ½) (chi-square at a
    fixed seed, p > 10⁻³; the quarter-bit counts of the theory preset fail the same test)."""
    rng = np.random.default_rng(b)
    draws = slb.quarter_bits_count(b, (60_000,), rng, ands=1)
    k = np.arange(b + 1)
    expected = stats.binom.pmf(k, b, 0.5) * draws.size
    keep = expected > 5

    def cells(counts_: np.ndarray) -> np.ndarray:  # the sparse tails pooled into one cell
        return np.append(counts_[keep], counts_[~keep].sum()) if (~keep).any() else counts_[keep]

    obs, exp = cells(np.bincount(draws, minlength=b + 1)), cells(expected)
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > P_MIN
    q = cells(np.bincount(slb.quarter_bits_count(b, (60_000,), rng), minlength=b + 1))
    assert stats.chisquare(q, exp * q.sum() / exp.sum()).pvalue < P_MIN
