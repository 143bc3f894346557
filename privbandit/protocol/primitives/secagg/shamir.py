"""t-of-n Shamir secret sharing (Shamir 1979) over GF(p), p = 2³¹ − 1, vectorized with numpy.

Bonawitz et al. 2017, Fig. 4 (round 1, "ShareKeys") share each user's self-mask seed ``b_u`` and
mask secret key ``s_u^SK`` t-of-n so the server can recover exactly one of the two per user.

Field choice (a deliberate deviation from a single big-prime field): a 32-byte secret is cut into
24-bit *limbs*, each shared independently with its own random polynomial over GF(2³¹ − 1). Every
limb is then information-theoretically hidden from t − 1 shares, hence so is the secret (the limbs'
sharings are independent). The small prime keeps every product below 2⁶² so the dealer's Horner
evaluation and the Lagrange combination run as int64 numpy over all recipients at once; the
Bonawitz dealer cost is O(n·t) field operations per secret, which pure-Python 127-bit integers
cannot do for n = 1000 in reasonable time. Cost: 11 limbs × 4 bytes = 44 bytes per share.

x-coordinates are 1 ≤ x < p and distinct; x = 0 would be the secret itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from privbandit.protocol.primitives.secagg.errors import ShareError

PRIME = 2**31 - 1
LIMB_BYTES = 3  # 24-bit limbs are < p, so every secret maps into the field injectively


def random_field(shape: tuple[int, ...], prime: int = PRIME) -> np.ndarray:
    """Uniform elements of GF(prime) from the OS CSPRNG (rejection on 31-bit words)."""
    if prime > PRIME:
        raise ValueError("fields larger than 2^31 - 1 overflow the int64 arithmetic")
    size = int(np.prod(shape))
    bits = max(1, (prime - 1).bit_length())
    out = np.empty(0, dtype=np.int64)
    while out.size < size:
        words = np.frombuffer(os.urandom(4 * (2 * size + 8)), dtype="<u4").astype(np.int64)
        words &= (1 << bits) - 1
        out = np.concatenate([out, words[words < prime]])
    return out[:size].reshape(shape)


def _check_xs(xs: Sequence[int] | np.ndarray, prime: int) -> np.ndarray:
    x = np.asarray(xs, dtype=np.int64).ravel()
    if x.size and (x.min() < 1 or x.max() >= prime):
        raise ShareError(f"x-coordinates must lie in [1, {prime}); got range [{x.min()}, {x.max()}]")
    if np.unique(x).size != x.size:
        raise ShareError("duplicate x-coordinates")
    return x


def split_field(
    values: Sequence[int] | np.ndarray,
    t: int,
    xs: Sequence[int] | np.ndarray,
    *,
    prime: int = PRIME,
    coefficients: np.ndarray | None = None,
) -> np.ndarray:
    """Share each of the L field elements ``values``; returns the (len(xs), L) share matrix.

    ``coefficients`` (shape (t − 1, L)) fixes the non-constant coefficients; tests use it to
    enumerate every polynomial. Production callers leave it None (CSPRNG).
    """
    secret = np.asarray(values, dtype=np.int64).ravel()
    x = _check_xs(xs, prime)
    if coefficients is not None:
        coefficients = np.asarray(coefficients, dtype=np.int64)
        if coefficients.shape != (t - 1, secret.size):
            raise ValueError(f"coefficients must have shape {(t - 1, secret.size)}")
        coefficients = coefficients[:, None, :]
    return split_field_many(secret[None, :], t, x[None, :], prime=prime, coefficients=coefficients)[0]


def split_field_many(
    values: np.ndarray,
    t: int,
    xs: np.ndarray,
    *,
    prime: int = PRIME,
    coefficients: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`split_field` for D dealers at once: dealer d shares the L elements ``values[d]`` at
    its own h x-coordinates ``xs[d]``; returns the (D, h, L) shares. Every element of every dealer
    gets its own independent random polynomial (``coefficients``: (t − 1, D, L), or None for the
    CSPRNG), so this is D separate dealings, done as one Horner pass.
    """
    secret = np.asarray(values, dtype=np.int64)
    x = np.asarray(xs, dtype=np.int64)
    if secret.ndim != 2 or x.ndim != 2 or x.shape[0] != secret.shape[0]:
        raise ValueError("need (D, L) values and (D, h) x-coordinates")
    dealers, h = x.shape
    if x.size and (x.min() < 1 or x.max() >= prime):
        raise ShareError(f"x-coordinates must lie in [1, {prime}); got range [{x.min()}, {x.max()}]")
    if h > 1 and (np.diff(np.sort(x, axis=1), axis=1) == 0).any():
        raise ShareError("duplicate x-coordinates")
    if not 1 <= t <= h:
        raise ShareError(f"threshold t={t} must satisfy 1 ≤ t ≤ n={h}")
    if secret.size and (secret.min() < 0 or secret.max() >= prime):
        raise ShareError("secret elements must lie in [0, p)")
    shape = (t - 1, *secret.shape)
    coeffs = random_field(shape, prime) if coefficients is None else np.asarray(coefficients, dtype=np.int64)
    if coeffs.shape != shape:
        raise ValueError(f"coefficients must have shape {shape}")
    acc = np.empty((dealers, h, secret.shape[1]), dtype=np.int64)
    if not acc.size:
        return acc
    # Horner's rule over all recipients at once, in place. The dealer's cost is this loop (t steps
    # over an h × L array), so the `%` pass is skipped while the next step provably cannot overflow
    # int64: with acc < bound, acc·x + c < bound·max(x) + p. For x = id + 1 < 2¹⁶ that reduces
    # every other step; for large x every step, as before. Results are identical either way.
    acc[:] = (coeffs[-1] if t > 1 else secret)[:, None, :]
    xcol, xmax, bound = x[:, :, None], int(x.max()), prime
    for k in range(t - 3, -2, -1):
        if bound * xmax + prime >= 2**63:
            np.remainder(acc, prime, out=acc)
            bound = prime
        np.multiply(acc, xcol, out=acc)
        acc += (coeffs[k] if k >= 0 else secret)[:, None, :]
        bound = bound * xmax + prime
    np.remainder(acc, prime, out=acc)
    return acc


def _inverse(a: np.ndarray, prime: int) -> np.ndarray:
    """Elementwise a^(p−2) mod p (Fermat), square-and-multiply in int64."""
    result = np.ones_like(a)
    base = a % prime
    e = prime - 2
    while e:
        if e & 1:
            result = result * base % prime
        base = base * base % prime
        e >>= 1
    return result


def _prod_mod(rows: np.ndarray, prime: int) -> np.ndarray:
    """Product along axis 1 mod p, by pairwise halving so no intermediate overflows."""
    while rows.shape[1] > 1:
        if rows.shape[1] % 2:
            rows = np.concatenate([rows, np.ones((rows.shape[0], 1), dtype=np.int64)], axis=1)
        rows = rows[:, 0::2] * rows[:, 1::2] % prime
    return rows[:, 0]


@lru_cache(maxsize=64)
def _lagrange_cached(xs: tuple[int, ...], prime: int) -> np.ndarray:
    x = np.asarray(xs, dtype=np.int64)
    lam = np.empty(x.size, dtype=np.int64)
    chunk = max(1, 4_000_000 // max(1, x.size))  # bound the (chunk × t) difference matrix
    for s in range(0, x.size, chunk):
        xi = x[s : s + chunk]
        diff = (x[None, :] - xi[:, None]) % prime  # x_j − x_i
        num = np.broadcast_to(x, diff.shape).copy()
        # λ_i = Π_{j≠i} x_j / (x_j − x_i): put 1 on the diagonal of both factors.
        rows = np.arange(xi.size)
        diff[rows, s + rows] = 1
        num[rows, s + rows] = 1
        lam[s : s + chunk] = _prod_mod(num, prime) * _inverse(_prod_mod(diff, prime), prime) % prime
    lam.setflags(write=False)
    return lam


def lagrange_at_zero(xs: Sequence[int] | np.ndarray, prime: int = PRIME) -> np.ndarray:
    """Coefficients λ_i with f(0) = Σ λ_i f(x_i) for deg f < len(xs). Cached per x set."""
    return _lagrange_cached(tuple(int(v) for v in _check_xs(xs, prime)), prime)


def combine_field(
    xs: Sequence[int] | np.ndarray,
    shares: np.ndarray,
    t: int,
    *,
    prime: int = PRIME,
    holders: Iterable[int] | None = None,
) -> np.ndarray:
    """Reconstruct the L secret elements from ≥ t shares (rows of ``shares``; the first t are used).

    ``holders``: the x-coordinates the dealer issued; a share at any other x is rejected.
    """
    x = _check_xs(xs, prime)
    if holders is not None:
        foreign = np.setdiff1d(x, np.fromiter(holders, dtype=np.int64))
        if foreign.size:
            raise ShareError(f"shares at x-coordinates {foreign.tolist()} were never issued")
    y = np.asarray(shares, dtype=np.int64)
    if y.ndim != 2 or y.shape[0] != x.size:
        raise ShareError("need one share row per x-coordinate")
    if x.size < t:
        raise ShareError(f"{x.size} shares cannot reconstruct a {t}-of-n secret: at least {t} needed")
    lam = lagrange_at_zero(x[:t], prime)
    return (lam[:, None] * (y[:t] % prime) % prime).sum(axis=0) % prime


def secret_to_limbs(secret: bytes) -> np.ndarray:
    padded = secret + bytes(-len(secret) % LIMB_BYTES)
    b = np.frombuffer(padded, dtype=np.uint8).astype(np.int64).reshape(-1, LIMB_BYTES)
    return (b[:, 0] << 16) | (b[:, 1] << 8) | b[:, 2]


def limbs_to_secret(limbs: np.ndarray, length: int) -> bytes:
    limbs = np.asarray(limbs, dtype=np.int64)
    if limbs.size and (limbs.min() < 0 or limbs.max() >= 1 << (8 * LIMB_BYTES)):
        raise ShareError("reconstructed limb out of range: inconsistent shares")
    raw = np.stack([(limbs >> 16) & 0xFF, (limbs >> 8) & 0xFF, limbs & 0xFF], axis=1).astype(np.uint8).tobytes()
    if any(raw[length:]):
        raise ShareError("reconstructed padding is not zero: inconsistent shares")
    return raw[:length]


def split_secret(secret: bytes, t: int, xs: Sequence[int] | np.ndarray) -> np.ndarray:
    """Share a byte string; row r of the result is the share for ``xs[r]`` (L int64 limbs)."""
    return split_secrets([secret], t, xs)[0]


def split_secrets(secrets: Sequence[bytes], t: int, xs: Sequence[int] | np.ndarray) -> list[np.ndarray]:
    """Share several byte strings among the same ``xs``: one :func:`split_secret` result each.

    One Horner pass over all their limbs together (a SecAgg user deals ``s^SK`` and ``b`` to the
    same holders). Every limb still gets its own independent random polynomial, so this is the
    same distribution as sharing each secret separately, at half the per-step overhead.
    """
    limbs = [secret_to_limbs(s) for s in secrets]
    shares = split_field(np.concatenate(limbs), t, xs)
    return np.split(shares, np.cumsum([piece.size for piece in limbs])[:-1], axis=1)


def split_secrets_many(secrets: Sequence[Sequence[bytes]], t: int, xs: np.ndarray) -> np.ndarray:
    """Dealer d shares the byte strings ``secrets[d]`` (the same count and lengths for every
    dealer) among its x-coordinates ``xs[d]``: returns (D, h, L₁ + L₂ + …) shares whose columns
    are each secret's limbs in turn, from one :func:`split_field_many` pass."""
    limbs = np.stack([np.concatenate([secret_to_limbs(s) for s in mine]) for mine in secrets])
    return split_field_many(limbs, t, xs)


def combine_secret(
    xs: Sequence[int] | np.ndarray,
    shares: np.ndarray,
    t: int,
    length: int,
    *,
    holders: Iterable[int] | None = None,
) -> bytes:
    """Inverse of :func:`split_secret` from any ≥ t shares."""
    return limbs_to_secret(combine_field(xs, shares, t, holders=holders), length)


def _prod_mod_last(a: np.ndarray, prime: int) -> np.ndarray:
    """Product along the last axis mod p, by pairwise halving (no int64 overflow)."""
    while a.shape[-1] > 1:
        if a.shape[-1] % 2:
            a = np.concatenate([a, np.ones((*a.shape[:-1], 1), dtype=np.int64)], axis=-1)
        a = a[..., 0::2] * a[..., 1::2] % prime
    return a[..., 0]


def combine_many(xs: np.ndarray, shares: np.ndarray, *, prime: int = PRIME) -> np.ndarray:
    """Reconstruct S secrets at once: row s of ``xs`` (S, t) holds t distinct x-coordinates and
    ``shares`` (S, t, L) their shares; returns the (S, L) secrets. Lagrange at zero as in
    :func:`combine_field`, vectorized over the secrets (each has its own x set), in chunks that
    bound the (chunk, t, t) difference arrays."""
    x = np.asarray(xs, dtype=np.int64)
    y = np.asarray(shares, dtype=np.int64) % prime
    if x.ndim != 2 or y.ndim != 3 or y.shape[:2] != x.shape:
        raise ShareError("need (S, t) x-coordinates and (S, t, L) shares")
    if x.size and (x.min() < 1 or x.max() >= prime):
        raise ShareError(f"x-coordinates must lie in [1, {prime})")
    s, t = x.shape
    if t > 1 and (np.diff(np.sort(x, axis=1), axis=1) == 0).any():
        raise ShareError("duplicate x-coordinates")
    out = np.empty((s, y.shape[2]), dtype=np.int64)
    step = max(1, 4_000_000 // max(1, t * t))
    eye = np.eye(t, dtype=bool)
    for lo in range(0, s, step):
        xc = x[lo: lo + step]
        diff = (xc[:, None, :] - xc[:, :, None]) % prime  # [i, j] = x_j − x_i
        num = np.broadcast_to(xc[:, None, :], diff.shape).copy()
        diff[:, eye] = 1
        num[:, eye] = 1
        lam = _prod_mod_last(num, prime) * _inverse(_prod_mod_last(diff, prime), prime) % prime  # (c, t)
        out[lo: lo + step] = (lam[:, :, None] * y[lo: lo + step] % prime).sum(axis=1) % prime
    return out


def limbs_to_secrets(limbs: np.ndarray, length: int) -> list[bytes]:
    """:func:`limbs_to_secret` for each row of ``limbs`` (S, L)."""
    limbs = np.asarray(limbs, dtype=np.int64)
    if limbs.size and (limbs.min() < 0 or limbs.max() >= 1 << (8 * LIMB_BYTES)):
        raise ShareError("reconstructed limb out of range: inconsistent shares")
    raw = np.stack([(limbs >> 16) & 0xFF, (limbs >> 8) & 0xFF, limbs & 0xFF], axis=2).astype(np.uint8)
    raw = raw.reshape(len(limbs), -1)
    if raw[:, length:].any():
        raise ShareError("reconstructed padding is not zero: inconsistent shares")
    return [bytes(row) for row in raw[:, :length]]
