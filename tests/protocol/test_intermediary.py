"""The ideal intermediary admits only the invited cohort, counts each report once, and releases
only the modular sum (or, in the local model, the reports)."""

import numpy as np
import pytest

from privbandit.protocol.events import Reports, RoundPlan
from privbandit.protocol.mechanisms.distributed_dp_mab import LocalDiscreteLaplace, NonPrivate, PolyaSecAgg
from privbandit.protocol.parties import Intermediary, ProtocolError


def _plan(mech, first=100, n=8, round_id=4):
    return RoundPlan(round_id=round_id, batch=3, arm=1, first_user=first, cohort=n, params=mech.params(n))


def test_bad_records_are_counted_and_accepted_ones_survive():
    mech = PolyaSecAgg(1.0, 0.1)
    plan = _plan(mech)
    m = plan.params.m
    box = Intermediary(plan, mech)
    good = Reports(4, np.arange(100, 104), np.array([1, 2, 3, 4]))
    assert box.receive(good) == 4
    bad = Reports(4, np.array([104, 104, 99, 108, 101, 105]), np.array([5, 6, 7, 8, 9, m]))
    # 104 twice (second is a duplicate), 99 and 108 outside the cohort, 101 already in, 105 out of Z_m
    assert box.receive(bad) == 1
    assert box.rejected == {"duplicate": 2, "not-in-cohort": 2, "out-of-range": 1}
    assert box.receive(Reports(5, np.array([105]), np.array([1]))) == 0 and box.rejected["wrong-round"] == 1
    assert box.receive(Reports(4, np.array([105]), np.array([0.5]))) == 0 and box.rejected["bad-type"] == 1
    with pytest.raises(ProtocolError, match="incomplete"):
        box.release()
    box.receive(Reports(4, np.arange(105, 108), np.array([10, 20, 30])))
    assert box.complete
    assert box.release().value == (1 + 2 + 3 + 4 + 5 + 10 + 20 + 30) % m


def test_modular_release_hides_the_order_of_reports():
    mech = PolyaSecAgg(1.0, 0.1)
    plan = _plan(mech)
    values = np.random.default_rng(0).integers(0, plan.params.m, 8)
    a, b = Intermediary(plan, mech), Intermediary(plan, mech)
    a.receive(Reports(4, np.arange(100, 108), values))
    perm = np.random.default_rng(1).permutation(8)
    b.receive(Reports(4, np.arange(100, 108)[perm], values[perm]))
    assert a.release() == b.release()


def test_local_model_releases_the_reports_themselves():
    mech = LocalDiscreteLaplace(1.0, 0.1)
    plan = _plan(mech)
    box = Intermediary(plan, mech)
    box.receive(Reports(4, np.arange(100, 108), np.arange(8)))
    rel = box.release()
    assert rel.value is None and rel.reports.tolist() == list(range(8))


def test_raw_rewards_must_lie_in_unit_interval():
    mech = NonPrivate()
    box = Intermediary(_plan(mech, n=3), mech)
    assert box.receive(Reports(4, np.array([100, 101, 102]), np.array([0.5, 1.5, np.nan]))) == 1
    assert box.rejected["out-of-range"] == 2


def test_shuffler_release_is_a_uniform_permutation_without_ids():
    """Chi-square over (sender, output position): each of n senders lands in each of n positions
    with probability 1/n. A shuffler that kept arrival order, or rotated, fails at once."""
    from scipy import stats

    from privbandit.protocol.parties import Shuffler

    mech = LocalDiscreteLaplace(1.0, 0.1)
    n, trials = 6, 12_000
    plan = _plan(mech, n=n)
    counts = np.zeros((n, n))
    rng = np.random.default_rng(8)
    for _ in range(trials):
        box = Shuffler(plan, mech, rng)
        box.receive(Reports(4, np.arange(100, 100 + n), np.arange(n)))  # sender i sends value i
        rel = box.release()
        assert rel.value is None and rel.n_reports == n and sorted(rel.reports) == list(range(n))
        counts[rel.reports, np.arange(n)] += 1
    assert stats.chisquare(counts.ravel()).pvalue > 1e-3
    identity = np.zeros((n, n))
    identity[np.arange(n), np.arange(n)] = trials
    assert stats.chisquare(identity.ravel() + 1).pvalue < 1e-12  # the test has power


def test_shuffled_modular_release_decodes_like_the_sum():
    from privbandit.protocol.parties import Shuffler

    mech = PolyaSecAgg(1.0, 0.1)
    plan = _plan(mech)
    values = np.random.default_rng(0).integers(0, plan.params.m, 8)
    box = Shuffler(plan, mech, np.random.default_rng(1))
    box.receive(Reports(4, np.arange(100, 108), values))
    summed = Intermediary(plan, mech)
    summed.receive(Reports(4, np.arange(100, 108), values))
    assert mech.aggregate(box.release().reports, plan.params) == summed.release().value
