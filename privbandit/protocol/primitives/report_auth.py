"""Per-user report authentication: a one-time Wegman–Carter MAC on every (user, round) record.

Fleets share one broker account, so without this anyone holding it could send a report under an
invited user's id before the real user does, and the intermediary would count the first one
(docs/attacks.md, "impersonate"). Each simulated user registers a MAC key with the intermediaries
when invited (simulated here by one master both sides derive from; the analyzer never holds it).

For round r of task k and plan q, the keys of user i are 3W + 1 words (a₁ … a_{3W}, b) of a ChaCha20
keystream keyed by HKDF(master, run ‖ k ‖ r ‖ q), at the user's position in its block of the plan's
cohort, where W is the number of 64-bit words of one report (its runs × width entries; W = 1 for a
residue). The tag of the report's words split into 22-bit limbs (l₁ … l_{3W}) is

    tag = Σ a_j l_j + b  mod p,   p = 2³¹ − 1.

The inner product is a universal hash and b a one-time pad, so a forger who has seen at most one
tag under a key succeeds with probability at most 1/p ≈ 4.7·10⁻¹⁰ per attempt (Wegman & Carter
1981). Every key is used for one record only, because a user reports once per round and plan. Limbs
keep every product below 2⁵³, so numpy computes the tags of a whole block at once, exactly.

A fleet closes a block of a plan's cohort (everyone there has answered; the missing users dropped
out) with a message whose ``block_tag`` is such an HMAC too: holding the users' broker account is
not enough to declare a block complete.

Secure-aggregation chunks from a fleet carry an HMAC-SHA256 under the fleet's own key
(:class:`FleetKeys`): the fleet speaks for its users there, and a chunk forged by another holder of
the users' broker account, another fleet included, would otherwise complete a step with garbage
before the genuine one arrives. Each fleet's key derives from a session secret the launcher draws
(not from the world seed, which every fleet holds); a fleet gets its own key only, the aggregator
the secret. Block truths to the observer carry a MAC under the users' master.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privbandit.protocol.primitives.seeding import USER_BLOCK

PRIME = (1 << 31) - 1
LIMB_BITS = 22
LIMB_MASK = (1 << LIMB_BITS) - 1
TAG_DTYPE = "<u4"


def report_words(values: np.ndarray) -> np.ndarray:
    """The 64-bit words a report's tag covers, one row per user: residues and counts as they are,
    floats by their bits. ``values`` is (n,) or (runs, n, width)."""
    values = np.asarray(values)
    if values.ndim == 3:
        values = np.moveaxis(values, 1, 0).reshape(values.shape[1], -1)
    else:
        values = values.reshape(-1, 1)
    if values.dtype.kind == "f":
        return values.astype(np.float64).view(np.uint64)
    if values.dtype.kind in "iu":
        return values.astype(np.uint64)
    raise TypeError(f"reports of dtype {values.dtype} cannot be authenticated")


class ReportAuthenticator:
    """Computes and checks the tags of one party's view; sans-I/O."""

    def __init__(self, master: int):
        if not 0 <= master < 2**256:
            raise ValueError(f"the report-authentication master key must be a 256-bit integer, got "
                             f"{master.bit_length()} bits")
        self.master = master.to_bytes(32, "big")

    def _derive(self, info: str) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info.encode()).derive(self.master)

    def _round_key(self, run_id: str, task: int, round_id: int, plan_id: int) -> bytes:
        return self._derive(f"privbandit report-auth|{run_id}|{task}|{round_id}|{plan_id}")

    def mac(self, purpose: str, *path: object, payload: bytes) -> bytes:
        """A 16-byte HMAC-SHA256 tag of ``payload`` under HKDF(master, purpose ‖ path): a fleet's
        secure-aggregation chunk (``"secagg-chunk"``, run, task, shard), the message closing a block
        of a plan's cohort for a round (``"block"``, run, task, round, plan, block), a block's ground
        truth (``"truth"``, run, task, plan, block). The payload is the message encoded with an
        empty tag."""
        key = self._derive("privbandit " + "|".join([purpose, *map(str, path)]))
        mac = hmac.HMAC(key, hashes.SHA256())
        mac.update(payload)
        return mac.finalize()[:16]

    def _keys(self, key: bytes, block: int, upto: int, words: int) -> np.ndarray:
        """(upto, words) key words of the first ``upto`` users of ``block``, each reduced below p."""
        nonce = (0).to_bytes(8, "little") + int(block).to_bytes(8, "little")
        stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(4 * words * upto))
        return (np.frombuffer(stream, "<u4").reshape(upto, words) % PRIME).astype(np.uint64)

    def tags(self, run_id: str, task: int, round_id: int, plan_id: int, first_user: int, user_ids: np.ndarray,
             values: np.ndarray) -> np.ndarray:
        """Tags of records (user_ids[i], values[.., i, ..]); every id must lie in the plan's cohort
        from first_user."""
        index = np.asarray(user_ids, dtype=np.int64) - int(first_user)
        if index.size and index.min() < 0:
            raise ValueError("a user id below the cohort's first user has no key")
        words = report_words(values)
        w = words.shape[1]
        limbs = np.concatenate([(words >> np.uint64(LIMB_BITS * i)) & np.uint64(LIMB_MASK) for i in range(3)], axis=1)
        key = self._round_key(run_id, task, round_id, plan_id)
        out = np.empty(index.size, dtype=np.uint64)
        blocks, offsets = np.divmod(index, USER_BLOCK)
        for block in np.unique(blocks):  # one keystream per block: a message carries one block
            sel = blocks == block
            k = self._keys(key, int(block), int(offsets[sel].max()) + 1, 3 * w + 1)[offsets[sel]]
            # Each partial sum < 3·2⁵³·W/3 + 2³¹; reduce every three terms to stay exact in uint64.
            acc = k[:, -1].copy()
            for j in range(0, 3 * w, 3):
                acc = (acc + (k[:, j:j + 3] * limbs[sel][:, j:j + 3]).sum(axis=1)) % np.uint64(PRIME)
            out[sel] = acc
        return out.astype(TAG_DTYPE)

    def verify(self, run_id: str, task: int, round_id: int, plan_id: int, first_user: int, user_ids: np.ndarray,
               values: np.ndarray, tags: np.ndarray) -> np.ndarray:
        """A mask of the records whose tag is right."""
        tags = np.asarray(tags)
        if tags.shape != np.shape(user_ids):
            return np.zeros(np.shape(user_ids), dtype=bool)
        return self.tags(run_id, task, round_id, plan_id, first_user, user_ids, values) == tags.astype(np.uint64)


def fleet_key(master: int, shard: int) -> int:
    """Fleet ``shard``'s own 256-bit key, from the session's fleet master (HKDF)."""
    info = f"privbandit secagg-fleet|{int(shard)}".encode()
    return int.from_bytes(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info)
                          .derive(master.to_bytes(32, "big")), "big")


class FleetKeys:
    """The aggregator's view of every fleet's key: ``mac`` as :meth:`ReportAuthenticator.mac`, keyed
    by the fleet the path names (``"secagg-chunk"``, run, task, shard)."""

    def __init__(self, master: int):
        if not 0 <= master < 2**256:
            raise ValueError(f"the fleets' master key must be a 256-bit integer, got {master.bit_length()} bits")
        self.master = master

    def of(self, shard: int) -> ReportAuthenticator:
        return ReportAuthenticator(fleet_key(self.master, shard))

    def mac(self, purpose: str, run: str, task: int, shard: int, payload: bytes) -> bytes:
        return self.of(int(shard)).mac(purpose, run, task, shard, payload=payload)
