"""Key advertisement signatures and pairwise key derivation."""

from __future__ import annotations

import dataclasses

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privbandit.protocol.primitives.secagg.errors import KeySubstitutionError
from privbandit.protocol.primitives.secagg.keys import (
    PURPOSE_ENCRYPTION,
    PURPOSE_MASK,
    RoundKeys,
    pairwise_key,
    verify_advertisement,
)

RUN = b"run-1"


@pytest.fixture
def parties():
    ids = {3: Ed25519PrivateKey.generate(), 8: Ed25519PrivateKey.generate()}
    pki = {u: k.public_key() for u, k in ids.items()}
    keys = {u: RoundKeys.generate() for u in ids}
    adverts = {u: keys[u].advertise(ids[u], run_id=RUN, round_id=4, user_id=u) for u in ids}
    return pki, keys, adverts


def test_both_sides_derive_the_same_key(parties):
    pki, keys, adverts = parties
    for u, v in [(3, 8), (8, 3)]:
        verify_advertisement(adverts[v], pki, run_id=RUN, round_id=4)
    k38 = pairwise_key(keys[3].s_private, adverts[8].s_public, run_id=RUN, round_id=4, me=3, peer=8, purpose=PURPOSE_MASK)
    k83 = pairwise_key(keys[8].s_private, adverts[3].s_public, run_id=RUN, round_id=4, me=8, peer=3, purpose=PURPOSE_MASK)
    assert k38 == k83 and len(k38) == 32


def test_contexts_separate(parties):
    _, keys, adverts = parties
    base = {"run_id": RUN, "round_id": 4, "me": 3, "peer": 8, "purpose": PURPOSE_MASK}
    k = pairwise_key(keys[3].s_private, adverts[8].s_public, **base)
    for change in [{"run_id": b"run-2"}, {"round_id": 5}, {"purpose": PURPOSE_ENCRYPTION}, {"peer": 9}]:
        assert pairwise_key(keys[3].s_private, adverts[8].s_public, **{**base, **change}) != k


def test_substituted_key_is_detected(parties):
    pki, _, adverts = parties
    attacker = RoundKeys.generate()
    forged_s = attacker.advertise(Ed25519PrivateKey.generate(), run_id=RUN, round_id=4, user_id=8).s_public
    with pytest.raises(KeySubstitutionError, match="user 8"):
        verify_advertisement(dataclasses.replace(adverts[8], s_public=forged_s), pki, run_id=RUN, round_id=4)
    # An advertisement fully re-signed by the attacker's own identity key fails too.
    forged = attacker.advertise(Ed25519PrivateKey.generate(), run_id=RUN, round_id=4, user_id=8)
    with pytest.raises(KeySubstitutionError):
        verify_advertisement(forged, pki, run_id=RUN, round_id=4)


def test_replay_into_another_round_or_user_is_detected(parties):
    pki, _, adverts = parties
    verify_advertisement(adverts[3], pki, run_id=RUN, round_id=4)
    with pytest.raises(KeySubstitutionError):
        verify_advertisement(adverts[3], pki, run_id=RUN, round_id=5)
    with pytest.raises(KeySubstitutionError):
        verify_advertisement(dataclasses.replace(adverts[3], user_id=8), pki, run_id=RUN, round_id=4)
    with pytest.raises(KeySubstitutionError, match="no identity key"):
        verify_advertisement(dataclasses.replace(adverts[3], user_id=99), pki, run_id=RUN, round_id=4)
