"""Fixed-point encoding, modular reduction and the analyzer's decode.

Chowdhury & Zhou (2023), Algorithm 1:

- line 20, randomized rounding: ``x̂ = ⌊x·g⌋ + Ber(x·g − ⌊x·g⌋)``, so ``x̂ ∈ {0..g}`` and
  ``E[x̂] = x·g``;
- line 22, ``y = (x̂ + η) mod m``, the *non-negative* residue (numpy's ``%`` gives it);
- lines 28–30, the decode: ``z = (ŷ − m)/g`` if ``ŷ > n·g + τ`` (the noisy sum underflowed below
  0 and wrapped), else ``z = ŷ/g``.

With ``m = n·g + 2τ + 1`` the integer interval ``[−τ, n·g + τ]`` has exactly ``m`` elements, so
reduction mod m is a bijection on it: the decode is exact whenever ``|Σ η| ≤ τ``
(proof of Theorem 1, cases 1–2).

Moduli can exceed 2³² (Skellam with s = 100 at n = 2¹⁸ gives m ≈ 1.3·10¹⁰), so everything here is
int64; :func:`check_modulus` refuses a modulus whose sums could overflow it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A modular sum of n residues < m is accumulated in int64 after reducing each partial sum, so
# m itself must leave headroom: (m − 1) + (m − 1) must not overflow.
MAX_MODULUS = 2**62


class EncodingError(ValueError):
    """A value outside what the encoding can represent."""


def check_modulus(m: int) -> int:
    if not 2 <= m <= MAX_MODULUS:
        raise EncodingError(f"modulus m={m} outside the supported range [2, 2^62]")
    return int(m)


def randomized_round(x: np.ndarray, g: int, rng: np.random.Generator) -> np.ndarray:
    """Encode rewards ``x ∈ [0, 1]`` as integers in ``{0..g}`` without bias (Alg. 1 line 20)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size and (np.nanmin(x) < 0.0 or np.nanmax(x) > 1.0 or np.isnan(x).any()):
        raise EncodingError("rewards must lie in [0, 1] before encoding")
    scaled = x * g
    floor = np.floor(scaled)
    # Ber(frac) as one uniform per user: cheaper than rng.binomial and exactly the same law.
    up = rng.random(x.shape) < (scaled - floor)
    return floor.astype(np.int64) + up


def reduce_mod(values: np.ndarray, m: int) -> np.ndarray:
    """Non-negative residues in ``Z_m`` (Alg. 1 line 22).

    Values that are residues already come back as they are (``values`` itself when it is an int64
    array): an encoded reward plus a noise share almost always is one, and checking the range
    costs a thirtieth of ``np.mod``'s integer division."""
    m = check_modulus(m)
    v = np.asarray(values, dtype=np.int64)
    if v.size and v.min() >= 0 and v.max() < m:
        return v
    return np.mod(v, m)


def modular_sum(residues: np.ndarray, m: int) -> int:
    """``(Σ y_i) mod m`` without int64 overflow for any ``m ≤ 2^62`` and any number of terms.

    Summing residues directly would overflow once n·m > 2⁶³, so the sum is taken in chunks small
    enough that each chunk's raw sum fits, and chunk sums are reduced as they go.
    """
    m = check_modulus(m)
    y = np.asarray(residues, dtype=np.int64).ravel()
    chunk = max(1, (2**63 - 1) // m - 1)
    total = 0
    for start in range(0, y.size, chunk):
        total = (total + int(y[start : start + chunk].sum()) % m) % m
    return total


@dataclass(frozen=True)
class Decoded:
    """The analyzer's view of one release, in encoded integer units."""

    noisy_sum: int  # S* as the analyzer reconstructs it, in [−τ, n·g + τ]
    wrapped: bool  # the underflow branch (Alg. 1 line 28) was taken


def decode(y_hat: int, *, n: int, g: int, tau: int, m: int) -> Decoded:
    """Alg. 1 lines 28–30. Returns the integer noisy sum; divide by g for reward units."""
    if not 0 <= y_hat < m:
        raise EncodingError(f"release {y_hat} is not a residue mod {m}")
    if y_hat > n * g + tau:
        return Decoded(noisy_sum=int(y_hat) - m, wrapped=True)
    return Decoded(noisy_sum=int(y_hat), wrapped=False)
