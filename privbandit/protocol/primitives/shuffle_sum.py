"""Summation through a shuffler: the split-and-mix protocol, the one primitive every family that
sums through a shuffler uses.

The protocol (Ishai, Kushilevitz, Ostrovsky & Sahai, "Cryptography from Anonymity", FOCS 2006):

1. each of n users splits her value y ∈ Z_m into ``s`` additive shares, s − 1 of them uniform in
   Z_m and the last completing y (:func:`split`);
2. the shuffler releases the multiset of all n·s shares, uniformly permuted, with no sender and no
   order (a ``shuffle`` round with ``messages = True``: :class:`~privbandit.protocol.spine.events.Round`);
3. the analyzer adds them up mod m (:func:`mixed_sum`): (Σ y) mod m, exactly what a secure
   aggregator releases, so the analyzer's decode is the aggregator's.

What the analyzer sees beyond the sum is bounded by :func:`closeness`: for every input y, the
statistical distance between the multiset and a simulation from the sum alone (ns − 1 uniform
values and one completing the sum) is at most η(n, s, m). Balle, Bell, Gascón & Nissim ("Improved
summation from shuffling", 2019; CCS 2020) and Ghazi, Manurangsi, Pagh & Velingker (EUROCRYPT 2020)
proved that s = O(1 + (σ + log m)/log n) shares give η ≤ 2^−σ. We do not reuse their constants; η
here is our own bound, proven in docs/shuffle-summation.md (Lemma 1) and checked against the exact
distance computed by enumeration at small sizes (tests/protocol/test_shuffle_sum.py):

    η(n, s, m) ≤ ½·√(E[m^{C−1}] − 1),

C the number of connected components of a uniformly random s-regular bipartite configuration
multigraph on n + n vertices; :func:`_log_moment_bound` bounds E[m^{C−1}] − 1 from above by a sum over
collections of closed vertex sets, evaluated term by term in log space.

Privacy (Balle, Bell, Gascón & Nissim 2019, "Differentially private summation with multi-message
shuffling": split-and-mix of Pólya shares simulates the discrete Laplace mechanism): if the secure
sum is (ε, δ₀)-DP, the shuffled shares are (ε, δ₀ + (1 + e^ε)η)-DP
(:func:`~privbandit.protocol.privacy.events.near_secure_sum`). Not pure: a view made of n·s equal
shares is impossible for some inputs with the sum it shows and possible for others, so the log
likelihood ratio of two neighbouring inputs is unbounded (docs/shuffle-summation.md, "Why not pure
ε"); pure ε through a shuffler needs Cheu & Yan's relaxed secure aggregation (TPDP 2022), whose
shuffle protocol sends O_ε(n^{2.5}) messages per user (Ghazi, Kumar & Manurangsi 2023).

Settings the bound does not cover (one user; more than :data:`MAX_SHARES` shares needed) are refused
by :func:`shares_for` with :class:`ShuffleSumError`, naming them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from privbandit.protocol.primitives.encoding import check_modulus, modular_sum

# More shares than this per user is a setting we refuse rather than send: at n ≥ 2 users and any
# m ≤ 2^62, 64 shares reach η below 10⁻³⁰ from n = 16 on.
MAX_SHARES = 64
# The bound's sum over A (the rows in closed sets) is evaluated term by term for its first FIRST_TERMS
# terms, doubling up to EXACT_USERS while the geometric tail bounding the rest is not negligible
# (docs/shuffle-summation.md, Lemma 2).
EXACT_USERS = 2048
FIRST_TERMS = 64
# Floating point: each log term is accurate to ~10⁻¹², so the bound is widened by this factor.
SAFETY = 1.0 + 1e-9


class ShuffleSumError(ValueError):
    """A split-and-mix setting the closeness bound does not cover."""


def split(values: np.ndarray, shares: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Each value's ``shares`` additive shares mod m: ``values`` (..., k) in Z_m → (..., k, shares).

    The first s − 1 are uniform in Z_m (numpy's ``integers``, exactly uniform: Lemire's rejection),
    the last is (y − Σ others) mod m, so the shares are s − 1 independent uniforms and their sum is y:
    any s − 1 of them are independent of y."""
    m = check_modulus(m)
    if not 2 <= shares <= MAX_SHARES:
        raise ShuffleSumError(f"shares = {shares} must lie in [2, {MAX_SHARES}]")
    v = np.asarray(values, dtype=np.int64)
    if v.size and (v.min() < 0 or v.max() >= m):
        raise ShuffleSumError(f"values to split must be residues in [0, {m})")
    out = np.empty(v.shape + (shares,), np.int64)
    out[..., :-1] = rng.integers(0, m, size=v.shape + (shares - 1,), dtype=np.int64)
    last = v.copy()
    for j in range(shares - 1):  # one subtraction per share, reduced each time: no int64 overflow
        last = np.mod(last - out[..., j], m)
    out[..., -1] = last
    return out


def mixed_sum(messages: np.ndarray, m: int) -> np.ndarray:
    """The analyzer's side: the sum mod m of each run's shuffled shares, ``messages`` (R, N) or
    (R, N, 1) → (R,) int64."""
    v = np.asarray(messages, dtype=np.int64)
    v = v.reshape(v.shape[0], -1)
    return np.array([modular_sum(row, m) for row in v], dtype=np.int64)


@lru_cache(maxsize=4096)
def closeness(n: int, shares: int, m: int) -> float:
    """η(n, s, m): an upper bound, for every input, on the statistical distance between the shuffled
    multiset of n users' s shares mod m and its simulation from their sum (Lemma 1 of
    docs/shuffle-summation.md). 1 where nothing is hidden (n < 2)."""
    check_modulus(m)
    if n < 2 or shares < 2:
        return 1.0
    log_b = _log_moment_bound(n, shares, m)
    if log_b >= math.log(4):  # the bound says nothing below distance 1
        return 1.0
    return float(min(1.0, 0.5 * math.exp(0.5 * log_b) * SAFETY))


def _log_moment_bound(n: int, s: int, q: int) -> float:
    """log of an upper bound on E[q^{C−1}] − 1 (Lemma 2 of docs/shuffle-summation.md):

        Σ_{A=1}^{n} P(A)·[x^A](exp((q−1)·G(x)) − 1),
        P(A) = (n!/(n−A)!)²·(ns − sA)!/(ns)!,   G(x) = Σ_{a=1}^{⌊n/2⌋} (as)!/(a!)²·x^a,

    a sum over collections of closed sets (a source rows whose s·a slots the random matching sends
    onto the slots of a target rows), each of at most n/2 rows. The coefficients come from
    exp's recurrence A·f_A = Σ_k k·g_k·f_{A−k}, in logs. The first A0 terms are summed and the rest
    is bounded by 2^{−A0}·(exp((q−1)K(ρ)) − 1), with ρ = 2(e/n)^{s−2} and K(x) = Σ_{a ≤ n/2}
    (a!)^{s−2} x^a; A0 doubles from :data:`FIRST_TERMS` until that tail is below a thousandth of the
    head, all n terms are summed, or A0 reaches :data:`EXACT_USERS` (then head plus tail: still an
    upper bound, only a looser one)."""
    half = n // 2
    log_q1 = math.log(q - 1)
    top = min(n, FIRST_TERMS)
    while True:
        head = _log_head(n, s, log_q1, half, top)
        if top >= n:
            return head
        tail = _log_tail(n, s, log_q1, half, top)
        if tail <= head + math.log(1e-3) or top >= EXACT_USERS:
            return float(np.logaddexp(head, tail))
        top = min(n, 2 * top)


def _log_head(n: int, s: int, log_q1: float, half: int, top: int) -> float:
    from scipy.special import gammaln, logsumexp  # here: 0.2 CPU-s to import, for split-and-mix runs only

    a = np.arange(1, min(half, top) + 1, dtype=np.float64)
    log_g = log_q1 + gammaln(a * s + 1) - 2 * gammaln(a + 1)  # (q − 1)·(as)!/(a!)²
    log_k = np.log(a)
    log_f = np.full(top + 1, -np.inf)
    log_f[0] = 0.0
    for A in range(1, top + 1):
        k = min(A, log_g.size)
        log_f[A] = logsumexp(log_k[:k] + log_g[:k] + log_f[A - 1::-1][:k]) - math.log(A)
    A = np.arange(1, top + 1, dtype=np.float64)
    log_p = (2 * (gammaln(n + 1) - gammaln(n - A + 1)) + gammaln(n * s - s * A + 1) - gammaln(n * s + 1.0))
    return float(logsumexp(log_p + log_f[1:]))


def _log_tail(n: int, s: int, log_q1: float, half: int, top: int) -> float:
    """log of 2^{−top}·(exp((q−1)·K(ρ)) − 1), ρ = 2(e/n)^{s−2}: the terms A > top (Lemma 2)."""
    from scipy.special import gammaln, logsumexp

    log_rho = math.log(2) + (s - 2) * (1 - math.log(n))
    exact = min(half, 100_000)
    a = np.arange(1, exact + 1, dtype=np.float64)
    terms = (s - 2) * gammaln(a + 1) + a * log_rho
    log_k = logsumexp(terms)
    if half > exact:  # the log-terms are convex in a: on [exact + 1, half] none exceeds the endpoints
        ends = [(s - 2) * gammaln(x + 1) + x * log_rho for x in (exact + 1.0, float(half))]
        log_k = np.logaddexp(log_k, math.log(half - exact) + max(ends))
    lx = float(log_q1 + log_k)
    if lx < -30:  # expm1(x) ≤ x·e^x
        log_expm1 = lx + math.exp(lx)
    elif lx > math.log(700):  # expm1(x) < e^x
        log_expm1 = math.exp(min(lx, 700.0)) if lx < 700 else math.inf
    else:
        log_expm1 = math.log(math.expm1(math.exp(lx)))
    return -top * math.log(2) + log_expm1


@lru_cache(maxsize=4096)
def shares_for(n: int, m: int, eta: float) -> int:
    """The fewest shares per user (≥ 2) with :func:`closeness` ≤ η for n users mod m; refuses, by
    name, a setting no s ≤ :data:`MAX_SHARES` covers. η decreases in s (each closed set's
    probability does), so a bisection finds it."""
    check_modulus(m)
    if n < 2:
        raise ShuffleSumError(f"split-and-mix needs at least 2 users to mix; a round of {n} hides nothing")
    if not 0 < eta < 1:
        raise ShuffleSumError(f"target closeness η = {eta} must lie in (0, 1)")
    if closeness(n, MAX_SHARES, m) > eta:
        raise ShuffleSumError(f"split-and-mix of n = {n} users mod m = {m} cannot reach closeness η = {eta:.3g} "
                              f"with at most {MAX_SHARES} shares per user (η ≤ {closeness(n, MAX_SHARES, m):.3g} "
                              f"there): use larger rounds or a larger δ")
    lo, hi = 2, MAX_SHARES
    while lo < hi:
        mid = (lo + hi) // 2
        if closeness(n, mid, m) <= eta:
            hi = mid
        else:
            lo = mid + 1
    return lo
