"""The AdvancedComposition event: k rounds in one ledger group cost the k-fold advanced-composition
bound, checked against the exact privacy profile of k-fold randomized response (the worst case of
composing pure ε₀-DP mechanisms, Kairouz–Oh–Viswanath) and against the DRV closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammaln

from privbandit.protocol.privacy import AdvancedComposition, ApproxDP, Ledger
from privbandit.protocol.privacy.events import advanced_epsilon, drv_epsilon


def rr_delta(eps0: float, k: int, eps: float) -> float:
    """Exact δ(ε) of k-fold ε₀-randomized response: Σ_i max(0, P(i) − e^ε Q(i)) over the number i of
    flipped answers, P(i) = C(k,i)p^{k−i}q^i, Q(i) = C(k,i)q^{k−i}p^i, p = e^{ε₀}/(1 + e^{ε₀})."""
    i = np.arange(k + 1)
    logc = gammaln(k + 1) - gammaln(i + 1) - gammaln(k - i + 1)
    lp, lq = eps0 - math.log1p(math.exp(eps0)), -math.log1p(math.exp(eps0))
    logP = logc + (k - i) * lp + i * lq
    logQ = logc + (k - i) * lq + i * lp
    return float(np.maximum(0.0, np.exp(logP) - np.exp(eps + logQ)).sum())


@pytest.mark.parametrize("eps0,k,slack", [(0.05, 200, 1e-6), (0.2, 50, 1e-5), (0.01, 1000, 1e-8), (0.5, 7, 1e-3)])
def test_k_fold_bound_holds_for_the_exact_worst_case_and_beats_drv(eps0, k, slack):
    eps, delta = advanced_epsilon(eps0, 0.0, k, slack)
    assert rr_delta(eps0, k, eps) <= delta * (1 + 1e-9)  # the bound holds for the worst pure-DP composition
    assert eps <= min(k * eps0, drv_epsilon(eps0, k, slack)) + 1e-12
    # and it is not loose: a little below it the worst case needs more than δ′ (the optimal composition)
    if eps < k * eps0:
        assert rr_delta(eps0, k, eps - 2 * eps0 - 1e-9) > slack


def test_the_drv_closed_form():
    closed = math.sqrt(200 * math.log(1e6)) * 0.1 + 100 * 0.1 * math.expm1(0.1)
    assert drv_epsilon(0.1, 100, 1e-6) == pytest.approx(closed)


def test_a_group_of_rounds_is_charged_the_k_fold_bound_and_groups_of_disjoint_users_the_worst():
    event = AdvancedComposition(0.02, 1e-7, 1e-7, "test")
    ledger = Ledger("shuffle", None, 1e-4, users=1000)
    for _ in range(150):
        ledger.record(event, "optimizer", "batch-1")
    for _ in range(40):
        ledger.record(event, "optimizer", "batch-2")
    out = ledger.summary()
    eps, delta = advanced_epsilon(0.02, 1e-7, 150, 1e-7)
    assert out["guarantee"] == "proven" and out["epsilon_at_delta"] == pytest.approx(eps)
    assert out["delta_from_theorems"] == pytest.approx(delta) and eps < 150 * 0.02
    # another lane composes sequentially, by basic composition
    ledger.record(ApproxDP(1.0, 1e-5, "cov"), "covariance")
    assert ledger.summary()["epsilon_at_delta"] == pytest.approx(eps + 1.0)
    # one round alone: (ε₀, δ₀), as a record shows it
    assert ledger.event_epsilon(event) == pytest.approx(0.02)
    assert advanced_epsilon(0.02, 1e-7, 1, 1e-7) == (0.02, 1e-7)


def test_rounds_recorded_so_far_are_all_that_is_charged():
    """After each round the ledger states the bound of the rounds so far (not of a whole plan ahead);
    the optimal composition's ε lies on the lattice ε₀(k − 2i), so it may step back by one ε₀
    between k and k + 1, never more."""
    event = AdvancedComposition(0.05, 0.0, 1e-6)
    ledger = Ledger("shuffle", None, 1e-5, users=100)
    seen = []
    for k in range(1, 61):
        ledger.record(event, "optimizer", 0)
        seen.append(ledger.summary()["epsilon_at_delta"])
        assert seen[-1] == pytest.approx(advanced_epsilon(0.05, 0.0, k, 1e-6)[0])
    assert all(b >= a - 0.05 - 1e-12 for a, b in zip(seen, seen[1:]))
    assert seen[-1] < 0.6 * 60 * 0.05  # well below basic composition


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="advanced composition"):
        AdvancedComposition(0.0, 0.0, 1e-6)
    with pytest.raises(ValueError, match="advanced composition"):
        AdvancedComposition(0.1, 0.0, 0.0)
