"""Mask expansion: a 32-byte seed → values exactly uniform on ``Z_m``.

Bonawitz et al. 2017 (Fig. 4, round "MaskedInputCollection") expand every pairwise seed ``s_ij``
and every self-mask seed ``b_i`` with a PRG into a vector in ``Z_m``; the masks hide the input only
if each value is uniform on *all* of ``Z_m``. Two weaknesses seen in public code are ruled out here
(DESIGN.md, "Secure aggregation"):

- the key is never collapsed (to 32 bits, or at all): the full 32-byte seed keys ChaCha20;
- no modulo bias and no off-by-one range: 64-bit words are kept only below ``⌊2⁶⁴/m⌋·m`` (a whole
  number of copies of ``Z_m``) and then reduced mod m, so every residue in ``[0, m)`` has
  probability exactly ``1/m`` given an ideal keystream.

Domain separation: the ChaCha20 key is ``HKDF-SHA256(seed, info = label ‖ round id ‖ purpose)``,
so the same seed gives unrelated streams in different rounds or for different purposes, and a
seed is never used directly as a cipher key.
"""

from __future__ import annotations

import hmac
import struct

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from privbandit.protocol.primitives.encoding import check_modulus

SEED_BYTES = 32
_LABEL = b"privbandit/secagg/prg/v1"
# ChaCha20 in `cryptography` takes a 16-byte nonce: a 4-byte little-endian block counter followed
# by a 12-byte nonce. The key is already unique per (seed, round, purpose), so both are zero.
_NONCE = bytes(16)
_TWO64 = 1 << 64
_HKDF_ZERO_SALT = bytes(32)  # RFC 5869 §2.2: an absent salt is HashLen zero bytes


def hkdf_sha256_32(ikm: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) with no salt and a 32-byte output.

    Byte-for-byte what ``cryptography``'s ``HKDF(SHA256(), length=32, salt=None, info=info)``
    derives (tests/protocol/secagg/test_prg.py checks it): extract ``PRK = HMAC(0³², ikm)``, then
    one expand block ``T(1) = HMAC(PRK, info ‖ 0x01)``. Written out with the standard library's
    one-shot HMAC because a round derives O(n·k) such keys and the HKDF object's set-up cost
    (≈ 9 µs, mostly Python-level type checks) was larger than the hashing itself.
    """
    prk = hmac.digest(_HKDF_ZERO_SALT, ikm, "sha256")
    return hmac.digest(prk, info + b"\x01", "sha256")


def prg_key(seed: bytes, *, round_id: int, purpose: bytes) -> bytes:
    """The ChaCha20 key for one (seed, round, purpose): HKDF-SHA256 with a length-prefixed info."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"PRG seed must be {SEED_BYTES} bytes, got {len(seed)}")
    info = _LABEL + struct.pack(">QH", int(round_id), len(purpose)) + purpose
    return hkdf_sha256_32(seed, info)


def acceptance_limit(m: int) -> int:
    """``⌊2⁶⁴/m⌋·m``: words below it are accepted. For m ≤ 2⁶² at least 3/4 of words are kept."""
    return (_TWO64 // m) * m


def uniform_mod(seed: bytes, count: int, m: int, *, round_id: int, purpose: bytes) -> np.ndarray:
    """``count`` values, exactly uniform on ``Z_m`` (int64), deterministic in all arguments.

    Rejection sampling on 64-bit keystream words, vectorized: draw a batch sized for the expected
    acceptance rate, keep the accepted words in order, and continue the *same* keystream when a
    batch falls short, so the output depends only on the seed, never on batch sizes.
    """
    m = check_modulus(m)
    if count < 0:
        raise ValueError("count must be non-negative")
    encryptor = Cipher(
        algorithms.ChaCha20(prg_key(seed, round_id=round_id, purpose=purpose), _NONCE), mode=None
    ).encryptor()
    limit = acceptance_limit(m)
    out = np.empty(count, dtype=np.int64)
    filled = 0
    while filled < count:
        need = count - filled
        # Expected acceptance ≥ 3/4; ask for a little more than need/rate to usually finish in one go.
        draw = need + need // 3 + 16
        words = np.frombuffer(encryptor.update(bytes(8 * draw)), dtype="<u8")
        if limit < _TWO64:  # limit == 2⁶⁴ when m divides 2⁶⁴ (powers of two): every word is kept
            words = words[words < np.uint64(limit)]
        take = min(words.size, need)
        out[filled : filled + take] = (words[:take] % np.uint64(m)).astype(np.int64)
        filled += take
    return out


def uniform_mod_rows(seeds: list[bytes], count: int, m: int, *, round_id: int, purpose: bytes) -> np.ndarray:
    """``np.stack([uniform_mod(s, count, m, …) for s in seeds])``, with the rejection sampling and
    the reduction done once over all rows.

    Each seed still keys its own ChaCha20 (a key per seed is what makes the masks independent); what
    is batched is everything after the keystream, which dominated for the one-residue masks of a
    SecAgg round (k + 1 streams per user). Rows whose first draw falls short of ``count`` accepted
    words (probability < 4^−(draw − count) each) continue their own stream through
    :func:`uniform_mod`, so every row is exactly that function's output.
    """
    m = check_modulus(m)
    if count < 0:
        raise ValueError("count must be non-negative")
    rows = len(seeds)
    out = np.empty((rows, count), dtype=np.int64)
    if rows == 0 or count == 0:
        return out
    draw = count + count // 3 + 16  # uniform_mod's first draw, so the streams line up
    blank = bytes(8 * draw)
    stream = b"".join(
        Cipher(algorithms.ChaCha20(prg_key(s, round_id=round_id, purpose=purpose), _NONCE), mode=None).encryptor().update(blank)
        for s in seeds)
    words = np.frombuffer(stream, dtype="<u8").reshape(rows, draw)
    limit = acceptance_limit(m)
    accept = words < np.uint64(limit) if limit < _TWO64 else np.ones(words.shape, dtype=bool)
    rank = np.cumsum(accept, axis=1)
    short = rank[:, -1] < count
    keep = accept & (rank <= count)
    full = ~short
    out[full] = (words[full][keep[full]] % np.uint64(m)).astype(np.int64).reshape(-1, count)
    for i in np.flatnonzero(short):
        out[i] = uniform_mod(seeds[i], count, m, round_id=round_id, purpose=purpose)
    return out
