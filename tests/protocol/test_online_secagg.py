"""The online family's distributed twins use an ideal secure sum (:class:`SecureBlockSum`). Here
the same users' Pólya-shared encodings go through the real Bonawitz et al. round of
:mod:`privbandit.protocol.primitives.secagg` (X25519 key agreement, HKDF, ChaCha20 masks and share
encryption, Shamir recovery) and the release must equal the ideal one bit for bit: that is what
licenses the substitution in the in-process engine."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.protocol.mechanisms.private_online_learning import DistributedArraySum, DistributedNoisyMax
from tests.protocol.secagg.helpers import make_round, run_round


def real_secure_sum(user_ids: np.ndarray, residues: np.ndarray, m: int, mode: str, round_id: int) -> np.ndarray:
    """One real SecAgg round among ``user_ids``; user u's input is its row of ``residues``."""
    residues = residues.reshape(len(user_ids), -1)
    ids = [int(u) for u in user_ids]
    users, server = make_round(ids, mode, m, length=residues.shape[1], round_id=round_id)
    result = run_round(users, server, {u: row for u, row in zip(ids, residues)})
    assert result.survivors == tuple(sorted(ids))
    return np.asarray(result.value, dtype=np.int64)


@pytest.mark.parametrize(("n", "mode", "eps"), [(32, "complete", 0.5), (128, "sparse", 8.0)])
def test_array_sum_through_real_secagg_equals_the_ideal_sum(n, mode, eps):
    """Anytime-Lazy-UCB array r = log2 n: its users arrive in cohorts interleaved with other arms'
    users (non-contiguous round numbers), the ideal session folds each cohort into a running sum
    mod m; one real round over all n users gives the same residue, hence the same decoded sum."""
    rng = np.random.default_rng(n)
    release = DistributedArraySum(eps, p=2.0**-20)
    rounds = np.sort(rng.choice(np.arange(1_000, 50_000), size=n, replace=False))  # arrival times
    x = (rng.random(n) < 0.7).astype(float)
    ideal = release.open((2, int(np.log2(n))), n)
    residues = np.empty(n, dtype=np.int64)
    for cohort in np.array_split(np.arange(n), 5):
        residues[cohort] = release.randomize(x[cohort], ideal.params, rng)
        ideal.receive(rounds[cohort], residues[cohort])
    want = ideal.release()
    m = ideal.params.m
    assert np.unique(residues).size > 1  # a non-trivial instance
    got = real_secure_sum(rounds, residues, m, mode, round_id=7)
    np.testing.assert_array_equal(got, want)
    assert want[0] == int(residues.sum()) % m
    assert release.decode(int(got[0]), ideal.params, np.random.default_rng(1)) == \
        release.decode(int(want[0]), ideal.params, np.random.default_rng(1))


@pytest.mark.parametrize(("n", "mode", "argmax_at"), [(32, "complete", "analyzer"), (128, "sparse", "intermediary")])
def test_ftnl_epoch_through_real_secagg_equals_the_ideal_sum(n, mode, argmax_at):
    """FTNL epoch s = log2 n: every user sends K residues (one per action), one session of width K.
    The real round's K-vector equals the ideal one, so the noisy-max index (and, when the trust
    model lets them out, the K decoded sums) are the same."""
    k = 5
    rng = np.random.default_rng(100 + n)
    rnm = DistributedNoisyMax(1.0, p=2.0**-20, multiplier=2.0, argmax_at=argmax_at)
    first = n  # epoch s holds users 2^s … 2^{s+1} − 1
    users = np.arange(first, first + n)
    x = (rng.random((n, k)) < np.array([0.75, 0.7, 0.5, 0.3, 0.2])).astype(float)
    ideal = rnm.open(("epoch", int(np.log2(n))), n, k)
    residues = rnm.randomize(x, ideal.params, rng)
    ideal.receive(users, residues)
    want = ideal.release()
    got = real_secure_sum(users, residues, ideal.params.m, mode, round_id=int(np.log2(n)))
    np.testing.assert_array_equal(got, want)
    assert got.shape == (k,) and len(set(got.tolist())) > 1
    a = rnm.select(got, ideal.params, np.random.default_rng(3))
    b = rnm.select(want, ideal.params, np.random.default_rng(3))
    assert a[0] == b[0]
    assert (a[1] is None) == (argmax_at == "intermediary")
    if a[1] is not None:
        np.testing.assert_array_equal(a[1], b[1])
