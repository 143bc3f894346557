"""Issue #33: a fleet derives a pair's keys once when it hosts both ends, skips verifying the
advertisements its own users signed, and splits the graph's ring into one arc per fleet. Each
shortcut must give every user the very values it would compute alone, as a device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from privbandit.protocol.primitives.secagg.batch import (
    Adverts,
    AggregatorRound,
    FleetRound,
    Shares,
    UserIdentities,
    concat,
    round_setup,
)
from privbandit.protocol.primitives.secagg.graph import MaskingGraph, contiguous_hosts, intra_fraction
from privbandit.protocol.primitives.secagg.keys import (
    PURPOSE_ENCRYPTION,
    PURPOSE_MASK,
    CheckedAdverts,
    pairwise_key,
    raw_public,
)
from privbandit.protocol.primitives.secagg.prg import uniform_mod
from privbandit.protocol.primitives.secagg.protocol import PURPOSE_PAIR, PURPOSE_SELF, _aad, _aead_nonce

M = 2**40 + 15
IDENTITIES = UserIdentities(b"p" * 32)


def _fleets(n, k, t, hosts, dropouts=(), seed=0, length=2):
    """One round of n users, user u run by fleet ``hosts[u]``, through FleetRound/AggregatorRound;
    returns everything needed to recompute each user's values the way a device would."""
    rng = np.random.default_rng(seed)
    config, graph = round_setup("pairs", 0, seed, np.arange(n), M, "sparse", k, t, length)
    values = {u: rng.integers(0, M, length) for u in range(n) if u not in dropouts}
    shards = max(hosts) + 1
    fleets = [FleetRound(config, graph, IDENTITIES, {u: v for u, v in values.items() if hosts[u] == f},
                         [u for u in dropouts if hosts[u] == f]) for f in range(shards)]
    agg = AggregatorRound(config, graph)
    directory = agg.directory(concat([f.advertise() for f in fleets], Adverts))
    shares = [f.share(directory) for f in fleets]
    users = {u: s for f in fleets for u, s in f.users.items()}  # before round 2 forgets the dropouts
    delivery = agg.deliveries(concat(shares, Shares))
    masked = [f.mask(delivery) for f in fleets]
    return config, graph, values, fleets, users, directory, shares, delivery, masked


def _device_view(config, users, directory, delivery, values, dropouts):
    """Each reporting user's masked input, recomputed as one device does: its own X25519 + HKDF
    with every neighbour's advertised key, its own PRG expansions, no book."""
    adverts = {a.user_id: a for a in directory.unpack()}
    got = {}
    for u, user in users.items():
        if u in dropouts:
            continue
        senders = sorted(int(s) for s, r in zip(delivery.senders, delivery.recipients) if r == u)
        y = values[u].astype(object) + uniform_mod(user._b, config.length, config.m, round_id=config.round_id,
                                                   purpose=PURPOSE_SELF).astype(object)
        for v in senders:
            seed = pairwise_key(user.keys.s_private, adverts[v].s_public, run_id=config.run_id,
                                round_id=config.round_id, me=u, peer=v, purpose=PURPOSE_MASK)
            mask = uniform_mod(seed, config.length, config.m, round_id=config.round_id, purpose=PURPOSE_PAIR)
            y = y + (1 if v > u else -1) * mask.astype(object)
        got[u] = [int(x) % config.m for x in y]
    return got


@pytest.mark.parametrize("seed", range(6))
def test_shared_pairs_give_every_user_its_own_device_values(seed):
    """Property over random graphs and hostings (random, by id, by ring arc; 1–3 fleets, dropouts):
    each user's masked input equals the one-device computation, each ciphertext opens under the key
    its two ends derive alone, and the fleets derived each intra-fleet pair's keys once."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(12, 60))
    k = int(rng.choice([2, 4, 6, 8]))
    t = int(rng.integers(1, k // 2 + 2))
    shards = int(rng.integers(1, 4))
    config, graph = round_setup("pairs", 0, seed, np.arange(n), M, "sparse", k, t, 2)
    kind = ["random", "id", "ring"][seed % 3]
    hosts = {"random": rng.integers(0, shards, n), "id": np.arange(n) % shards,
             "ring": contiguous_hosts(graph, np.arange(n), shards)}[kind].tolist()
    hosts[0] = shards - 1  # every fleet index up to shards − 1 exists
    dropouts = sorted(rng.choice(n, int(rng.integers(0, 3)), replace=False).tolist())
    config, graph, values, fleets, users, directory, shares, delivery, masked = _fleets(n, k, t, hosts, dropouts, seed)
    assert all(not f.aborted for f in fleets)
    got = {int(u): [int(x) for x in y] for m in masked for u, y in zip(m.ids, m.values)}
    assert got == _device_view(config, users, directory, delivery, values, set(dropouts))
    # Every ciphertext opens under the key its sender and its recipient each derive alone.
    adverts = {a.user_id: a for a in directory.unpack()}

    def alone(me, peer):
        return pairwise_key(users[me].keys.c_private, adverts[peer].c_public, run_id=config.run_id,
                            round_id=config.round_id, me=me, peer=peer, purpose=PURPOSE_ENCRYPTION)

    rows = [row for batch in shares for row in batch.rows()]
    assert len(rows) == n * k
    for s, r, ct in rows:
        assert alone(s, r) == alone(r, s)
        ChaCha20Poly1305(alone(s, r)).decrypt(_aead_nonce(s), ct, _aad(config, s, r))
    # X25519 + HKDF work: once per pair and purpose where one fleet hosts both ends, else once per end.
    edges = {(u, v) for u in range(n) for v in graph.neighbours(u) if u < v}
    cost = {(u, v): 1 if hosts[u] == hosts[v] else 2 for u, v in edges}
    # round 2: a reporting user masks with each neighbour that shared, dropouts included (dangling masks)
    masking = sum(cost[u, v] if u not in dropouts and v not in dropouts else (u not in dropouts) + (v not in dropouts)
                  for u, v in edges)
    assert sum(f.adverts.agreed for f in fleets) == sum(cost.values()) + masking


@pytest.mark.parametrize("hosting", ["id", "ring"])
def test_a_forged_advertisement_still_aborts_every_reader_in_every_fleet(hosting):
    """The aggregator substitutes user v's mask key in the directory: every neighbour of v aborts,
    in v's own fleet too (its book knows v's genuine bytes, so the forgery is verified and fails),
    and nobody else does."""
    n, k, t = 40, 8, 3
    config, graph = round_setup("pairs", 0, 9, np.arange(n), M, "sparse", k, t, 1)
    hosts = (np.arange(n) % 2 if hosting == "id" else contiguous_hosts(graph, np.arange(n), 2)).tolist()
    fleets = [FleetRound(config, graph, IDENTITIES, {u: 1 for u in range(n) if hosts[u] == f}) for f in range(2)]
    agg = AggregatorRound(config, graph)
    directory = agg.directory(concat([f.advertise() for f in fleets], Adverts))
    victim = 17
    forged = [dataclasses.replace(a, s_public=raw_public(X25519PrivateKey.generate().public_key()))
              if a.user_id == victim else a for a in directory.unpack()]
    for f in fleets:
        f.share(Adverts.of(forged))
    alive = {u for f in fleets for u in f.users}
    assert set(range(n)) - alive == set(graph.neighbours(victim))
    assert sum(f.aborted["round 1: KeySubstitutionError"] for f in fleets) == k
    assert any(hosts[v] == hosts[victim] for v in graph.neighbours(victim))  # readers in the victim's fleet too


def test_own_adverts_are_not_verified_again_but_others_are():
    """A fleet verifies only the advertisements its users read that another process signed; with
    the ring split, that is about k users per arc end, not n."""
    n, k, t = 200, 10, 4
    config, graph = round_setup("pairs", 0, 3, np.arange(n), M, "sparse", k, t, 1)
    hosts = contiguous_hosts(graph, np.arange(n), 2).tolist()
    config, graph, values, fleets, *_ = _fleets(n, k, t, hosts, seed=3, length=1)
    assert all(not f.aborted for f in fleets)
    for f, fleet in enumerate(fleets):
        read = {v for u in fleet.users for v in graph.neighbours(u)}
        assert fleet.adverts.verified == len({v for v in read if hosts[v] != f}) <= k
    # A book whose PKI lists another identity for the user does not take its advertisement on trust.
    book = CheckedAdverts({0: Ed25519PrivateKey.generate().public_key()}, run_id=b"r", round_id=0)
    from privbandit.protocol.primitives.secagg.keys import RoundKeys

    mine = Ed25519PrivateKey.generate()
    advert = RoundKeys.generate().advertise(mine, run_id=b"r", round_id=0, user_id=0)
    book.own(advert, mine)
    with pytest.raises(Exception, match="fails signature verification"):
        book.check(advert)
    assert book.verified == 1


def test_the_ring_split_keeps_all_but_the_arc_ends_edges_in_one_fleet():
    """Arcs of ≥ k/2 places: exactly shards·(k/2)(k/2 + 1)/2 edges cross an arc's end; the id
    rule keeps about 1/shards of the edges in one fleet."""
    for n, k, shards in [(1000, 38, 2), (500, 10, 3), (97, 8, 4), (60, 4, 1)]:
        g = MaskingGraph(range(n), "sparse", seed=b"ring", degree=k, threshold=3)
        hosts = contiguous_hosts(g, np.arange(n), shards)
        sizes = np.bincount(hosts, minlength=shards)
        assert sizes.sum() == n and sizes.max() - sizes.min() <= 1  # arcs as even as n allows
        cross = (shards if shards > 1 else 0) * (k // 2) * (k // 2 + 1) // 2
        assert intra_fraction(g, dict(enumerate(hosts.tolist()))) == pytest.approx(1 - cross / (n * k / 2))
    g = MaskingGraph(range(1000), "sparse", seed=b"ring", degree=38, threshold=3)
    assert abs(intra_fraction(g, {u: u % 2 for u in range(1000)}) - 0.5) < 0.02
