"""Authenticated key advertisement and pairwise key derivation.

Bonawitz et al. 2017, Fig. 4 (round 0, "AdvertiseKeys"): each user u creates two key pairs,
``(c_u^PK, c_u^SK)`` for encrypting the shares it sends through the server and
``(s_u^PK, s_u^SK)`` for the pairwise masks, and signs ``c_u^PK ‖ s_u^PK`` with its long-term
signing key (the active-adversary variant, §6/Fig. 4). Here:

- key agreement is X25519 and signatures are Ed25519;
- the "PKI" is a dict ``user_id → Ed25519 public key`` handed to every party at setup;
- the signature also covers the run id, round id and user id, so an advertisement cannot be
  replayed into another round or attributed to another user;
- a shared secret is never used directly: ``HKDF-SHA256(secret, info = label ‖ purpose ‖ run ‖
  round ‖ min(i, j) ‖ max(i, j))`` gives a 32-byte key that both sides derive identically.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from privbandit.protocol.primitives.secagg.errors import KeySubstitutionError
from privbandit.protocol.primitives.secagg.prg import hkdf_sha256_32

_ADVERT_LABEL = b"privbandit/secagg/advertise/v1"
_KDF_LABEL = b"privbandit/secagg/pairwise/v1"

# Purposes of pairwise keys: the AEAD key for share transport (from c keys) and the mask seed
# (from s keys). Distinct HKDF info keeps them independent even if the key pairs coincided.
PURPOSE_ENCRYPTION = b"enc"
PURPOSE_MASK = b"mask"


def raw_public(key: X25519PublicKey | Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class KeyAdvertisement:
    """Bonawitz round 0 message: ``(u, c_u^PK, s_u^PK, σ_u)``. Keys are raw 32-byte encodings."""

    user_id: int
    c_public: bytes
    s_public: bytes
    signature: bytes

    def signed_bytes(self, run_id: bytes, round_id: int) -> bytes:
        return advert_payload(run_id, round_id, self.user_id, self.c_public, self.s_public)


def advert_payload(run_id: bytes, round_id: int, user_id: int, c_public: bytes, s_public: bytes) -> bytes:
    return (
        _ADVERT_LABEL
        + struct.pack(">H", len(run_id))
        + run_id
        + struct.pack(">QQ", round_id, user_id)
        + c_public
        + s_public
    )


@dataclass
class RoundKeys:
    """A user's ephemeral key pairs for one round."""

    c_private: X25519PrivateKey
    s_private: X25519PrivateKey

    @classmethod
    def generate(cls) -> RoundKeys:
        return cls(X25519PrivateKey.generate(), X25519PrivateKey.generate())

    def advertise(self, identity: Ed25519PrivateKey, *, run_id: bytes, round_id: int, user_id: int) -> KeyAdvertisement:
        c_pub = raw_public(self.c_private.public_key())
        s_pub = raw_public(self.s_private.public_key())
        sig = identity.sign(advert_payload(run_id, round_id, user_id, c_pub, s_pub))
        return KeyAdvertisement(user_id, c_pub, s_pub, sig)


def verify_advertisement(
    advert: KeyAdvertisement, pki: Mapping[int, Ed25519PublicKey], *, run_id: bytes, round_id: int
) -> None:
    """Raise :class:`KeySubstitutionError` unless ``advert`` is signed by its user's identity key."""
    identity = pki.get(advert.user_id)
    if identity is None:
        raise KeySubstitutionError(f"user {advert.user_id} has no identity key in the PKI")
    try:
        identity.verify(advert.signature, advert.signed_bytes(run_id, round_id))
    except InvalidSignature:
        raise KeySubstitutionError(
            f"key advertisement of user {advert.user_id} (round {round_id}) fails signature "
            "verification: keys substituted or replayed in transit"
        ) from None


class CheckedAdverts:
    """What one process knows of a round's advertisements: each verified and parsed once for every
    user that reads it, and each pairwise key agreed once where the process holds both ends.

    Bonawitz et al.'s users each verify every neighbour's signed keys (round 1). A fleet process
    simulates many users, and k of them read each advertisement: the signature check is a function
    of public bytes only (the PKI's key, the signed payload, the signature), so its verdict is the
    same for all k and is computed once, then remembered, failures included (every reader of a
    substituted key still aborts, with the same error). Parsing the two X25519 public keys is
    shared likewise. A user run on its own (one object per device) gets its own book, so it still
    verifies each of its neighbours itself.

    Two more shortcuts apply only to what the process itself produced, and each gives the very
    value every device would compute (issue #33):

    - **Own advertisements** (:meth:`own`): a user of this process signed these bytes with the
      identity key whose public half the PKI lists (checked when it registers), and Ed25519
      verification of a genuine signature on the signed bytes always succeeds (RFC 8032 §5.1.7), so
      a reader of exactly those bytes gets "valid" without the check. Any other bytes (a forged or
      replayed advertisement) are verified as before.
    - **Pairwise keys** (:meth:`pair_key`): when both ends u, v of an edge are users here and each
      read the other's advertisement exactly as that user made it, u's X25519(c_u^SK, c_v^PK) and
      v's X25519(c_v^SK, c_u^PK) are the same Diffie–Hellman value, and the HKDF context orders the
      pair (min, max) (:func:`pairwise_key`), so the 32-byte key is computed by the first end and
      handed to the second. A read of anything else is computed by the reader, as on a device.
      A device's own book registers only its own advertisement, so it never shares a pair.
    """

    def __init__(self, pki: Mapping[int, Ed25519PublicKey], *, run_id: bytes, round_id: int):
        self.pki, self.run_id, self.round_id = pki, run_id, round_id
        self._verdicts: dict[KeyAdvertisement, str | None] = {}  # advert → None (valid) or why not
        self._parsed: dict[bytes, X25519PublicKey] = {}
        self._own: dict[int, KeyAdvertisement] = {}  # user → the advertisement it made here
        self._pairs: dict[tuple[int, int, bytes], bytes] = {}  # (min, max, purpose) → key, until the other end takes it
        self.verified = 0  # signatures actually checked (the benchmark reports it)
        self.agreed = 0  # pairwise keys actually derived (X25519 + HKDF)

    def own(self, advert: KeyAdvertisement, identity: Ed25519PrivateKey) -> None:
        """Register ``advert`` as signed here by ``identity``, if that is the key the PKI lists for
        its user (a user whose identity the PKI does not list is checked by its readers as usual)."""
        listed = self.pki.get(advert.user_id)
        if listed is not None and raw_public(listed) == raw_public(identity.public_key()):
            self._own[advert.user_id] = advert

    def check(self, advert: KeyAdvertisement) -> None:
        """:func:`verify_advertisement`, once per distinct advertisement (none for one signed here)."""
        if advert not in self._verdicts:
            if self._own.get(advert.user_id) != advert:
                self.verified += 1
                try:
                    verify_advertisement(advert, self.pki, run_id=self.run_id, round_id=self.round_id)
                except KeySubstitutionError as exc:
                    self._verdicts[advert] = str(exc)
            self._verdicts.setdefault(advert, None)
        why = self._verdicts[advert]
        if why is not None:
            raise KeySubstitutionError(why)

    def public(self, raw: bytes) -> X25519PublicKey:
        """The X25519 public key of a checked advertisement's 32 raw bytes."""
        key = self._parsed.get(raw)
        if key is None:
            key = self._parsed[raw] = X25519PublicKey.from_public_bytes(raw)
        return key

    def pair_key(self, private: X25519PrivateKey, me: int, peer: KeyAdvertisement, *, purpose: bytes) -> bytes:
        """:func:`pairwise_key` of ``me`` (its ``private`` key) and ``peer``'s advertised c key
        (``purpose`` :data:`PURPOSE_ENCRYPTION`) or s key (:data:`PURPOSE_MASK`); derived once per
        pair where both ends are users here (see the class docstring)."""
        raw = peer.c_public if purpose == PURPOSE_ENCRYPTION else peer.s_public
        genuine = self._own.get(peer.user_id) == peer  # this read of the peer is what the peer made
        slot = (min(me, peer.user_id), max(me, peer.user_id), purpose)
        if genuine and me in self._own:
            key = self._pairs.pop(slot, None)  # the other end's: each end asks once per purpose
            if key is not None:
                return key
        self.agreed += 1
        key = pairwise_key(private, self.public(raw), run_id=self.run_id, round_id=self.round_id, me=me,
                           peer=peer.user_id, purpose=purpose)
        if genuine and me in self._own:
            self._pairs[slot] = key
        return key


def pairwise_key(
    private: X25519PrivateKey,
    peer_public: X25519PublicKey | bytes,
    *,
    run_id: bytes,
    round_id: int,
    me: int,
    peer: int,
    purpose: bytes,
) -> bytes:
    """The 32-byte key shared by users ``me`` and ``peer``: X25519, then HKDF-SHA256.

    The context orders the pair (min, max), so ``s_ij = s_ji``.
    """
    if me == peer:
        raise ValueError("no pairwise key with oneself")
    if isinstance(peer_public, bytes):
        peer_public = X25519PublicKey.from_public_bytes(peer_public)
    shared = private.exchange(peer_public)
    lo, hi = min(me, peer), max(me, peer)
    info = (
        _KDF_LABEL
        + struct.pack(">H", len(purpose))
        + purpose
        + struct.pack(">H", len(run_id))
        + run_id
        + struct.pack(">QQQ", round_id, lo, hi)
    )
    return hkdf_sha256_32(shared, info)
