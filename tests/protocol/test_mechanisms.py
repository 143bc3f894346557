"""Each mechanism's parameter rule is its theorem's, and its (R, S, A) pipeline carries the
intended noise law from the users' shares to the analyzer's decode."""

import math

import numpy as np
import pytest
from scipy import stats

from privbandit.families.distributed_dp_mab.mechanisms import (
    CentralDiscreteLaplace,
    CentralLaplace,
    DiscreteGaussianSecAgg,
    LocalDiscreteLaplace,
    NonPrivate,
    PolyaSecAgg,
    SkellamSecAgg,
)
from privbandit.protocol.primitives.noise import discrete_laplace_pmf
from tests.stats import P_MIN, chi_square_pvalue

T = 10**6


# The worked values of spec §4 (computed there from the theorems with p = 1/T, T = 10⁶).
@pytest.mark.parametrize(
    "mech, n, g, tau, m, bits",
    [
        (PolyaSecAgg(0.1, 1 / T), 2, 1, 146, 295, 9),
        (PolyaSecAgg(0.1, 1 / T), 1024, 4, 581, 5_259, 13),
        (PolyaSecAgg(0.1, 1 / T), 262_144, 52, 7_545, 13_646_579, 24),
        (PolyaSecAgg(1.0, 1 / T), 2, 2, 30, 65, 7),
        (PolyaSecAgg(1.0, 1 / T), 1024, 32, 465, 33_699, 16),
        (PolyaSecAgg(1.0, 1 / T), 262_144, 512, 7_429, 134_232_587, 28),
        (SkellamSecAgg(0.1, 1 / T, s=10), 1024, 32, 2_459, 37_687, 16),
        (SkellamSecAgg(1.0, 1 / T, s=10), 2, 15, 135, 301, 9),
        (SkellamSecAgg(1.0, 1 / T, s=10), 262_144, 5_120, 39_025, 1_342_255_331, 31),
        (SkellamSecAgg(1.0, 1 / T, s=100), 262_144, 51_200, 390_065, 13_422_552_931, 34),
    ],
)
def test_parameter_rules_match_the_worked_values(mech, n, g, tau, m, bits):
    q = mech.params(n)
    assert (q.n, q.g, q.tau, q.m, q.bits) == (n, g, tau, m, bits)


def test_other_rules_by_hand():
    eps, p, n = 0.5, 0.1, 100
    L = math.log(2 / p)
    q = DiscreteGaussianSecAgg(eps, p, s=10).params(n)
    assert q.g == math.ceil(10 * eps * 10) and q.tau == math.ceil(q.g / eps * math.sqrt(2 * L)) and q.h == 0
    q = LocalDiscreteLaplace(eps, p, c=2).params(n)
    assert q.g == 5 and q.tau == math.ceil(2 * 5 / eps * max(math.sqrt(2 * n * L), 2 * L))
    q = LocalDiscreteLaplace(eps, p, c=2).params(2)  # the second branch of Lemma 5 binds
    assert q.tau == math.ceil(2 * q.g / eps * 2 * L)
    q = SkellamSecAgg(eps, p, s=10, tau_rule="log").params(n)
    assert q.tau == math.ceil(2 * q.g / eps * L + math.sqrt(2) * L)
    assert CentralDiscreteLaplace(eps, p).params(n) == PolyaSecAgg(eps, p).params(n)
    assert (PolyaSecAgg(eps, p).params(n).sigma, PolyaSecAgg(eps, p).params(n).h) == (math.sqrt(2) / eps, 1 / eps)


def _rounds(mech, n, rounds, seed, x=0.3):
    """Run `rounds` independent cohorts through R → S → A; returns the decoded integer sums minus
    the users' Σx̂, i.e. the noise the analyzer's estimate carries, in encoded units."""
    rng = np.random.default_rng(seed)
    q = mech.params(n)
    out = np.empty(rounds, dtype=np.int64)
    for i in range(rounds):
        u = mech.randomize(np.full(n, x), q, rng)
        est = mech.analyze(mech.aggregate(u.messages, q), q, rng)
        out[i] = round(est.reward_sum * q.g) - u.encoded_sum
    return q, out


@pytest.mark.parametrize("mech", [PolyaSecAgg(0.5, 1e-3), CentralDiscreteLaplace(0.5, 1e-3)])
def test_decoded_noise_is_discrete_laplace_g_over_eps(mech):
    q, noise = _rounds(mech, n=16, rounds=20_000, seed=1)
    assert chi_square_pvalue(noise, lambda k: discrete_laplace_pmf(k, q.g / 0.5)) > P_MIN


def test_central_model_users_send_no_noise():
    mech = CentralDiscreteLaplace(0.5, 0.1)
    q = mech.params(64)
    u = mech.randomize(np.full(64, 0.4), q, np.random.default_rng(0))
    assert u.noise_sum == 0 and int(u.messages.sum()) == u.encoded_sum


def test_local_model_noise_is_per_message():
    mech = LocalDiscreteLaplace(1.0, 0.1)
    q = mech.params(400)
    rng = np.random.default_rng(2)
    x = np.full(50_000, 0.25)
    u = mech.randomize(x, q, rng)
    # Each message alone is x̂ + Lap_Z(g/ε) mod m; recover the per-user noise centred in Z_m.
    eta = (u.messages - q.g * 0.25 + q.m // 2) % q.m - q.m // 2  # x·g is an integer here (g = 20)
    assert chi_square_pvalue(eta.astype(np.int64), lambda k: discrete_laplace_pmf(k, q.g / 1.0)) > P_MIN


def test_dp_se_noise_is_laplace_one_over_eps():
    mech = CentralLaplace(0.7)
    q = mech.params(10)
    rng = np.random.default_rng(4)
    noise = np.array([mech.analyze(3.0, q, rng).reward_sum - 3.0 for _ in range(20_000)])
    assert stats.kstest(noise, stats.laplace(scale=1 / 0.7).cdf).pvalue > P_MIN


def test_non_private_release_is_the_exact_sum():
    mech = NonPrivate()
    x = np.random.default_rng(0).random(1000)
    q = mech.params(1000)
    u = mech.randomize(x, q, np.random.default_rng(1))
    assert mech.analyze(mech.aggregate(u.messages, q), q, None).reward_sum == pytest.approx(x.sum())


@pytest.mark.parametrize(
    "mech",
    [PolyaSecAgg(0.5, 0.1), SkellamSecAgg(0.5, 0.1, s=10), DiscreteGaussianSecAgg(0.5, 0.1, s=2),
     CentralDiscreteLaplace(0.5, 0.1), LocalDiscreteLaplace(0.5, 0.1)],
    ids=lambda m: m.key,
)
def test_wraparound_failures_and_assumption_1_hold_at_rate_p(mech):
    """τ bounds |Ση| with probability ≥ 1 − p, and the decoded sum's error obeys Assumption 1,
    |R − Σx| ≤ σ·sqrt(log(2/p)) + h·log(2/p), with probability ≥ 1 − 2p (Lemma 2), here p = 0.1."""
    # The exact discrete-Gaussian sampler costs ~8 ms per small batch: fewer rounds for it.
    n, rounds, p = 64, (800 if mech.key == "dist-cdp" else 3000), 0.1
    rng = np.random.default_rng(9)
    q = mech.params(n)
    bound = q.sigma * math.sqrt(math.log(2 / p)) + q.h * math.log(2 / p)
    fails = exceed = 0
    for _ in range(rounds):
        x = rng.random(n)
        u = mech.randomize(x, q, rng)
        est = mech.analyze(mech.aggregate(u.messages, q), q, rng)
        eta = u.noise_sum + round(est.central_noise * q.g)
        fails += abs(eta) > q.tau
        exceed += abs(est.reward_sum - x.sum()) > bound
        if abs(eta) <= q.tau:  # exact decode whenever the noise is within τ
            assert round(est.reward_sum * q.g) == u.encoded_sum + eta
    # Binomial(rounds, p) upper 5-sigma slack: the rates must not exceed p (resp. 2p) beyond it.
    assert fails <= rounds * p + 5 * math.sqrt(rounds * p)
    assert exceed <= rounds * 2 * p + 5 * math.sqrt(rounds * 2 * p)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: PolyaSecAgg(0.0, 0.1), "epsilon"),
        (lambda: PolyaSecAgg(float("inf"), 0.1), "epsilon"),
        (lambda: PolyaSecAgg(1.0, 0.0), "confidence p"),
        (lambda: SkellamSecAgg(1.0, 0.1, s=0.5), "scale s"),
        (lambda: LocalDiscreteLaplace(1.0, 0.1, c=0), "constant c"),
        (lambda: PolyaSecAgg(1.0, 0.1).params(0), "cohort size"),
    ],
)
def test_bad_parameters_are_named(build, match):
    with pytest.raises(ValueError, match=match):
        build()
