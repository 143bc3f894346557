"""Per-user report authentication: a one-time Wegman–Carter MAC on every (user, round) record.

Fleets share one broker account, so without this anyone holding it could send a report under an
invited user's id before the real user does, and the intermediary would count the first one
(docs/attacks.md, "impersonate"). Each simulated user registers a MAC key with the intermediaries
when invited (simulated here by one master both sides derive from; the analyzer never holds it).
That master, like every key of this module, is a secret of the session (:class:`SessionKeys`):
drawn from the OS's randomness when the session starts, handed to the parties that need it like
their broker passwords, never derived from the run seed, which is in every experiment file and
results directory (issue #32). The seed drives only the simulation, so the numbers are the same.

For round r of task k and plan q, the keys of user i are 3W + 1 words (a₁ … a_{3W}, b) of a ChaCha20
keystream keyed by HKDF(master, run ‖ k ‖ r ‖ q), at the user's position in its block of the plan's
cohort, where W is the number of 64-bit words of one report (its runs × width entries; W = 1 for a
residue). The tag of the report's words split into 22-bit limbs (l₁ … l_{3W}) is

    tag = Σ a_j l_j + b  mod p,   p = 2³¹ − 1.

The inner product is a universal hash and b a one-time pad, so a forger who has seen at most one
tag under a key succeeds with probability at most 1/p ≈ 4.7·10⁻¹⁰ per attempt (Wegman & Carter
1981). Every key is used for one record only, because a user reports once per round and plan. Limbs
keep every product of a key word (taken as its 32 raw bits, ≡ a_j mod p) and a limb below 2⁵⁴, so
numpy computes the tags of a whole block at once, exactly, in uint64. A message's usual records
(one block, ids increasing and contiguous) take their key words straight from the keystream,
entered at the first user's ChaCha20 block.

A fleet closes a block of a plan's cohort (everyone there has answered; the missing users dropped
out) with a message whose ``block_tag`` authenticates the whole message under the users' master
(:meth:`ReportAuthenticator.nonce_mac`): holding the users' broker account is not enough to declare a
block complete. That tag is Poly1305's, as ChaCha20-Poly1305 makes it over associated data and no
plaintext (RFC 8439), keyed by HKDF(master, block ‖ run ‖ task ‖ round ‖ plan ‖ block) and a random
96-bit nonce it carries: a message of ~1 MB is checked in 0.14 ms instead of HMAC-SHA256's 0.6 ms,
which was 20 % of the aggregator's CPU at T = 10⁸. The nonce makes every tag's one-time key its own,
so a block served again under the same key (a resend) never reuses one.

Secure-aggregation chunks from a fleet carry an HMAC-SHA256 under the fleet's own key
(:class:`FleetKeys`): the fleet speaks for its users there, and a chunk forged by another holder of
the users' broker account, another fleet included, would otherwise complete a step with garbage
before the genuine one arrives. Each fleet's key derives from the session's fleet master (not from
the world seed, which every fleet holds); a fleet gets its own key only, the aggregator the master.
Block truths and the fleets' statuses to the observer carry a MAC under the users' master.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privbandit.protocol.primitives.seeding import USER_BLOCK

PRIME = (1 << 31) - 1
LIMB_BITS = 22
LIMB_MASK = (1 << LIMB_BITS) - 1
TAG_DTYPE = "<u4"
NONCE_MAC_BYTES = 12 + 16  # a nonce and a Poly1305 tag (ReportAuthenticator.nonce_mac)


# A product of a raw 32-bit key word and a 22-bit limb is below 2⁵⁴, so 1023 of them and a 32-bit
# b (or a partial sum already reduced below p) add up below 2⁶⁴: exact in uint64, reduced mod p only
# once per 1023 terms (once per tag for every report up to 341 words).
_TERMS = 1023
# The keystream is ChaCha20 applied to zeros, read from this many zero bytes at a time (memory stays
# bounded whatever the report's width); 1 MiB is one 65,536-user block of one-word reports.
_ZEROS = bytes(1 << 20)
_CHACHA_BLOCK = 64  # bytes of keystream per ChaCha20 counter value (RFC 7539 §2.3)


def report_words(values: np.ndarray) -> np.ndarray:
    """The 64-bit words a report's tag covers, one row per user: residues and counts as they are,
    floats by their bits. ``values`` is (n,) or (runs, n, width). A view of ``values`` where its
    bits already are the words (int64, uint64, float64 with one word per user), else a copy."""
    values = np.asarray(values)
    if values.ndim == 3:  # the shape spelled out: -1 cannot be inferred for a message of no record
        runs, n, width = values.shape
        values = np.moveaxis(values, 1, 0).reshape(n, runs * width)
    else:
        values = values.reshape(-1, 1)
    if values.dtype.kind == "f":
        return values.astype(np.float64, copy=False).view(np.uint64)
    if values.dtype.kind in "iu":
        if values.dtype.itemsize == 8 and values.dtype.isnative:  # int64 → uint64: astype's bits, no copy
            return values.view(np.uint64)
        return values.astype(np.uint64)
    raise TypeError(f"reports of dtype {values.dtype} cannot be authenticated")


def _inner(keys: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Σ a_j l_j + b mod p per row, for (n, 3W + 1) raw keystream words (a₁ … a_{3W}, b) and (n, W)
    report words (module docstring). A key word enters as its raw 32 bits, congruent mod p to the
    a_j it stands for: the tag is the same as with every key word reduced first, without that pass."""
    w = words.shape[1]
    acc = keys[:, 3 * w].astype(np.uint64)
    limb = np.empty_like(words)
    terms = 0  # products added to acc since it was last below 2³²
    for i in range(3):  # limb i of every word: bits 22i … 22i + 21 (the last one has 20)
        np.right_shift(words, np.uint64(LIMB_BITS * i), out=limb)
        if i < 2:
            limb &= np.uint64(LIMB_MASK)
        if w == 1:  # one word per report (a residue, a count): in place, no row sums
            limb[:, 0] *= keys[:, i]
            acc += limb[:, 0]
            continue
        for lo in range(0, w, _TERMS):
            hi = min(w, lo + _TERMS)
            if terms + hi - lo > _TERMS:
                acc %= np.uint64(PRIME)
                terms = 0
            acc += np.multiply(keys[:, i * w + lo:i * w + hi], limb[:, lo:hi], dtype=np.uint64).sum(axis=1)
            terms += hi - lo
    acc %= np.uint64(PRIME)
    return acc


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
        empty tag; a receiver of a status or truth checks it over the bytes it received, the tag's
        value emptied, which are those bytes (``services.codec.tag_payload``)."""
        key = self._derive("privbandit " + "|".join([purpose, *map(str, path)]))
        mac = hmac.HMAC(key, hashes.SHA256())
        mac.update(payload)
        return mac.finalize()[:16]

    def nonce_mac(self, purpose: str, *path: object, payload: bytes, nonce: bytes | None = None) -> bytes:
        """``nonce ‖ tag`` (:data:`NONCE_MAC_BYTES`): the 16-byte Poly1305 tag of ``payload`` under
        the one-time key ChaCha20(HKDF(master, purpose ‖ path), nonce) gives (the module docstring;
        the block message: ``"block"``, run, task, round, plan, block). ``nonce``: 12 bytes, random
        by default."""
        nonce = os.urandom(12) if nonce is None else nonce
        key = self._derive("privbandit " + "|".join([purpose, *map(str, path)]))
        return nonce + ChaCha20Poly1305(key).encrypt(nonce, b"", payload)

    def check_nonce_mac(self, tag: bytes, purpose: str, *path: object, payload: bytes) -> bool:
        """Whether ``tag`` is :meth:`nonce_mac`'s for ``payload`` under ``purpose`` and ``path``."""
        if len(tag) != NONCE_MAC_BYTES:
            return False
        key = self._derive("privbandit " + "|".join([purpose, *map(str, path)]))
        try:
            ChaCha20Poly1305(key).decrypt(tag[:12], tag[12:], payload)
        except InvalidTag:
            return False
        return True

    def _keys(self, key: bytes, block: int, start: int, stop: int, words: int) -> np.ndarray:
        """(stop − start, words) raw keystream words of the users at offsets start … stop − 1 of
        ``block``: user u's are the 4·words bytes at 4·words·u of the block's keystream, which is
        entered at its 64-byte ChaCha20 block (the counter, the nonce's first 4 bytes) instead of
        being generated from the start of the block and thrown away up to there."""
        first = 4 * words * start
        counter, skip = divmod(first, _CHACHA_BLOCK)
        nonce = counter.to_bytes(4, "little") + bytes(4) + int(block).to_bytes(8, "little")
        enc = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        out = np.empty(skip + 4 * words * (stop - start), dtype=np.uint8)
        zeros = memoryview(_ZEROS)
        for at in range(0, out.size, len(zeros)):
            end = min(out.size, at + len(zeros))
            enc.update_into(zeros[:end - at], out[at:end])
        return out[skip:].view("<u4").reshape(stop - start, words)

    def tags(self, run_id: str, task: int, round_id: int, plan_id: int, first_user: int, user_ids: np.ndarray,
             values: np.ndarray) -> np.ndarray:
        """Tags of records (user_ids[i], values[.., i, ..]); every id must lie in the plan's cohort
        from first_user. Ids in any order, from any blocks; a message's usual ids (one block,
        increasing, contiguous) take the keystream as it comes, with no gather."""
        index = np.asarray(user_ids, dtype=np.int64) - int(first_user)
        words = report_words(values)
        if index.ndim != 1 or words.shape[0] != index.size:
            raise ValueError(f"user_ids must be 1-D with one id per report: {index.shape} ids, "
                             f"{words.shape[0]} reports")
        out = np.empty(index.size, dtype=TAG_DTYPE)
        if not index.size:
            return out
        low, high = int(index.min()), int(index.max())
        if low < 0:
            raise ValueError("a user id below the cohort's first user has no key")
        key = self._round_key(run_id, task, round_id, plan_id)
        if low // USER_BLOCK == high // USER_BLOCK:  # one block, the usual message: no masks, no sort
            block = low // USER_BLOCK
            out[:] = self._block_tags(key, block, index - block * USER_BLOCK, low % USER_BLOCK, high % USER_BLOCK,
                                      words)
            return out
        blocks = index // USER_BLOCK
        for block in np.unique(blocks):
            sel = np.flatnonzero(blocks == block)
            offsets = index[sel] - int(block) * USER_BLOCK
            out[sel] = self._block_tags(key, int(block), offsets, int(offsets.min()), int(offsets.max()), words[sel])
        return out

    def _block_tags(self, key: bytes, block: int, offsets: np.ndarray, low: int, high: int,
                    words: np.ndarray) -> np.ndarray:
        """Tags of the records at ``offsets`` of one block, in any order (``low``, ``high``: their
        least and greatest)."""
        keys = self._keys(key, block, low, high + 1, 3 * words.shape[1] + 1)
        # min, max and size say the offsets fill low … high; increasing, they are low, low + 1, …
        contiguous = offsets.size == high - low + 1 and bool(np.all(offsets[1:] > offsets[:-1]))
        if not contiguous:  # np.take gathers rows several times faster than keys[offsets - low]
            keys = np.take(keys, offsets - low, axis=0)
        return _inner(keys, words)

    def verify(self, run_id: str, task: int, round_id: int, plan_id: int, first_user: int, user_ids: np.ndarray,
               values: np.ndarray, tags: np.ndarray) -> np.ndarray:
        """A mask of the records whose tag is right."""
        tags = np.asarray(tags)
        if tags.shape != np.shape(user_ids):
            return np.zeros(np.shape(user_ids), dtype=bool)
        if tags.dtype != np.dtype(TAG_DTYPE):  # compared as uint64, as a <u4 tag is (negatives wrap)
            tags = tags.astype(np.uint64)
        return self.tags(run_id, task, round_id, plan_id, first_user, user_ids, values) == tags


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


@dataclass(frozen=True)
class SessionKeys:
    """The secrets of one session, drawn by the launcher (or ``privbandit keys --party session``)
    from the OS's randomness, never from the run seed; each party gets the ones its role needs,
    through its environment, like its broker password (docs/distributed.md):

    - ``users``: the users' report-authentication master (:class:`ReportAuthenticator`): the
      records' MACs, the block tags, the truths' and the fleets' statuses' MACs. The fleets sign
      with it; the intermediaries and the observer check with it; never the analyzer.
    - ``fleets``: the fleets' master; fleet i signs its secure-aggregation chunks with
      :func:`fleet_key` (fleets, i), which only it and the aggregator (holding the master) know.
    - ``identities``: the master of the simulated users' Ed25519 identities (secure aggregation's
      PKI, :class:`~privbandit.protocol.primitives.secagg.batch.UserIdentities`); the fleets only,
      so neither the aggregator nor anyone with the experiment file can forge a key advertisement.

    A restarted party gets the same keys (the launcher keeps them for the session; compose keeps
    them in volumes); a new session draws new ones. None of them changes a number: MACs and
    signatures only decide what is admitted."""

    users: int
    fleets: int
    identities: int

    def __post_init__(self):
        for name in ("users", "fleets", "identities"):
            key = getattr(self, name)
            if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 2**256:
                raise ValueError(f"SessionKeys.{name} must be a 256-bit non-negative integer")

    @classmethod
    def draw(cls) -> SessionKeys:
        return cls(secrets.randbits(256), secrets.randbits(256), secrets.randbits(256))

    def fleet(self, shard: int) -> int:
        """Fleet ``shard``'s own chunk key."""
        return fleet_key(self.fleets, shard)


def identity_master(key: int) -> bytes:
    """The bytes :class:`~privbandit.protocol.primitives.secagg.batch.UserIdentities` takes, from
    the session's ``identities`` key."""
    return int(key).to_bytes(32, "big")
