"""Secure aggregation between user *fleets* and the aggregator, as batched sans-I/O objects.

A fleet process hosts many simulated users; each still runs its own :class:`SecAggUser` (own keys,
own shares, own checks), but their messages travel together: one batch per fleet and step, as
flat arrays and fixed-width byte records, so the services move them with a few MQTT messages.

    fleet: FleetRound                           aggregator: AggregatorRound
    advertise()  → Adverts        round 0 →     directory(adverts)   → Adverts (U₁, to every fleet)
    share(dir)   → Shares         round 1 →     deliveries(shares)   → Shares (by recipient)
    mask(dlv)    → Masked         round 2 →     survivors(masked)    → ids (U₃, to every fleet)
    unmask(U₃)   → Unmasks        round 4 →     finalize(unmasks)    → Σ y mod m

Identities: the signing keys of Bonawitz et al.'s PKI come from :class:`UserIdentities`, a
keyed derivation the user fleets share (they simulate the users) and the aggregator never holds,
so the aggregator can relay key advertisements but cannot forge or substitute one.

A user whose own checks fail (a forged key, too few live holders, a disconnected survivor graph)
stops, as Bonawitz et al.'s users abort; the fleet counts why (``aborted``) and the rest go on.
The aggregator's checks raise :class:`SecAggAbort`: the round releases nothing.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privbandit.protocol.primitives.secagg.errors import SecAggError
from privbandit.protocol.primitives.secagg.graph import MaskingGraph
from privbandit.protocol.primitives.secagg.keys import CheckedAdverts, KeyAdvertisement
from privbandit.protocol.primitives.secagg.protocol import (
    LIMBS,
    EncryptedShares,
    KeyDirectory,
    MaskedInput,
    RoundConfig,
    SecAggServer,
    SecAggUser,
    SharesDelivery,
    UnmaskRequest,
    UnmaskResponse,
    apply_masks,
    deal_shares,
)

ADVERT_RECORD = 32 + 32 + 64  # c^PK ‖ s^PK ‖ Ed25519 signature
CIPHERTEXT_BYTES = struct.calcsize(f">QQ{2 * LIMBS}I") + 16  # share plaintext + Poly1305 tag
SHARE_SELF, SHARE_KEY = 0, 1  # an unmask row reveals a share of b_v, or of s_v^SK


class BatchError(ValueError):
    """A batch whose arrays do not fit together (from the network: count it, drop it)."""


class UserIdentities:
    """Long-term Ed25519 identities, ``HKDF(master, user id)``: the simulated PKI."""

    def __init__(self, master: bytes):
        if len(master) < 32:
            raise ValueError("identity master key must be ≥ 32 bytes")
        self._master = master
        self._public: dict[int, Ed25519PublicKey] = {}

    def private(self, user: int) -> Ed25519PrivateKey:
        seed = HKDF(hashes.SHA256(), 32, salt=None, info=b"privbandit/secagg/identity/v1" + struct.pack(">Q", user)).derive(self._master)
        return Ed25519PrivateKey.from_private_bytes(seed)

    def public(self, user: int) -> Ed25519PublicKey:
        key = self._public.get(user)
        if key is None:
            key = self._public[user] = self.private(user).public_key()
        return key

    @property
    def pki(self) -> Mapping[int, Ed25519PublicKey]:
        return _LazyPKI(self)


class _LazyPKI(Mapping):
    def __init__(self, ids: UserIdentities):
        self._ids = ids

    def __getitem__(self, user: int) -> Ed25519PublicKey:
        return self._ids.public(int(user))

    def get(self, user, default=None):
        return self._ids.public(int(user)) if int(user) >= 0 else default

    def __iter__(self):
        raise TypeError("the PKI is not enumerable")

    def __len__(self):
        raise TypeError("the PKI is not enumerable")


# --- the batches: what one fleet (or the aggregator) sends for one step --------------------------


def _ids(a) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise BatchError("ids must be a 1-d integer array")
    return a.astype(np.int64)


@dataclass(frozen=True)
class Adverts:
    ids: np.ndarray
    records: bytes  # ADVERT_RECORD bytes per id

    def __post_init__(self):
        if len(self.records) != ADVERT_RECORD * len(self.ids):
            raise BatchError(f"{len(self.ids)} adverts need {ADVERT_RECORD * len(self.ids)} bytes, got {len(self.records)}")

    @classmethod
    def of(cls, adverts: Iterable[KeyAdvertisement]) -> Adverts:
        adverts = list(adverts)
        return cls(np.array([a.user_id for a in adverts], dtype=np.int64),
                   b"".join(a.c_public + a.s_public + a.signature for a in adverts))

    def unpack(self) -> list[KeyAdvertisement]:
        r = self.records
        return [KeyAdvertisement(int(u), r[i * ADVERT_RECORD: i * ADVERT_RECORD + 32],
                                 r[i * ADVERT_RECORD + 32: i * ADVERT_RECORD + 64],
                                 r[i * ADVERT_RECORD + 64: (i + 1) * ADVERT_RECORD]) for i, u in enumerate(self.ids)]


@dataclass(frozen=True)
class Shares:
    """Ciphertexts of shares: row i goes from ``senders[i]`` to ``recipients[i]``."""

    senders: np.ndarray
    recipients: np.ndarray
    ciphertexts: bytes

    def __post_init__(self):
        if len(self.senders) != len(self.recipients) or len(self.ciphertexts) != CIPHERTEXT_BYTES * len(self.senders):
            raise BatchError("shares: senders, recipients and ciphertexts differ in length")

    def rows(self):
        c = self.ciphertexts
        for i, (s, r) in enumerate(zip(self.senders.tolist(), self.recipients.tolist())):
            yield s, r, c[i * CIPHERTEXT_BYTES: (i + 1) * CIPHERTEXT_BYTES]

    @classmethod
    def of(cls, rows: list[tuple[int, int, bytes]]) -> Shares:
        return cls(np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64),
                   b"".join(r[2] for r in rows))


def rows_of(values, n: int) -> np.ndarray:
    """``values`` as n rows of residues, as many in each (an input's ``length``); (0, 1) for no
    row. :class:`BatchError` if they do not split so."""
    values = np.asarray(values)
    if (values.size == 0) != (n == 0) or (n and values.size % n):
        raise BatchError("masked: values are not a whole, non-zero number of residues per id")
    return values.reshape(n, -1) if n else values.reshape(0, 1)


@dataclass(frozen=True)
class Masked:
    ids: np.ndarray
    values: np.ndarray  # (users, RoundConfig.length) masked residues

    def __post_init__(self):
        if len(self.ids) != len(self.values):
            raise BatchError("masked: ids and values differ in length")


@dataclass(frozen=True)
class Unmasks:
    """Row i: ``responders[i]`` reveals its share of ``owners[i]``'s b (kind 0) or s^SK (kind 1)."""

    responders: np.ndarray
    owners: np.ndarray
    kinds: np.ndarray
    limbs: np.ndarray  # LIMBS per row, flattened

    def __post_init__(self):
        n = len(self.responders)
        if len(self.owners) != n or len(self.kinds) != n or len(self.limbs) != n * LIMBS:
            raise BatchError("unmasks: responders, owners, kinds and limbs differ in length")


def concat(batches: list, cls):
    """Many chunks of one step into one batch."""
    if cls is Adverts:
        return Adverts(np.concatenate([_ids(b.ids) for b in batches] or [np.zeros(0, np.int64)]),
                       b"".join(b.records for b in batches))
    if cls is Shares:
        return Shares(np.concatenate([_ids(b.senders) for b in batches] or [np.zeros(0, np.int64)]),
                      np.concatenate([_ids(b.recipients) for b in batches] or [np.zeros(0, np.int64)]),
                      b"".join(b.ciphertexts for b in batches))
    if cls is Masked:  # a fleet hosting none of the round sends an empty chunk, whatever its width
        full = [b for b in batches if len(b.ids)]
        if len({np.shape(b.values)[1:] for b in full}) > 1:
            raise BatchError("masked: chunks of one step differ in residues per user")
        return Masked(np.concatenate([_ids(b.ids) for b in full] or [np.zeros(0, np.int64)]),
                      np.concatenate([np.asarray(b.values, dtype=np.int64) for b in full]
                                     or [np.zeros((0, 1), np.int64)]))
    return Unmasks(*(np.concatenate([np.asarray(getattr(b, f), dtype=np.int64) for b in batches] or [np.zeros(0, np.int64)])
                     for f in ("responders", "owners", "kinds", "limbs")))


# --- the two sides ---------------------------------------------------------------------------------


class FleetRound:
    """One fleet's users in one round. ``values`` maps each *reporting* user to its residue; the
    ``dropouts`` take part in rounds 0–1 and then vanish (their device went offline).

    The users share one :class:`~.keys.CheckedAdverts`: each advertisement in the directory is
    verified once in the fleet instead of once by each of its k neighbours here (the same verdict,
    for 1/k of the Ed25519 work), one signed by a user of this fleet not at all, and a pair whose
    two ends are both here agrees its two keys once for both (the very values each end derives
    alone: issue #33). A device verifies its k neighbours and derives its 2k keys itself;
    benchmarks/bench_secagg.py reports the fleet's CPU and a device's apart."""

    def __init__(self, config: RoundConfig, graph: MaskingGraph, identities: UserIdentities,
                 values: Mapping[int, int | np.ndarray], dropouts: Iterable[int] = ()):
        pki = identities.pki
        hosted = sorted({*map(int, values), *map(int, dropouts)})
        self.adverts = CheckedAdverts(pki, run_id=config.run_id, round_id=config.round_id)
        self.users = {u: SecAggUser(u, identities.private(u), pki, config, graph, self.adverts) for u in hosted}
        # each user's input: config.length residues (one per arm of an FTNL epoch, say)
        self.values = {int(u): np.atleast_1d(np.asarray(v, dtype=np.int64)) for u, v in values.items()}
        self.config = config
        self.aborted: Counter[str] = Counter()  # users that stopped, by the check that failed

    def _each(self, step: str, users: Iterable[int], call):
        out = []
        for u in users:
            try:
                out.append(call(self.users[u]))
            except SecAggError as exc:  # this user aborts; the others carry on
                self.aborted[f"{step}: {type(exc).__name__}"] += 1
                self.users.pop(u)
        return out

    def advertise(self) -> Adverts:
        return Adverts.of(self._each("round 0", list(self.users), lambda s: s.advertise()))

    def share(self, directory: Adverts) -> Shares:
        adverts = {a.user_id: a for a in directory.unpack()}
        directory = KeyDirectory(adverts)
        dealers = self._each("round 1", list(self.users), lambda s: s.share_holders(directory))
        shared = deal_shares(dealers)  # every user's dealing in one Horner pass per holder count
        return Shares.of([(m.sender, v, ct) for m in shared for v, ct in m.ciphertexts.items()])

    def mask(self, delivery: Shares) -> Masked:
        inbox: dict[int, dict[int, bytes]] = {}
        for s, r, ct in delivery.rows():
            inbox.setdefault(r, {})[s] = ct
        stay = [u for u in self.users if u in self.values]
        for u in set(self.users) - set(stay):
            self.users.pop(u)  # a dropout: gone before round 2
        seeds = self._each("round 2", stay, lambda s: s.mask_seeds(SharesDelivery(inbox.get(s.id, {})),
                                                                   self.values[s.id]))
        sent = apply_masks(seeds, self.config)  # every user's masks in one batch
        return Masked(np.array([m.sender for m in sent], dtype=np.int64),
                      np.array([m.y for m in sent], dtype=np.int64).reshape(len(sent), self.config.length))

    def unmask(self, survivors: np.ndarray) -> Unmasks:
        request = UnmaskRequest(frozenset(int(u) for u in survivors))
        mine = [u for u in self.users if u in request.survivors]
        answers = self._each("round 4", mine, lambda s: s.unmask(request))
        rows = [(a.sender, v, kind, share) for a in answers
                for kind, shares in ((SHARE_SELF, a.self_mask_shares), (SHARE_KEY, a.mask_key_shares))
                for v, share in shares.items()]
        return Unmasks(np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64),
                       np.array([r[2] for r in rows], dtype=np.int64),
                       np.concatenate([np.asarray(r[3], dtype=np.int64) for r in rows] or [np.zeros(0, np.int64)]))


class AggregatorRound:
    """The aggregator's side of one round: :class:`SecAggServer` fed with whole batches."""

    def __init__(self, config: RoundConfig, graph: MaskingGraph):
        self.server = SecAggServer(config, graph)

    @property
    def rejected(self) -> int:
        return self.server.rejected

    def directory(self, adverts: Adverts) -> Adverts:
        dirs = self.server.key_directories(adverts.unpack())
        return Adverts.of(self.server._adverts[u] for u in sorted(dirs))

    def deliveries(self, shares: Shares) -> Shares:
        by_sender: dict[int, dict[int, bytes]] = {}
        for s, r, ct in shares.rows():
            by_sender.setdefault(s, {})[r] = ct
        routed = self.server.route_shares(EncryptedShares(s, cts) for s, cts in by_sender.items())
        return Shares.of([(s, r, ct) for r, box in routed.items() for s, ct in box.ciphertexts.items()])

    def survivors(self, masked: Masked) -> np.ndarray:
        values = rows_of(np.asarray(masked.values, dtype=np.int64), len(masked.ids))
        req = self.server.unmask_request(MaskedInput(int(u), y) for u, y in zip(masked.ids, values))
        return np.array(sorted(req.survivors), dtype=np.int64)

    def finalize(self, unmasks: Unmasks) -> tuple[np.ndarray, int]:
        """``(Σ y mod m over U₃, |U₃|)``, the sum one entry per residue of an input."""
        responses: dict[int, tuple[dict, dict]] = {}
        limbs = np.asarray(unmasks.limbs, dtype=np.int64).reshape(-1, LIMBS)
        for i, (r, v, kind) in enumerate(zip(unmasks.responders.tolist(), unmasks.owners.tolist(), unmasks.kinds.tolist())):
            selfs, keys = responses.setdefault(r, ({}, {}))
            (selfs if kind == SHARE_SELF else keys)[v] = limbs[i]
        result = self.server.finalize(UnmaskResponse(r, s, k) for r, (s, k) in responses.items())
        return np.asarray(result.value, dtype=np.int64), len(result.survivors)


def round_setup(run: str, task: int, round_id: int, cohort: Sequence[int] | np.ndarray, m: int, mode: str,
                degree: int | None = None, threshold: int | None = None, length: int = 1
                ) -> tuple[RoundConfig, MaskingGraph]:
    """The public parameters both sides derive from a round's plans: the run, task and round
    identify the keys' context; the graph's public randomness is tied to them too; ``cohort`` is
    the round's users (its joins' members); ``degree`` and ``threshold`` are the (k, t) the plan
    carries (:mod:`.parameters`); ``length``: residues per user (the round's width)."""
    context = f"{run}/{task}".encode()
    config = RoundConfig(run_id=context, round_id=round_id, m=m, length=length)
    graph = MaskingGraph(np.asarray(cohort).tolist(), mode, seed=context + struct.pack(">Q", round_id),
                         degree=degree, threshold=threshold)
    return config, graph
