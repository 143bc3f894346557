"""The linear family's random-stream layout: each run's numbers do not depend on the runs stacked with
it, and a party that skips batches of a noise block (a restarted fleet) still draws the same numbers.
Together these make one distributed task (one run) reproduce the in-process engine."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.experiment import linear_family as lf
from privbandit.experiment.config import ConfigError
from privbandit.protocol import linear_streams as ls
from privbandit.protocol.mechanisms import shuffle_linear_bandits as slb
from privbandit.protocol.parties.intermediary import ProtocolError
from privbandit.protocol.parties.linear import LinearPlan, LinearReports, LinearShuffleBox

EXPERIMENT = """
family = "shuffle-linear-bandits"
horizon = 4000
seed = 4
epsilon = 0.2
runs = 4
[environment]
arms = 100
dim = 5
[algorithms.LinUCB-SDP-Vec]
[algorithms.LinUCB-SDP-Amp]
[algorithms.LinUCB-LDP]
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "lin.toml"
    path.write_text(EXPERIMENT)
    return lf.load(path)


@pytest.mark.parametrize("label", ["LinUCB-SDP-Vec", "LinUCB-SDP-Amp"])
def test_a_run_alone_equals_the_same_run_stacked(config, label):
    _, stacked, _ = lf.execute(config, label)
    if label == "LinUCB-SDP-Vec":  # ε = 0.2 clips V_m, in different batches of different runs: in some
        clipped = stacked["clipped"]  # batch one run takes the eigen-fallback while another does not
        assert clipped.sum() > 0 and len(set(clipped.tolist())) > 1, clipped
    for r in (0, 3):
        _, alone, _ = lf.execute(config, label, [r])
        for key in ("pseudo", "realized", "clipped", "not_pd"):
            assert np.array_equal(alone[key][0], stacked[key][r]), (label, r, key)


def test_per_round_baselines_keep_stacked_streams_and_refuse_mqtt(config):
    with pytest.raises(ConfigError, match="algorithms.LinUCB-LDP: --transport mqtt runs"):
        lf.check_distributed(config)


@pytest.mark.parametrize("batch", [1, 20, 300])
def test_a_batch_gets_the_same_draws_whatever_was_asked_before(batch):
    vec = slb.VecParams(g=9, b=40, p=0.25, shift=1.0, span=2.0)
    randomizer = slb.BitSumRandomizer(vec)
    per_block = ls.batches_per_block(batch)
    batches = [0, 1, per_block - 1, per_block, per_block + 2, 3 * per_block + 1]
    full = ls.user_noise(3, "L", 1, batch, randomizer, 5)
    in_order = {m: full.for_batch(m) for m in range(max(batches) + 1)}
    assert in_order[0][0].shape == (batch, 5) and not np.array_equal(in_order[0][0], in_order[1][0])
    skipping = ls.user_noise(3, "L", 1, batch, randomizer, 5)
    for m in batches + [1]:  # forwards with gaps, then back to an earlier batch (a restarted fleet)
        u, k = skipping.for_batch(m)
        assert np.array_equal(u, in_order[m][0]) and np.array_equal(k, in_order[m][1])
    other_run = ls.user_noise(3, "L", 2, batch, randomizer, 5).for_batch(0)
    assert not np.array_equal(other_run[0], in_order[0][0])


def test_fleets_host_whole_noise_blocks():
    owners = [ls.fleet_of(m, 20, 3) for m in range(4 * ls.batches_per_block(20))]
    per_block = ls.batches_per_block(20)
    assert owners[:per_block] == [0] * per_block and owners[per_block] == 1 and owners[3 * per_block] == 0


def test_user_uniforms_jump_to_any_user():
    whole = ls.user_uniforms(7, 2, 0, 5000)
    assert np.array_equal(ls.user_uniforms(7, 2, 1234, 100), whole[1234:1334])


def _box(max_count=10, width=3):
    plan = LinearPlan(4, 100, 5, True, np.zeros(2), np.eye(2), 1.0)
    return LinearShuffleBox(plan, slb.LabelCountShuffler(), width, max_count, None)


def test_shuffle_box_admits_invited_users_once_and_releases_totals_only():
    box = _box()
    ids = np.arange(100, 105)
    counts = np.arange(15).reshape(5, 3) % 11
    assert box.receive(LinearReports(4, ids[:3], counts[:3])) == 3
    with pytest.raises(ProtocolError, match="incomplete-round"):
        box.release()
    hostile = [
        LinearReports(4, np.array([100]), counts[:1]),  # duplicate
        LinearReports(4, np.array([99]), counts[:1]),  # not invited
        LinearReports(4, np.array([103]), np.array([[0, 11, 0]])),  # count above max_count
        LinearReports(4, np.array([103]), np.array([[0, -1, 0]])),  # negative count
        LinearReports(4, np.array([103]), np.array([[0.5, 1.0, 0.0]])),  # not counts
        LinearReports(4, np.array([103]), np.array([[0, 1]])),  # wrong width
        LinearReports(5, np.array([103]), counts[3:4]),  # another batch
    ]
    for reports in hostile:
        assert box.receive(reports) == 0
    assert {k: v for k, v in box.rejected.items() if v} == {
        "duplicate": 1, "not-in-cohort": 1, "out-of-range": 2, "bad-type": 1, "wrong-shape": 1, "wrong-round": 1}
    assert box.receive(LinearReports(4, ids[3:], counts[3:])) == 2
    release = box.release()
    assert release.n_reports == 5 and np.array_equal(release.values, counts.sum(axis=0))


def test_amp_box_refuses_non_finite_reports():
    box = _box(max_count=None)
    assert box.receive(LinearReports(4, np.array([100, 101]), np.array([[0.1, np.nan, 0.0], [0.2, 0.3, np.inf]]))) == 0
    assert box.rejected["out-of-range"] == 2
