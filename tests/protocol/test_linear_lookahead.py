"""The linear family's in-process look-ahead (LinUCB, LinUCB-JDP, LinUCB-LDP with one-user batches):
the analyzer that decides a block of users through the users' oracle makes, bit for bit, the run the
analyzer serving one user per plan makes (what it does over MQTT): arms, regret curves, rounds.csv
rows, ledger, learner summary."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.families.shuffle_linear_bandits import parties as linear_parties
from privbandit.families.shuffle_linear_bandits.family import FAMILY
from privbandit.families.shuffle_linear_bandits.parties import exact_steps
from privbandit.protocol.spine import engine
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.runner.tasks import parties


def _config(label: str, horizon: int, epsilon: float, seed: int, runs: int, preset: str = "paper-code",
            dim: int = 5, arms: int = 100, checkpoints: int = 240):
    return FAMILY.load({"family": FAMILY.name, "horizon": horizon, "seed": seed, "epsilon": epsilon, "runs": runs,
                        "preset": preset, "environment": {"arms": arms, "dim": dim}, "checkpoints": checkpoints,
                        "algorithms": {label: {}}}, "<test>")


def _run(config, label: str, oracle: bool):
    runs = list(range(config.runs))
    _, analyzer, users, boxes, observer = parties(FAMILY, config, label, runs, oracle=oracle)
    plans = []
    next_plans = analyzer.next_plans

    def counted():
        out = next_plans()
        plans.extend(out)
        return out

    analyzer.next_plans = counted
    engine.run(analyzer, users, boxes, observer)
    result = observer.result(runs, analyzer.ledger.summary(), analyzer.logic.summary(),
                             FAMILY.row_maker(config, label))
    FAMILY.finish(config, label, result)
    result.final = analyzer.logic.learner  # the learner as the run left it
    return result, plans


def _rows(result):
    return [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()} for row in result.rounds]


@pytest.mark.parametrize("label,horizon,epsilon,seed,runs,preset,dim", [
    ("LinUCB", 3000, 1.0, 2, 1, "paper-code", 5),
    ("LinUCB", 2000, 1.0, 7, 3, "theory", 5),  # β grows with t; three runs stacked
    ("LinUCB-JDP", 3000, 0.2, 2, 1, "paper-code", 5),  # clips V_m: the safeguard's branch inside blocks
    ("LinUCB-JDP", 2000, 1.0, 3, 2, "paper-code", 10),
    ("LinUCB-JDP", 1500, 1.0, 4, 2, "theory", 5),
    ("LinUCB-LDP", 3000, 1.0, 2, 1, "paper-code", 5),
    ("LinUCB-LDP", 2000, 10.0, 5, 3, "paper-code", 5),
    ("LinUCB-LDP", 1500, 1.0, 6, 1, "theory", 3),
    ("LinUCB-SDP-Amp", 3010, 1.0, 2, 1, "paper-code", 5),  # B = 20; a trailing partial batch
    ("LinUCB-SDP-Amp", 2000, 0.2, 3, 3, "paper-code", 5),
    ("LinUCB-SDP-Amp", 1500, 1.0, 4, 2, "theory", 10),
    ("LinUCB-SDP-Vec", 3010, 1.0, 2, 1, "paper-code", 5),  # per-label totals of each batch, a trailing partial batch
    ("LinUCB-SDP-Vec", 2000, 0.2, 3, 3, "paper-code", 5),
    ("LinUCB-SDP-Vec", 1500, 1.0, 4, 2, "theory", 3),
    ("LinUCB-SDP-Vec", 1500, 1.0, 5, 2, "exact", 3),  # fair noise bits
    # the exact preset of every other algorithm (#33: each algorithm and preset)
    ("LinUCB", 1500, 1.0, 8, 2, "exact", 5),
    ("LinUCB-JDP", 1500, 1.0, 8, 2, "exact", 5),
    ("LinUCB-LDP", 1500, 1.0, 8, 2, "exact", 5),
    ("LinUCB-SDP-Amp", 1500, 1.0, 8, 2, "exact", 5),
    ("LinUCB-LDP", 6000, 1.0, 9, 1, "paper-code", 5),  # one block of 6000 users (more than the old 4096)
])
def test_look_ahead_equals_one_user_per_plan(label, horizon, epsilon, seed, runs, preset, dim):
    """LinUCB, JDP and LDP (B = 1), SDP-Amp (B = 20, its batches shuffled one by one inside a
    block's round) and SDP-Vec (B = 20, each batch's totals released on their own) decided a block
    at a time, against one plan per batch."""
    config = _config(label, horizon, epsilon, seed, runs, preset, dim)
    fast, fast_plans = _run(config, label, oracle=True)
    ref, ref_plans = _run(config, label, oracle=False)
    batch = 20 if label.startswith("LinUCB-SDP") else 1
    assert len(ref_plans) == -(-horizon // batch) and len(fast_plans) < len(ref_plans) / 4  # the look-ahead served
    assert any("arms" in p.body for p in fast_plans) and not any("arms" in p.body for p in ref_plans)
    np.testing.assert_array_equal(fast.pseudo, ref.pseudo)
    np.testing.assert_array_equal(fast.realized, ref.realized)
    assert _rows(fast) == _rows(ref)
    assert fast.privacy == ref.privacy and fast.privacy["releases"] == horizon // batch
    assert fast.learner == ref.learner
    for field in ("u", "V", "v_inv", "theta", "clipped", "not_pd"):
        np.testing.assert_array_equal(getattr(fast.final, field), getattr(ref.final, field), err_msg=field)
    assert (fast.final.t, fast.final.beta) == (ref.final.t, ref.final.beta)
    assert (fast.reports, fast.protocol_bits, fast.max_report_bits) == (ref.reports, ref.protocol_bits,
                                                                        ref.max_report_bits)
    if label == "LinUCB-JDP" and epsilon == 0.2:
        assert ref.learner[0]["batches_clipped"] > 20
    if horizon > 4096 and label == "LinUCB-LDP":  # a single run's block is not cut at 4096 users any more
        assert [p.cohort for p in fast_plans] == [horizon]


def test_sdp_amp_blocks_clip_as_batches_do(monkeypatch):
    """SDP-Amp's V_m never needs the safeguard at the paper's λ; with the floor raised 4-fold some
    batches do, inside blocks, and the run is still the one-plan-per-batch run."""
    original = linear_parties.BatchedLinUCB
    monkeypatch.setattr(linear_parties, "BatchedLinUCB",
                        lambda runs, d, lam, floor, beta_fn: original(runs, d, lam, 4 * floor, beta_fn))
    config = _config("LinUCB-SDP-Amp", 2000, 1.0, 5, 2)
    fast, fast_plans = _run(config, "LinUCB-SDP-Amp", oracle=True)
    ref, _ = _run(config, "LinUCB-SDP-Amp", oracle=False)
    assert len(fast_plans) < 10
    assert 0 < ref.learner[0]["batches_clipped"] < 100 and fast.learner == ref.learner
    np.testing.assert_array_equal(fast.pseudo, ref.pseudo)
    assert _rows(fast) == _rows(ref)
    for field in ("V", "v_inv", "theta"):
        np.testing.assert_array_equal(getattr(fast.final, field), getattr(ref.final, field), err_msg=field)


@pytest.mark.parametrize("label", ["LinUCB-SDP-Amp", "LinUCB-SDP-Vec"])
def test_sdp_block_checks_each_batch_sum(monkeypatch, label):
    """Two users of different batches swap reports: every report is still in the block's release,
    but two batches' sums (SDP-Vec: per-label totals) changed, which the analyzer refuses."""
    config = _config(label, 600, 1.0, 2, 1)
    original = linear_parties.LinearUsers._act_block

    def swapped(self, plan, block, first, size, stay):
        answer = original(self, plan, block, first, size, stay)
        values = answer.reports[0][2]
        values[:, [0, 25]] = values[:, [25, 0]]
        return answer

    monkeypatch.setattr(linear_parties.LinearUsers, "_act_block", swapped)
    with pytest.raises(ProtocolError, match="look-ahead-mismatch"):
        _run(config, label, oracle=True)


def test_segmented_sum_releases_each_batch_total():
    """A ``sum`` round with ``segment``: one total per segment, the shape the analyzer checks; a
    modular or float sum cannot be segmented."""
    from privbandit.protocol.spine.events import Round
    from privbandit.protocol.spine.parties import check_release
    from privbandit.protocol.spine.events import Release

    from privbandit.protocol.spine.events import Join, Plan, Reports
    from privbandit.protocol.spine.intermediary import Intermediary

    rnd = Round(0, "shuffler", "sum", expected=6, width=2, integer=True, low=0, high=5, segment=3)
    box = Intermediary("shuffler", shuffle_keys=[5])
    box.open_plan(Plan(0, 100, 6, {}, (rnd,), (Join(0, 100, 6, 6),)))
    sent = np.array([[[0, 1], [1, 1], [2, 1], [3, 0], [4, 0], [5, 5]]])
    assert box.receive(Reports(0, 0, np.arange(100, 106), sent)) == 6
    out = box.release(0)
    np.testing.assert_array_equal(out.values, [[[3, 3], [12, 5]]])
    check_release(rnd, out, 1)
    check_release(rnd, Release(0, 6, np.array([[[1, 2], [15, 0]]])), 1)
    with pytest.raises(ProtocolError, match="wrong-shape"):
        check_release(rnd, Release(0, 6, np.array([[16, 2]])), 1)
    with pytest.raises(ProtocolError, match="out-of-range"):  # a segment's total above 3 · 5
        check_release(rnd, Release(0, 6, np.array([[[1, 2], [16, 0]]])), 1)
    for bad in ({"m": 7}, {"integer": False}):
        with pytest.raises(ValueError, match="segment"):
            Round(0, "shuffler", "sum", expected=6, width=2, segment=3, **{"integer": True, **bad})


def test_look_ahead_is_for_one_user_batches_of_independent_releases():
    """Returning users compose every release in one group (n additions, not one): no look-ahead."""
    config = FAMILY.load({"family": FAMILY.name, "horizon": 300, "seed": 1, "epsilon": 1.0, "runs": 1,
                          "returning_users": True, "algorithms": {"LinUCB-LDP": {}, "LinUCB-JDP": {}}}, "<test>")
    for label in ("LinUCB-LDP", "LinUCB-JDP"):
        _, plans = _run(config, label, oracle=True)
        assert len(plans) == 300


def test_a_release_other_than_the_one_looked_at_is_refused(monkeypatch):
    """The users report what the analyzer looked ahead at, or the run stops: here one user's
    reward differs from the oracle's."""
    config = _config("LinUCB-JDP", 400, 1.0, 2, 1)
    original = linear_parties.LinearUsers.oracle

    def lying(self, first, n):
        arms, rewards, noise, fits = original(self, first, n)
        rewards = rewards.copy()
        rewards[:, -1] = ~rewards[:, -1]
        return arms, rewards, noise, fits

    monkeypatch.setattr(linear_parties.LinearUsers, "oracle", lying)
    with pytest.raises(ProtocolError, match="look-ahead-mismatch"):
        _run(config, "LinUCB-JDP", oracle=True)


def test_exact_steps_reproduce_running_sums_where_they_can():
    """Running regret sums (0 ≤ before ≤ target): before + x == target for the x found; and a step
    is missing exactly where every candidate sum is a tie that rounds to even (``before`` halfway
    between two multiples of the target's ulp, the target odd), which happens."""
    rng = np.random.default_rng(1)
    before = rng.random(200_000) * rng.choice([1.0, 1e-3, 1e-8], 200_000)
    target = before * (2 + 30 * rng.random(200_000)) + rng.random(200_000)
    x, found = exact_steps(before, target)
    np.testing.assert_array_equal(before[found] + x[found], target[found])
    assert np.sum(before + (target - before) != target) > 1000 and found.mean() > 0.98  # nudged ones
    missing = ~found
    assert missing.any()
    ulp = np.spacing(target[missing])
    half = np.mod(before[missing], ulp)
    np.testing.assert_array_equal(half, ulp / 2)  # the tie case, and only it
    one = rng.random(10_000)  # one user's step always exists: her regret
    sums = np.cumsum(rng.random(10_000))
    assert exact_steps(sums, sums + one)[1].all()
    near = np.cumsum(rng.random((3, 5000)), axis=1)  # within 2x: exact as it is (Sterbenz)
    np.testing.assert_array_equal(exact_steps(near[:, :-1], near[:, 1:])[0], near[:, 1:] - near[:, :-1])


@pytest.mark.parametrize("label,horizon", [("LinUCB-LDP", 1200), ("LinUCB-SDP-Amp", 4000), ("LinUCB-SDP-Vec", 4000)])
def test_a_block_stops_where_the_observer_could_not_follow(monkeypatch, label, horizon):
    """Force the users to report a block as not fitting beyond a few batches: the analyzer re-decides
    the shorter block from its saved state, and the run is still the one-batch-per-plan run. (SDP-Vec's
    randomizer draws are a tuple, not an array: the shorter block's slice of them raised TypeError.)"""
    config = _config(label, horizon, 1.0, 3, 2, checkpoints=20)
    original = linear_parties.LinearUsers.fits
    calls = []
    batch = 20 if label.startswith("LinUCB-SDP") else 1

    def short(self, first, arms):
        calls.append(arms.shape[1])
        return min(original(self, first, arms), 1 + first % 37)

    monkeypatch.setattr(linear_parties.LinearUsers, "fits", short)
    fast, plans = _run(config, label, oracle=True)
    monkeypatch.undo()
    ref, _ = _run(config, label, oracle=False)
    assert any(c > 37 for c in calls) and max(p.cohort for p in plans) <= 37 * batch
    np.testing.assert_array_equal(fast.pseudo, ref.pseudo)
    assert _rows(fast) == _rows(ref) and fast.privacy == ref.privacy and fast.learner == ref.learner


@pytest.mark.parametrize("start,n", [(0, 1), (0, 64), (5, 1), (7, 9), (13, 50), (255, 3), (1000, 300)])
def test_tree_changes_are_the_steps_changes(start, n):
    """The JDP tree's changes for n counts at once equal n calls of TreeAggregator.step, bit for
    bit, and leave the same tree (its live nodes, by identity of their draws, and its count)."""
    from privbandit.families.shuffle_linear_bandits import mechanisms as slb
    from privbandit.families.shuffle_linear_bandits.lookahead import tree_changes
    from privbandit.protocol.primitives.noise.grid_gaussian import to_grid

    rng = np.random.default_rng(start + n)
    one, many = slb.TreeAggregator(1.0, (2, 4)), slb.TreeAggregator(1.0, (2, 4))
    for _ in range(start):
        draw = to_grid(rng.normal(size=(2, 4)))
        one.step(np.zeros((2, 4)), draw)
        many.step(np.zeros((2, 4)), draw)
    # the tree's noise and the analyzer's decoded sums lie on the grid (the step rounds its raw sum)
    fresh = to_grid(rng.normal(size=(2, n, 4)))
    raw = to_grid(rng.normal(size=(2, n, 4)))
    stepped = np.stack([one.step(raw[:, i], fresh[:, i]) for i in range(n)], axis=1)
    np.testing.assert_array_equal(raw + tree_changes(many, fresh), stepped)
    assert many.count == one.count and len(many.nodes) == len(one.nodes)
    for a, b in zip(many.nodes, one.nodes):
        assert (a is None) == (b is None) and (a is None or np.array_equal(a, b))
