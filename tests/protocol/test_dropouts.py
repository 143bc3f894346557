"""Dropouts: the ε the survivors' noise actually gives, the tolerance ρ, partial releases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import nbinom

from privbandit.families.distributed_dp_mab import FAMILY
from privbandit.families.distributed_dp_mab.base import RoundParams
from privbandit.families.distributed_dp_mab.learners import GeometricSchedule, Lemma2Width, SuccessiveElimination
from privbandit.families.distributed_dp_mab.mechanisms import (
    CentralDiscreteLaplace,
    CentralLaplace,
    DiscreteGaussianSecAgg,
    PolyaSecAgg,
    SkellamSecAgg,
)
from privbandit.families.distributed_dp_mab.parties import EliminationServer, release_threshold
from privbandit.protocol.primitives.noise.polya import discrete_laplace_pmf
from privbandit.protocol.privacy import polya_sum_epsilon
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Reports
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.runner import tasks
from tests.stats import P_MIN, chi_square_pvalue


def _brute_force_epsilon(r: float, beta: float, delta: int, span: int = 3000) -> float:
    """sup over every k and every shift 0 < d ≤ Δ, by direct correlation (no FFT, no shortcut)."""
    pmf = nbinom.pmf(np.arange(span), r, 1 - beta)
    d = np.correlate(pmf, pmf, mode="full")  # index span − 1 + k
    logd = np.log(d)
    best = -np.inf
    centre = span - 1
    ks = np.arange(-span // 4, span // 4)
    for shift in range(1, delta + 1):
        best = max(best, float((logd[centre + ks] - logd[centre + ks + shift]).max()))
    return best


@pytest.mark.parametrize("r", [0.3, 0.7, 0.95])
def test_polya_epsilon_matches_brute_force(r):
    eps, g = 1.0, 8
    beta = math.exp(-eps / g)
    assert polya_sum_epsilon(r, beta, g) == pytest.approx(_brute_force_epsilon(r, beta, g), rel=1e-6)


def test_polya_epsilon_is_the_target_with_every_share_and_grows_as_shares_go():
    eps, g = 0.5, 40
    beta = math.exp(-eps / g)
    assert polya_sum_epsilon(1.0, beta, g) == pytest.approx(eps, rel=1e-9)
    got = [polya_sum_epsilon(r, beta, g) for r in (1.0, 0.9, 0.7, 0.5, 0.2)]
    assert all(a < b for a, b in zip(got, got[1:]))


def test_polya_event_with_missing_shares():
    mech = PolyaSecAgg(1.0, 0.01)
    q = mech.params(100)
    assert mech.privacy_event(q).pure_epsilon == 1.0
    assert mech.privacy_event(q, 100).pure_epsilon == 1.0
    weaker = mech.privacy_event(q, 80).pure_epsilon
    assert weaker == pytest.approx(polya_sum_epsilon(0.8, math.exp(-1.0 / q.g), q.g)) and weaker > 1.1
    tolerant = PolyaSecAgg(1.0, 0.01, dropout_tolerance=0.2)
    qt = tolerant.params(100)
    assert qt.noise_n == 80 and tolerant.privacy_event(qt, 80).pure_epsilon == 1.0
    assert tolerant.privacy_event(qt, 79).pure_epsilon > 1.0


def test_skellam_and_gaussian_events_count_the_shares_that_arrived():
    sk = SkellamSecAgg(1.0, 0.01, s=10)
    q = sk.params(200)
    full, part = sk.privacy_event(q), sk.privacy_event(q, 150)
    assert part.variance == pytest.approx(0.75 * full.variance)
    dg = DiscreteGaussianSecAgg(1.0, 0.01, s=10)
    qd = dg.params(200)
    assert dg.privacy_event(qd, 150).cdp_epsilon > dg.privacy_event(qd).cdp_epsilon
    tol = SkellamSecAgg(1.0, 0.01, s=10, dropout_tolerance=0.25)
    qt = tol.params(200)
    # 150 survivors of a ρ = 0.25 calibration carry exactly the intended Sk(0, g²/ε²) variance.
    assert tol.privacy_event(qt, 150).variance == pytest.approx(qt.g**2 / 1.0**2)


def test_any_calibrated_number_of_polya_shares_sums_to_the_discrete_laplace():
    """ρ = 0.3, n = 50: the shares are Pólya(1/35); any 35 of them sum to Lap_Z(g/ε) (chi-square
    against Definition 4's pmf, 20k sums, tail cells pooled, p > 0.001)."""
    mech = PolyaSecAgg(1.0, 0.01, dropout_tolerance=0.3)
    q = mech.params(50)
    assert q.noise_n == 35
    rng = np.random.default_rng(7)
    sums = np.array([mech.local_shares(35, q, rng).sum() for _ in range(20_000)])
    b = q.g / mech.epsilon
    assert chi_square_pvalue(sums, lambda k: discrete_laplace_pmf(k, b)) > P_MIN
    # Power: all 50 shares (j = 50/35 times the noise) fail the same test.
    more = np.array([mech.local_shares(50, q, rng).sum() for _ in range(20_000)])
    assert chi_square_pvalue(more, lambda k: discrete_laplace_pmf(k, b)) < P_MIN


@pytest.mark.parametrize("make", [
    lambda rho: PolyaSecAgg(1.0, 0.05, dropout_tolerance=rho),
    lambda rho: SkellamSecAgg(1.0, 0.05, s=2, dropout_tolerance=rho),
], ids=["polya", "skellam"])
def test_tolerant_tau_still_bounds_the_noise_of_all_n_shares(make):
    """With every user reporting, the shares carry j = n/n′ times the noise; τ must still hold with
    probability ≥ 1 − p (p = 0.05; 4,000 rounds; allowed up to p + 3 binomial stderr)."""
    rng = np.random.default_rng(3)
    for rho in (0.2, 0.5):
        mech = make(rho)
        q = mech.params(40)
        sums = np.array([mech.local_shares(40, q, rng).sum() for _ in range(4000)])
        rate = float((np.abs(sums) > q.tau).mean())
        assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000), (rho, rate, q.tau)
        assert q.tau > make(0.0).params(40).tau


def test_tolerance_is_refused_where_noise_is_not_distributed():
    with pytest.raises(ValueError, match="distributed noise only"):
        CentralDiscreteLaplace(1.0, 0.1, dropout_tolerance=0.1)
    assert not hasattr(CentralLaplace(1.0), "dropout_tolerance")


def _plan(cohort=9, m=2**20, secagg=None) -> Plan:
    """Round 0 of users 100 … 100 + cohort − 1, as the family's analyzer opens it (threshold
    ⌊2n/3⌋ + 1; ``secagg``: summed by a real Bonawitz et al. round)."""
    mech = PolyaSecAgg(1.0, 0.1)
    server = EliminationServer(SuccessiveElimination(2, GeometricSchedule(2), Lemma2Width(0.1)), mech, 10**6,
                               key=0, secagg=secagg)
    q = RoundParams(n=cohort, g=4, tau=10, m=m)
    rnd = server.round_of(0, cohort, q)
    assert rnd.threshold == release_threshold(cohort) and rnd.secagg == secagg
    return Plan(0, 100, cohort, {"batch": 1, "arm": 0, "params": {"n": cohort, "g": 4, "tau": 10, "m": m}},
                (rnd,), (Join(0, 100, cohort, cohort),))


@pytest.mark.parametrize("box", ["ideal", "secagg-complete", "secagg-sparse"])
def test_partial_release_sums_the_survivors_and_refuses_below_threshold(box):
    plan = _plan(cohort=12, secagg=None if box == "ideal" else box.split("-")[1])
    values = np.arange(1, 13, dtype=np.int64) * 1000

    def make(k):
        inter = Intermediary("aggregator")
        inter.open_plan(plan)
        inter.receive(Reports(0, plan.id, np.arange(100, 100 + k), values[:k].reshape(1, k, 1)))
        return inter

    ok = make(11)  # t = ⌊24/3⌋ + 1 = 9 ≤ 11
    assert ok.ready() == []  # user 111 may still come
    with pytest.raises(ProtocolError, match="incomplete-round"):
        ok.release(0)
    ok.answered(plan.id)  # every joined user answered or never will: 111 dropped out
    assert ok.ready() == [0] and ok.starved() == []
    rel = ok.release(0, partial=True)
    assert rel.n_reports == 11 and rel.values.tolist() == [[int(values[:11].sum())]]
    short = make(8)
    short.answered(plan.id)
    assert short.ready() == [] and short.starved() == [0]
    with pytest.raises(ProtocolError) as e:
        short.release(0, partial=True)
    assert e.value.reason == "below-threshold"


def test_learner_uses_each_arms_report_count():
    se = SuccessiveElimination(2, GeometricSchedule(2), Lemma2Width(0.1))
    q = RoundParams(n=2)
    se.conclude_batch({0: 1.0, 1: 1.0}, q, counts={0: 2, 1: 1})
    assert se.estimates.tolist() == [0.5, 1.0]
    r = Lemma2Width(0.1).radius(1, 2, q, np.array([2.0, 1.0]))
    assert r[1] > r[0] == pytest.approx(Lemma2Width(0.1).radius(1, 2, q))


def _config(algorithm: dict, horizon: int, seed: int, means: list[float], checkpoints: int = 16):
    """One algorithm (label "a": its users' streams are keyed by the label) on a fixed instance."""
    data = {"family": "distributed-dp-mab", "name": "dropouts", "horizon": horizon, "seed": seed,
            "checkpoints": checkpoints, "environment": {"kind": "means", "means": means},
            "algorithms": {"a": {"batch_growth": 2.0, **algorithm}}}
    return FAMILY.load(data, "dropouts.toml")


def _run(config):
    (result,) = tasks.run_experiment(FAMILY, config, jobs=1)[0]["a"]
    return result


def test_engine_ledger_reports_the_epsilon_dropouts_leave():
    """A 20 % dropout rate under ρ = 0 weakens every round of Dist-DP-SE; ρ = 0.2 restores ε."""
    out = {}
    for rho in (0.0, 0.2):
        res = _run(_config({"algorithm": "dist-dp-se", "epsilon": 1.0, "p": 0.01, "dropout_rate": 0.2,
                            "dropout_tolerance": rho}, 4000, seed=5, means=[0.4, 0.6]))
        dropped = [row for row in res.rounds if row["reports"] < row["n"]]
        assert dropped and all(row["reports"] == row["n"] - int(0.2 * row["n"]) for row in res.rounds)
        out[rho] = res
    assert out[0.0].privacy["epsilon_pure"] > 1.2
    assert out[0.2].privacy["epsilon_pure"] == pytest.approx(1.0)
    assert max(r["epsilon"] for r in out[0.2].rounds) == pytest.approx(1.0)
    # Each round's ε is the Pólya event of the shares that arrived (the ledger's worst round).
    mech = PolyaSecAgg(1.0, 0.01)
    for row in out[0.0].rounds:
        want = mech.privacy_event(mech.params(row["n"]), row["reports"]).pure_epsilon
        assert row["epsilon"] == pytest.approx(want)
    assert out[0.0].privacy["epsilon_pure"] == pytest.approx(max(r["epsilon"] for r in out[0.0].rounds))


def test_secagg_recovers_dropouts_exactly_as_the_ideal_sum():
    """Dropped users share their keys, then vanish before masking: Bonawitz et al.'s recovery must
    release exactly the ideal functionality's sum, so the two runs agree bit for bit."""
    runs = {}
    for box in ("auto", "secagg"):
        config = _config({"algorithm": "dist-dp-se", "epsilon": 1.0, "p": 0.05, "dropout_tolerance": 0.1,
                          "dropout_rate": 0.1, "intermediary": box, "secagg_graph": "complete"},
                         200, seed=9, means=[0.3, 0.5, 0.7])
        server = FAMILY.analyzer(FAMILY.public_task(config, "a", [0]), [0])
        assert server.secagg == (None if box == "auto" else "complete")  # the real protocol, or the ideal sum
        runs[box] = _run(config)
    ideal, real = runs["auto"], runs["secagg"]
    assert any(r["reports"] < r["n"] for r in real.rounds)
    assert [r["estimate_sum"] for r in real.rounds] == [r["estimate_sum"] for r in ideal.rounds]
    np.testing.assert_array_equal(real.pseudo, ideal.pseudo)
