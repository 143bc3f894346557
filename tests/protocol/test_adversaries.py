"""Adversaries (issue #5): who attacks, what each attack does to the release, and the defences.

Each test pins the honest result (unchanged where the attack is inert or fully rejected) or the
exact documented bound of the change.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from privbandit.experiment.config import ConfigError, load_experiment
from privbandit.experiment.runner import run_experiment
from privbandit.protocol.adversaries import MaxShift, OutOfRange, bounded_sum, in_window, report_slack
from privbandit.protocol.primitives.encoding import modular_sum
from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.events import RoundPlan
from privbandit.protocol.mechanisms.distributed_dp_mab import (
    CentralDiscreteLaplace,
    LocalDiscreteLaplace,
    NonPrivate,
    PolyaSecAgg,
)
from privbandit.protocol.parties import Intermediary, UserPopulation
from privbandit.protocol.primitives.seeding import USER_BLOCK

BASE = """
name = "adv"
horizon = {horizon}
seed = 5
epsilon = 0.5
runs = 1
preset = "paper-code"
[environment]
kind = "uniform"
arms = 4
"""


def _run(tmp_path: Path, algos: str, horizon: int = 60_000, overrides=()) -> dict:
    path = tmp_path / "adv.toml"
    path.write_text(BASE.format(horizon=horizon) + algos)
    config, _ = load_experiment(path, list(overrides))
    results, *_ = run_experiment(config, jobs=1)
    return {label: runs[0] for label, runs in results.items()}


def _plan(mech, n: int, arm: int = 1, first: int = 1000, round_id: int = 3) -> RoundPlan:
    return RoundPlan(round_id=round_id, batch=2, arm=arm, first_user=first, cohort=n, params=mech.params(n))


def _population(mech, adversary=None):
    inst = BanditInstance(np.array([0.3, 0.7, 0.5]), "gaussian", 0.1)
    return UserPopulation(inst, mech, seed=9, checkpoints=np.array([1, 10**7]), stream_prefix=(0, "x"),
                          adversary=adversary)


def test_attackers_are_an_exact_deterministic_subset_whatever_the_sharding():
    mech = PolyaSecAgg(0.5, 0.1)
    adv = MaxShift(0.05, mech, seed=9, stream_prefix=(0, "x"), best_arm=1)
    plan = _plan(mech, USER_BLOCK + 1000)
    for block, size in ((0, USER_BLOCK), (1, 1000)):
        a, b = adv.members(plan, block, size), adv.members(plan, block, size)
        assert a.sum() == int(0.05 * size) and np.array_equal(a, b)
    assert not np.array_equal(adv.members(plan, 0, 1000), adv.members(_plan(mech, 1000, round_id=4), 0, 1000))
    users = _population(mech, adv)
    whole, _ = users.respond(plan)
    parts = [users.respond(plan, [b])[0] for b in (1, 0)]  # two fleets, any order
    assert np.array_equal(whole.values, np.concatenate([parts[1].values, parts[0].values]))


@pytest.mark.parametrize("arm", [0, 1])
def test_max_shift_sets_the_decoded_sum_exactly_across_blocks(arm):
    """Under (ideal) secure aggregation one attacker per block controls the whole release: the
    analyzer decodes −τ (best arm) or n·g + τ (any other arm), exactly."""
    mech = PolyaSecAgg(0.5, 0.1)
    plan = _plan(mech, 2 * USER_BLOCK + 77, arm=arm)  # three blocks, the last one small
    users = _population(mech, MaxShift(0.02, mech, seed=9, stream_prefix=(0, "x"), best_arm=1))
    sent, truths = users.respond(plan)
    assert all(t.attackers >= 1 for t in truths)
    box = Intermediary(plan, mech)
    box.receive(sent)
    est = mech.analyze(box.release().value, plan.params, np.random.default_rng(0))
    q = plan.params
    expected = -q.tau if arm == 1 else q.n * q.g + q.tau
    assert est.reward_sum * q.g == expected


def test_out_of_range_shift_lies_in_its_documented_bound():
    mech = PolyaSecAgg(0.5, 0.1)
    plan = _plan(mech, 20_000, arm=0)  # not the best arm: pushed up
    honest, _ = _population(mech).respond(plan)
    adv = OutOfRange(0.01, mech, seed=9, stream_prefix=(0, "x"), best_arm=1, magnitude=2.0)
    attacked, truths = _population(mech, adv).respond(plan)
    a, q = truths[0].attackers, plan.params
    changed = attacked.values != honest.values
    assert a == 200 and changed.sum() <= a
    # Each attacker swaps its x̂ ∈ [0, g] for g·(1 + magnitude): a shift of 2 to 3 rewards each.
    shift = (modular_sum(attacked.values, q.m) - modular_sum(honest.values, q.m)) % q.m
    assert 2.0 * a * q.g <= shift <= 3.0 * a * q.g


@pytest.mark.parametrize("mech", [CentralDiscreteLaplace(0.5, 0.1), NonPrivate()], ids=["cdp-se", "se"])
def test_range_check_rejects_out_of_range_attackers_like_dropouts(mech):
    """Where reports are visible a rejected attacker is a dropout: the release is exactly the honest
    release over the other users."""
    plan = _plan(mech, 5_000)
    adv = OutOfRange(0.1, mech, seed=9, stream_prefix=(0, "x"), best_arm=1)
    attacked, truths = _population(mech, adv).respond(plan)
    honest, _ = _population(mech).respond(plan)
    window = None if plan.params.m is None else report_slack(mech, plan.params)
    assert window in (None, 0)
    box = Intermediary(plan, mech, window=window)
    box.receive(attacked)
    reason = "out-of-range" if window is None else "out-of-window"
    assert +box.rejected == {reason: truths[0].attackers} and truths[0].attackers == 500
    keep = ~adv.members(plan, 0, 5_000)
    twin = Intermediary(plan, mech)
    twin.receive(type(honest)(honest.round_id, honest.user_ids[keep], honest.values[keep]))
    got, want = box.release(partial=True), twin.release(partial=True)
    assert (got.n_reports, got.value) == (want.n_reports, want.value)
    assert np.array_equal(got.reports, want.reports) if want.reports is not None else got.reports is None


def test_bounded_sum_is_the_modular_sum_for_honest_reports_and_bounds_window_attackers():
    mech = LocalDiscreteLaplace(0.5, 0.1)
    plan = _plan(mech, 4_000)
    q, slack = plan.params, report_slack(mech, plan.params)
    assert slack == min(q.tau, math.ceil(q.g / 0.5 * (math.log(q.n) + mech.log2p))) and slack < q.tau
    honest, _ = _population(mech).respond(plan)
    assert in_window(honest.values, q, slack).all()
    assert bounded_sum(honest.values, q, slack) == modular_sum(honest.values, q.m)
    # Everyone at the top of the window: the modular sum wraps to a tiny value, the bounded one clips.
    top = np.full(q.n, (q.g + slack) % q.m)
    assert bounded_sum(top, q, slack) == q.n * q.g + q.tau
    assert modular_sum(top, q.m) != q.n * q.g + q.tau


def test_colluders_leave_regret_alone_and_the_ledger_reports_the_coalitions_epsilon(tmp_path):
    algos = """
[algorithms.honest]
algorithm = "dist-dp-se"
[algorithms.colluded]
algorithm = "dist-dp-se"
adversary = {kind = "colluders", fraction = 0.2}
[algorithms.central]
algorithm = "cdp-se"
adversary = {kind = "colluders", fraction = 0.2}
"""
    path = tmp_path / "adv.toml"
    path.write_text(BASE.format(horizon=60_000) + algos)
    config, _ = load_experiment(path)
    runs = {k: v[0] for k, v in run_experiment(config, jobs=1)[0].items()}
    honest, colluded = runs["honest"], runs["colluded"]
    # The algorithms' streams are keyed by label, so compare the colluded run with itself
    # without the adversary instead: the same label, the file's adversary removed.
    plain = _run(tmp_path, algos.split("[algorithms.central]")[0], overrides=["algorithms.colluded.adversary.fraction=0"])
    assert np.array_equal(plain["colluded"].pseudo_regret, colluded.pseudo_regret)
    assert [r["estimate_sum"] for r in plain["colluded"].rounds] == [r["estimate_sum"] for r in colluded.rounds]
    assert plain["colluded"].privacy == {k: v for k, v in colluded.privacy.items() if k != "coalition"}
    mech = PolyaSecAgg(0.5, 0.1)
    for row in colluded.rounds:
        q = mech.params(row["n"])
        want = mech.privacy_event(q, row["reports"] - row["attackers"]).pure_epsilon
        assert row["epsilon_coalition"] == want
        assert (want > 0.5) == (row["attackers"] > 0)
    coalition = colluded.privacy["coalition"]
    assert coalition["epsilon_pure"] == max(r["epsilon_coalition"] for r in colluded.rounds) > 0.5
    assert coalition["colluders"] == sum(r["attackers"] for r in colluded.rounds) > 0
    assert colluded.privacy["epsilon_pure"] == 0.5 == honest.privacy["epsilon_pure"]
    # The central model's noise is the analyzer's own: colluding users take nothing away.
    assert runs["central"].privacy["coalition"]["epsilon_pure"] == 0.5


def test_range_check_without_attackers_changes_nothing(tmp_path):
    algos = """
[algorithms.LDP-SE]
[algorithms.shuffled]
algorithm = "dist-rdp-se"
intermediary = "shuffler"
"""
    plain = _run(tmp_path, algos)
    checked = _run(tmp_path, algos, overrides=["algorithms.LDP-SE.range_check=true",
                                               "algorithms.shuffled.range_check=true"])
    for label in plain:
        assert checked[label].rejected == {}
        assert checked[label].rounds == plain[label].rounds
        assert np.array_equal(checked[label].realized_regret, plain[label].realized_regret)


def test_window_edge_attackers_pass_the_check_and_move_each_estimate_within_the_bound(tmp_path):
    algos = """
[algorithms.shuffled]
algorithm = "dist-rdp-se"
intermediary = "shuffler"
range_check = true
"""
    plain = _run(tmp_path, algos)["shuffled"]
    attacked = _run(tmp_path, algos + 'adversary = {kind = "window-edge", fraction = 0.25}\n')["shuffled"]
    assert attacked.rejected == {}
    same = []  # rounds served to the same users as in the honest run: every plan so far agrees
    for a, h in zip(attacked.rounds, plain.rounds):
        if (a["arm"], a["n"], a["batch"]) != (h["arm"], h["n"], h["batch"]):
            break
        same.append((a, h))
    assert sum(a["attackers"] for a, _ in same) >= 4
    for a, h in same:
        q_g, slack = a["g"], a["tau"]  # distributed shares: B = τ
        bound = a["attackers"] * (q_g + 2 * slack) / q_g
        assert abs(a["estimate_sum"] - h["estimate_sum"]) <= bound + 1e-9
        assert -a["tau"] / q_g <= a["estimate_sum"] <= (a["n"] * q_g + a["tau"]) / q_g


def test_max_shift_under_secure_aggregation_eliminates_the_best_arm(tmp_path):
    """One attacker in a cohort decides its release: the best arm goes, regret becomes linear."""
    algos = """
[algorithms.Dist-DP-SE]
adversary = {kind = "max-shift", fraction = 0.0}
"""
    runs = [_run(tmp_path, algos, horizon=100_000, overrides=[f"algorithms.Dist-DP-SE.adversary.fraction={f}"])[
            "Dist-DP-SE"] for f in (0.0, 0.05)]
    assert not runs[0].best_arm_eliminated and runs[1].best_arm_eliminated
    assert runs[1].pseudo_regret[-1] > 2 * runs[0].pseudo_regret[-1]
    # The first round with an attacker on the best arm decodes to exactly −τ.
    hit = next(r for r in runs[1].rounds if r["attackers"] and r["arm"] == runs[1].best_arm)
    assert hit["estimate_sum"] * hit["g"] == -hit["tau"]


@pytest.mark.parametrize(("override", "field"), [
    ('algorithms.Dist-DP-SE.adversary={kind="max-shift", fraction=0.4}', "adversary.fraction"),
    ('algorithms.Dist-DP-SE.adversary={kind="nope"}', "adversary.kind"),
    ("algorithms.Dist-DP-SE.range_check=true", "range_check: under secure aggregation"),
    ('algorithms.Dist-DP-SE.adversary={kind="colluders", fraction=0.2}', "below 1/3"),
])
def test_bad_adversary_settings_name_the_field(tmp_path, override, field):
    path = tmp_path / "adv.toml"
    path.write_text(BASE.format(horizon=1000) + "[algorithms.Dist-DP-SE]\ndropout_rate = 0.2\n")
    with pytest.raises(ConfigError) as e:
        load_experiment(path, [override])
    assert field in str(e.value)
