"""Hybrid-UCB's decided blocks (issue #33): the users an analyzer may plan before any of them
reports, because no reward in [0, 1] the earlier ones send can change their arm
(:func:`~privbandit.families.private_online_learning.hybrid_streaks.decided_streak`). Over MQTT
that is what turns one broker round trip per user into one per block.

The whole-run equality of the three drivers (looked ahead, decided blocks, one user per plan) is
``tests/protocol/test_private_online_learning.py::test_hybrid_streaks_equal_one_user_per_plan``;
these tests hold the rule itself to its claim, against rewards chosen to break it."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.families.private_online_learning import parties as online_parties
from privbandit.families.private_online_learning.hybrid_streaks import decided_margin, decided_streak
from privbandit.families.private_online_learning.hybrid_ucb import HybridUCB
from privbandit.families.private_online_learning.mechanisms import refresh_count
from privbandit.protocol.primitives.noise.grid_laplace import sample_grid_steps
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Release

MEANS = {1: (0.75, 0.70, 0.70, 0.70, 0.70), 2: (0.75, 0.625, 0.5, 0.375, 0.25), 3: (0.6, 0.6, 0.5)}


def _learner_at(t_end: int, eps: float, means, seed: int):
    """A learner after t_end − 1 stepwise rounds of Bernoulli rewards, and every round's noise."""
    rng = np.random.default_rng(seed)
    noise = sample_grid_steps((t_end + 4096, 2), stream(seed, "test-noise"))
    h = HybridUCB(len(means), eps)
    for t in range(1, t_end):
        j = h.choose(t)
        h.observe(j, float(rng.random() < means[j]), *map(float, noise[t - 1]))
    return h, noise


def _adversarial_rewards(kind: str, n: int, rng) -> np.ndarray:
    return {"zeros": np.zeros(n), "ones": np.ones(n), "alternating": np.arange(n) % 2.0,
            "uniform": rng.random(n), "drop-late": (np.arange(n) < n // 2).astype(float)}[kind]


@pytest.mark.parametrize("kind", ["zeros", "ones", "alternating", "uniform", "drop-late"])
@pytest.mark.parametrize(("setting", "eps"), [(1, 1.0), (1, 0.1), (2, 8.0), (3, 128.0), (1, 64.0)])
def test_no_reward_in_0_1_changes_a_decided_blocks_arms(setting, eps, kind):
    """From 40 states along a run, the block decided_streak plans is what choose() picks, one
    user at a time, whatever rewards the block's users send: all 0, all 1, alternating, uniform
    floats, or ones then zeros (a leader that falls late). Fails if the rule looked at the wrong
    end of [0, 1], skipped a round's comparison, or let a block cross an array fill."""
    means = MEANS[setting]
    rng = np.random.default_rng(7)
    blocks = longest = 0
    for start in np.linspace(len(means) + 1, 6000, 40).astype(int):
        h, noise = _learner_at(int(start), eps, means, seed=int(start))
        t0 = int(start)
        size = decided_streak(h, t0, 4096, lambda t, m: noise[t - 1:t - 1 + m, 0])
        j = h.choose(t0)
        assert size >= 1
        x = _adversarial_rewards(kind, size, rng)
        for k in range(size):
            assert h.choose(t0 + k) == j, (start, k, size)
            assert h.pulls[j] + 1 <= refresh_count(h.r[j]) or k == size - 1  # a fill only as the last pull
            h.observe(j, float(x[k]), *map(float, noise[t0 + k - 1]))
        blocks += size > 1
        longest = max(longest, size)
    assert blocks >= 10 and longest >= 4, (blocks, longest)  # the rule is not trivially one user


@pytest.mark.parametrize(("setting", "eps"), [(1, 1.0), (2, 8.0)])
def test_a_decided_block_ends_where_rewards_0_could_change_the_arm(setting, eps):
    """The rule is not needlessly short: unless the block stopped at the leader's array fill or at
    n, the next user fed the block's pulls with rewards 0 would go elsewhere, or win by no more than
    the rounding margin."""
    means = MEANS[setting]
    checked = 0
    for start in np.linspace(len(means) + 1, 6000, 40).astype(int):
        h, noise = _learner_at(int(start), eps, means, seed=int(start))
        t0, n = int(start), 4096
        size = decided_streak(h, t0, n, lambda t, m: noise[t - 1:t - 1 + m, 0])
        j = h.choose(t0)
        shadow = h.copy()
        if size == n or h.pulls[j] + size + 1 >= refresh_count(h.r[j]) or t0 <= len(means):  # n, a fill, or t ≤ K
            continue
        for k in range(size):
            shadow.observe(j, 0.0, *map(float, noise[t0 + k - 1]))
        lt = np.log2(t0 + size)
        u = [m + np.sqrt(lt) * b1 + lt * b2 for m, b1, b2 in zip(shadow.means, shadow.b1, shadow.b2)]
        margin = decided_margin(h, j, size + 64, 2.0**40, lt)
        assert shadow.choose(t0 + size) != j or u[j] - max(u[:j] + u[j + 1:]) <= margin
        checked += 1
    assert checked >= 20


def test_the_rounding_margin_is_positive_and_negligible():
    h, _ = _learner_at(3000, 1.0, MEANS[1], seed=3)
    j = h.choose(3000)
    m = decided_margin(h, j, 5000, 1e6, np.log2(8000))
    u = h.means[j] + np.sqrt(np.log2(3000)) * h.b1[j] + np.log2(3000) * h.b2[j]
    assert 0 < m < 1e-7 * abs(u)  # gaps between indices that decide anything are ~10⁻³ and up


def _server(horizon=4000):
    return online_parties.HybridServer(5, 1.0, "r", horizon, key=11)


def _release(rid: int, x: np.ndarray) -> Release:
    return Release(rid, x.size, x[None, :, None], user_ids=np.arange(x.size))


def _first_block(srv):
    """Plans until one serves more than one user; returns it (its round and arms)."""
    while True:
        (plan,) = srv.plans()
        arms = plan.body["arms"][0]
        if arms.size > 1:
            return plan, arms
        srv.on_release(plan.opens[0], _release(plan.opens[0].id, np.array([1.0])))


def test_a_block_whose_rewards_lead_elsewhere_is_refused_as_a_mismatch(monkeypatch):
    """If the rule were wrong (here: a block stretched far past what was decided), the release's
    rewards would lead the learner to other arms, and the analyzer says so instead of going on."""
    srv = _server()
    monkeypatch.setattr(online_parties, "decided_streak", lambda h, t0, n, noise: min(n, 3000))
    plan, arms = _first_block(srv)
    with pytest.raises(ProtocolError, match="decided-mismatch"):
        srv.on_release(plan.opens[0], _release(plan.opens[0].id, np.zeros(arms.size)))


def test_a_decided_block_needs_every_users_reward_in_range():
    srv = _server()
    plan, arms = _first_block(srv)
    rnd = plan.opens[0]
    assert rnd.threshold == arms.size  # complete or not at all: no dropouts inside a block
    with pytest.raises(ProtocolError, match="bad-report-count"):
        srv.on_release(rnd, Release(rnd.id, arms.size - 1, np.zeros((1, arms.size - 1, 1)),
                                    user_ids=np.arange(arms.size - 1)))
    x = np.zeros(arms.size)
    x[-1] = 1.5
    with pytest.raises(ProtocolError, match="out-of-range"):
        srv.on_release(rnd, _release(rnd.id, x))
    srv.on_release(rnd, _release(rnd.id, np.ones(arms.size)))  # nothing was changed by the refusals
    assert srv.learner.pulls[int(arms[0])] >= arms.size
