"""Algorithm 1's schedule, widths and elimination, and the engine's bookkeeping of a run."""

import math
from dataclasses import asdict

import numpy as np
import pytest

from privbandit.families.distributed_dp_mab import FAMILY
from privbandit.families.distributed_dp_mab.base import RoundParams
from privbandit.families.distributed_dp_mab.family import instance_for
from privbandit.families.distributed_dp_mab.learners import (
    GeometricSchedule,
    Lemma2Width,
    SajedSheffetSchedule,
    SuccessiveElimination,
    sajed_sheffet_width,
)
from privbandit.families.distributed_dp_mab.mechanisms import CentralLaplace, PolyaSecAgg
from privbandit.families.distributed_dp_mab.parties import BanditUsers, EliminationServer
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.privacy import Ledger
from privbandit.protocol.spine import engine
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.observer import Observer, checkpoint_grid
from privbandit.protocol.spine.parties import Analyzer, Users
from privbandit.runner import tasks


def test_geometric_schedule():
    assert [GeometricSchedule(2).size(b, 10) for b in range(1, 6)] == [2, 4, 8, 16, 32]
    assert [GeometricSchedule(4).size(b, 3) for b in range(1, 4)] == [4, 16, 64]
    assert GeometricSchedule(1.5).size(3, 1) == math.ceil(1.5**3)
    with pytest.raises(ValueError, match="eta"):
        GeometricSchedule(1.0)


def test_lemma_2_width_by_hand():
    p, b, k, l, sigma, h = 0.1, 3, 7, 64, 2.0, 0.5
    u = k * b * b / p
    expect = math.sqrt(math.log(4 * u) / (2 * l)) + sigma * math.sqrt(math.log(2 * u)) / l + h * math.log(2 * u) / l
    assert Lemma2Width(p).radius(b, k, RoundParams(n=l, sigma=sigma, h=h)) == pytest.approx(expect)
    assert Lemma2Width(p, 2.0).radius(b, k, RoundParams(n=l, sigma=sigma, h=h)) == pytest.approx(2 * expect)


def test_sajed_sheffet_schedule_and_width_by_hand():
    eps, p, e, s = 0.5, 0.1, 2, 10
    gap = 0.25
    r = 1 + int(max(32 * math.log(8 * s * e * e / p) / gap**2, 8 * math.log(4 * s * e * e / p) / (eps * gap)))
    assert SajedSheffetSchedule(eps, p).size(e, s) == r
    width = math.sqrt(math.log(8 * s * e * e / p) / (2 * r)) + math.log(4 * s * e * e / p) / (r * eps)
    # DP-SE's mechanism supplies h = 1/ε (and σ = 0) in its round parameters.
    assert sajed_sheffet_width(p).radius(e, s, CentralLaplace(eps).params(r)) == pytest.approx(width)


class _FixedWidth:
    def __init__(self, beta):
        self.beta = beta

    def radius(self, b, n_active, params):
        return self.beta


def test_elimination_rule_is_ucb_below_max_lcb():
    se = SuccessiveElimination(4, GeometricSchedule(2), _FixedWidth(0.25))
    n = se.batch_size()
    assert n == 2
    # µ̂ = 1, 0.75, 0.5, 0.49 (exact in binary): max LCB = 0.75; UCBs 1.25, 1, 0.75 (kept: not
    # strictly below), 0.74 (dropped)
    out = se.conclude_batch({0: 2.0, 1: 1.5, 2: 1.0, 3: 0.98}, RoundParams(n=n))
    assert out.eliminated == (3,)
    assert se.active.tolist() == [0, 1, 2] and se.batch == 2 and se.eliminated_at.tolist() == [0, 0, 0, 1]
    with pytest.raises(ValueError, match="needs sums"):
        se.conclude_batch({0: 1.0}, RoundParams(n=4))


def _config(algorithm: dict, horizon: int, seed: int, environment: dict, runs: int = 1):
    """An experiment of one algorithm (label "a"), validated by the family as a file would be."""
    data = {"family": "distributed-dp-mab", "name": "learner", "horizon": horizon, "seed": seed, "runs": runs,
            "environment": environment, "algorithms": {"a": dict(algorithm)}}
    return FAMILY.load(data, "learner.toml")


def _run(config) -> list:
    """Every run of the experiment through the runner's tasks and the spine's engine."""
    results, _, _ = tasks.run_experiment(FAMILY, config, jobs=1)
    return results["a"]


def _eliminated(config, result) -> np.ndarray:
    return np.asarray(result.learner[0]["eliminated_at"])


def _best_arm_eliminated(config, result) -> bool:
    return bool(_eliminated(config, result)[instance_for(config, result.runs[0]).best_arm] > 0)


FOUR_ARMS = {"kind": "means", "means": [0.3, 0.5, 0.55, 0.7]}


@pytest.mark.parametrize("algorithm", [
    {"algorithm": "dist-dp-se", "epsilon": 0.5, "p": 1e-6},
    {"algorithm": "dist-rdp-se", "epsilon": 0.5, "p": 1e-6, "s": 10, "tau_rule": "sqrt-log"},
    {"algorithm": "se", "p": 1e-6},
], ids=lambda a: a["algorithm"])
def test_best_arm_is_never_eliminated_on_easy_instances(algorithm):
    """On the good event (prob ≥ 1 − 3p) a* survives every batch (proof of Lemma 2); with p = 1e-6
    and 12 instances at fixed seeds, any elimination of a* would be a bug."""
    config = _config({**algorithm, "batch_growth": 2.0}, 300_000, seed=0,
                     environment={"kind": "uniform", "arms": 10, "low": 0.25, "high": 0.75}, runs=12)
    results = _run(config)
    assert [r.runs for r in results] == [[r] for r in range(12)]
    assert len({tuple(instance_for(config, r).means) for r in range(12)}) == 12  # 12 distinct instances
    for r in results:
        assert not _best_arm_eliminated(config, r), f"run {r.runs}"
        assert (_eliminated(config, r) > 0).sum() >= 5  # and it does learn


def test_run_bookkeeping_and_the_trailing_partial_batch():
    horizon = 10_000
    config = _config({"algorithm": "dist-dp-se", "epsilon": 1.0, "p": 0.1, "batch_growth": 2.0}, horizon, seed=3,
                     environment=FOUR_ARMS)
    (r,) = _run(config)
    assert r.checkpoints[-1] == horizon and r.pseudo.shape == r.realized.shape == (1, r.checkpoints.size)
    # Pseudo-regret at T is Σ Δ_a·N_a: rebuild N_a from the released rounds plus the unreleased tail.
    released = sum(row["n"] for row in r.rounds)
    assert released < horizon  # the trailing batch is served but never aggregated
    assert r.reports == released
    assert all(row["n"] == row["reports"] == 2 ** row["batch"] for row in r.rounds)
    assert all(row["epsilon"] == 1.0 for row in r.rounds) and r.privacy["epsilon_pure"] == 1.0
    assert r.privacy["releases"] == len(r.rounds)
    assert np.all(np.diff(r.pseudo[0]) >= 0)
    # Time-average realized regret tracks pseudo-regret (both estimate Σ Δ_a N_a).
    assert r.realized[0, -1] == pytest.approx(r.pseudo[0, -1], rel=0.1)


def test_pseudo_regret_equals_gaps_times_pulls():
    horizon = 5_000
    config = _config({"algorithm": "dp-se", "epsilon": 1.0, "p": 0.1}, horizon, seed=1,
                     environment={"kind": "means", "means": [0.2, 0.8], "reward": "bernoulli"})
    assert FAMILY.analyzer(FAMILY.public_task(config, "a", [0]), [0]).learner.schedule == SajedSheffetSchedule(1.0, 0.1)
    (r,) = _run(config)
    inst = instance_for(config, 0)
    pulls_arm0 = sum(row["n"] for row in r.rounds if row["arm"] == 0)
    unreleased = horizon - sum(row["n"] for row in r.rounds)
    gap = inst.gaps[0]
    assert pulls_arm0 * gap <= r.pseudo[0, -1] <= (pulls_arm0 + unreleased) * gap + 1e-9


def test_same_seed_same_run_other_seed_other_run():
    a, b, c = (_run(_config({"algorithm": "dist-dp-se", "epsilon": 0.5, "p": 0.1, "batch_growth": 2.0}, 50_000,
                            seed=s, environment=FOUR_ARMS))[0] for s in (5, 5, 6))
    assert np.array_equal(a.realized, b.realized) and a.rounds == b.rounds
    assert not np.array_equal(a.realized, c.realized)


def test_engine_drives_hand_built_parties_like_the_runner():
    """The engine loop on parties built by hand (a 3-arm instance, Algorithm 1 with η = 2) gives
    exactly the runner's task of the same experiment: same keys, same streams, same rows."""
    horizon, seed = 20_000, 4
    config = _config({"algorithm": "dist-dp-se", "epsilon": 1.0, "p": 0.1, "batch_growth": 2.0}, horizon, seed,
                     environment={"kind": "means", "means": [0.3, 0.5, 0.7]})
    (want,) = _run(config)
    inst = BanditInstance(np.array([0.3, 0.5, 0.7]))
    mech = PolyaSecAgg(1.0, 0.1)
    logic = EliminationServer(SuccessiveElimination(3, GeometricSchedule(2), Lemma2Width(0.1)), mech, horizon,
                              tasks.analyzer_keys(seed, "a", [0])[0])
    ledger = Ledger("distributed", 1.0, 1 / (10 * horizon), users=horizon)
    analyzer = Analyzer(logic, ledger)
    grid = checkpoint_grid(horizon)
    users = Users(BanditUsers(inst, mech, seed, (0, "a"), grid), seed, (0, "a"))
    observer = Observer(grid)
    rejected = engine.run(analyzer, users, {"aggregator": Intermediary("aggregator")}, observer)
    assert not +rejected and analyzer.done and not analyzer.open
    got = observer.result([0], ledger.summary(), logic.summary(), FAMILY.row_maker(config, "a"), rejected)
    FAMILY.finish(config, "a", got)
    assert np.array_equal(got.pseudo, want.pseudo) and np.array_equal(got.realized, want.realized)
    assert got.rounds == want.rounds and got.privacy == want.privacy and got.learner == want.learner


def test_analyzer_rejects_unknown_rounds_and_impossible_releases():
    mech = PolyaSecAgg(1.0, 0.1)
    an = Analyzer(EliminationServer(SuccessiveElimination(3, GeometricSchedule(2), Lemma2Width(0.1)), mech, 1000,
                                    key=0), Ledger("distributed", 1.0, 1e-6, users=1000))
    plans = an.next_plans()
    assert [p.body["arm"] for p in plans] == [0, 1, 2] and an.next_plans() == []  # one batch at a time
    cohort, m = plans[0].cohort, plans[0].opens[0].m
    with pytest.raises(ProtocolError) as e:
        an.on_release(Release(round_id=99, n_reports=2, values=np.array([[0]])))
    assert e.value.reason == "unknown-round"
    for count in (0, cohort - 1, cohort + 1):  # threshold ⌊2n/3⌋ + 1 = n for n = 2
        with pytest.raises(ProtocolError) as e:
            an.on_release(Release(round_id=0, n_reports=count, values=np.array([[0]])))
        assert e.value.reason == "bad-report-count"
    with pytest.raises(ProtocolError) as e:
        an.on_release(Release(round_id=0, n_reports=cohort, values=np.array([[m]])))  # not a residue
    assert e.value.reason == "out-of-range"
    with pytest.raises(ProtocolError) as e:
        an.on_release(Release(round_id=0, n_reports=cohort, values=np.array([[0, 1]])))
    assert e.value.reason == "wrong-shape"
    # A refused release changed nothing: the round is still open and a good one is accepted.
    assert an.ledger.releases == 0 and 0 in an.open
    rec = an.on_release(Release(round_id=0, n_reports=cohort, values=np.array([[1]])))
    assert rec.round_id == 0 and rec.epsilon == 1.0 and 0 not in an.open and an.ledger.releases == 1


def test_sharded_users_draw_exactly_what_one_population_draws():
    """A fleet hosting any subset of blocks produces the same records and truths, so a sharded
    distributed run can reproduce the in-process run bit for bit."""
    from privbandit.protocol.primitives.seeding import USER_BLOCK

    inst = BanditInstance(np.array([0.3, 0.6]))
    mech = PolyaSecAgg(0.5, 0.1)
    cohort = 2 * USER_BLOCK + 1234
    q = mech.params(cohort)
    server = EliminationServer(SuccessiveElimination(2, GeometricSchedule(2), Lemma2Width(0.1)), mech, 10**7, key=0)
    plan = Plan(3, 777, cohort, {"batch": 5, "arm": 0, "params": asdict(q)}, (server.round_of(3, cohort, q),),
                (Join(3, 777, cohort, cohort),))
    grid = checkpoint_grid(777 + cohort)

    def population():
        return Users(BanditUsers(inst, mech, 11, (0, "x"), grid), 11, (0, "x"))

    (rep,), truths = population().respond(plan)
    assert rep.values.shape == (1, cohort, 1) and len(truths) == 3
    (rep_a,), tr_a = population().respond(plan, blocks=[0, 2])
    (rep_b,), tr_b = population().respond(plan, blocks=[1])
    ids = np.concatenate([rep_a.user_ids, rep_b.user_ids])
    vals = np.concatenate([rep_a.values, rep_b.values], axis=1)
    order = np.argsort(ids)
    assert np.array_equal(ids[order], rep.user_ids) and np.array_equal(vals[:, order], rep.values)
    one, two = Observer(grid), Observer(grid)
    for t in truths:
        one.on_truth(t)
    for t in tr_b + tr_a:  # arrival order does not matter
        two.on_truth(t)
    for x, y in zip(one.truths_of(3), two.truths_of(3), strict=True):
        assert (x.block, x.first_user, x.size, x.extras) == (y.block, y.first_user, y.size, y.extras)
        for f in ("pseudo", "realized", "pseudo_at", "realized_at"):
            assert np.array_equal(getattr(x, f), getattr(y, f))
