"""One secure-aggregation round as sans-I/O objects: Bonawitz et al. 2017, Fig. 4 (semi-honest
rounds 0–2 and 4; the active-adversary ConsistencyCheck round 3 is not implemented), with the
sparse graph of SecAgg+ (Bell et al. 2020) as an option.

    user                                  server
    advertise()          AdvertiseKeys →  key_directories()       round 0: U₁
    share_keys(dir)      EncryptedShares → route_shares()         round 1: U₂
    masked_input(dlv, y) MaskedInput   →  unmask_request()        round 2: U₃
    unmask(req)          UnmaskResponse → finalize() → Σ y mod m  round 4: U₅

A user's masked input is ``y_u + PRG(b_u) + Σ_{v∈N(u)∩U₂, v>u} PRG(s_uv) − Σ_{v<u} PRG(s_uv)
mod m``. In round 4 every responding user reveals, for each neighbour v that shared with it,
either its share of ``b_v`` (v survived) or of ``s_v^SK`` (v dropped after sharing) — never both,
because it answers once, against a single announced survivor set. The server removes the self
masks of survivors and the dangling pairwise masks of dropped users; every other pairwise mask
cancels in the sum.

Any check that fails raises :class:`SecAggAbort` and nothing is released: a holder set with fewer
than t live members at any step, a secret with fewer than t shares, a sparse survivor graph that
is disconnected (its components' partial sums would leak).

Messages are plain frozen dataclasses; nothing here does I/O. Dropouts are simply messages that
never reach the next call.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from privbandit.protocol.primitives.encoding import check_modulus, modular_sum
from privbandit.protocol.primitives.secagg.errors import SecAggAbort, SecAggError, ShareError
from privbandit.protocol.primitives.secagg.graph import MaskingGraph
from privbandit.protocol.primitives.secagg.keys import (
    PURPOSE_ENCRYPTION,
    PURPOSE_MASK,
    CheckedAdverts,
    KeyAdvertisement,
    RoundKeys,
    pairwise_key,
)
from privbandit.protocol.primitives.secagg.prg import uniform_mod_rows
from privbandit.protocol.primitives.secagg.shamir import (
    LIMB_BYTES,
    combine_many,
    limbs_to_secrets,
    split_secrets_many,
)

AdvertiseKeys = KeyAdvertisement  # round 0 message (keys.py owns signing and verification)

SECRET_BYTES = 32
LIMBS = -(-SECRET_BYTES // LIMB_BYTES)
_SHARE_PLAIN = struct.Struct(f">QQ{2 * LIMBS}I")  # sender, recipient, s^SK share, b share
_SHARE_ADDRESS = struct.Struct(">QQ")  # its first two fields
_SHARE_ROW = np.dtype([("sender", ">u8"), ("recipient", ">u8"), ("limbs", ">u4", (2 * LIMBS,))])  # the same, packed
assert _SHARE_ROW.itemsize == _SHARE_PLAIN.size
PURPOSE_SELF = b"self-mask"
PURPOSE_PAIR = b"pair-mask"


@dataclass(frozen=True)
class RoundConfig:
    """Public parameters of a round, known to every party."""

    run_id: bytes
    round_id: int
    m: int  # modulus of this round; changes per round
    length: int  # number of residues per user

    def __post_init__(self):
        check_modulus(self.m)
        if self.length < 1:
            raise ValueError("length must be ≥ 1")


@dataclass(frozen=True)
class KeyDirectory:
    """Server → user after round 0: the (signed) advertisements of the user's live neighbours."""

    adverts: Mapping[int, KeyAdvertisement]


@dataclass(frozen=True)
class EncryptedShares:
    """User → server, round 1: AEAD ciphertexts of shares, keyed by recipient."""

    sender: int
    ciphertexts: Mapping[int, bytes]

    def wire_bytes(self) -> int:
        return 8 + sum(8 + len(c) for c in self.ciphertexts.values())


@dataclass(frozen=True)
class SharesDelivery:
    """Server → user after round 1: ciphertexts addressed to it, keyed by sender (its U₂ view)."""

    ciphertexts: Mapping[int, bytes]


@dataclass(frozen=True)
class MaskedInput:
    """User → server, round 2."""

    sender: int
    y: np.ndarray

    def wire_bytes(self) -> int:
        return 8 + 8 * self.y.size


@dataclass(frozen=True)
class UnmaskRequest:
    """Server → users after round 2: the survivor set U₃ (users whose masked input arrived)."""

    survivors: frozenset[int]


@dataclass(frozen=True)
class UnmaskResponse:
    """User → server, round 4: b-shares of surviving neighbours, s^SK-shares of dropped ones."""

    sender: int
    self_mask_shares: Mapping[int, np.ndarray]
    mask_key_shares: Mapping[int, np.ndarray]

    def wire_bytes(self) -> int:
        k = len(self.self_mask_shares) + len(self.mask_key_shares)
        return 8 + k * (8 + 4 * LIMBS)


@dataclass(frozen=True)
class SecAggResult:
    value: np.ndarray  # Σ_{u∈U₃} y_u mod m
    survivors: tuple[int, ...]  # U₃, whose inputs the sum covers


def _aead_nonce(sender: int) -> bytes:
    # One key per unordered pair and round, used once per direction: the sender id makes the nonce unique.
    return struct.pack(">QI", sender, 0)


def _aad(config: RoundConfig, sender: int, recipient: int) -> bytes:
    return b"privbandit/secagg/shares/v1" + config.run_id + struct.pack(">QQQ", config.round_id, sender, recipient)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SecAggAbort(message)


def _sign(u: int, v: int) -> int:
    """u adds PRG(s_uv) for v > u and subtracts it for v < u, so each pair cancels."""
    return 1 if v > u else -1


def _column_sums(rows: np.ndarray, m: int) -> np.ndarray:
    """``Σ rows mod m`` per column, exactly (a column of residues < m ≤ 2⁶² overflows int64)."""
    rows = np.asarray(rows, dtype=np.int64)
    return np.asarray([modular_sum(rows[:, c], m) for c in range(rows.shape[1])], dtype=np.int64)


def _share_plaintexts(sender: int, recipients: list[int], sk_shares: np.ndarray, b_shares: np.ndarray) -> bytes:
    """The share plaintexts (``_SHARE_PLAIN``: sender, recipient, s^SK share, b share) for each
    recipient, back to back, built in one numpy pass."""
    rows = np.empty(len(recipients), dtype=_SHARE_ROW)
    rows["sender"] = sender
    rows["recipient"] = recipients
    rows["limbs"][:, :LIMBS] = sk_shares
    rows["limbs"][:, LIMBS:] = b_shares
    return rows.tobytes()


@dataclass(frozen=True)
class ShareHolders:
    """One user's round-1 input to :func:`deal_shares`: its two secrets (s^SK, b) and its live
    holders (its live neighbours and itself, sorted)."""

    user: SecAggUser
    secrets: tuple[bytes, bytes]
    holders: list[int]


def deal_shares(dealers: list[ShareHolders]) -> list[EncryptedShares]:
    """Round 1's dealing and sealing for each user (Bonawitz et al. 2017, Fig. 4, "ShareKeys"):
    both secrets Shamir-shared t-of-h at x = holder id + 1, every user with the same number of live
    holders in one Horner pass (:func:`~.shamir.split_secrets_many`), then sealed per holder."""
    out: list[EncryptedShares | None] = [None] * len(dealers)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, d in enumerate(dealers):
        groups.setdefault((d.user.t, len(d.holders)), []).append(i)
    for (t, _), members in groups.items():
        xs = np.asarray([dealers[i].holders for i in members], dtype=np.int64) + 1
        shares = split_secrets_many([dealers[i].secrets for i in members], t, xs)
        for i, rows in zip(members, shares):
            d = dealers[i]
            out[i] = d.user.seal_shares(d.holders, rows[:, :LIMBS], rows[:, LIMBS:])
    return out


@dataclass(frozen=True)
class MaskSeeds:
    """One user's round-2 input to :func:`apply_masks`: its input, its self-mask seed ``b`` and one
    seed per neighbour in U₂, with ``up[i]`` true where that neighbour's id is above the user's."""

    sender: int
    y: np.ndarray
    self_seed: bytes
    pair_seeds: list[bytes]
    up: np.ndarray


def apply_masks(users: list[MaskSeeds], config: RoundConfig) -> list[MaskedInput]:
    """``y_u + PRG(b_u) + Σ_{v>u} PRG(s_uv) − Σ_{v<u} PRG(s_uv) mod m`` for each user (Bonawitz et
    al. 2017, Fig. 4, round 2), with every user's masks expanded in two batches (self masks, pair
    masks) and added in one pass per neighbour slot.

    Each distinct seed still keys its own ChaCha20 (:func:`~.prg.uniform_mod_rows`); what is batched
    across users is the numpy work after the keystream and the Python around it, and a seed two
    users of the batch share (the two ends of a pair) is expanded once. Residues are < m ≤ 2⁶²,
    so adding two of them never overflows int64 and the running sum is reduced after each slot.
    """
    m, length = config.m, config.length
    if not users:
        return []
    count = np.asarray([len(u.pair_seeds) for u in users], dtype=np.int64)
    acc = np.stack([u.y for u in users]) + uniform_mod_rows(
        [u.self_seed for u in users], length, m, round_id=config.round_id, purpose=PURPOSE_SELF)
    acc %= m
    # Both ends of a pair hosted in one batch hold the same seed s_uv; PRG(s_uv) is expanded once
    # and used by both (u adds it, v subtracts it: the very rows each would expand alone).
    index: dict[bytes, int] = {}
    which = np.asarray([index.setdefault(s, len(index)) for u in users for s in u.pair_seeds], dtype=np.int64)
    pairs = uniform_mod_rows(list(index), length, m, round_id=config.round_id, purpose=PURPOSE_PAIR)[which]
    up = np.concatenate([u.up for u in users]) if pairs.size else np.zeros(0, dtype=bool)
    pairs[~up] = (m - pairs[~up]) % m  # − PRG(s_uv) for v < u, as a residue
    slots = np.zeros((len(users), int(count.max()), length), dtype=np.int64)
    slots[np.arange(slots.shape[1]) < count[:, None]] = pairs  # user i's masks in row i, in order
    for j in range(slots.shape[1]):
        acc += slots[:, j]
        acc %= m
    return [MaskedInput(u.sender, row) for u, row in zip(users, acc)]


class SecAggUser:
    """One user's side of the round. Call the four methods in order; each one at most once.

    ``adverts``: a :class:`~.keys.CheckedAdverts` shared by the users one process simulates (a
    fleet), so each neighbour's advertisement is verified once there; by default the user has its
    own and verifies every neighbour itself, as a device does.
    """

    def __init__(
        self,
        user_id: int,
        identity: Ed25519PrivateKey,
        pki: Mapping[int, Ed25519PublicKey],
        config: RoundConfig,
        graph: MaskingGraph,
        adverts: CheckedAdverts | None = None,
    ):
        self.id = int(user_id)
        self.identity = identity
        self.pki = pki
        self.config = config
        self.graph = graph
        self.t = graph.threshold
        self.neighbours = graph.neighbours(self.id)
        self.adverts = CheckedAdverts(pki, run_id=config.run_id, round_id=config.round_id) if adverts is None else adverts
        self.keys = RoundKeys.generate()
        self._peers: dict[int, KeyAdvertisement] = {}  # live neighbours after round 0 (U₁ view)
        self._shared_with: frozenset[int] = frozenset()  # neighbours in U₂ view
        self._held: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # v → (s^SK share, b share)
        # AEAD key per live neighbour, derived once in round 1 and reused to open that neighbour's
        # shares in round 2 (the same X25519 + HKDF key both times; it was derived twice before).
        self._share_keys: dict[int, bytes] = {}
        self._stage = 0

    def _advance(self, stage: int) -> None:
        if self._stage != stage:
            raise SecAggError(f"user {self.id}: step {stage} called at step {self._stage}")
        self._stage = stage + 1

    def advertise(self) -> KeyAdvertisement:
        """Round 0: signed ``(c^PK, s^PK)``."""
        self._advance(0)
        advert = self.keys.advertise(self.identity, run_id=self.config.run_id, round_id=self.config.round_id, user_id=self.id)
        self.adverts.own(advert, self.identity)  # its readers in this process need not verify it
        return advert

    def share_keys(self, directory: KeyDirectory) -> EncryptedShares:
        """Round 1: verify neighbours' keys, share ``s^SK`` and a fresh ``b`` t-of-h, encrypt shares."""
        return deal_shares([self.share_holders(directory)])[0]

    def share_holders(self, directory: KeyDirectory) -> ShareHolders:
        """Round 1 up to the dealing: verify the live neighbours' keys, check the threshold and draw
        ``b``. :func:`deal_shares` then deals and seals, for one user or a whole fleet at once."""
        self._advance(1)
        # Look up the k neighbours, not scan the directory: a fleet hands all its users one
        # directory of every user in U₁, and a scan per user was O(n) each, O(n²) per fleet.
        listed = directory.adverts
        peers = {v: listed[v] for v in self.neighbours if v in listed}
        for v, advert in peers.items():
            if advert.user_id != v:
                raise SecAggAbort(f"user {self.id}: directory entry {v} carries user {advert.user_id}'s keys")
            self.adverts.check(advert)
        _require(len(peers) + 1 >= self.t, f"user {self.id}: {len(peers) + 1} live holders after round 0, threshold {self.t}")
        self._peers = peers
        self._b = os.urandom(SECRET_BYTES)
        s_sk = self.keys.s_private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return ShareHolders(self, (s_sk, self._b), sorted((*peers, self.id)))

    def seal_shares(self, holders: list[int], sk_shares: np.ndarray, b_shares: np.ndarray) -> EncryptedShares:
        """Keep the own share, encrypt each other holder's (one key agreement and one AEAD per pair)."""
        plains = _share_plaintexts(self.id, holders, sk_shares, b_shares)
        cts = {}
        for row, v in enumerate(holders):
            if v == self.id:
                self._held[v] = (sk_shares[row], b_shares[row])  # own share stays local
            else:
                cts[v] = self._seal_plain(self._peers[v], plains[row * _SHARE_PLAIN.size: (row + 1) * _SHARE_PLAIN.size])
        return EncryptedShares(self.id, cts)

    def _seal(self, peer: KeyAdvertisement, sk_share: np.ndarray, b_share: np.ndarray) -> bytes:
        """Encrypt this user's two shares for ``peer`` (AEAD, bound to sender, recipient, round).

        For benchmarks/bench_secagg.py, which has a user seal shares for a few sampled recipients
        only, through this same code.
        """
        return self._seal_plain(peer, _share_plaintexts(self.id, [peer.user_id], sk_share[None], b_share[None]))

    def _seal_plain(self, peer: KeyAdvertisement, plain: bytes) -> bytes:
        cfg, v = self.config, peer.user_id
        key = self.adverts.pair_key(self.keys.c_private, self.id, peer, purpose=PURPOSE_ENCRYPTION)
        self._share_keys[v] = key
        return ChaCha20Poly1305(key).encrypt(_aead_nonce(self.id), plain, _aad(cfg, self.id, v))

    def masked_input(self, delivery: SharesDelivery, y: np.ndarray) -> MaskedInput:
        """Round 2: store the shares received, then mask ``y`` with every neighbour in U₂."""
        return apply_masks([self.mask_seeds(delivery, y)], self.config)[0]

    def mask_seeds(self, delivery: SharesDelivery, y: np.ndarray) -> MaskSeeds:
        """Round 2 up to the masks: store the shares received (one AEAD opening per neighbour) and
        agree a mask seed with every neighbour in U₂ (one X25519 + HKDF per pair).
        :func:`apply_masks` expands and adds the masks, for one user or for a whole fleet at once."""
        self._advance(2)
        cfg = self.config
        y = np.asarray(y, dtype=np.int64).reshape(-1)
        if y.size != cfg.length or (y.size and (y.min() < 0 or y.max() >= cfg.m)):
            raise ValueError(f"input must be {cfg.length} residues in [0, {cfg.m})")
        for v, ct in delivery.ciphertexts.items():
            _require(v in self._peers, f"user {self.id}: shares from {v}, not a live neighbour")
            key = self._share_keys[v]  # set in round 1 for every live neighbour
            try:
                plain = ChaCha20Poly1305(key).decrypt(_aead_nonce(v), ct, _aad(cfg, v, self.id))
            except InvalidTag:
                raise SecAggAbort(f"user {self.id}: shares from {v} fail authentication") from None
            _require(len(plain) == _SHARE_PLAIN.size and _SHARE_ADDRESS.unpack_from(plain) == (v, self.id),
                     f"user {self.id}: misaddressed shares from {v}")
            limbs = np.frombuffer(plain, dtype=">u4", offset=_SHARE_ADDRESS.size).astype(np.int64)
            self._held[v] = (limbs[:LIMBS], limbs[LIMBS:])
        self._share_keys.clear()  # transport keys have no further use this round
        self._shared_with = frozenset(delivery.ciphertexts)
        _require(len(self._shared_with) + 1 >= self.t, f"user {self.id}: {len(self._shared_with) + 1} live holders after round 1, threshold {self.t}")
        peers = sorted(self._shared_with)
        seeds = [self.adverts.pair_key(self.keys.s_private, self.id, self._peers[v], purpose=PURPOSE_MASK) for v in peers]
        return MaskSeeds(self.id, y, self._b, seeds, np.asarray([v > self.id for v in peers], dtype=bool))

    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        """Round 4: for each neighbour that shared with us, reveal exactly one of its two shares."""
        self._advance(3)
        alive = request.survivors
        _require(self.id in alive, f"user {self.id}: announced survivors omit this user")
        live_holders = sum(1 for v in self._shared_with if v in alive) + 1
        _require(live_holders >= self.t, f"user {self.id}: {live_holders} live holders after round 2, threshold {self.t}")
        _require(self.graph.connected(alive), f"user {self.id}: survivor graph is disconnected; partial sums would leak")
        b_shares, sk_shares = {}, {}
        for v, (sk, b) in self._held.items():
            if v in alive:
                b_shares[v] = b
            elif v in self._shared_with:
                sk_shares[v] = sk
        return UnmaskResponse(self.id, b_shares, sk_shares)


@dataclass
class SecAggServer:
    """The aggregator's side. Each method takes the messages that arrived in time."""

    config: RoundConfig
    graph: MaskingGraph
    rejected: int = 0  # messages ignored: unknown sender, duplicate, or wrong stage
    _adverts: dict[int, KeyAdvertisement] = field(default_factory=dict)
    _u2: frozenset[int] = frozenset()
    _inputs: dict[int, np.ndarray] = field(default_factory=dict)
    _shared_to: dict[int, frozenset[int]] = field(default_factory=dict)

    def _check_holders(self, live: frozenset[int], step: str) -> None:
        t = self.graph.threshold
        _require(len(live) >= t, f"{step}: {len(live)} live users, threshold {t}; round aborted, nothing released")
        if not self.graph.complete:
            ids, h = self.graph.live_holders(live)
            low = np.flatnonzero(h < t)
            if low.size:
                u, got = int(ids[low[0]]), int(h[low[0]])
                raise SecAggAbort(f"{step}: user {u} has {got} live holders, threshold {t}; round aborted, nothing released")

    def _admit(self, senders: Iterable[int], allowed: Iterable[int]) -> list[int]:
        allowed, seen, out = set(allowed), set(), []
        for s in senders:
            if s in allowed and s not in seen:
                seen.add(s)
                out.append(s)
            else:
                self.rejected += 1
        return out

    def key_directories(self, adverts: Iterable[KeyAdvertisement]) -> dict[int, KeyDirectory]:
        """After round 0. Complete graph: one shared broadcast; sparse: each user's neighbours only."""
        adverts = list(adverts)
        keep = set(self._admit((a.user_id for a in adverts), self.graph.user_ids))
        self._adverts = {a.user_id: a for a in adverts if a.user_id in keep}
        u1 = frozenset(self._adverts)
        self._check_holders(u1, "round 0")
        if self.graph.complete:
            shared = KeyDirectory(self._adverts)
            return {u: shared for u in u1}
        return {u: KeyDirectory({v: self._adverts[v] for v in self.graph.neighbours(u) if v in u1}) for u in u1}

    def route_shares(self, messages: Iterable[EncryptedShares]) -> dict[int, SharesDelivery]:
        """After round 1: forward each ciphertext to its recipient; U₂ = who sent shares."""
        messages = list(messages)
        ok = set(self._admit((msg.sender for msg in messages), self._adverts))
        u2 = frozenset(ok)
        self._check_holders(u2, "round 1")
        inbox: dict[int, dict[int, bytes]] = {u: {} for u in u2}
        for msg in messages:
            if msg.sender not in ok:
                continue
            ok.discard(msg.sender)  # first message per sender only
            self._shared_to[msg.sender] = frozenset(msg.ciphertexts)
            for v, ct in msg.ciphertexts.items():
                if v in inbox:
                    inbox[v][msg.sender] = ct
        self._u2 = u2
        return {u: SharesDelivery(box) for u, box in inbox.items()}

    def unmask_request(self, messages: Iterable[MaskedInput]) -> UnmaskRequest:
        """After round 2: U₃ = users in U₂ whose masked input arrived."""
        messages = list(messages)
        ok = set(self._admit((msg.sender for msg in messages), self._u2))
        for msg in messages:
            if msg.sender in ok and msg.sender not in self._inputs:
                y = np.asarray(msg.y, dtype=np.int64)
                _require(y.shape == (self.config.length,) and bool(((y >= 0) & (y < self.config.m)).all()), f"malformed masked input from {msg.sender}")
                self._inputs[msg.sender] = y
        u3 = frozenset(self._inputs)
        self._check_holders(u3, "round 2")
        _require(self.graph.connected(u3), "round 2: survivor graph is disconnected; round aborted, nothing released")
        return UnmaskRequest(u3)

    def _reconstruct(self, owners: list[int], shares: dict[int, dict[int, np.ndarray]], what: str) -> list[bytes]:
        """Each owner's secret from the first t of its shares (by holder), all in one Lagrange
        batch. Fewer than t shares abort the round; a share at an x-coordinate its owner never
        issued raises :class:`ShareError`."""
        t = self.graph.threshold
        if not owners:
            return []
        xs = np.empty((len(owners), t), dtype=np.int64)
        ys = np.empty((len(owners), t, LIMBS), dtype=np.int64)
        for row, v in enumerate(owners):
            got = shares.get(v, {})
            _require(len(got) >= t, f"round 4: {len(got)} shares of {what} of user {v}, threshold {t}; nothing released")
            holders = sorted(got)
            foreign = set(holders) - self._shared_to.get(v, frozenset()) - {v}
            if foreign:
                raise ShareError(f"shares at x-coordinates {sorted(h + 1 for h in foreign)} were never issued")
            xs[row] = np.asarray(holders[:t], dtype=np.int64) + 1
            ys[row] = np.stack([got[h] for h in holders[:t]])
        return limbs_to_secrets(combine_many(xs, ys), SECRET_BYTES)

    def finalize(self, responses: Iterable[UnmaskResponse]) -> SecAggResult:
        """After round 4: reconstruct the needed secrets and release Σ_{U₃} y mod m (and nothing else)."""
        cfg = self.config
        u3 = frozenset(self._inputs)
        responses = list(responses)
        ok = set(self._admit((r.sender for r in responses), u3))
        self._check_holders(frozenset(ok), "round 4")
        b_shares: dict[int, dict[int, np.ndarray]] = {}
        sk_shares: dict[int, dict[int, np.ndarray]] = {}
        for r in responses:
            if r.sender not in ok:
                continue
            ok.discard(r.sender)
            for v, s in r.self_mask_shares.items():
                b_shares.setdefault(v, {})[r.sender] = s
            for v, s in r.mask_key_shares.items():
                sk_shares.setdefault(v, {})[r.sender] = s

        total = _column_sums(np.stack([self._inputs[u] for u in sorted(u3)]), cfg.m)
        # Remove every survivor's self mask: all b_v rebuilt in one Lagrange batch, their masks
        # expanded in one batch (Bonawitz et al. Fig. 4, round 4, "Unmasking").
        seeds = self._reconstruct(sorted(u3), b_shares, "b")
        selfs = uniform_mod_rows(seeds, cfg.length, cfg.m, round_id=cfg.round_id, purpose=PURPOSE_SELF)
        total = (total - _column_sums(selfs, cfg.m)) % cfg.m
        # Users that dropped after sharing: cancel the masks the survivors that got their shares
        # (and so masked with them) added. Their s^SK are rebuilt in one Lagrange batch and the
        # dangling masks expanded in one batch; the key agreement stays one per pair.
        dropped = [u for u in sorted(self._u2 - u3) if any(v in u3 for v in self._shared_to.get(u, ()))]
        pair_seeds, signs, peers = [], [], {}
        for u, key in zip(dropped, self._reconstruct(dropped, sk_shares, "s^SK")):
            s_sk = X25519PrivateKey.from_private_bytes(key)
            for v in sorted(self._shared_to[u]):
                if v in u3:
                    if v not in peers:
                        peers[v] = X25519PublicKey.from_public_bytes(self._adverts[v].s_public)
                    pair_seeds.append(pairwise_key(s_sk, peers[v], run_id=cfg.run_id, round_id=cfg.round_id,
                                                   me=u, peer=v, purpose=PURPOSE_MASK))
                    signs.append(_sign(v, u))
        if pair_seeds:
            masks = uniform_mod_rows(pair_seeds, cfg.length, cfg.m, round_id=cfg.round_id, purpose=PURPOSE_PAIR)
            up = np.asarray(signs) > 0  # v added +PRG(s_uv) for u > v: remove it; −PRG for u < v: add it back
            total = (total - _column_sums(masks[up], cfg.m) + _column_sums(masks[~up], cfg.m)) % cfg.m
        return SecAggResult(total, tuple(sorted(u3)))
