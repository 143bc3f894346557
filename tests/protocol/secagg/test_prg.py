"""Mask expansion: exact uniformity on Z_m, determinism, domain separation."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy import stats

from privbandit.protocol.primitives.secagg import prg
from privbandit.protocol.primitives.secagg.prg import acceptance_limit, prg_key, uniform_mod
from tests.stats import P_MIN

SEED = bytes(range(32))


def _chi2(observed: np.ndarray, probs: np.ndarray) -> float:
    expected = probs / probs.sum() * observed.sum()
    return float(stats.chisquare(observed, expected).pvalue)


def _bucket_probs(m: int, buckets: int) -> tuple[np.ndarray, callable]:
    """Buckets of consecutive residues ``[b·w, (b+1)·w)`` with w = ⌈m/buckets⌉; exact probabilities."""
    width = -(-m // buckets)
    edges = np.minimum(np.arange(buckets + 1, dtype=object) * width, m)
    sizes = np.array([int(edges[b + 1] - edges[b]) for b in range(buckets)], dtype=np.float64)
    return sizes / m, lambda v: (v // width).astype(np.int64)


def test_small_modulus_uniform_and_hits_every_residue():
    v = uniform_mod(SEED, 200_000, 7, round_id=1, purpose=b"test")
    counts = np.bincount(v, minlength=7)
    assert counts.size == 7 and counts.min() > 0  # m − 1 = 6 is reachable: no [0, m−1) bug
    assert _chi2(counts, np.ones(7)) > P_MIN


def test_million_modulus_folded_buckets_uniform():
    m = 1_000_003
    v = uniform_mod(SEED, 300_000, m, round_id=2, purpose=b"test")
    probs, bucket = _bucket_probs(m, 500)
    assert _chi2(np.bincount(bucket(v), minlength=500), probs) > P_MIN


@pytest.mark.parametrize("m", [2**62, 2**62 - 57, (2**64 * 2) // 9])
def test_large_modulus_top_bits_uniform(m):
    v = uniform_mod(SEED, 200_000, m, round_id=3, purpose=b"test")
    assert v.dtype == np.int64 and v.min() >= 0 and v.max() < m
    probs, bucket = _bucket_probs(m, 256)
    assert _chi2(np.bincount(bucket(v), minlength=256), probs) > P_MIN


def test_naive_modulo_reduction_fails_the_same_test():
    """Power check: plain ``w mod m`` on the same keystream is visibly biased for m ≈ 2⁶⁴/4.5."""
    m = (2**64 * 2) // 9
    enc = Cipher(algorithms.ChaCha20(prg_key(SEED, round_id=3, purpose=b"test"), bytes(16)), None).encryptor()
    words = np.frombuffer(enc.update(bytes(8 * 200_000)), dtype="<u8")
    naive = (words % np.uint64(m)).astype(np.int64)
    probs, bucket = _bucket_probs(m, 256)
    assert _chi2(np.bincount(bucket(naive), minlength=256), probs) < 1e-6


def test_acceptance_limit_is_a_whole_number_of_copies():
    for m in [2, 7, 1_000_003, 2**32 + 15, 2**62 - 57, 2**62]:
        limit = acceptance_limit(m)
        assert limit % m == 0 and 2**64 - m < limit <= 2**64


def test_deterministic_and_prefix_stable():
    a = uniform_mod(SEED, 1000, 2**40 + 3, round_id=5, purpose=b"mask")
    b = uniform_mod(SEED, 1000, 2**40 + 3, round_id=5, purpose=b"mask")
    c = uniform_mod(SEED, 10, 2**40 + 3, round_id=5, purpose=b"mask")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:10], c)


def test_seeds_rounds_and_purposes_separate():
    m = 2**61 + 1
    base = uniform_mod(SEED, 64, m, round_id=5, purpose=b"mask")
    other_seed = bytes([SEED[0] ^ 1]) + SEED[1:]
    for variant in [
        uniform_mod(other_seed, 64, m, round_id=5, purpose=b"mask"),
        uniform_mod(SEED, 64, m, round_id=6, purpose=b"mask"),
        uniform_mod(SEED, 64, m, round_id=5, purpose=b"self"),
    ]:
        assert (variant != base).sum() > 60


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        uniform_mod(SEED[:16], 4, 7, round_id=0, purpose=b"x")
    with pytest.raises(ValueError):
        uniform_mod(SEED, 4, 2**62 + 1, round_id=0, purpose=b"x")
    assert uniform_mod(SEED, 0, 7, round_id=0, purpose=b"x").size == 0


def test_hkdf_matches_rfc5869_and_the_cryptography_implementation():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from privbandit.protocol.primitives.secagg.prg import hkdf_sha256_32

    # RFC 5869 Appendix A.3 (SHA-256, empty salt and info): the first 32 bytes of the OKM.
    okm = hkdf_sha256_32(bytes([0x0B] * 22), b"")
    assert okm.hex() == "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
    rng = np.random.default_rng(5)
    for size in (0, 1, 32, 33, 100):
        ikm, info = rng.bytes(32), rng.bytes(size)
        ref = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(ikm)
        assert hkdf_sha256_32(ikm, info) == ref
        assert hkdf_sha256_32(ikm, info + b"x") != ref


@pytest.mark.parametrize("m", [7, 2**32 + 15, 2**62 - 57, 2**62])
@pytest.mark.parametrize("count", [1, 3, 40])
def test_batched_rows_are_the_single_streams(m, count):
    """uniform_mod_rows batches only what follows the keystream: every row is uniform_mod's output."""
    seeds = [bytes([i]) * 32 for i in range(9)]
    rows = prg.uniform_mod_rows(seeds, count, m, round_id=5, purpose=b"pair-mask")
    want = np.stack([prg.uniform_mod(s, count, m, round_id=5, purpose=b"pair-mask") for s in seeds])
    np.testing.assert_array_equal(rows, want)
    assert prg.uniform_mod_rows([], count, m, round_id=5, purpose=b"x").shape == (0, count)


def test_batched_rows_that_run_short_continue_their_own_stream(monkeypatch):
    """With most words rejected (a test-only acceptance limit), rows whose first draw falls short
    continue their own keystream, exactly as uniform_mod does."""
    m = 1000
    monkeypatch.setattr(prg, "acceptance_limit", lambda m: m * ((2**64 // m) // 16))
    seeds = [bytes([i + 1]) * 32 for i in range(12)]
    rows = prg.uniform_mod_rows(seeds, 8, m, round_id=1, purpose=b"self-mask")
    want = np.stack([prg.uniform_mod(s, 8, m, round_id=1, purpose=b"self-mask") for s in seeds])
    np.testing.assert_array_equal(rows, want)
