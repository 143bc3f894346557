"""Exact discrete Gaussian sampling, vectorized over a batch.

Implements Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for
Differential Privacy", Algorithms 1–3: Bernoulli(exp(-γ)) (Alg. 1), the
discrete Laplace proposal (Alg. 2, with s = 1 and integer scale t) and
rejection sampling of N_Z(0, σ²) from it (Alg. 3).

Exactness: every coin is Bernoulli(N/D) with N/D rational, held as Python
ints.  A batch of such coins is drawn by comparing uniform uint64 words U
with the 64-bit prefix P = ⌊(N/D)·2^64⌋: U < P gives 1 and U > P gives 0;
U == P (probability 2^-64) is resolved in scalar Python with further 64-bit
words against the exact remainder, so P[1] = N/D with no rounding anywhere.
No floating point, truncated support or lookup table touches the samples.
The discrete Laplace proposal is Algorithm 2 itself: U ~ Uniform{0..t-1} from
rng.integers, D ~ Bernoulli(exp(-U/t)) and V counted with Bernoulli(exp(-1))
coins, all built from the exact coins above.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

_WORD = 64
_FULL = 1 << _WORD
_MAX_SIGMA2 = 10**24  # σ <= 1e12 keeps every draw, and t·V, far inside int64


def _words(rng: np.random.Generator, size: int | None = None):
    # Not bit_generator.random_raw: MT19937 yields only 32 bits per raw draw.
    return rng.integers(0, _FULL, size=size, dtype=np.uint64)


def _bernoulli_residual(num: int, den: int, rng: np.random.Generator) -> bool:
    """Exact scalar Bernoulli(num/den), 0 <= num <= den, 64 bits at a time."""
    while True:
        scaled = num << _WORD
        prefix = scaled // den  # may equal 2^64 when num == den: then always 1
        u = int(_words(rng))
        if u != prefix:
            return u < prefix
        num = scaled - prefix * den


def _bernoulli(num: list[int], den: list[int], key: np.ndarray, rng) -> np.ndarray:
    """Bernoulli(num[k]/den[k]) for each k in `key`; probabilities must lie in [0, 1]."""
    prefix = [min((n << _WORD) // d, _FULL - 1) for n, d in zip(num, den)]
    threshold = np.array(prefix, dtype=np.uint64)[key]
    u = _words(rng, key.size)
    out = u < threshold
    for i in np.flatnonzero(u == threshold):  # probability 2^-64 per draw
        k = key[i]
        out[i] = _bernoulli_residual((num[k] << _WORD) - prefix[k] * den[k], den[k], rng)
    return out


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for non-negative ints, via bincount when cheap."""
    if values.size and values.max() < 4 * values.size + 1024:
        present = np.bincount(values) > 0
        return np.flatnonzero(present), (np.cumsum(present) - 1)[values]
    return np.unique(values, return_inverse=True)


def _bernoulli_exp_unit(num: list[int], den: list[int], key: np.ndarray, rng) -> np.ndarray:
    """Bernoulli(exp(-γ)), γ = num[k]/den[k] ∈ [0, 1], for each k in `key` (CKS Algorithm 1).

    K counts the coins A ~ Bernoulli(γ/K) up to the first 0; P[K odd] = exp(-γ).
    Every sample still running in round K shares that K, so one batch per round.
    """
    out = np.empty(key.size, dtype=bool)
    active = np.arange(key.size)
    k = 1
    while active.size:
        a = _bernoulli(num, [d * k for d in den], key[active], rng)
        out[active[~a]] = k % 2 == 1
        active = active[a]
        k += 1
    return out


def _exp_minus_one(n: int, rng) -> np.ndarray:
    return _bernoulli_exp_unit([1], [1], np.zeros(n, dtype=np.intp), rng)


def _bernoulli_exp(num: list[int], den: list[int], key: np.ndarray, rng) -> np.ndarray:
    """Bernoulli(exp(-num[k]/den[k])) for any γ >= 0: exp(-γ) = exp(-1)^⌊γ⌋ · exp(-(γ - ⌊γ⌋))."""
    whole = np.array([n // d for n, d in zip(num, den)], dtype=np.int64)[key]
    out = np.ones(key.size, dtype=bool)
    pending = np.flatnonzero(whole > 0)
    j = 1
    while pending.size:  # the j-th exp(-1) coin, for samples with ⌊γ⌋ >= j still alive
        ok = _exp_minus_one(pending.size, rng)
        out[pending[~ok]] = False
        pending = pending[ok & (whole[pending] > j)]
        j += 1
    alive = np.flatnonzero(out)
    out[alive] = _bernoulli_exp_unit([n % d for n, d in zip(num, den)], den, key[alive], rng)
    return out


def _discrete_laplace(t: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` draws with P[Y=y] ∝ exp(-|y|/t) (CKS Algorithm 2 with s = 1).

    U ~ Uniform{0..t-1} accepted w.p. exp(-U/t) exactly, V ~ Geometric counted
    by exact Bernoulli(exp(-1)) coins; X = U + tV, signed by a fair coin,
    rejecting (negative, 0) so that 0 is not double-counted.
    """
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        u = rng.integers(0, t, size=size - filled)
        distinct, inverse = _distinct(u)
        u = u[_bernoulli_exp_unit(distinct.tolist(), [t] * distinct.size, inverse, rng)]
        v = np.zeros(u.size, dtype=np.int64)
        active = np.arange(u.size)
        while active.size:
            active = active[_exp_minus_one(active.size, rng)]
            v[active] += 1
        if v.size and v.max() > (np.iinfo(np.int64).max - t) // t:  # only for σ ≳ 1e15
            raise OverflowError("a discrete Gaussian draw does not fit in int64")
        x = u + t * v
        negative = rng.integers(0, 2, size=x.size).astype(bool)
        y = np.where(negative, -x, x)[~(negative & (x == 0))]
        out[filled : filled + y.size] = y
        filled += y.size
    return out


def _as_fraction(sigma2) -> Fraction:
    if isinstance(sigma2, bool) or not isinstance(sigma2, numbers.Real):
        raise ValueError(f"sigma2 must be a finite real number in (0, 1e24], got {sigma2!r}")
    if isinstance(sigma2, numbers.Rational):
        value = Fraction(sigma2.numerator, sigma2.denominator)
    elif math.isfinite(float(sigma2)):
        value = Fraction(float(sigma2))  # exact: every finite float is a dyadic rational
    else:
        raise ValueError(f"sigma2 must be a finite real number in (0, 1e24], got {sigma2!r}")
    if not 0 < value <= _MAX_SIGMA2:
        raise ValueError(f"sigma2 must be a finite real number in (0, 1e24], got {sigma2!r}")
    return value


def sample_discrete_gaussian(sigma2: Fraction | int | float, size: int, rng: np.random.Generator) -> np.ndarray:
    """int64 array of `size` i.i.d. draws from N_Z(0, sigma2): P[X=x] ∝ exp(-x²/(2 sigma2)), x ∈ Z.

    Exact sampler of Canonne, Kamath & Steinke 2020, Algorithms 1–3; see the
    module docstring for how each rational coin is drawn exactly.  sigma2 must
    be finite and in (0, 1e24] (so draws fit int64); size a non-negative int.
    Cost per sample is O(1) numpy work plus Python work per *distinct* |Y|, so
    throughput drops once σ is comparable to `size` (≈1e5/s at σ² = 1e12).
    """
    value = _as_fraction(sigma2)
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise ValueError(f"size must be a non-negative integer, got {size!r}")
    a, b = value.numerator, value.denominator
    t = math.isqrt(a // b) + 1  # ⌊σ⌋ + 1, since ⌊√x⌋ = isqrt(⌊x⌋)
    out = np.empty(int(size), dtype=np.int64)
    filled = 0
    while filled < size:
        y = _discrete_laplace(t, int(size) - filled, rng)
        distinct, inverse = _distinct(np.abs(y))
        # γ = (|y| - σ²/t)² / (2σ²) = (|y|·b·t - a)² / (2·a·b·t²) with σ² = a/b.
        num = [(d * b * t - a) ** 2 for d in distinct.tolist()]
        accepted = y[_bernoulli_exp(num, [2 * a * b * t * t] * len(num), inverse, rng)]
        out[filled : filled + accepted.size] = accepted
        filled += accepted.size
    return out


def _support(sigma2: float) -> np.ndarray:
    half = math.ceil(40 * math.sqrt(sigma2) + 10)  # exp(-800) < 1e-300 beyond this
    return np.arange(-half, half + 1, dtype=np.float64)


def discrete_gaussian_pmf(x: np.ndarray, sigma2: float) -> np.ndarray:
    """Exact-enough pmf for tests/diagnostics: normalise exp(-x²/(2σ²)) over a support wide enough (±(40σ+10)) that the tail is < 1e-300."""
    sigma2 = float(sigma2)
    z = np.sum(np.exp(-_support(sigma2) ** 2 / (2 * sigma2)))
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-(x**2) / (2 * sigma2)) / z


def discrete_gaussian_variance(sigma2: float) -> float:
    """Variance of N_Z(0, sigma2), summed numerically over the same support (it is < sigma2)."""
    k = _support(sigma2)
    return float(np.sum(k**2 * discrete_gaussian_pmf(k, sigma2)))
