"""Adversaries (issue #5): who attacks, what each attack does to the release, and the defences.

Each test pins the honest result (unchanged where the attack is inert or fully rejected) or the
exact documented bound of the change.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from privbandit.families.distributed_dp_mab import FAMILY
from privbandit.families.distributed_dp_mab.adversaries import MaxShift, OutOfRange, params_of
from privbandit.families.distributed_dp_mab.defences import bounded_sum, in_window, report_slack
from privbandit.families.distributed_dp_mab.family import instance_for
from privbandit.families.distributed_dp_mab.learners import GeometricSchedule, Lemma2Width, SuccessiveElimination
from privbandit.families.distributed_dp_mab.mechanisms import (
    CentralDiscreteLaplace,
    LocalDiscreteLaplace,
    NonPrivate,
    PolyaSecAgg,
)
from privbandit.families.distributed_dp_mab.parties import BanditUsers, EliminationServer
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.primitives.encoding import modular_sum
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine.events import Join, Plan, Reports
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.parties import Users
from privbandit.runner import tasks
from privbandit.runner.config import ConfigError, load

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


class Run:
    """One task's result, with what the old run result carried: the best arm and its fate."""

    def __init__(self, config, result):
        self.result = result
        self.best_arm = instance_for(config, result.runs[0]).best_arm
        self.best_arm_eliminated = bool(result.learner[0]["eliminated_at"][self.best_arm] > 0)

    def __getattr__(self, name):
        return getattr(self.result, name)


def _load(tmp_path: Path, algos: str, horizon: int = 60_000, overrides=()):
    path = tmp_path / "adv.toml"
    path.write_text(BASE.format(horizon=horizon) + algos)
    family, config = load(path, list(overrides))
    assert family is FAMILY
    return config


def _run(tmp_path: Path, algos: str, horizon: int = 60_000, overrides=()) -> dict:
    config = _load(tmp_path, algos, horizon, overrides)
    results, *_ = tasks.run_experiment(FAMILY, config, jobs=1)
    return {label: Run(config, runs[0]) for label, runs in results.items()}


def _plan(mech, n: int, arm: int = 1, first: int = 1000, round_id: int = 3, bounded: bool = False) -> Plan:
    """Round ``round_id`` of Algorithm 1 as the family's analyzer opens it (``bounded``: with the
    clear-text range check's window)."""
    server = EliminationServer(SuccessiveElimination(3, GeometricSchedule(2), Lemma2Width(0.1)), mech, 10**7,
                               key=0, bounded=bounded)
    q = mech.params(n)
    return Plan(round_id, first, n, {"batch": 2, "arm": arm, "params": asdict(q)},
                (server.round_of(round_id, n, q),), (Join(round_id, first, n, n),))


def _population(mech, adversary=None) -> Users:
    inst = BanditInstance(np.array([0.3, 0.7, 0.5]), "gaussian", 0.1)
    return Users(BanditUsers(inst, mech, 9, (0, "x"), np.array([1, 10**7])), 9, (0, "x"), adversary=adversary)


def _respond(users: Users, plan: Plan, blocks=None):
    """The plan's one (merged) message of reports, and its block truths."""
    (sent,), truths = users.respond(plan, blocks)
    return sent, truths


def _box(plan: Plan) -> Intermediary:
    box = Intermediary("aggregator")
    box.open_plan(plan)
    return box


def test_attackers_are_an_exact_deterministic_subset_whatever_the_sharding():
    mech = PolyaSecAgg(0.5, 0.1)
    adv = MaxShift(0.05, mech, seed=9, stream_prefix=(0, "x"), best_arm=1)
    plan = _plan(mech, USER_BLOCK + 1000)
    for block, size in ((0, USER_BLOCK), (1, 1000)):
        a, b = adv.members(plan, block, size), adv.members(plan, block, size)
        assert a.sum() == int(0.05 * size) and np.array_equal(a, b)
    assert not np.array_equal(adv.members(plan, 0, 1000), adv.members(_plan(mech, 1000, round_id=4), 0, 1000))
    users = _population(mech, adv)
    whole, truths = _respond(users, plan)
    assert [t.extras["attackers"] for t in truths] == [int(0.05 * USER_BLOCK), int(0.05 * 1000)]
    parts = [_respond(users, plan, [b])[0] for b in (1, 0)]  # two fleets, any order
    assert np.array_equal(whole.values, np.concatenate([parts[1].values, parts[0].values], axis=1))
    assert np.array_equal(whole.user_ids, np.concatenate([parts[1].user_ids, parts[0].user_ids]))


@pytest.mark.parametrize("arm", [0, 1])
def test_max_shift_sets_the_decoded_sum_exactly_across_blocks(arm):
    """Under (ideal) secure aggregation one attacker per block controls the whole release: the
    analyzer decodes −τ (best arm) or n·g + τ (any other arm), exactly."""
    mech = PolyaSecAgg(0.5, 0.1)
    plan = _plan(mech, 2 * USER_BLOCK + 77, arm=arm)  # three blocks, the last one small
    users = _population(mech, MaxShift(0.02, mech, seed=9, stream_prefix=(0, "x"), best_arm=1))
    sent, truths = _respond(users, plan)
    assert len(truths) == 3 and all(t.extras["attackers"] >= 1 for t in truths)
    box = _box(plan)
    assert box.receive(sent) == plan.cohort  # nobody can check a residue: all accepted
    q = params_of(plan)
    est = mech.analyze(int(box.release(3).values[0, 0]), q, np.random.default_rng(0))
    expected = -q.tau if arm == 1 else q.n * q.g + q.tau
    assert est.reward_sum * q.g == expected


def test_out_of_range_shift_lies_in_its_documented_bound():
    mech = PolyaSecAgg(0.5, 0.1)
    plan = _plan(mech, 20_000, arm=0)  # not the best arm: pushed up
    honest, _ = _respond(_population(mech), plan)
    adv = OutOfRange(0.01, mech, seed=9, stream_prefix=(0, "x"), best_arm=1, magnitude=2.0)
    attacked, truths = _respond(_population(mech, adv), plan)
    a, q = truths[0].extras["attackers"], params_of(plan)
    changed = attacked.values != honest.values
    assert a == 200 and changed.sum() <= a
    # Each attacker swaps its x̂ ∈ [0, g] for g·(1 + magnitude): a shift of 2 to 3 rewards each.
    shift = (modular_sum(attacked.values, q.m) - modular_sum(honest.values, q.m)) % q.m
    assert 2.0 * a * q.g <= shift <= 3.0 * a * q.g


@pytest.mark.parametrize("mech", [CentralDiscreteLaplace(0.5, 0.1), NonPrivate()], ids=["cdp-se", "se"])
def test_range_check_rejects_out_of_range_attackers_like_dropouts(mech):
    """Where reports are visible a rejected attacker is a dropout: the release is exactly the honest
    release over the other users."""
    plan = _plan(mech, 5_000, bounded=True)
    q, rnd = params_of(plan), plan.opens[0]
    adv = OutOfRange(0.1, mech, seed=9, stream_prefix=(0, "x"), best_arm=1)
    attacked, truths = _respond(_population(mech, adv), plan)
    honest, _ = _respond(_population(mech), plan)
    if q.m is None:
        assert rnd.window is None and (rnd.low, rnd.high) == (0.0, 1.0)
    else:
        assert report_slack(mech, q) == 0 and rnd.window == (0, q.g)  # the central model: exactly [0, g]
    box = _box(plan)
    box.receive(attacked)
    reason = "out-of-range" if q.m is None else "out-of-window"
    assert +box.rejected == {reason: truths[0].extras["attackers"]} and truths[0].extras["attackers"] == 500
    keep = ~adv.members(plan, 0, 5_000)
    twin = _box(plan)
    twin.receive(Reports(honest.round_id, plan.id, honest.user_ids[keep], honest.values[:, keep]))
    for b in (box, twin):
        b.answered(plan.id)  # the rejected attackers count as dropouts
        assert b.ready() == [3]
    got, want = box.release(3, partial=True), twin.release(3, partial=True)
    assert got.n_reports == want.n_reports == 4_500
    assert np.array_equal(got.values, want.values)
    assert (got.user_ids is None) == (want.user_ids is None) == (rnd.rule == "sum")
    if want.user_ids is not None:
        assert np.array_equal(got.user_ids, want.user_ids)


def test_bounded_sum_is_the_modular_sum_for_honest_reports_and_bounds_window_attackers():
    mech = LocalDiscreteLaplace(0.5, 0.1)
    plan = _plan(mech, 4_000)
    q = params_of(plan)
    slack = report_slack(mech, q)
    assert slack == min(q.tau, math.ceil(q.g / 0.5 * (math.log(q.n) + mech.log2p))) and slack < q.tau
    honest, _ = _respond(_population(mech), plan)
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
    runs = _run(tmp_path, algos)
    honest, colluded = runs["honest"], runs["colluded"]
    # The algorithms' streams are keyed by label, so compare the colluded run with itself
    # without the adversary instead: the same label, the file's adversary removed.
    plain = _run(tmp_path, algos.split("[algorithms.central]")[0], overrides=["algorithms.colluded.adversary.fraction=0"])
    assert np.array_equal(plain["colluded"].pseudo, colluded.pseudo)
    assert [r["estimate_sum"] for r in plain["colluded"].rounds] == [r["estimate_sum"] for r in colluded.rounds]
    own = {k: v for k, v in plain["colluded"].privacy.items() if k != "coalition"}
    assert own == {k: v for k, v in colluded.privacy.items() if k != "coalition"}
    # fraction = 0 still names the colluders' kind: a coalition of nobody, whose ε is the ledger's.
    nobody = plain["colluded"].privacy.get("coalition", {"colluders": 0, "epsilon_pure": 0.5})
    assert nobody["colluders"] == 0 and nobody["epsilon_pure"] == own["epsilon_pure"] == 0.5
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
intermediary = "shuffler-residues"
"""
    plain = _run(tmp_path, algos)
    checked = _run(tmp_path, algos, overrides=["algorithms.LDP-SE.range_check=true",
                                               "algorithms.shuffled.range_check=true"])
    for label in plain:
        assert checked[label].rejected == {}
        assert checked[label].rounds == plain[label].rounds
        assert np.array_equal(checked[label].realized, plain[label].realized)


def test_window_edge_attackers_pass_the_check_and_move_each_estimate_within_the_bound(tmp_path):
    algos = """
[algorithms.shuffled]
algorithm = "dist-rdp-se"
intermediary = "shuffler-residues"
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
    assert runs[1].pseudo[0, -1] > 2 * runs[0].pseudo[0, -1]
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
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "[algorithms.Dist-DP-SE]\ndropout_rate = 0.2\n", horizon=1000, overrides=[override])
    assert field in str(e.value)
