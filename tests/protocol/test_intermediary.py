"""The ideal intermediary admits only the invited cohort, counts each report once, and releases
only what the round's rule allows: the modular sum, the reports themselves (local model), or their
uniformly permuted multiset (shuffler). Rounds are those the MAB family's analyzer opens."""

from dataclasses import asdict, replace

import numpy as np
import pytest

from privbandit.families.distributed_dp_mab.learners import GeometricSchedule, Lemma2Width, SuccessiveElimination
from privbandit.families.distributed_dp_mab.mechanisms import LocalDiscreteLaplace, NonPrivate, PolyaSecAgg
from privbandit.families.distributed_dp_mab.parties import EliminationServer
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Reports
from privbandit.protocol.spine.intermediary import Intermediary


def _plan(mech, first=100, n=8, round_id=4, box="aggregator") -> Plan:
    """One round of Algorithm 1 as :class:`EliminationServer` opens it (its rule, modulus, bounds)."""
    server = EliminationServer(SuccessiveElimination(3, GeometricSchedule(2), Lemma2Width(0.1)), mech, 10**6,
                               key=0, intermediary=box)
    q = mech.params(n)
    rnd = server.round_of(round_id, n, q)
    body = {"batch": 3, "arm": 1, "params": asdict(q)}
    return Plan(round_id, first, n, body, (rnd,), (Join(round_id, first, n, n),))


def _box(plan: Plan, **kw) -> Intermediary:
    box = Intermediary(plan.opens[0].intermediary, **kw)
    box.open_plan(plan)
    return box


def _reports(plan: Plan, ids, values, round_id=None) -> Reports:
    """One message of records: ``values[i]`` is user ``ids[i]``'s report (one run, width 1)."""
    values = np.asarray(values)
    return Reports(plan.opens[0].id if round_id is None else round_id, plan.id, np.asarray(ids),
                   values.reshape(1, -1, 1))


def test_bad_records_are_counted_and_accepted_ones_survive():
    mech = PolyaSecAgg(1.0, 0.1)
    plan = _plan(mech)
    m = plan.opens[0].m
    box = _box(plan)
    assert box.receive(_reports(plan, np.arange(100, 104), [1, 2, 3, 4])) == 4
    bad = _reports(plan, [104, 104, 99, 108, 101, 105], [5, 6, 7, 8, 9, m])
    # 104 twice (second is a duplicate), 99 and 108 outside the cohort, 101 already in, 105 out of Z_m
    assert box.receive(bad) == 1
    assert +box.rejected == {"duplicate": 2, "not-in-cohort": 2, "out-of-range": 1}
    assert box.receive(_reports(plan, [105], [1], round_id=5)) == 0 and box.rejected["unknown-round"] == 1
    assert box.receive(_reports(plan, [105], [0.5])) == 0 and box.rejected["bad-type"] == 1
    assert box.receive(Reports(4, plan.id, np.array([105]), np.array([[1, 2]]))) == 0  # not (runs, n, width)
    assert box.rejected["wrong-shape"] == 1
    assert box.ready() == []
    with pytest.raises(ProtocolError, match="incomplete"):
        box.release(4)
    box.receive(_reports(plan, np.arange(105, 108), [10, 20, 30]))
    assert box.ready() == [4]
    rel = box.release(4)
    assert rel.n_reports == 8 and rel.values.tolist() == [[(1 + 2 + 3 + 4 + 5 + 10 + 20 + 30) % m]]
    assert rel.user_ids is None  # a sum names nobody
    # The round is closed: a late report is refused, not added.
    assert box.receive(_reports(plan, [100], [1])) == 0 and box.rejected["round-closed"] == 1


def test_modular_release_hides_the_order_of_reports():
    mech = PolyaSecAgg(1.0, 0.1)
    plan = _plan(mech)
    values = np.random.default_rng(0).integers(0, plan.opens[0].m, 8)
    a, b = _box(plan), _box(plan)
    a.receive(_reports(plan, np.arange(100, 108), values))
    perm = np.random.default_rng(1).permutation(8)
    for half in (perm[:3], perm[3:]):  # and in two messages
        b.receive(_reports(plan, np.arange(100, 108)[half], values[half]))
    ra, rb = a.release(4), b.release(4)
    assert ra.n_reports == rb.n_reports == 8 and np.array_equal(ra.values, rb.values)
    assert ra.values[0, 0] == int(values.sum()) % plan.opens[0].m


def test_local_model_releases_the_reports_themselves():
    mech = LocalDiscreteLaplace(1.0, 0.1)
    plan = _plan(mech)
    assert plan.opens[0].rule == "pass"
    box = _box(plan)
    box.receive(_reports(plan, np.arange(100, 108), np.arange(8)))
    rel = box.release(4)
    assert rel.values[0, :, 0].tolist() == list(range(8))
    assert rel.user_ids.tolist() == list(range(100, 108))  # attributable: the local model


def test_raw_rewards_must_lie_in_unit_interval():
    mech = NonPrivate()
    plan = _plan(mech, n=3)
    box = _box(plan)
    assert box.receive(_reports(plan, [100, 101, 102], [0.5, 1.5, np.nan])) == 1
    assert box.rejected["out-of-range"] == 2


def test_shuffler_release_is_a_uniform_permutation_without_ids():
    """Chi-square over (sender, output position): each of n senders lands in each of n positions
    with probability 1/n. A shuffler that kept arrival order, or rotated, fails at once.
    Reproducible: the shuffler's permutation stream is keyed (key 8), one round per trial."""
    from scipy import stats

    mech = LocalDiscreteLaplace(1.0, 0.1)
    n, trials = 6, 12_000
    counts = np.zeros((n, n))
    box = Intermediary("shuffler", shuffle_keys=[8])
    rnd = _plan(mech, n=n, box="shuffler-residues").opens[0]
    assert rnd.rule == "shuffle"
    for trial in range(trials):
        plan = Plan(trial, 100, n, {}, (replace(rnd, id=trial),), (Join(trial, 100, n, n),))
        box.open_plan(plan)
        box.receive(_reports(plan, np.arange(100, 100 + n), np.arange(n)))  # sender i sends value i
        rel = box.release(trial)
        out = rel.values[0, :, 0]
        assert rel.user_ids is None and rel.n_reports == n and sorted(out) == list(range(n))
        counts[out, np.arange(n)] += 1
    assert stats.chisquare(counts.ravel()).pvalue > 1e-3
    identity = np.zeros((n, n))
    identity[np.arange(n), np.arange(n)] = trials
    assert stats.chisquare(identity.ravel() + 1).pvalue < 1e-12  # the test has power


def test_a_segmented_shuffle_permutes_each_segment_uniformly_and_in_place():
    """``segment`` s: every consecutive s reports are a shuffle of their own (as s separate rounds
    would release them), column groups permuted independently. Chi-square over (sender, position)
    within each segment (2 segments of 3, column groups (1, 1)), and nothing crosses a segment."""
    from scipy import stats

    from privbandit.protocol.spine.events import Round

    n, seg, trials = 6, 3, 6_000
    counts = np.zeros((2, n // seg, seg, seg))
    box = Intermediary("shuffler", shuffle_keys=[5])
    for trial in range(trials):
        rnd = Round(trial, "shuffler", "shuffle", expected=n, width=2, integer=False, groups=(1, 1), segment=seg)
        plan = Plan(trial, 100, n, {}, (rnd,), (Join(trial, 100, n, n),))
        box.open_plan(plan)
        sent = np.stack([np.arange(n), np.arange(n)], axis=-1).astype(np.float64)[None]  # sender i sends (i, i)
        assert box.receive(Reports(trial, trial, np.arange(100, 100 + n), sent)) == n
        out = box.release(trial).values[0].astype(int)  # (n, 2)
        for g in range(2):
            for k in range(n // seg):
                part = out[k * seg:(k + 1) * seg, g]
                assert sorted(part) == list(range(k * seg, (k + 1) * seg))  # its own senders, none else
                counts[g, k, part - k * seg, np.arange(seg)] += 1
    assert stats.chisquare(counts.ravel()).pvalue > 1e-3
    same = np.mean([np.array_equal(*c) for c in zip(counts[0].reshape(-1, seg * seg), counts[1].reshape(-1, seg * seg))])
    assert same < 1  # the two groups' permutations differ


@pytest.mark.parametrize("kw,why", [({"rule": "sum"}, "shuffle"), ({"segment": 4}, "divides"),
                                    ({"threshold": 3}, "complete")])
def test_a_segment_needs_a_complete_shuffle_it_divides(kw, why):
    from privbandit.protocol.spine.events import Round

    args = {"id": 1, "intermediary": "shuffler", "rule": "shuffle", "expected": 6, "integer": False, "segment": 3}
    with pytest.raises(ValueError, match="segment"):
        Round(**{**args, **kw})


def test_shuffled_modular_release_decodes_like_the_sum():
    mech = PolyaSecAgg(1.0, 0.1)
    plan, shuffled_plan = _plan(mech), _plan(mech, box="shuffler-residues")
    values = np.random.default_rng(0).integers(0, plan.opens[0].m, 8)
    box = _box(shuffled_plan, shuffle_keys=[1])
    box.receive(_reports(shuffled_plan, np.arange(100, 108), values))
    summed = _box(plan)
    summed.receive(_reports(plan, np.arange(100, 108), values))
    reports = box.release(4).values[0, :, 0]
    assert not np.array_equal(reports, values)  # actually permuted (fixed key)
    assert mech.aggregate(reports, mech.params(8)) == summed.release(4).values[0, 0]
