"""What the double-precision samplers guarantee: how far numpy's geometric (and the exponentials behind
it) is from the law it stands for, computed from the code numpy runs.

:func:`~.polya.sample_discrete_laplace` draws Lap_ℤ(b) as G₁ − G₂, two of numpy's
``Generator.geometric(p)``, p = 1 − e^{−1/b} (``numpy/random/src/distributions/distributions.c``;
``tests/protocol/test_sampler_bounds.py`` holds the installed numpy to both branches, bit for bit):

- p < 1/3, **inversion**: G = ⌈−E / log1p(−p)⌉ with E numpy's ziggurat exponential
  (``random_standard_exponential``). E is a lattice of doubles: below the ziggurat's base
  r = 7.69711747013104972 it is ri·w_i (ri a 53-bit integer, 256 layers, each point of probability
  2⁻⁶¹), and beyond r it is r − log1p(−U) with U = j·2⁻⁵³, j < 2⁵³. So E never exceeds
  :data:`EXPONENTIAL_MAX` = r + 53·ln 2 = 44.434 and G never exceeds ⌈44.434/λ⌉, λ = −log1p(−p)
  (≈ 44.4 scales): :func:`geometric_cap`.
- p ≥ 1/3, **search**: the smallest X with U ≤ p + pq + … + pq^{X−1}, the partial sums accumulated
  in doubles and U = j·2⁻⁵³ (``random_geometric_search``): its law is a finite set of multiples of
  2⁻⁵³, computed exactly here (:func:`geometric_tv_bound`). Where the double sum stops growing below
  1 − 2⁻⁵³, the few U above it never end the loop: numpy hangs, with the probability
  :func:`geometric_hang` gives (2⁻⁵² at b = 2, 2⁻⁵¹ at b = 2.4, 0 at b = 1; from replaying numpy's
  loop in doubles, not observed). It turns on p's last bit: at b = 2.4, one ulp below the correctly
  rounded p (what some machines' libm expm1 gives) it is 2⁻⁵².

**Privacy consequence.** The ideal Lap_ℤ makes the grid releases exactly ε-DP. The sampler's support
is capped (|L| ≤ :func:`discrete_laplace_cap`), so for neighbours k grid steps apart an output
beyond the other's cap has probability > 0 under one and 0 under the other: *no* pure ε holds.
What holds: if the sampler's law is within total variation τ of Lap_ℤ(b), a mechanism that is ε-DP
with the ideal noise is (ε, (1 + e^ε)·τ)-DP with the sampler's (P_s(A) ≤ P(A) + τ ≤ e^ε P'(A) + τ ≤
e^ε (P'_s(A) + τ) + τ), and τ(G₁ − G₂) ≤ 2·τ(G). :func:`discrete_laplace_tv_bound` bounds τ:

- search branch: τ(G) computed exactly (rationals) from the double partial sums;
- inversion branch: τ(G) ≤ (n_r·2⁻⁵¹ + n_t·2⁻⁵⁹ + 2⁻⁴⁰ + e^{−44.434}) / 0.98, where n_r =
  ⌈r/λ⌉ + 1 values of G are fed by the 256 layers below r (each layer's lattice is off an interval's
  length by at most 2 points from the monotone acceptance and 2 from rounding at its ends: 256·4
  points of 2⁻⁶¹), n_t = ⌈(44.434 − r)/λ⌉ + 1 by the tail beyond r (4 points of at most 2⁻⁸·2⁻⁵³
  each), 2⁻⁴⁰ a relative allowance for the rounding of the ziggurat's tables and wedge test (taken
  on trust, not derived: the tables are not public API), and 0.98 the ziggurat's acceptance per
  attempt (numpy's comment: 98.9 % on the first try).

The bound grows with the scale b (λ ≈ 1/b): at b = 10⁶ grid steps (the grid Laplace at ε ≈ 1)
τ(L) ≤ 7.5·10⁻⁹. It is an upper bound, not an estimate: the lattice's errors need not line up.
The fully exact alternative (:mod:`.discrete_gaussian`'s rational coins, CKS Alg. 2) drew 1.2·10⁵
Lap_ℤ(2²⁰ + 1) per second against 1.6·10⁷ for numpy's geometrics (``benchmarks/bench_samplers.py
--only Laplace``, load 14.6): 128× slower, which is why the grid releases keep numpy's.
"""

from __future__ import annotations

import math
from fractions import Fraction

# numpy's ziggurat_exp_r: where the exponential's ziggurat hands over to its tail
# (numpy/random/src/distributions/ziggurat_constants.h).
ZIGGURAT_EXP_R = 7.69711747013104972
# The largest double numpy's standard exponential returns: the tail r − log1p(−U) at U = 1 − 2⁻⁵³.
EXPONENTIAL_MAX = ZIGGURAT_EXP_R - math.log1p(-(1.0 - 2.0**-53))
_SEARCH_P = 0.333333333333333333333333  # numpy's branch point between search and inversion
_LAYER_POINTS = 256 * 4 * 2.0**-61  # per value of G below r: 256 layers, 4 lattice points each
_TAIL_POINTS = 4 * 2.0**-8 * 2.0**-53  # per value of G beyond r
_TABLES = 2.0**-40  # relative allowance for the ziggurat tables' and wedge test's rounding
_ACCEPT = 0.98  # the ziggurat's acceptance per attempt is above this (98.9 % on the rectangle alone)


def _check_p(p: float) -> float:
    if not (isinstance(p, float) and 0.0 < p < 1.0):
        raise ValueError(f"geometric p={p!r} must be a float in (0, 1)")
    return p


def _search_sums(p: float) -> list[float]:
    """numpy's partial sums p, p + pq, … in doubles, up to the first that no U (at most 1 − 2⁻⁵³)
    exceeds, or the last that still grows: beyond it the sum is stuck, and a U above it would keep
    numpy's loop running for ever (:func:`geometric_hang`)."""
    u_max, q = 1.0 - 2.0**-53, 1.0 - p
    sums, s, prod = [p], p, p
    while u_max > s:
        prod *= q
        if s + prod == s:  # prod only shrinks: the sum never grows again
            break
        s += prod
        sums.append(s)
    return sums


def geometric_hang(p: float) -> float:
    """The probability that ``Generator.geometric(p)`` never returns: for p ≥ 1/3 the uniforms above
    the search's stuck partial sum (0 where the sum reaches 1 − 2⁻⁵³, and for the inversion)."""
    p = _check_p(p)
    if p < _SEARCH_P:
        return 0.0
    top = Fraction(_search_sums(p)[-1])
    return float(max(Fraction(0), 1 - Fraction(math.floor(top * 2**53) + 1, 2**53)))


def geometric_cap(p: float) -> int:
    """The largest value ``Generator.geometric(p)`` can return."""
    p = _check_p(p)
    if p >= _SEARCH_P:
        return len(_search_sums(p))
    return math.ceil(-EXPONENTIAL_MAX / math.log1p(-p))


def geometric_tv_bound(p: float) -> float:
    """An upper bound on the total variation between ``Generator.geometric(p)`` and Geometric(p)
    on {1, 2, …}: exact for p ≥ 1/3, the lattice bound of the module docstring below."""
    p = _check_p(p)
    if p >= _SEARCH_P:
        # P_s(G ≤ g) = P(U ≤ s_g) = (⌊s_g·2⁵³⌋ + 1)/2⁵³, at most 1; ideal P(G ≤ g) = 1 − (1 − p)^g.
        scale, q = 2**53, 1 - Fraction(p)
        sampler = [min(Fraction(math.floor(Fraction(s) * scale) + 1, scale), Fraction(1))
                   for s in _search_sums(p)]
        ideal = [1 - q**g for g in range(1, len(sampler) + 1)]
        total, prev_s, prev_i = Fraction(0), Fraction(0), Fraction(0)
        for s, i in zip(sampler, ideal):
            total += abs((s - prev_s) - (i - prev_i))
            prev_s, prev_i = s, i
        # and the ideal mass beyond the cap, against the sampler's mass that never returns
        return float((total + abs((1 - ideal[-1]) - (1 - sampler[-1]))) / 2)
    return _exponential_interval_bound(-math.log1p(-p))


def _exponential_interval_bound(width: float) -> float:
    """The lattice bound of the module docstring for G = ⌈E/width⌉ (or ⌊E/width⌋): the summed
    |P_s − P| over all values (twice the total variation, so a bound on it with room to spare)."""
    below = math.ceil(ZIGGURAT_EXP_R / width) + 1
    beyond = math.ceil((EXPONENTIAL_MAX - ZIGGURAT_EXP_R) / width) + 1
    return (below * _LAYER_POINTS + beyond * _TAIL_POINTS + _TABLES + math.exp(-EXPONENTIAL_MAX)) / _ACCEPT


def discrete_gaussian_fast_tv_bound(sigma: float) -> float:
    """An upper bound on the total variation between
    :func:`~.grid_gaussian.sample_discrete_gaussian_fast` (σ in integer steps) and N_ℤ(0, σ²).

    CKS Algorithm 3 with t = ⌊σ⌋ + 1: the proposal ⌊tE₁⌋ − ⌊tE₂⌋ (numba's exponentials, numpy's
    ziggurat to the bit) is off Lap_ℤ(t) by at most 2ℓ summed over values, ℓ the lattice bound of one
    geometric at interval width 1/t; each acceptance P(E′ > c) is off e^{−c} by at most
    α = (256·2 + 2)·2⁻⁶¹/0.98 + 2⁻⁴⁰ (one boundary). With Z the ideal acceptance rate, the output is
    within total variation (2ℓ + α)/Z, and
    Z ≥ tanh(1/(2t))·e^{−σ²/(2t²)}·(σ√(2π) − 1) (the proposal's and the coin's exponents add to
    −y²/(2σ²) − σ²/(2t²), and a sum of a unimodal function over ℤ is at least its integral less its
    maximum)."""
    if not (math.isfinite(sigma) and sigma >= 1):
        raise ValueError(f"discrete Gaussian σ={sigma} (in grid steps) must be finite and ≥ 1")
    t = math.floor(sigma) + 1.0
    ell = _exponential_interval_bound(1.0 / t)
    alpha = (256 * 2 + 2) * 2.0**-61 / _ACCEPT + _TABLES
    z = math.tanh(1 / (2 * t)) * math.exp(-sigma**2 / (2 * t**2)) * (sigma * math.sqrt(2 * math.pi) - 1)
    return min(1.0, (2 * ell + alpha) / z)


def _laplace_p(b: float) -> float:
    if not (isinstance(b, (int, float)) and math.isfinite(b) and b > 0):
        raise ValueError(f"discrete Laplace scale b={b!r} must be finite and > 0")
    return float(-math.expm1(-1.0 / b))


def discrete_laplace_cap(b: float) -> int:
    """The largest |L| ``sample_discrete_laplace(b, …)`` can return (in integer steps): the largest
    geometric less the smallest, which is 1 for the search and 0 for the inversion (E = 0 exactly,
    probability 2⁻⁵³, gives ⌈0⌉ = 0)."""
    p = _laplace_p(b)
    return geometric_cap(p) - (1 if p >= _SEARCH_P else 0)


def discrete_laplace_tv_bound(b: float) -> float:
    """An upper bound on the total variation between ``sample_discrete_laplace(b, …)``'s law and
    Lap_ℤ(b): twice the geometric's (the two draws are independent)."""
    return min(1.0, 2 * geometric_tv_bound(_laplace_p(b)))


def approx_dp_delta(epsilon: float, tv: float) -> float:
    """δ such that a release that is ε-DP with the ideal noise is (ε, δ)-DP with noise within total
    variation ``tv`` of it: (1 + e^ε)·tv (module docstring)."""
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon={epsilon} must be finite and ≥ 0")
    if not 0 <= tv <= 1:
        raise ValueError(f"total variation {tv} must lie in [0, 1]")
    return min(1.0, (1 + math.exp(epsilon)) * tv)
