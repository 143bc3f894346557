"""The report MAC's fast path gives the same tags, bit for bit, as the algorithm it replaced.

``_frozen_tags`` is ``ReportAuthenticator.tags`` as it was before the fast path (commit 5c82b88):
one keystream per block from the block's first user, every key word reduced mod p, limbs gathered
per block with masks, the sum reduced every three terms. Tags are what users and intermediaries
agree on, so a changed tag is a broken protocol, not a slower one: the property compares every
tag, over widths W = 1..4, float and integer reports (their extreme values too), ids in one block or
several, increasing, shuffled, with gaps and repeats, and contiguous runs starting anywhere in a
block (where the fast path enters the keystream mid-block).
"""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from hypothesis import given, settings
from hypothesis import strategies as st

from privbandit.protocol.primitives.report_auth import ReportAuthenticator
from privbandit.protocol.primitives.seeding import USER_BLOCK

MASTER = 0x11 << 200  # any 256-bit key
AUTH = ReportAuthenticator(MASTER)
PRIME, LIMB_BITS, LIMB_MASK = (1 << 31) - 1, 22, (1 << 22) - 1


def _frozen_words(values):
    values = np.asarray(values)
    if values.ndim == 3:
        values = np.moveaxis(values, 1, 0).reshape(values.shape[1], -1)
    else:
        values = values.reshape(-1, 1)
    if values.dtype.kind == "f":
        return values.astype(np.float64).view(np.uint64)
    return values.astype(np.uint64)


def _frozen_keys(key, block, upto, words):
    nonce = (0).to_bytes(8, "little") + int(block).to_bytes(8, "little")
    stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(4 * words * upto))
    return (np.frombuffer(stream, "<u4").reshape(upto, words) % PRIME).astype(np.uint64)


def _frozen_tags(run_id, task, round_id, plan_id, first_user, user_ids, values):
    index = np.asarray(user_ids, dtype=np.int64) - int(first_user)
    if index.size and index.min() < 0:
        raise ValueError("a user id below the cohort's first user has no key")
    words = _frozen_words(values)
    w = words.shape[1]
    limbs = np.concatenate([(words >> np.uint64(LIMB_BITS * i)) & np.uint64(LIMB_MASK) for i in range(3)], axis=1)
    key = AUTH._round_key(run_id, task, round_id, plan_id)
    out = np.empty(index.size, dtype=np.uint64)
    blocks, offsets = np.divmod(index, USER_BLOCK)
    for block in np.unique(blocks):
        sel = blocks == block
        k = _frozen_keys(key, int(block), int(offsets[sel].max()) + 1, 3 * w + 1)[offsets[sel]]
        acc = k[:, -1].copy()
        for j in range(0, 3 * w, 3):
            acc = (acc + (k[:, j:j + 3] * limbs[sel][:, j:j + 3]).sum(axis=1)) % np.uint64(PRIME)
        out[sel] = acc
    return out.astype("<u4")


DTYPES = ["<i8", "<u8", "<f8", "<f4", "<i4", "<u4", "|u1", "|i1", ">i8", ">f8"]
LAYOUTS = ["contiguous", "shuffled", "gaps", "repeats", "blocks"]


def _values(rng, dtype, shape, extremes):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = rng.standard_normal(shape) * 10.0 ** rng.integers(-300, 300, shape)
        if extremes and x.size:
            x.flat[rng.integers(0, x.size, max(1, x.size // 4))] = rng.choice(
                [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, np.finfo(np.float64).max], max(1, x.size // 4))
        with np.errstate(over="ignore"):
            return x.astype(dtype)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, shape, dtype=dtype.newbyteorder("="), endpoint=True)
    if extremes and x.size:
        special = np.array([info.min, info.max, 0, 1, info.max - 1], dtype=dtype.newbyteorder("="))
        x.flat[rng.integers(0, x.size, max(1, x.size // 4))] = rng.choice(special, max(1, x.size // 4))
    return x.astype(dtype)


def _ids(rng, layout, n, first_user, start):
    base = first_user + start
    if layout == "contiguous":  # a fleet's message: increasing, no gap (across a block end if start says so)
        return base + np.arange(n)
    if layout == "shuffled":
        return base + rng.permutation(n)
    if layout == "gaps":  # dropouts: increasing, some missing
        return np.sort(base + rng.choice(2 * n, n, replace=False))
    if layout == "repeats":  # a hostile message: some ids twice
        return base + rng.integers(0, max(1, n // 2), n)
    return first_user + rng.integers(0, 3 * USER_BLOCK, n)  # anywhere in three blocks, any order


@settings(max_examples=250, deadline=None)
@given(w=st.integers(1, 4), runs_split=st.booleans(), flat=st.booleans(), dtype=st.sampled_from(DTYPES),
       layout=st.sampled_from(LAYOUTS), n=st.integers(0, 1500), first_user=st.integers(0, 10**9),
       start=st.one_of(st.just(0), st.integers(0, 2 * USER_BLOCK), st.integers(USER_BLOCK - 1500, USER_BLOCK)),
       extremes=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_tags_are_bit_identical_to_the_frozen_algorithm(w, runs_split, flat, dtype, layout, n, first_user, start,
                                                        extremes, seed):
    rng = np.random.default_rng(seed)
    ids = _ids(rng, layout, n, first_user, start)
    if flat and w == 1:
        values = _values(rng, dtype, (n,), extremes)  # (n,): a residue per user
    else:  # (runs, n, width) with runs × width = W words per user
        runs = w if runs_split and w > 1 else 1
        values = _values(rng, dtype, (runs, n, w // runs), extremes)
    path = ("run", 3, 17, 5, first_user)
    got = AUTH.tags(*path, ids, values)
    if n == 0 and values.ndim == 3:  # the frozen code raised here (reshape(0, -1)): no record, no tag
        assert got.shape == (0,) and got.dtype == np.dtype("<u4")
        return
    want = _frozen_tags(*path, ids, values)
    assert got.dtype == want.dtype == np.dtype("<u4")
    assert np.array_equal(got, want)
    # verify agrees with the frozen tags, and refuses each tag changed by one
    assert AUTH.verify(*path, ids, values, want).all()
    if n:
        assert not AUTH.verify(*path, ids, values, (want.astype(np.int64) + 1) % PRIME).any()


@pytest.mark.parametrize("w", [341, 342, 1400])
def test_wide_reports_stay_exact_past_the_reduction_threshold(w):
    """Up to 1023 products are summed before a reduction mod p (341 words of three limbs): at 342
    and 1400 words the sum is reduced mid-way. Every bit set makes each limb as large as it gets; at
    1400 words, summing all 4200 products unreduced (about 2⁵³ each) would wrap around 2⁶⁴."""
    rng = np.random.default_rng(w)
    ids = 9 + rng.permutation(40)
    values = np.full((1, 40, w), 2**64 - 1, np.uint64)  # every bit set: every limb full
    values[:, ::2] = rng.integers(0, 2**64 - 1, (1, 20, w), dtype=np.uint64, endpoint=True)
    assert np.array_equal(AUTH.tags("run", 0, 1, 2, 0, ids, values), _frozen_tags("run", 0, 1, 2, 0, ids, values))


def test_a_block_entered_mid_stream_gets_the_same_key_words():
    """The keystream entered at a user's 64-byte ChaCha20 block is the block's keystream from there."""
    key = AUTH._round_key("run", 0, 1, 2)
    whole = AUTH._keys(key, 7, 0, 1000, 4)
    for start in (1, 3, 4, 5, 999):  # 16-byte users: a ChaCha20 block holds four
        assert np.array_equal(AUTH._keys(key, 7, start, 1000, 4), whole[start:])
    odd = AUTH._keys(key, 7, 0, 300, 7)  # 28-byte users straddle ChaCha20 blocks
    assert np.array_equal(AUTH._keys(key, 7, 123, 300, 7), odd[123:])


def test_ids_and_reports_must_match():
    with pytest.raises(ValueError, match="one id per report"):
        AUTH.tags("run", 0, 1, 2, 0, np.arange(5), np.zeros(1, np.int64))  # would broadcast
    with pytest.raises(ValueError, match="one id per report"):
        AUTH.tags("run", 0, 1, 2, 0, np.arange(4).reshape(2, 2), np.zeros(4, np.int64))


def test_a_message_of_no_record_has_no_tag():
    """A block none of whose users report into a round is still sent, to close the block: its
    (runs, 0, width) reports used to make report_words raise (reshape(0, -1)), in the fleet and the
    aggregator alike."""
    for shape in [(1, 0, 1), (2, 0, 3), (0,)]:
        none = np.zeros(shape, np.int64)
        assert AUTH.tags("run", 0, 1, 2, 0, np.zeros(0, np.int64), none).shape == (0,)
        assert AUTH.verify("run", 0, 1, 2, 0, np.zeros(0, np.int64), none, np.zeros(0, "<u4")).shape == (0,)
