"""The ledger's numbers against hand computations of the paper's lemmas."""

import math

import numpy as np
import pytest

from privbandit.families.distributed_dp_mab.mechanisms import DiscreteGaussianSecAgg, SkellamSecAgg
from privbandit.protocol.privacy import (
    ORDERS,
    DiscreteGaussianSumCDP,
    Ledger,
    NonPrivate,
    PureDP,
    SkellamRDP,
    rdp_to_dp,
)


def test_pure_dp_rdp_curve():
    assert PureDP(0.1).rdp(np.array([2.0, 3.0])) == pytest.approx([0.01, 0.015])  # αε²/2
    assert PureDP(1.0).rdp(np.array([2.0, 10.0])) == pytest.approx([1.0, 1.0])  # capped at ε


def test_skellam_lemma_3_by_hand():
    # Δ = 10, σ² = 400, α = 2: 2·100/800 + min((3·100 + 60)/(4·160000), 30/800)
    assert SkellamRDP(10, 400).rdp(np.array([2.0]))[0] == pytest.approx(0.25 + 360 / 640_000)
    # α = 50: the second branch of the min binds: 50·100/800 + 30/800
    assert SkellamRDP(10, 400).rdp(np.array([1000.0]))[0] == pytest.approx(1000 * 100 / 800 + 30 / 800)


@pytest.mark.parametrize("eps, s, n", [(0.1, 10, 4), (1.0, 10, 1024), (0.5, 100, 2)])
def test_skellam_round_is_within_theorem_2(eps, s, n):
    """Per-round Lemma 3 ≤ Theorem 2's ε̂(α), with the last term as Lemma 3 gives it (3ε/(2s√n);
    the paper prints 3ε²/(2s√n), spec §9 item 6)."""
    mech = SkellamSecAgg(eps, 0.1, s=s)
    q = mech.params(n)
    ours = mech.privacy_event(q).rdp(ORDERS)
    a = ORDERS
    theorem = a * eps**2 / 2 + np.minimum(
        (2 * a - 1) * eps**2 / (4 * s**2 * n) + 3 * eps / (2 * s**3 * n**1.5), 3 * eps / (2 * s * math.sqrt(n))
    )
    assert np.all(ours <= theorem * (1 + 1e-12))
    assert ours[0] == pytest.approx(SkellamRDP(q.g, q.g**2 / eps**2).rdp(a[:1])[0])


def test_discrete_gaussian_lemma_4_by_hand():
    # n = 2, σ² = 1, Δ = 1: ξ = 10·e^{−2π²·½} = 10·e^{−π²}
    xi = 10 * math.exp(-math.pi**2)
    ev = DiscreteGaussianSumCDP(sensitivity=1, share_variance=1.0, n=2)
    assert ev.xi == pytest.approx(xi)
    assert ev.cdp_epsilon == pytest.approx(min(math.sqrt(0.5 + xi / 2), 1 / math.sqrt(2) + xi))


def test_discrete_gaussian_xi_vanishes_with_s():
    """Remark 6: ξ → 0 as s grows, so ε̂ → ε."""
    mech = DiscreteGaussianSecAgg(0.5, 0.1, s=10)
    ev = mech.privacy_event(mech.params(1000))
    assert ev.xi == 0.0 and ev.cdp_epsilon == pytest.approx(0.5, rel=1e-12)
    with pytest.raises(ValueError, match="σ ≥ 1/2"):
        DiscreteGaussianSumCDP(1, 0.2, 3)


def test_rdp_to_dp_is_lemma_10_minimised_over_integer_orders():
    rho, delta = 0.02, 1e-6
    brute = min(rho * a + math.log(1 / (a * delta)) / (a - 1) + math.log(1 - 1 / a) for a in range(2, 4097))
    assert rdp_to_dp(rho * ORDERS, delta) == pytest.approx(brute)
    # Tighter than the classical ρ + 2·sqrt(ρ·log(1/δ)) conversion.
    assert brute < rho + 2 * math.sqrt(rho * math.log(1 / delta))
    with pytest.raises(ValueError, match="delta"):
        rdp_to_dp(rho * ORDERS, 0.0)


def test_ledger_takes_the_worst_round_and_reports_every_view():
    ledger = Ledger("distributed", epsilon_target=0.5, delta=1e-6, users=1000)
    ledger.record(PureDP(0.5))
    ledger.record(PureDP(0.3))
    s = ledger.summary()
    assert s["epsilon_pure"] == 0.5 and s["cdp_epsilon"] == 0.5 and s["releases"] == 2
    assert s["rdp"]["2"] == pytest.approx(0.25) and s["epsilon_at_delta"] <= 0.5
    ledger.record(SkellamRDP(10, 400))
    s = ledger.summary()
    assert s["epsilon_pure"] is None and s["cdp_epsilon"] is None
    assert s["rdp"]["2"] == pytest.approx(max(0.25, 0.25 + 360 / 640_000))


def test_non_private_ledger_is_infinite():
    ledger = Ledger("none", epsilon_target=None, delta=1e-6, users=1000)
    ledger.record(NonPrivate())
    s = ledger.summary()
    assert s["guarantee"] == "non-private"
    assert s["epsilon_pure"] is None and s["epsilon_at_delta"] is None and s["rdp"]["2"] is None


def test_xi_for_huge_cohorts_is_an_upper_bound():
    small = DiscreteGaussianSumCDP(1, 0.3, 2**20)
    big = DiscreteGaussianSumCDP(1, 0.3, 2**20 + 5000)
    k = np.arange(1, 2**20 + 5000, dtype=np.float64)
    exact = 10 * np.exp(-2 * math.pi**2 * 0.3 * k / (k + 1)).sum()
    assert exact <= big.xi <= exact * (1 + 1e-6) and small.xi < big.xi


def test_ledger_groups_compose_sequentially_and_lanes_add():
    """Releases of one group reach the same users (ε adds); groups of a lane are disjoint users
    (the worst group); lanes add. The default group (None) is a release of its own users."""
    ledger = Ledger("central", epsilon_target=1.0, delta=1e-6, users=1000)
    ledger.record(PureDP(0.2), group="a")
    ledger.record(PureDP(0.3), group="a")
    ledger.record(PureDP(0.4), group="b")
    assert ledger.summary()["epsilon_pure"] == pytest.approx(0.5)
    ledger.record(PureDP(0.1), lane="other")
    s = ledger.summary()
    assert s["epsilon_pure"] == pytest.approx(0.6) and s["releases"] == 4


def test_a_ledger_with_no_release_states_zero_not_infinity():
    """A run whose analyzer released nothing (a horizon shorter than the first batch) learned
    nothing about any user: ε = 0, where the table used to print ∞."""
    from privbandit.protocol.privacy import Ledger, NoneProven, PureDP

    empty = Ledger("central", 1.0, 1e-6, users=100).summary()
    assert empty["guarantee"] == "proven" and empty["epsilon_pure"] == 0.0 and empty["epsilon_at_delta"] == 0.0
    one = Ledger("central", 1.0, 1e-6, users=100)
    one.record(PureDP(1.0))
    assert one.summary()["epsilon_pure"] == 1.0
    unproven = Ledger("distributed", 1.0, 1e-6, users=100)
    unproven.record(NoneProven("a shuffled multiset of residues"))
    assert unproven.summary()["guarantee"] == "none proven" and unproven.summary()["epsilon_pure"] is None
