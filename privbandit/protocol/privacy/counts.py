"""The exact privacy of counts of shuffled bits: the accountant of the ``exact`` presets.

What a shuffler of one-bit messages hands the analyzer is, per label, the number of ones among the
bits it received (the shuffled multiset of labelled bits is determined by those counts): the users'
data bits plus the noise bits they added. With every user adding ``b`` fair noise bits, a label's
count is its data plus Bin(N, ½), N = n·b. Two neighbouring inputs differ in one user, who moves
each of the D labels' data by at most ``shift`` ones (P_Vec's g, a bit summation's 1).

Dominance (why one pair per label is the worst case, all labels at once):

- Bin(N, ½) is log-concave, so the pair (X, X + c) is less distinguishable than (X, X + g) for every
  0 ≤ c ≤ g: its optimal tests are thresholds, and at each threshold the larger shift's type II
  error is smaller (its trade-off curve lies below, which is Blackwell dominance);
- Bin(N, ½) is symmetric about N/2, so the pair (X, X − c) is (X, X + c) reflected;
- the labels' noise is independent, so the product of dominated pairs is dominated by the product
  of the dominating ones; the changed user's own randomized rounding mixes such pairs (joint
  convexity of the hockey-stick divergence).

So the D-fold composition of (Bin(N, ½), Bin(N, ½) + shift) is an upper bound on the privacy profile
of any neighbouring pair, and it is computed, not bounded: dp-accounting's privacy-loss distribution
from the two PMFs (pessimistic discretization, so an upper bound), composed D times. Each PMF is cut
to N/2 ± a with 2e^{−2a²/N} ≤ :data:`TRUNCATION` (Hoeffding); the mass cut, D·TRUNCATION in all, is
added to δ. :func:`binomial_count_delta` checks the computation against the hockey-stick divergence
summed term by term (tests/protocol/test_counts.py).

Fair noise bits are what the ``exact`` presets draw (popcounts of uniform 64-bit words, exactly
Bin(b, ½)); :func:`fewest_noise_bits` calibrates b.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np

TRUNCATION = 1e-40  # the PMF mass cut per label, added to δ
DISCRETIZATION = 1e-4  # privacy-loss bucket width: its pessimistic rounding adds ≲ 10⁻⁴ to ε
BASIS = ("exact privacy of the released counts: per label Bin(N, ½) noise bits plus data shifted by at most g, D labels "
         "composed by dp-accounting's privacy-loss distributions from the PMFs (pessimistic), truncation mass added "
         "to δ (privbandit.protocol.privacy.counts)")


@lru_cache(maxsize=512)
def _count_pld(trials: int, shift: int, labels: int):
    """dp-accounting's privacy-loss distribution of ``labels`` counts Bin(trials, ½) against their
    shift by ``shift`` (the dominating pair; module docstring)."""
    from dp_accounting.pld import privacy_loss_distribution as pld
    from scipy.stats import binom

    if trials < 1 or shift < 1 or labels < 1:
        raise ValueError(f"a count needs trials ≥ 1, shift ≥ 1 and labels ≥ 1 (got {trials}, {shift}, {labels})")
    a = math.ceil(math.sqrt(trials / 2 * math.log(2 / TRUNCATION)))
    x = np.arange(max(0, trials // 2 - a), min(trials + shift, trials // 2 + a + shift) + 1)
    lower, upper = binom.logpmf(x, trials, 0.5), binom.logpmf(x - shift, trials, 0.5)
    with warnings.catch_warnings():  # scipy's logsumexp warns on the −inf of empty buckets inside dp-accounting
        warnings.simplefilter("ignore", RuntimeWarning)
        one = pld.from_two_probability_mass_functions(
            {int(k): float(v) for k, v in zip(x, lower) if v > -np.inf},
            {int(k): float(v) for k, v in zip(x, upper) if v > -np.inf},
            pessimistic_estimate=True, value_discretization_interval=DISCRETIZATION, symmetric=True)
        return one if labels == 1 else one.self_compose(labels)


def count_delta(trials: int, shift: int, labels: int, epsilon: float) -> float:
    """δ(ε) of ``labels`` shuffled counts with Bin(trials, ½) noise each, data shifted by ≤ ``shift``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(_count_pld(trials, shift, labels).get_delta_for_epsilon(epsilon)) + labels * TRUNCATION


def count_epsilon(trials: int, shift: int, labels: int, delta: float) -> float:
    """ε at δ of the same (inf if δ is below what the truncation alone costs)."""
    rest = delta - labels * TRUNCATION
    if rest <= 0:
        return math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(_count_pld(trials, shift, labels).get_epsilon_for_delta(rest))


@lru_cache(maxsize=512)
def fewest_noise_bits(users: int, shift: int, labels: int, epsilon: float, delta: float, most: int = 2**24) -> int:
    """The fewest fair noise bits b per user and label for which ``users`` users' counts are
    (ε, δ)-DP (:func:`count_delta` of N = users·b trials); ValueError if more than ``most`` are needed.
    δ(ε) falls as N grows, so halving or doubling from a Gaussian guess, then a bisection, finds it."""
    if users < 1 or not epsilon > 0 or not 0 < delta < 1:
        raise ValueError(f"calibration needs users ≥ 1, ε > 0 and δ in (0, 1) (got {users}, {epsilon}, {delta})")

    def ok(b: int) -> bool:
        return count_delta(users * b, shift, labels, epsilon) <= delta

    # Start from the Gaussian mechanism's answer (sd √N/2 per label, ℓ2 shift·√D, analytic curve):
    # the binomial count needs about as many, so the doubling and the bisection take a few steps.
    from privbandit.protocol.privacy.amplification import gaussian_delta

    sens = shift * math.sqrt(labels)
    sigma = sens / 2
    while gaussian_delta(epsilon, sens, sigma) > delta:
        sigma *= 1.25
    b = max(1, math.ceil((2 * sigma) ** 2 / users / 2))
    if ok(b):  # halve while still enough: then ok(b) and not ok(b // 2)
        while b > 1 and ok(b // 2):
            b //= 2
    else:  # double until enough: then ok(b) and not ok(b // 2)
        while not ok(b):
            b *= 2
            if b > most:
                raise ValueError(f"{users} users' counts (shift {shift}, {labels} labels) need more than {most} fair "
                                 f"noise bits each for (ε, δ) = ({epsilon}, {delta})")
    lo, hi = b // 2 + 1, b
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return hi


def binomial_count_delta(trials: int, shift: int, epsilon: float) -> float:
    """The same δ(ε) for one label summed term by term over the whole support (no discretization,
    no truncation): the reference the tests hold :func:`count_delta` to, at small sizes."""
    from scipy.stats import binom

    x = np.arange(trials + shift + 1)
    p, q = binom.pmf(x, trials, 0.5), binom.pmf(x - shift, trials, 0.5)
    return float(max(np.clip(p - math.exp(epsilon) * q, 0, None).sum(),
                     np.clip(q - math.exp(epsilon) * p, 0, None).sum()))
