"""The online family's distributed twins (Anytime-Lazy-UCB's arrays, FTNL's epochs) are released in
process by the spine's ideal intermediary: a ``sum`` round (the modular sum of the users' Pólya-
shared residues) or an ``argmax`` round (only the index of the largest decoded sum leaves). Here the
same users' residues go through the real Bonawitz et al. round of
:mod:`privbandit.protocol.primitives.secagg` (X25519 key agreement, HKDF, ChaCha20 masks and share
encryption, Shamir recovery): the masks cancel and the release equals the ideal one bit for bit,
and the noisy max taken inside the intermediary is report-noisy-max on the users' own noise. That
is what licenses the substitution in the in-process engine."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from privbandit import registry
from privbandit.families.private_online_learning.mechanisms import DistributedArraySum, DistributedNoisyMax
from privbandit.families.private_online_learning.parties import modular_round
from privbandit.protocol.spine import engine
from privbandit.protocol.spine.events import Join, Plan, Reports
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.runner import tasks
from tests.protocol.secagg.helpers import make_round, run_round


def real_secure_sum(user_ids: np.ndarray, residues: np.ndarray, m: int, mode: str, round_id: int) -> np.ndarray:
    """One real SecAgg round among ``user_ids``; user u's input is its row of ``residues``."""
    residues = residues.reshape(len(user_ids), -1)
    ids = [int(u) for u in user_ids]
    users, server = make_round(ids, mode, m, length=residues.shape[1], round_id=round_id)
    result = run_round(users, server, {u: row for u, row in zip(ids, residues)})
    assert result.survivors == tuple(sorted(ids))
    return np.asarray(result.value, dtype=np.int64)


def signed(values: np.ndarray, m: int) -> np.ndarray:
    """Residues read as their representatives in (−m/2, m/2]: a share's η from (x̂ + η) mod m − x̂."""
    return (np.asarray(values, dtype=np.int64) + (m - 1) // 2) % m - (m - 1) // 2


@pytest.mark.parametrize(("n", "mode", "eps"), [(32, "complete", 0.5), (128, "sparse", 8.0)])
def test_array_sum_through_real_secagg_equals_the_ideal_sum(n, mode, eps):
    """Anytime-Lazy-UCB array r = log2 n: its users arrive in 5 cohorts interleaved with other arms'
    users (non-contiguous arrival times); each cohort's plan joins the array's one round at the
    ideal intermediary, which releases the sum mod m once the n-th report is in. One real round over
    all n users gives the same residue, hence the same decoded sum."""
    rng = np.random.default_rng(n)
    release = DistributedArraySum(eps, p=2.0**-20)
    q = release.params(n)
    arrivals = np.sort(rng.choice(np.arange(1_000, 50_000), size=n, replace=False))  # user ids
    x = (rng.random(n) < 0.7).astype(float)
    rnd = modular_round(7, n, q)  # the round LazyServer opens for the array
    box = Intermediary("aggregator")
    residues = np.empty(n, dtype=np.int64)
    encoded = noise = 0  # Σ x̂ and Σ η, read from the same draws (never seen by any party)
    cohorts = np.array_split(np.arange(n), 5)
    for c, cohort in enumerate(cohorts):
        shadow = copy.deepcopy(rng)
        residues[cohort] = release.randomize(x[cohort], q, rng)
        out = release.mechanism.randomize(x[cohort], q, shadow)
        assert np.array_equal(out.messages, residues[cohort])
        encoded, noise = encoded + out.encoded_sum, noise + out.noise_sum
        # The cohort's plan serves every user from the previous cohort's last arrival on; only the
        # array's users among them report into round 7 (the others pull other arms).
        first = int(arrivals[cohorts[c - 1][-1]]) + 1 if c else 0
        last = int(arrivals[cohort[-1]])
        plan = Plan(c, first, last - first + 1, {}, (rnd,) if c == 0 else (),
                    (Join(7, first, last - first + 1, cohort.size),))
        box.open_plan(plan)
        assert box.receive(Reports(7, c, arrivals[cohort], residues[cohort].reshape(1, -1, 1))) == cohort.size
        assert box.ready() == ([7] if c == len(cohorts) - 1 else [])
    want = box.release(7)
    assert want.n_reports == n and want.values.shape == (1, 1)
    assert np.unique(residues).size > 1  # a non-trivial instance
    got = real_secure_sum(arrivals, residues, q.m, mode, round_id=7)
    np.testing.assert_array_equal(got, want.values[0])
    assert want.values[0, 0] == int(residues.sum()) % q.m
    # The masks cancel on the users' own inputs: the decoded sum is Σ x̂ plus the users' noise.
    decoded, _ = release.decode(int(got[0]), q, np.random.default_rng(1))
    assert decoded == release.decode(int(want.values[0, 0]), q, np.random.default_rng(1))[0]
    assert abs(noise) <= q.tau and round(decoded * q.g) == encoded + noise


@pytest.mark.parametrize(("n", "mode", "argmax_at"), [(32, "complete", "analyzer"), (128, "sparse", "intermediary")])
def test_ftnl_epoch_through_real_secagg_equals_the_ideal_release(n, mode, argmax_at):
    """FTNL epoch s = log2 n: every user sends K residues (one per action), one round of width K.
    The real round's K-vector equals the ideal sum; the index the ideal ``argmax`` round releases is
    the noisy max of those same sums (and, where the trust model lets them out, the K decoded sums
    are the same); and that index is report-noisy-max on the users' own noise: the argmax of
    ``Σ x̂_j + Σ η_j`` with ``Σ η_j ∼ Lap_Z(c·g/ε)``, as the central model's RNM on that noise."""
    k, s = 5, int(np.log2(n))
    rng = np.random.default_rng(100 + n)
    rnm = DistributedNoisyMax(1.0, p=2.0**-20, multiplier=2.0, argmax_at=argmax_at)
    q = rnm.params(n)
    users = np.arange(n, 2 * n)  # epoch s holds users 2^s … 2^{s+1} − 1
    x = (rng.random((n, k)) < np.array([0.75, 0.7, 0.5, 0.3, 0.2])).astype(float)
    shadow = copy.deepcopy(rng)  # the same draws again, to read the users' encodings and shares
    residues = rnm.randomize(x, q, rng)
    out = rnm.mechanism.randomize(x.ravel(), q, shadow)
    assert np.array_equal(out.messages.reshape(n, k), residues)
    encoded = out.encoded.reshape(n, k).sum(axis=0)
    noise = signed(residues - out.encoded.reshape(n, k), q.m).sum(axis=0)

    def ideal(rule: str):
        box = Intermediary("aggregator")
        rnd = modular_round(s, n, q, width=k, rule=rule)  # the round FtnlServer opens
        box.open_plan(Plan(s, n - 1, n, {}, (rnd,), (Join(s, n - 1, n, n),)))
        assert box.receive(Reports(s, s, users - 1, residues[None])) == n  # 0-based user indices
        return box.release(s)

    want = ideal("sum").values[0]
    got = real_secure_sum(users, residues, q.m, mode, round_id=s)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (k,) and len(set(got.tolist())) > 1
    a = rnm.select(got, q, np.random.default_rng(3))
    b = rnm.select(want, q, np.random.default_rng(3))
    assert a[0] == b[0]
    assert (a[1] is None) == (argmax_at == "intermediary")
    if a[1] is not None:
        np.testing.assert_array_equal(a[1], b[1])
    # Only the index leaves an argmax round: the same index the analyzer would pick from the sums.
    index = ideal("argmax").values
    assert index.shape == (1, 1) and int(index[0, 0]) == a[0]
    # Report noisy max on the users' own noise (the decode is exact: |Σ η_j| ≤ τ here).
    assert np.all(np.abs(noise) <= q.tau)
    assert a[0] == int(np.argmax((encoded + noise) / q.g))
    np.testing.assert_array_equal(np.round(rnm.decode(got, q, None) * q.g), encoded + noise)
    assert rnm.privacy_event(k).pure_epsilon == pytest.approx(k * 0.5 if argmax_at == "analyzer" else 2 * 0.5)


@pytest.mark.parametrize(("algorithm", "extra"), [
    ("anytime-lazy-ucb", {}),
    ("ftnl", {"argmax_at": "intermediary", "rnm_multiplier": 2.0}),
    ("ftnl", {"argmax_at": "analyzer", "rnm_multiplier": 2.0}),
], ids=["lazy", "ftnl-argmax-inside", "ftnl-sums-out"])
def test_a_whole_distributed_task_releases_what_real_secagg_releases(algorithm, extra):
    """Every round a distributed Anytime-Lazy-UCB or FTNL task opens, released by the ideal
    intermediary in the engine, equals a real secure-aggregation round over the same reports; the
    task's results are those of the runner's (ideal) task."""
    fam = registry.family("private-online-learning")
    horizon = 100 if algorithm == "anytime-lazy-ucb" else 63
    config = fam.load({"family": fam.name, "horizon": horizon, "seed": 3, "epsilon": 1.0, "checkpoints": 8,
                       "environment": {"means": [0.8, 0.5, 0.3]},
                       "algorithms": {"a": {"algorithm": algorithm, "trust": "distributed", **extra}}}, "x.toml")
    checked = []

    class Checked(Intermediary):
        sent: dict

        def receive(self, reports: Reports) -> int:
            accepted = super().receive(reports)
            assert accepted == reports.user_ids.size  # honest users: every report admitted
            self.sent.setdefault(reports.round_id, []).append(reports)
            return accepted

        def release(self, round_id: int, partial: bool = False):
            rnd = self.rounds[round_id].round
            out = super().release(round_id, partial)
            parts = self.sent.pop(round_id)
            ids = np.concatenate([r.user_ids for r in parts])
            values = np.concatenate([r.values[0] for r in parts])
            assert out.n_reports == ids.size == rnd.expected
            if ids.size < 2:  # a one-user array (r = 0) or epoch (s = 0): no masks to cancel
                return out
            real = real_secure_sum(ids + 1, values, rnd.m, "sparse", round_id=rnd.id)
            np.testing.assert_array_equal(real, values.astype(object).sum(axis=0) % rnd.m)  # the masks cancel
            if rnd.rule == "sum":
                np.testing.assert_array_equal(real, out.values[0])
            else:
                lo, _ = rnd.decode
                assert int(np.argmax((real - lo) % rnd.m + lo)) == int(out.values[0, 0])
            checked.append((rnd.rule, ids.size))
            return out

    public, analyzer, users, _, observer = tasks.parties(fam, config, "a", [0])
    box = Checked("aggregator")
    box.sent = {}
    rejected = engine.run(analyzer, users, {"aggregator": box}, observer)
    got = observer.result([0], analyzer.ledger.summary(), analyzer.logic.summary(), fam.row_maker(config, "a"),
                          rejected)
    _, _, want, _ = tasks.execute(tasks.Task(fam.name, config, "a", (0,)))
    rules = {"anytime-lazy-ucb": "sum", "ftnl": "argmax" if extra.get("argmax_at") == "intermediary" else "sum"}
    assert len(checked) >= 4 and {r for r, _ in checked} == {rules[algorithm]} and max(n for _, n in checked) >= 16
    assert got.rounds == want.rounds and got.privacy == want.privacy
    np.testing.assert_array_equal(got.pseudo, want.pseudo)
    np.testing.assert_array_equal(got.realized, want.realized)


# --- intermediary = "secagg": the real protocol inside the task ------------------------------------

def _lazy_config(fam, horizon: int, **extra):
    return fam.load({"family": fam.name, "horizon": horizon, "seed": 3, "epsilon": 1.0, "checkpoints": 8,
                     "environment": {"means": [0.8, 0.5, 0.3]},
                     "algorithms": {"a": {"algorithm": "anytime-lazy-ucb", "trust": "distributed", **extra}}}, "x.toml")


@pytest.mark.parametrize("graph", ["complete", "sparse"])
def test_secagg_lazy_ucb_runs_real_rounds_among_the_named_users_and_equals_the_ideal_task(graph, monkeypatch):
    """With ``intermediary = "secagg"`` every array of at least two users is released by a real
    Bonawitz et al. round (the in-process intermediary calls the protocol's driver), among exactly
    the users its joins name, though they arrived over several plans; nobody drops out; the task's
    results are the ideal task's, bit for bit."""
    from privbandit.protocol.primitives.secagg import driver

    fam = registry.family("private-online-learning")
    calls = []
    real = driver.secure_sum

    def spy(ids, values, m, **kw):
        calls.append((np.asarray(ids).copy(), kw["dropped"].size, kw["mode"]))
        return real(ids, values, m, **kw)

    monkeypatch.setattr(driver, "secure_sum", spy)
    secure = tasks.execute(tasks.Task(fam.name, _lazy_config(fam, 300, intermediary="secagg", secagg_graph=graph),
                                      "a", (0,)))[2]
    ideal = tasks.execute(tasks.Task(fam.name, _lazy_config(fam, 300), "a", (0,)))[2]
    assert secure.rounds == ideal.rounds and secure.privacy == ideal.privacy
    np.testing.assert_array_equal(secure.pseudo, ideal.pseudo)
    np.testing.assert_array_equal(secure.realized, ideal.realized)
    arrays = [r for r in ideal.rounds if int(r["array"]) >= 1]  # 2^array users
    assert len(calls) == len(arrays) >= 10 and {mode for _, _, mode in calls} == {graph}
    assert all(dropped == 0 for _, dropped, _ in calls)
    assert sorted(ids.size for ids, _, _ in calls) == sorted(2 ** int(r["array"]) for r in arrays)
    # Some array was filled by users who are not one contiguous range (other arms' users between).
    assert any(ids[-1] - ids[0] + 1 > ids.size for ids, _, _ in calls)


def test_a_secure_lazy_plan_names_each_arrays_reporters_and_only_they_are_admitted():
    fam = registry.family("private-online-learning")
    config = _lazy_config(fam, 300, intermediary="secagg")
    plans = []

    class Recording(Intermediary):
        def open_plan(self, plan):
            plans.append(plan)
            super().open_plan(plan)

    public, analyzer, users, _, observer = tasks.parties(fam, config, "a", [0])
    engine.run(analyzer, users, {"aggregator": Recording("aggregator")}, observer)
    named = [(p, j) for p in plans for j in p.joins if j.users is not None]
    assert named, "no secure array joined"
    for plan, j in named:
        assert len(j.users) == j.reports and all(j.first <= u < j.first + j.count for u in j.users)
    rnd = next(r for p in plans for r in p.opens if r.secagg is not None)
    assert rnd.secagg == "sparse" and rnd.secagg_degree is not None
    fam.check_secure_round(config, "a", rnd)  # the users accept the analyzer's graph …
    with pytest.raises(ValueError, match="threat model gives"):  # … and refuse another one
        fam.check_secure_round(config, "a", dataclasses.replace(rnd, secagg_threshold=1))
    # The intermediary admits a named user, refuses a user of the range the join does not name.
    plan, j = next((p, j) for p, j in named if j.reports < j.count)  # other arms' users in its range
    box = Intermediary("aggregator")
    box.open(dataclasses.replace(rnd, id=j.round_id, expected=j.reports, secagg=None, secagg_degree=None,
                                 secagg_threshold=None))
    box.join(plan, j)
    outsider = next(u for u in range(j.first, j.first + j.count) if u not in set(j.users))
    ids = np.array([j.users[0], outsider])
    assert box.receive(Reports(j.round_id, plan.id, ids, np.ones((1, 2, 1), np.int64))) == 1
    assert box.rejected["not-named"] == 1


def test_secagg_ftnl_sums_each_epochs_k_residues_by_a_real_round_and_equals_the_ideal_task(monkeypatch):
    """FTNL with argmax_at = "analyzer" releases an epoch's K sums: with intermediary = "secagg"
    each epoch of at least two users is one real round whose inputs are the users' K residues; the
    task's results are the ideal task's, bit for bit. (Its argmax inside the intermediary is
    refused: secure aggregation releases sums, not their argmax.)"""
    from privbandit.protocol.primitives.secagg import driver

    fam = registry.family("private-online-learning")
    calls = []
    real = driver.secure_sum

    def spy(ids, values, m, **kw):
        calls.append(np.asarray(values).shape)
        return real(ids, values, m, **kw)

    def config(**extra):
        return fam.load({"family": fam.name, "horizon": 127, "seed": 3, "epsilon": 1.0, "checkpoints": 8,
                         "environment": {"means": [0.8, 0.5, 0.3, 0.2]},
                         "algorithms": {"a": {"algorithm": "ftnl", "trust": "distributed", "argmax_at": "analyzer",
                                              **extra}}}, "x.toml")

    monkeypatch.setattr(driver, "secure_sum", spy)
    secure = tasks.execute(tasks.Task(fam.name, config(intermediary="secagg", secagg_graph="sparse"), "a", (0,)))[2]
    ideal = tasks.execute(tasks.Task(fam.name, config(), "a", (0,)))[2]
    assert secure.rounds == ideal.rounds and secure.privacy == ideal.privacy
    np.testing.assert_array_equal(secure.pseudo, ideal.pseudo)
    assert sorted(calls) == [(2**s, 4) for s in range(1, 7)]  # epochs 1-6 (2-64 users), 4 residues each
