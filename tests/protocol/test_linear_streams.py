"""The linear family's random-stream layout and its rounds on the spine: each run's numbers do not
depend on the runs stacked with it, a party that skips batches of a noise block (a restarted fleet)
still draws the same numbers, and the intermediaries admit and release only what the trust path
allows. Together these make one distributed task (one run) reproduce the stacked in-process task."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import world
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Reports
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.parties import Analyzer
from privbandit.runner import config as experiment_files
from privbandit.runner.tasks import Task, execute

EXPERIMENT = """
family = "shuffle-linear-bandits"
horizon = {horizon}
seed = 4
epsilon = 0.2
runs = 4
[environment]
arms = 100
dim = 5
[algorithms.LinUCB-SDP-Vec]
vec_span = "2delta"  # the provable encoding: its doubled noise makes some batches clip V_m (below)
[algorithms.LinUCB-SDP-Amp]
[algorithms.LinUCB-LDP]
[algorithms.LinUCB-JDP]
[algorithms.LinUCB]
"""


def _load(tmp_path, horizon=4000):
    path = tmp_path / "lin.toml"
    path.write_text(EXPERIMENT.format(horizon=horizon))
    return experiment_files.load(path)


@pytest.mark.parametrize("label", ["LinUCB-SDP-Vec", "LinUCB-SDP-Amp", "LinUCB-LDP", "LinUCB-JDP", "LinUCB"])
def test_a_run_alone_equals_the_same_run_stacked(tmp_path, label):
    family, config = _load(tmp_path, 4000 if label.startswith("LinUCB-SDP") else 600)
    assert family.stackable(config, label)
    _, _, stacked, _ = execute(Task(family.name, config, label, (0, 1, 2, 3)))
    if label == "LinUCB-SDP-Vec":  # ε = 0.2 clips V_m, in different batches of different runs: in some
        clipped = [x["batches_clipped"] for x in stacked.learner]  # batch one run takes the eigen-fallback
        assert sum(clipped) > 0 and len(set(clipped)) > 1, clipped  # while another does not
    rows = {}
    for row in stacked.rounds:
        rows.setdefault(row["run"], []).append(row)
    for r in (0, 3):
        _, _, alone, _ = execute(Task(family.name, config, label, (r,)))
        assert np.array_equal(alone.pseudo[0], stacked.pseudo[r]), (label, r)
        assert np.array_equal(alone.realized[0], stacked.realized[r]), (label, r)
        assert alone.learner[0] == stacked.learner[r]
        assert alone.rounds == rows.get(r, []), (label, r)  # λ_min, θ̂ error, decoding error
        assert alone.privacy == stacked.privacy


@pytest.mark.parametrize("batch", [1, 20, 300])
def test_a_batch_gets_the_same_draws_whatever_was_asked_before(batch):
    vec = slb.VecParams(g=9, b=40, p=0.25, shift=1.0, span=2.0)
    randomizer = slb.BitSumRandomizer(vec)
    per_block = slb.batches_per_block(batch)
    batches = [0, 1, per_block - 1, per_block, per_block + 2, 3 * per_block + 1]
    full = slb.user_noise(3, "L", 1, batch, randomizer, 5)
    in_order = {m: full.for_batch(m) for m in range(max(batches) + 1)}
    assert in_order[0][0].shape == (batch, 5) and not np.array_equal(in_order[0][0], in_order[1][0])
    skipping = slb.user_noise(3, "L", 1, batch, randomizer, 5)
    for m in batches + [1]:  # forwards with gaps, then back to an earlier batch (a restarted fleet)
        u, k = skipping.for_batch(m)
        assert np.array_equal(u, in_order[m][0]) and np.array_equal(k, in_order[m][1])
    other_run = slb.user_noise(3, "L", 2, batch, randomizer, 5).for_batch(0)
    assert not np.array_equal(other_run[0], in_order[0][0])
    stacked = slb.StackedStreams([slb.user_noise(3, "L", r, batch, randomizer, 5) for r in (1, 2)])
    assert np.array_equal(stacked.for_batch(per_block + 2)[1][0], in_order[per_block + 2][1])


def test_fleets_host_whole_noise_blocks(tmp_path):
    owners = [slb.fleet_of(m, 20, 3) for m in range(4 * slb.batches_per_block(20))]
    per_block = slb.batches_per_block(20)
    assert owners[:per_block] == [0] * per_block and owners[per_block] == 1 and owners[3 * per_block] == 0
    family, config = _load(tmp_path)
    users = family.users(config, "LinUCB-SDP-Amp", [0])
    assert [users.shard(Plan(m, 20 * m, 20), 0, 3) for m in range(len(owners))] == owners


def test_user_uniforms_jump_to_any_user():
    whole = world.user_uniforms(7, 2, 0, 70_000)
    assert np.array_equal(world.user_uniforms(7, 2, 1234, 100), whole[1234:1334])
    other = world.user_uniforms(7, 5, 0, 70_000)
    chunks = world.UserUniforms(7, [2, 5])
    for first, n in ((65_530, 10), (5, 3), (65_536, 4), (0, 1), (69_990, 10)):  # across a chunk boundary too
        got = chunks.get(first, n)
        assert np.array_equal(got[0], whole[first:first + n]) and np.array_equal(got[1], other[first:first + n])


def _vec_round(tmp_path):
    family, config = _load(tmp_path)
    s = family.setup(config, "LinUCB-SDP-Vec")
    return s, s.round(4)


def test_vec_round_admits_invited_users_once_and_releases_totals_only(tmp_path):
    s, rnd = _vec_round(tmp_path)
    assert (rnd.intermediary, rnd.rule, rnd.width, rnd.high) == ("shuffler", "sum", 20, s.vec.max_count)
    n = rnd.expected
    box = Intermediary("shuffler")
    box.open_plan(Plan(4, 100, n, {}, (rnd,), (Join(4, 100, n, n),)))
    ids = np.arange(100, 100 + n)
    counts = (np.arange(n * 20).reshape(1, n, 20) % (s.vec.max_count + 1)).astype(np.int64)
    assert box.receive(Reports(4, 4, ids[:3], counts[:, :3])) == 3
    with pytest.raises(ProtocolError, match="incomplete-round"):
        box.release(4)
    top = s.vec.max_count
    row = counts[:, 3:4]
    hostile = [
        Reports(4, 4, np.array([100]), counts[:, :1]),  # duplicate
        Reports(4, 4, np.array([99]), counts[:, :1]),  # not invited
        Reports(4, 4, np.array([103]), np.where(np.arange(20) == 1, top + 1, row)),  # a count above max_count
        Reports(4, 4, np.array([103]), np.where(np.arange(20) == 1, -1, row)),  # a negative count
        Reports(4, 4, np.array([103]), row.astype(np.float64) + 0.5),  # not counts
        Reports(4, 4, np.array([103]), row[:, :, :19]),  # wrong width
        Reports(5, 4, np.array([103]), row),  # another batch
    ]
    for reports in hostile:
        assert box.receive(reports) == 0
    assert {k: v for k, v in box.rejected.items() if v} == {
        "duplicate": 1, "not-in-cohort": 1, "out-of-range": 2, "bad-type": 1, "wrong-shape": 1, "unknown-round": 1}
    assert box.receive(Reports(4, 4, ids[3:], counts[:, 3:])) == n - 3
    release = box.release(4)
    assert release.n_reports == n and np.array_equal(release.values, counts.sum(axis=1))  # (1, D): no per-user row


def test_amp_round_refuses_non_finite_reports(tmp_path):
    family, config = _load(tmp_path)
    rnd = family.setup(config, "LinUCB-SDP-Amp").round(0)
    assert (rnd.rule, rnd.groups) == ("shuffle", (5, 15))
    box = Intermediary("shuffler", 1, [0])
    box.open_plan(Plan(0, 0, rnd.expected, {}, (rnd,), (Join(0, 0, rnd.expected, rnd.expected),)))
    bad = np.zeros((1, 2, 20))
    bad[0, 0, 3], bad[0, 1, 7] = np.nan, np.inf
    assert box.receive(Reports(0, 0, np.array([0, 1]), bad)) == 0
    assert box.rejected["out-of-range"] == 2


def test_analyzer_refuses_a_bad_release_without_changing_state(tmp_path):
    family, config = _load(tmp_path)
    public = family.public_task(config, "LinUCB-SDP-Amp", [0])
    analyzer = Analyzer(family.analyzer(public, [1]), family.ledger(public))
    (plan,) = analyzer.next_plans()
    assert analyzer.next_plans() == []  # one batch at a time
    n = plan.cohort
    theta = analyzer.logic.learner.theta.copy()
    for bad in (Release(0, n, np.zeros((1, n, 19))), Release(0, n - 1, np.zeros((1, n - 1, 20))),
                Release(0, n, np.full((1, n, 20), np.nan)), Release(1, n, np.zeros((1, n, 20)))):
        with pytest.raises(ProtocolError):
            analyzer.on_release(bad)
    assert analyzer.open.keys() == {0} and np.array_equal(analyzer.logic.learner.theta, theta)
    assert analyzer.ledger.releases == 0
    record = analyzer.on_release(Release(0, n, np.ones((1, n, 20))))
    assert record.round_id == 0 and analyzer.ledger.releases == 1 and not analyzer.open
    (nxt,) = analyzer.next_plans()
    assert nxt.first_user == n and not np.array_equal(np.asarray(nxt.body["theta"]), theta)


def test_fleets_check_a_plan_before_acting_on_it(tmp_path):
    family, config = _load(tmp_path)
    public = family.public_task(config, "LinUCB-SDP-Vec", [0])
    (plan,) = family.analyzer(public, [1]).plans()
    family.check_plan(plan)  # what the analyzer makes passes
    users = family.users(config, "LinUCB-SDP-Vec", [0])
    assert users.act(plan, 0, 0, plan.cohort, None).reports
    b = plan.body
    bad = [{**b, "theta": b["theta"][:, :3]}, {**b, "v_inv": b["v_inv"][:, :2]}, {**b, "beta": float("nan")},
           {**b, "theta": b["theta"].astype(np.float32)}, {**b, "batch": 7},
           {k: v for k, v in b.items() if k != "beta"},
           {**b, "theta": np.full_like(b["theta"], np.inf)}]
    for body in bad:
        with pytest.raises(ValueError):
            family.check_plan(Plan(plan.id, plan.first_user, plan.cohort, body, plan.opens, plan.joins))
    # A well-formed plan for another dimension is refused by the users themselves.
    other = {**b, "theta": np.zeros((1, 3)), "v_inv": np.zeros((1, 3, 3))}
    family.check_plan(Plan(plan.id, plan.first_user, plan.cohort, other, plan.opens, plan.joins))
    with pytest.raises(ValueError, match="do not fit"):
        users.act(Plan(plan.id, plan.first_user, plan.cohort, other, plan.opens, plan.joins), 0, 0, plan.cohort, None)
