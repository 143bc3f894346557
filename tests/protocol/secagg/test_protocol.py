"""The round end to end: exact sums under dropouts, aborts, uniform masked inputs, key substitution."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy import stats

from privbandit.protocol.primitives.secagg import KeySubstitutionError, MaskingGraph, SecAggAbort
from privbandit.protocol.primitives.secagg.keys import raw_public
from privbandit.protocol.primitives.secagg.parameters import ThreatModel, derive
from privbandit.protocol.primitives.secagg.protocol import KeyDirectory, UnmaskRequest
from tests.protocol.secagg.helpers import (
    Drops,
    expected_sum,
    make_round,
    random_inputs,
    run_round,
    run_until_masked,
)
from tests.stats import P_MIN

MODULI = [7, 2**32 + 15, 2**62]
N_COMPLETE = 12  # t = ⌊2·12/3⌋ + 1 = 9: up to 3 dropouts
IDS = list(range(100, 100 + N_COMPLETE))
N_SPARSE = 40  # these tests fix k = 12, h = 13 holders, t = 9 (the protocol's mechanics, not its parameters)
SPARSE_IDS = list(range(7, 7 + N_SPARSE))
SPARSE = {"degree": 12, "threshold": 9}


def _check(ids, mode, m, drops, *, length=3, round_id=1, seed=0):
    rng = np.random.default_rng(seed)
    users, server = make_round(ids, mode, m, length=length, round_id=round_id, **(SPARSE if mode == "sparse" else {}))
    inputs = random_inputs(ids, m, length, rng)
    result = run_round(users, server, inputs, drops)
    survivors = sorted(set(ids) - drops.after_advertise - drops.after_share)
    assert result.survivors == tuple(survivors)
    np.testing.assert_array_equal(result.value, expected_sum(inputs, survivors, m))


def test_graph_parameters():
    g = MaskingGraph(SPARSE_IDS, "sparse", seed=b"x", **SPARSE)
    assert (g.degree, g.threshold, g.complete) == (12, 9, False)
    assert all(len(g.neighbours(u)) == 12 and u not in g.neighbours(u) for u in SPARSE_IDS)
    assert all(u in g.neighbours(v) for u in SPARSE_IDS for v in g.neighbours(u))  # undirected
    assert g.connected(SPARSE_IDS)
    assert MaskingGraph(range(5), "sparse", degree=6).complete  # k = 6 ≥ n − 1: falls back to complete
    assert not MaskingGraph(range(10), "sparse", degree=8).complete  # k = 8 < 9
    with pytest.raises(ValueError, match="even"):
        MaskingGraph(range(10), "sparse", degree=5)  # H(n, k) is k-regular only for even k
    # Without explicit parameters: the derivation's, for the default threat model.
    d = derive(N_SPARSE, ThreatModel())
    assert (MaskingGraph(SPARSE_IDS, "sparse").degree, MaskingGraph(SPARSE_IDS, "sparse").threshold) == (d.k, d.t)
    isolated = SPARSE_IDS[0]
    assert not g.connected(set(SPARSE_IDS) - set(g.neighbours(isolated)))
    assert g.connected(set(SPARSE_IDS) - {isolated})


def test_disconnected_survivors_abort_without_release():
    """Low threshold so the holder checks pass: the connectivity check alone must stop the round."""
    users, server = make_round(SPARSE_IDS, "sparse", 2**40, length=1, degree=12, threshold=1)
    gone = set(server.graph.neighbours(SPARSE_IDS[0]))
    inputs = random_inputs(SPARSE_IDS, 2**40, 1, np.random.default_rng(0))
    with pytest.raises(SecAggAbort, match="disconnected"):
        run_round(users, server, inputs, Drops(after_share=gone))

@pytest.mark.parametrize("m", MODULI)
@pytest.mark.parametrize("step", ["none", "after_advertise", "after_share", "after_masked"])
def test_complete_exact_sum_with_max_dropouts(m, step):
    drops = Drops()
    if step != "none":
        getattr(drops, step).update(IDS[1:4])  # n − t = 3 dropouts at this step
    _check(IDS, "complete", m, drops)


@pytest.mark.parametrize("m", MODULI)
def test_complete_dropouts_spread_over_steps(m):
    _check(IDS, "complete", m, Drops({IDS[0]}, {IDS[5]}, {IDS[-1]}))


@pytest.mark.parametrize("m", MODULI)
@pytest.mark.parametrize("step", ["none", "after_advertise", "after_share", "after_masked", "mixed"])
def test_sparse_exact_sum_with_dropouts(m, step):
    rng = np.random.default_rng(3)
    dropped = [int(u) for u in rng.choice(SPARSE_IDS, size=6, replace=False)]
    drops = Drops()
    if step == "mixed":
        drops = Drops(set(dropped[:2]), set(dropped[2:4]), set(dropped[4:]))
    elif step != "none":
        getattr(drops, step).update(dropped)
    _check(SPARSE_IDS, "sparse", m, drops)


@pytest.mark.parametrize("step", ["after_advertise", "after_share", "after_masked"])
def test_complete_below_threshold_aborts_without_release(step):
    users, server = make_round(IDS, "complete", 2**40, length=2)
    inputs = random_inputs(IDS, 2**40, 2, np.random.default_rng(0))
    drops = Drops()
    getattr(drops, step).update(IDS[:4])  # n − t + 1 dropouts
    with pytest.raises(SecAggAbort, match="threshold 9"):
        run_round(users, server, inputs, drops)


def test_sparse_neighbourhood_below_threshold_aborts():
    users, server = make_round(SPARSE_IDS, "sparse", 2**40, length=2, **SPARSE)
    victim = SPARSE_IDS[0]
    gone = set(server.graph.neighbours(victim)[:5])  # leaves 13 − 5 = 8 < 9 live holders
    inputs = random_inputs(SPARSE_IDS, 2**40, 2, np.random.default_rng(0))
    with pytest.raises(SecAggAbort, match="live holders"):
        run_round(users, server, inputs, Drops(after_share=gone))


def test_user_refuses_forged_small_survivor_set():
    """A server announcing too few survivors does not get b-shares from honest users."""
    users, server = make_round(IDS, "complete", 101, length=1)
    inputs = random_inputs(IDS, 101, 1, np.random.default_rng(0))
    run_until_masked(users, server, inputs, Drops())
    with pytest.raises(SecAggAbort, match="threshold 9"):
        users[IDS[0]].unmask(UnmaskRequest(frozenset(IDS[:5])))


def test_response_reveals_one_share_per_neighbour():
    users, server = make_round(IDS, "complete", 101, length=1)
    inputs = random_inputs(IDS, 101, 1, np.random.default_rng(0))
    masked = run_until_masked(users, server, inputs, Drops(after_share={IDS[2]}))
    request = server.unmask_request(masked)
    r = users[IDS[0]].unmask(request)
    assert set(r.self_mask_shares).isdisjoint(r.mask_key_shares)
    assert set(r.mask_key_shares) == {IDS[2]}
    assert set(r.self_mask_shares) == set(IDS) - {IDS[2]}


def test_substituted_key_is_detected_in_the_round():
    users, server = make_round(IDS, "complete", 101, length=1)
    dirs = server.key_directories(users[u].advertise() for u in users)
    victim, target = IDS[0], IDS[1]
    adverts = dict(dirs[victim].adverts)
    evil = raw_public(X25519PrivateKey.generate().public_key())
    adverts[target] = dataclasses.replace(adverts[target], c_public=evil)
    with pytest.raises(KeySubstitutionError, match=f"user {target}"):
        users[victim].share_keys(KeyDirectory(adverts))


def _masked_samples(value: int, m: int, rounds: int, length: int) -> np.ndarray:
    ids = list(range(3))
    out = []
    for r in range(rounds):
        users, server = make_round(ids, "complete", m, length=length, round_id=1000 + r)
        inputs = {u: np.full(length, value if u == 0 else 1, dtype=np.int64) for u in ids}
        masked = run_until_masked(users, server, inputs, Drops())
        out.append(next(msg.y for msg in masked if msg.sender == 0))
    return np.concatenate(out)


def test_masked_input_uniform_and_independent_of_input():
    m = 11
    a, b = _masked_samples(0, m, 40, 250), _masked_samples(7, m, 40, 250)
    ca, cb = np.bincount(a, minlength=m), np.bincount(b, minlength=m)
    assert ca.size == m and ca.min() > 0
    assert stats.chisquare(ca).pvalue > P_MIN and stats.chisquare(cb).pvalue > P_MIN
    assert stats.chi2_contingency(np.stack([ca, cb]))[1] > P_MIN
    # Power check: the unmasked inputs (what a broken protocol would send) fail both tests.
    assert stats.chisquare(np.bincount(np.full(a.size, 7), minlength=m)).pvalue < 1e-12


def test_masked_input_uniform_top_bits_large_modulus():
    m = 2**62 - 57
    v = _masked_samples(12345, m, 20, 500)
    width = -(-m // 64)
    probs = np.array([min(width, m - b * width) for b in range(64)], dtype=float) / m
    counts = np.bincount(v // width, minlength=64)
    assert stats.chisquare(counts, probs * v.size).pvalue > P_MIN


def test_steps_out_of_order_rejected():
    users, _ = make_round(IDS, "complete", 101, length=1)
    with pytest.raises(Exception, match="step"):
        users[IDS[0]].unmask(UnmaskRequest(frozenset(IDS)))


@pytest.mark.parametrize("m", MODULI)
def test_masks_applied_for_many_users_at_once_equal_the_formula(m):
    """apply_masks, which a fleet calls once for all its users, gives each user exactly
    y + PRG(b) + Σ_{v>u} PRG(s_uv) − Σ_{v<u} PRG(s_uv) mod m, computed here in Python integers one
    user at a time; users with different neighbour counts (none included) share the batch."""
    import os

    from privbandit.protocol.primitives.secagg.prg import uniform_mod
    from privbandit.protocol.primitives.secagg.protocol import (
        PURPOSE_PAIR,
        PURPOSE_SELF,
        MaskSeeds,
        RoundConfig,
        apply_masks,
    )

    cfg = RoundConfig(run_id=b"test-run", round_id=3, m=m, length=4)

    def mask(seed: bytes, purpose: bytes) -> np.ndarray:  # one seed's PRG expansion, as Bonawitz et al. define it
        return uniform_mod(seed, cfg.length, cfg.m, round_id=cfg.round_id, purpose=purpose)

    rng = np.random.default_rng(m % 1000)
    users = []
    for u, k in enumerate([5, 0, 12, 1, 7]):
        users.append(MaskSeeds(u, rng.integers(0, m, size=4, dtype=np.int64), os.urandom(32),
                               [os.urandom(32) for _ in range(k)], rng.random(k) < 0.5))
    got = apply_masks(users, cfg)
    for u, out in zip(users, got):
        want = [int(y) + int(b) for y, b in zip(u.y, mask(u.self_seed, PURPOSE_SELF))]
        for seed, up in zip(u.pair_seeds, u.up):
            want = [w + (1 if up else -1) * int(p) for w, p in zip(want, mask(seed, PURPOSE_PAIR))]
        assert out.sender == u.sender and out.y.tolist() == [w % m for w in want]
    assert [x.y.tolist() for x in apply_masks(users[2:3], cfg)] == [got[2].y.tolist()]  # alone or together


def test_a_shared_advert_book_verifies_each_advertisement_once_and_remembers_failures():
    """A fleet's users share one CheckedAdverts: one signature check per advertisement instead of
    one per reader (none for one its own users signed), and a substituted key fails for every
    reader, as if each had checked it."""
    from privbandit.protocol.primitives.secagg.keys import CheckedAdverts
    from privbandit.protocol.primitives.secagg.protocol import SecAggUser
    from tests.protocol.secagg.helpers import identity

    users, server = make_round(SPARSE_IDS, "sparse", 2**32 + 15, **SPARSE)
    pki = {u: identity(u).public_key() for u in SPARSE_IDS}
    cfg, graph = users[SPARSE_IDS[0]].config, users[SPARSE_IDS[0]].graph
    book = CheckedAdverts(pki, run_id=cfg.run_id, round_id=cfg.round_id)
    users = {u: SecAggUser(u, identity(u), pki, cfg, graph, book) for u in SPARSE_IDS}
    adverts = {u: users[u].advertise() for u in SPARSE_IDS}
    victim = SPARSE_IDS[3]
    forged = dataclasses.replace(adverts[victim], s_public=raw_public(X25519PrivateKey.generate().public_key()))
    directory = KeyDirectory({**adverts, victim: forged})
    aborted = []
    for u in SPARSE_IDS:
        try:
            users[u].share_keys(directory)
        except KeySubstitutionError as exc:
            aborted.append(u)
            assert f"user {victim}" in str(exc)
    assert sorted(aborted) == sorted(graph.neighbours(victim))  # each reader of the forged key, alone
    # One check per advertisement at most, not one per (reader, advertisement); here every genuine
    # advertisement was signed by a user of this book, so only the forged one is checked (issue #33).
    assert book.verified == 1
    # A user on its own (a device) gets its own book and checks each of its k neighbours itself.
    u = next(u for u in SPARSE_IDS if u != victim and u not in aborted)
    alone = SecAggUser(u, identity(u), pki, cfg, graph)
    alone.advertise()
    alone.share_keys(directory)  # not a neighbour of the victim: every key it reads is genuine
    assert alone.adverts is not book and alone.adverts.verified == len(graph.neighbours(u)) == SPARSE["degree"]


def test_live_holders_count_each_users_live_holders():
    """The server's vectorized holder count equals counting N(u) ∪ {u} ∩ live user by user."""
    g = MaskingGraph(SPARSE_IDS, "sparse", seed=b"live", **SPARSE)
    rng = np.random.default_rng(4)
    for _ in range(20):
        live = {u for u in SPARSE_IDS if rng.random() < 0.7}
        ids, h = g.live_holders(live)
        assert ids.tolist() == sorted(live)
        assert h.tolist() == [sum(1 for v in g.holders(u) if v in live) for u in sorted(live)]
