"""The users' one-time report MACs: tags verify, and nothing else does."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.protocol.primitives.report_auth import NONCE_MAC_BYTES, PRIME, ReportAuthenticator, report_words
from privbandit.protocol.primitives.seeding import USER_BLOCK

AUTH = ReportAuthenticator(7 << 200)


def _records(n=2000, first=5_000, seed=0):
    rng = np.random.default_rng(seed)
    ids = first + rng.permutation(n)
    return ids, rng.integers(0, 2**40, n)


def test_genuine_tags_verify_in_any_order_and_across_blocks():
    ids, values = _records()
    tags = AUTH.tags("r", 0, 3, 2, 5_000, ids, values)
    assert AUTH.verify("r", 0, 3, 2, 5_000, ids, values, tags).all()
    order = np.argsort(ids)
    assert np.array_equal(AUTH.tags("r", 0, 3, 2, 5_000, ids[order], values[order]), tags[order])
    # A user in the second block of a cohort gets its own keystream position, not the first block's.
    far = np.array([5_000 + USER_BLOCK + 1, 5_000 + 1])
    t = AUTH.tags("r", 0, 3, 2, 5_000, far, np.array([9, 9]))
    assert t[0] != t[1] and AUTH.verify("r", 0, 3, 2, 5_000, far, np.array([9, 9]), t).all()


@pytest.mark.parametrize("change", ["value", "user", "round", "plan", "task", "run", "key"])
def test_a_tag_is_bound_to_its_user_value_round_plan_task_run_and_key(change):
    """Changing any one of them leaves about 1/p of the tags valid: none of 2000 here."""
    ids, values = _records()
    tags = AUTH.tags("r", 0, 3, 2, 5_000, ids, values)
    args = {"run_id": "r", "task": 0, "round_id": 3, "plan_id": 2, "first_user": 5_000, "user_ids": ids, "values": values}
    auth = AUTH
    if change == "value":
        args["values"] = values ^ (1 << np.arange(values.size) % 40)  # flip one bit per record
    elif change == "user":
        args["user_ids"] = np.roll(ids, 1)  # every record under another invited user's id
    elif change == "round":
        args["round_id"] = 4
    elif change == "plan":
        args["plan_id"] = 3
    elif change == "task":
        args["task"] = 1
    elif change == "run":
        args["run_id"] = "s"
    else:
        auth = ReportAuthenticator(8 << 200)
    assert not auth.verify(tags=tags, **args).any()


def test_guessed_tags_succeed_at_rate_one_over_p():
    """Uniform guesses: the count of hits among 2·10⁵ is Poisson(2·10⁵/p) ≈ 10⁻⁴, so zero."""
    ids, values = _records(n=200_000, first=0, seed=1)
    guesses = np.random.default_rng(2).integers(0, PRIME, ids.size).astype("<u4")
    assert AUTH.verify("r", 0, 0, 2, 0, ids, values, guesses).sum() == 0


def test_tags_are_uniform_mod_p():
    """Tags of fixed values under fresh keys are uniform on Z_p: chi-square over 64 bins at α = 10⁻³."""
    from scipy import stats

    ids, _ = _records(n=64_000, first=0, seed=3)
    tags = AUTH.tags("r", 0, 0, 2, 0, ids, np.zeros(ids.size, np.int64)).astype(np.int64)
    counts = np.bincount(tags * 64 // PRIME, minlength=64)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_float_rewards_are_covered_by_their_bits_and_bad_inputs_refused():
    x = np.array([0.25, 0.5])
    assert np.array_equal(report_words(x), x.view(np.uint64)[:, None])  # one word per user
    wide = np.arange(12, dtype=np.int64).reshape(2, 3, 2)  # (runs, users, width): a user's row holds all its words
    assert np.array_equal(report_words(wide)[1], [2, 3, 8, 9])
    tags = AUTH.tags("r", 0, 0, 2, 10, np.array([10, 11]), x)
    assert not AUTH.verify("r", 0, 0, 2, 10, np.array([10, 11]), np.nextafter(x, 1), tags).any()
    assert not AUTH.verify("r", 0, 0, 2, 10, np.array([10, 11]), x, tags[:1]).any()  # wrong shape
    with pytest.raises(ValueError, match="below the cohort"):
        AUTH.tags("r", 0, 0, 2, 10, np.array([9]), np.array([1]))
    with pytest.raises(ValueError, match="256-bit"):
        ReportAuthenticator(2**256)
    with pytest.raises(TypeError, match="cannot be authenticated"):
        report_words(np.array(["a"]))


def test_a_block_tag_binds_its_message_and_path_and_each_carries_its_own_nonce():
    """The block message's tag (nonce ‖ Poly1305 over the message, ChaCha20-Poly1305 with no
    plaintext): it verifies for its payload and path only, under the users' master only; a flipped
    bit anywhere, tag or nonce included, fails; two tags of one message differ by their nonces."""
    auth, other = ReportAuthenticator(7), ReportAuthenticator(8)
    path = ("block", "r1", 0, 3, 2, 0)
    payload = bytes(range(256)) * 4000  # about a block message's size
    tag = auth.nonce_mac(*path, payload=payload)
    assert len(tag) == NONCE_MAC_BYTES and auth.check_nonce_mac(tag, *path, payload=payload)
    assert tag[:12] != auth.nonce_mac(*path, payload=payload)[:12]  # a fresh nonce each time
    assert auth.nonce_mac(*path, payload=payload, nonce=tag[:12]) == tag  # the nonce fixes the tag
    assert not other.check_nonce_mac(tag, *path, payload=payload)
    assert not auth.check_nonce_mac(tag, "block", "r1", 0, 3, 2, 1, payload=payload)  # another block
    assert not auth.check_nonce_mac(tag, *path, payload=payload[:-1] + b"\x00")
    for i in (0, 11, 12, 27):  # nonce and tag bytes
        bad = bytearray(tag)
        bad[i] ^= 1
        assert not auth.check_nonce_mac(bytes(bad), *path, payload=payload)
    assert not auth.check_nonce_mac(tag[:16], *path, payload=payload)  # an old HMAC-length tag
