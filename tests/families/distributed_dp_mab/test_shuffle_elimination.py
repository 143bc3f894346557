"""VB-SDP-AE as built (privbandit/families/distributed_dp_mab/shuffle_elimination.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from privbandit.families.distributed_dp_mab.shuffle_elimination import (
    ShuffleEliminationServer,
    ShuffleEliminationUsers,
    count_event,
    noise_bits,
)
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.privacy.counts import count_delta
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Plan, Release
from privbandit.runner import run_file
from tests.stats import P_MIN, chi_square_pvalue

EPS, DELTA = 0.5, 1e-6


def _first_plans(horizon: int = 10_000, arms: int = 3):
    server = ShuffleEliminationServer(arms, EPS, DELTA, horizon, growth=2.0, p=1 / horizon)
    return server, server.plans()


def test_a_rounds_noise_bits_are_the_fewest_the_exact_accountant_allows():
    n_bits = noise_bits(EPS, DELTA)
    assert count_delta(n_bits, 1, 1, EPS) <= DELTA < count_delta(n_bits - 1, 1, 1, EPS)
    event = count_event(n_bits, DELTA)
    assert 0.9 * EPS < event.epsilon <= EPS and event.delta == DELTA


def test_the_released_count_is_the_users_bits_plus_binomial_noise():
    """Over many plans of 2 users (each carrying half the N noise bits), the noise bits' count is
    Bin(N, ½) by chi-square at a fixed seed, and the same test rejects Bin(N + 40, ½): a round
    whose users sent fewer or more live noise bits would fail it."""
    inst = BanditInstance(np.array([0.3, 0.7]), "gaussian")
    n_bits = noise_bits(EPS, DELTA)
    users = ShuffleEliminationUsers(inst, 5, (0, "vb"), np.array([2]), n_bits)
    server, plans = _first_plans()
    plan = plans[0]
    noise = []
    for pid in range(3000):
        p = Plan(pid, plan.first_user, plan.cohort, plan.body, plan.opens, plan.joins)
        bits = users.act(p, 0, p.first_user, p.cohort, None).reports[0][2][0]
        assert set(np.unique(bits)) <= {0, 1}
        noise.append(int(bits[:, 1:].sum()))
    noise = np.array(noise)
    assert chi_square_pvalue(noise, lambda k: binom.pmf(k, n_bits, 0.5), pad=0) > P_MIN
    assert chi_square_pvalue(noise, lambda k: binom.pmf(k, n_bits + 40, 0.5), pad=0) < 1e-6


def test_users_refuse_a_round_with_less_noise_than_their_guarantee_needs():
    inst = BanditInstance(np.array([0.3, 0.7]), "gaussian")
    users = ShuffleEliminationUsers(inst, 5, (0, "vb"), np.array([2]), noise_bits(EPS, DELTA))
    _, plans = _first_plans()
    plan = plans[0]
    curious = Plan(plan.id, plan.first_user, plan.cohort, {**plan.body, "noise": plan.body["noise"] // 2},
                   plan.opens, plan.joins)
    with pytest.raises(ProtocolError, match="noise bits"):
        users.act(curious, 0, plan.first_user, plan.cohort, None)


def test_the_analyzer_estimates_from_every_batch_and_eliminates():
    """Counts fed by hand: an arm whose counts run far below the others' is eliminated once the radius
    allows, and the estimates pool every batch (not only the last)."""
    server, plans = _first_plans(horizon=200_000, arms=2)
    while not server.done and server.active.size == 2:
        for plan in plans:
            if not plan.opens:
                continue
            rnd = plan.opens[0]
            arm, n = plan.body["arm"], rnd.expected
            ones = int(0.9 * n) if arm == 0 else int(0.1 * n)
            values = np.zeros((1, n * rnd.width, 1), dtype=np.int64)
            values[0, :ones + server.noise // 2] = 1
            server.on_release(rnd, Release(rnd.id, n, values))
        plans = server.plans()
    assert server.active.tolist() == [0] and server.eliminated_at[1] > 0
    assert server.users[1] > 2 ** (server.eliminated_at[1])  # pooled over its batches


def test_vb_sdp_ae_runs_and_its_ledger_is_the_accountants(tmp_path):
    path = tmp_path / "vb.toml"
    path.write_text("""
family = "distributed-dp-mab"
horizon = 20000
seed = 2
epsilon = 0.5
runs = 2
[environment]
arms = 4
[algorithms.vb-sdp-ae]
""")
    summary = run_file(path).summary
    ledger = summary["privacy"]["vb-sdp-ae"]
    assert ledger["guarantee"] == "proven" and ledger["trust_model"] == "shuffle"
    assert 0.45 < ledger["epsilon_at_delta"] <= 0.5 and ledger["delta"] == pytest.approx(1 / 200_000)
    assert "exact privacy of the released counts" in ledger["basis"][0]
    assert summary["algorithms"]["vb-sdp-ae"]["regret_final_mean"] < 20000 * 0.25
