"""Theorem 3's route (issue #30): Dist-DP-SE, Dist-RDP-SE and Dist-CDP-SE through a real shuffler
that releases the multiset of every user's split-and-mix shares. The release is a multiset (no
order, no sender), the analyzer decodes exactly the secure-aggregation sum, the ledger states the
(ε, δ) the closeness bound proves and never a pure ε, and the users refuse an analyzer that asks
for fewer shares than their own δ needs."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pytest
from scipy import stats

from privbandit.families.distributed_dp_mab import config as cfg
from privbandit.families.distributed_dp_mab.family import FAMILY
from privbandit.families.distributed_dp_mab.learners import GeometricSchedule, Lemma2Width, SuccessiveElimination
from privbandit.families.distributed_dp_mab.mechanisms import PolyaSecAgg
from privbandit.families.distributed_dp_mab.parties import EliminationServer, check_split_round, split_shares
from privbandit.protocol.primitives.shuffle_sum import closeness, split
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Reports, Round
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.parties import check_release
from privbandit.runner import run
from privbandit.runner.config import ConfigError
from tests.stats import P_MIN

DELTA = 1e-6


def _split_plan(n=3, first=40, rid=2, delta=DELTA):
    mech = PolyaSecAgg(1.0, 0.01)
    server = EliminationServer(SuccessiveElimination(2, GeometricSchedule(2), Lemma2Width(0.1)), mech, 10**6, key=0,
                               intermediary="shuffler", delta=delta)
    q = mech.params(n)
    rnd = server.round_of(rid, n, q)
    return mech, q, rnd, Plan(rid, first, n, {"batch": 1, "arm": 0, "params": asdict(q)}, (rnd,), (Join(rid, first, n, n),))


def test_the_shuffler_releases_the_multiset_of_every_share_uniformly_permuted():
    """Every entry of every report is a message of its own: the release is (1, n·s, 1), carries no
    user ids, holds exactly the shares sent, and puts user 0's first share (and her second) at a
    uniform position among all n·s, independently of each other: shares of one user are not kept
    together. Chi-square over 3,000 keyed rounds, p > 10⁻³; a shuffler that permuted reports as
    rows (keeping a user's shares adjacent) fails the second test at once."""
    n, s = 3, 4
    rnd = Round(0, "shuffler", "shuffle", expected=n, width=s, m=1000, messages=True)
    first_at, gap = [], []
    box = Intermediary("shuffler", shuffle_keys=[9])
    for trial in range(3000):
        r = replace(rnd, id=trial)
        p = Plan(trial, 40, n, {}, (r,), (Join(trial, 40, n, n),))
        box.open_plan(p)
        shares = np.arange(n * s, dtype=np.int64).reshape(1, n, s)  # distinct labels: who sent what
        box.receive(Reports(trial, trial, np.arange(40, 40 + n), shares))
        box.answered(trial)
        (ready,) = box.ready()
        release = box.release(ready, partial=True)
        assert release.user_ids is None and release.values.shape == (1, n * s, 1)
        assert sorted(release.values.ravel().tolist()) == sorted(shares.ravel().tolist())
        check_release(r, release, 1)
        pos = {int(v): i for i, v in enumerate(release.values.ravel())}
        first_at.append(pos[0])
        gap.append((pos[1] - pos[0]) % (n * s))
    assert stats.chisquare(np.bincount(first_at, minlength=n * s)).pvalue > P_MIN
    gaps = np.bincount(gap, minlength=n * s)[1:]  # the second share anywhere but on the first
    assert stats.chisquare(gaps).pvalue > P_MIN
    rows_kept = np.full(3000, 1)  # a row-wise shuffle: the second share always right after the first
    assert stats.chisquare(np.bincount(rows_kept, minlength=n * s)[1:]).pvalue < P_MIN


def test_a_release_that_is_not_the_rounds_multiset_is_refused_before_anything_changes():
    mech, q, rnd, plan = _split_plan()
    n, s = rnd.expected, rnd.width
    with pytest.raises(ProtocolError, match="wrong-shape|reports, not"):
        check_release(rnd, Release(rnd.id, n, np.zeros((1, n, s), np.int64)), 1)  # rows, not messages
    with pytest.raises(ProtocolError):
        check_release(rnd, Release(rnd.id, n, np.full((1, n * s, 1), q.m, np.int64)), 1)  # outside Z_m


def test_the_analyzer_decodes_the_secure_sum_and_the_ledger_states_the_closeness():
    mech, q, rnd, plan = _split_plan(n=16)
    server = EliminationServer(SuccessiveElimination(2, GeometricSchedule(2), Lemma2Width(0.1)), mech, 10**6, key=0,
                               intermediary="shuffler", delta=DELTA)
    server.open[rnd.id] = plan
    residues = np.random.default_rng(3).integers(0, q.m, 16)
    shares = split(residues, rnd.width, q.m, np.random.default_rng(4)).reshape(1, -1, 1)
    release = Release(rnd.id, 16, np.random.default_rng(5).permutation(shares[0])[None])
    assert server.value_of(rnd, release, q) == int(residues.sum()) % q.m
    body, spend = server.on_release(rnd, release)
    assert body["shares"] == rnd.width and body["closeness"] == closeness(16, rnd.width, q.m)
    assert spend.event.epsilon == 1.0 and 0 < spend.event.delta <= DELTA and not np.isfinite(spend.event.pure_epsilon)


def test_users_refuse_a_round_with_fewer_shares_than_their_delta_needs():
    mech, q, rnd, plan = _split_plan()
    check_split_round(mech, DELTA, rnd)
    with pytest.raises(ValueError, match="needs at least"):
        check_split_round(mech, DELTA, replace(rnd, width=rnd.width - 1))
    with pytest.raises(ValueError, match="do not run split-and-mix"):
        check_split_round(mech, None, rnd)
    with pytest.raises(ValueError, match="needs at least"):  # a tighter δ on the users' side
        check_split_round(mech, DELTA / 1e6, rnd)


QUICK = {"name": "split", "horizon": 20_000, "seed": 7, "epsilon": 0.5, "runs": 2,
         "environment": {"kind": "uniform", "arms": 4}}


def _run(algorithms: dict, **top):
    return run({**QUICK, **top, "algorithms": algorithms})


def test_theorem3s_route_spends_half_the_budget_with_the_closeness_as_delta():
    res = _run({"Dist-DP-SE": {"intermediary": "shuffler"}, "residues": {"algorithm": "dist-dp-se",
                                                                          "intermediary": "shuffler-residues"}})
    p = res.summary["privacy"]["Dist-DP-SE"]
    assert p["guarantee"] == "proven" and p["epsilon_pure"] is None
    assert p["epsilon_at_delta"] == 0.25 and p["delta"] == pytest.approx(1 / (10 * 20_000))
    assert 0 < p["delta_from_theorems"] <= p["delta"] and any("split-and-mix" in b for b in p["basis"])
    assert res.summary["privacy"]["residues"]["guarantee"] == "none proven"
    a = res.summary["algorithms"]["Dist-DP-SE"]["parameters"]
    assert a["epsilon"] == 0.5 and a["noise_budget"] == "theorem-3" and a["p"] == pytest.approx(1 / 40_000)
    assert p["epsilon_target"] == 0.5  # the budget; the noise at ε′ = ε/2, p′ = 1/(2T)
    whole = _run({"x": {"algorithm": "dist-dp-se", "intermediary": "shuffler", "noise_budget": "whole"}})
    assert whole.summary["privacy"]["x"]["epsilon_at_delta"] == 0.5


def test_the_shuffler_decodes_exactly_what_secure_aggregation_decodes():
    """At the same noise parameters the split-and-mix route's regret equals the aggregator's in
    every run and at every checkpoint: the shares add up to the residues the aggregator sums, and
    are drawn from a stream of their own. (Same label: a label keys the users' streams.)"""
    same = {"epsilon": 0.5, "p": 1e-5}

    def rows(route: str) -> list:  # (the noise at the whole ε, not Theorem 3's half)
        res = _run({"dp": {"algorithm": "dist-dp-se", **same, **route_of(route)},
                    "rdp": {"algorithm": "dist-rdp-se", **same, **{k: v for k, v in route_of(route).items()
                                                                  if k != "noise_budget"}}})
        table = res.table()
        out = table if isinstance(table, list) else table.to_dict("records")
        return [(r["algorithm"], r["run"], r["t"], r["pseudo"], r["realized"]) for r in out], res

    def route_of(route: str) -> dict:
        return {} if route == "auto" else {"intermediary": route, **({"noise_budget": "whole"} if route == "shuffler"
                                                                    else {})}

    (secagg, _), (mixed, res) = rows("auto"), rows("shuffler")
    assert secagg == mixed and len(mixed) > 10
    p = res.summary["privacy"]["rdp"]
    assert p["guarantee"] == "proven" and p["epsilon_at_delta"] > 0 and p["delta_from_theorems"] <= p["delta"]


def test_equal_guarantees_solve_the_noise_for_the_target():
    """Under Theorem 3's split the nominal ε is solved upwards (the noise at its half spends 0.5),
    with the whole ε it stays 0.5: both spend the target."""
    res = _run({"t3": {"algorithm": "dist-dp-se", "intermediary": "shuffler"},
                "whole": {"algorithm": "dist-dp-se", "intermediary": "shuffler", "noise_budget": "whole"}},
               calibrate=True)
    for label, nominal in (("t3", 1.0), ("whole", 0.5)):
        p = res.summary["privacy"][label]
        assert p["epsilon_at_delta"] == pytest.approx(0.5, rel=1e-6) and p["delta_from_theorems"] <= p["delta"]
        assert res.summary["algorithms"][label]["parameters"]["epsilon"] == pytest.approx(nominal, rel=1e-6)


def test_colluders_leave_the_shuffled_noise_of_the_others():
    res = _run({"Dist-DP-SE": {"intermediary": "shuffler", "adversary": {"kind": "colluders", "fraction": 0.2}}})
    coalition = res.summary["privacy"]["Dist-DP-SE"]["coalition"]
    assert coalition["guarantee"] == "proven" and coalition["epsilon_at_delta"] > 0.25


@pytest.mark.parametrize("table, match", [
    ({"algorithm": "dp-se", "intermediary": "shuffler"}, "dp-se has none"),
    ({"algorithm": "dist-dp-se", "intermediary": "shuffler", "range_check": True}, "nobody sees a residue"),
    ({"algorithm": "dist-rdp-se", "intermediary": "shuffler", "noise_budget": "whole"}, "noise_budget: only"),
])
def test_settings_split_and_mix_cannot_serve_are_refused(table, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        _run({"x": table})


def test_a_round_too_small_for_the_bound_is_refused_by_name():
    """δ so small that no 64 shares reach it for the first batch's 2 users: refused before any work."""
    with pytest.raises(ConfigError, match="Dist-DP-SE.*split-and-mix of n = 2 users"):
        _run({"Dist-DP-SE": {"intermediary": "shuffler"}}, delta=1e-30)


def test_the_users_check_a_curious_analyzers_round_in_process():
    a = cfg.AlgorithmConfig(algorithm="dist-dp-se", intermediary="shuffler", epsilon=1.0, p=0.01, noise_budget="whole")
    config = cfg.ExperimentConfig.model_validate({**QUICK, "algorithms": {"x": a.model_dump()}})
    users = FAMILY.users(config, "x", [0])
    mech, q, rnd, plan = _split_plan(n=8, delta=1 / (10 * 20_000))
    weak = replace(rnd, width=rnd.width - 2)
    bad = replace(plan, opens=(weak,))
    with pytest.raises(ProtocolError, match="needs at least"):
        users.act(bad, 0, plan.first_user, 8, None)
    with pytest.raises(ValueError, match="needs at least"):
        FAMILY.check_secure_round(config, "x", weak)
    assert split_shares(mech, q, 8, 1 / (10 * 20_000)) == rnd.width


def test_the_audit_holds_the_mixed_release_to_its_claim():
    """privbandit audit's target for Dist-DP-SE through the split-and-mix shuffler: the users' own
    shares, summed as the analyzer sums them; claim (ε/2, δ) at the ledger's δ; consistent, and a
    broken randomizer (no noise shares) under the same claim is flagged."""
    from privbandit.audit import audit_target
    from privbandit.families.distributed_dp_mab.audit import mechanism_target

    def audit(target, samples, seed):
        return audit_target(target, samples, None, 0.95, np.random.default_rng(seed))

    config = cfg.ExperimentConfig.model_validate({**QUICK, "horizon": 10**6, "epsilon": 1.0,
                                                  "algorithms": {"mixed": {"algorithm": "dist-dp-se",
                                                                           "intermediary": "shuffler"}}})
    (t,) = FAMILY.audit_targets(config, "mixed", 16)
    assert t.details["rule"] == "shuffle" and t.details["shares"] >= 2
    claim = t.claim(t.delta)  # the noise at Theorem 3's ε/2
    assert claim["guarantee"] == "proven" and claim["epsilon_at_delta"] == 0.5 and claim["epsilon_pure"] is None
    r = audit(t, 200_000, seed=3)
    assert r["verdict"] == "consistent" and r["audit"]["epsilon"] <= 0.5, r["audit"]

    class NoShares(PolyaSecAgg):
        def local_shares(self, size, params, rng):
            return np.zeros(size, dtype=np.int64)

    server = FAMILY.analyzer(FAMILY.public_task(config, "mixed", [0]), [0])
    rnd = server.round_of(0, 16, server.mechanism.params(16))
    broken = mechanism_target(NoShares(0.5, server.mechanism.p), rnd, 16, lambda e, d: t.claim(d), t.delta,
                              "distributed-dp-mab", "broken", "dist-dp-se")
    flagged = audit(broken, 200_000, seed=3)
    assert flagged["verdict"] == "violation", flagged["audit"]


@pytest.mark.parametrize("kind", ["max-shift", "out-of-range", "window-edge"])
def test_poisoning_users_do_to_the_shares_what_they_do_to_the_residues(kind):
    """An adversary attacks the residue a user's shares add up to and moves the change into her
    last share: the sums, and so the regret of an attacked run, are those of the same attack under
    secure aggregation, run by run (same label, same noise parameters)."""
    same = {"algorithm": "dist-dp-se", "epsilon": 0.5, "p": 1e-5, "adversary": {"kind": kind, "fraction": 0.05}}

    def final(route: dict) -> list:
        table = _run({"x": {**same, **route}}).table()
        rows = table if isinstance(table, list) else table.to_dict("records")
        return [r["pseudo"] for r in rows if r["t"] == QUICK["horizon"]]

    honest = [r["pseudo"] for r in (lambda t: t if isinstance(t, list) else t.to_dict("records"))(
        _run({"x": {k: v for k, v in same.items() if k != "adversary"}}).table()) if r["t"] == QUICK["horizon"]]
    attacked = final({})
    assert final({"intermediary": "shuffler", "noise_budget": "whole"}) == attacked and attacked != honest
