"""Algorithm 4 under the ``exact`` preset (issue #30 item 4) and the ``cs-random`` reference: every
node's P_Vec is calibrated by the exact accountant of its label counts, the ledger states the ε it
computes (never more than the target) and names the accountant; random play reports nothing and
its regret is uniform play's."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.families.concurrent_shuffle.bandit import alg4_of
from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.protocol.privacy import counts
from privbandit.runner import run
from privbandit.runner.config import ConfigError

BASE = {"family": "concurrent-shuffle", "name": "x", "horizon": 2000, "seed": 5, "epsilon": 1.0, "delta": 0.1,
        "runs": 2, "environment": {"arms": 20, "dim": 3}}
ALGS = {"alg4@k2": {"algorithm": "cs-linucb", "k": 2}, "random": {"algorithm": "cs-random", "k": 1}}


def test_exact_nodes_are_calibrated_by_the_count_accountant():
    res = run({**BASE, "preset": "exact", "algorithms": ALGS})
    from privbandit.families.concurrent_shuffle import FAMILY

    a = alg4_of(FAMILY.public_task(res.config, "alg4@k2", [0]))
    labels = slb.n_entries(3)
    for level, (vec, s) in enumerate(zip(a.vec, a.tree.sizes), start=1):
        assert vec.p == 0.5 and vec.b == counts.fewest_noise_bits(s, vec.g, labels, 0.5, 0.05)
        event = a.event(level)
        assert event.epsilon <= 0.5 and event.delta == 0.05 and event.basis == counts.BASIS
    p = res.summary["privacy"]["alg4@k2"]
    assert p["guarantee"] == "proven" and p["epsilon_at_delta"] <= 1.0 and counts.BASIS in p["basis"]
    theory = run({**BASE, "algorithms": {"alg4@k2": ALGS["alg4@k2"]}}).summary["privacy"]["alg4@k2"]
    assert theory["basis"] == [lp.VEC_BASIS]  # the ledger says which accountant produced each figure


def test_random_play_reports_nothing_and_pays_uniform_regret():
    res = run({**BASE, "horizon": 20_000, "algorithms": {"random": ALGS["random"]}})
    p = res.summary["privacy"]["random"]
    assert p["releases"] == 0 and p["epsilon_pure"] == 0
    from privbandit.families.shuffle_linear_bandits.world import instances

    inst = instances("paper", 20, 3, 5, [0, 1])
    gap = (inst.means.max(axis=1, keepdims=True) - inst.means).mean(axis=1)  # uniform play's mean gap per user
    final = {r: row["pseudo"] for row in (res.table() if isinstance(res.table(), list) else res.table().to_dict("records"))
             for r in [row["run"]] if row["t"] == 20_000}
    for r in (0, 1):
        sd = (inst.means.max(axis=1)[r] - inst.means[r]).std() * np.sqrt(20_000)
        assert abs(final[r] - 20_000 * gap[r]) < 5 * sd, (r, final[r], 20_000 * gap[r])


def test_the_proof_constant_has_no_place_under_exact():
    with pytest.raises(ConfigError, match="vec_scale"):
        run({**BASE, "preset": "exact", "algorithms": {"x": {"algorithm": "cs-linucb", "k": 2, "vec_scale": 10.0}}})


def test_the_audit_holds_exact_nodes_to_their_claim():
    """privbandit audit's Algorithm 4 node targets under exact: the level's own fair-bit P_Vec, claim
    the exact accountant's ε at δ/k; consistent at 20,000 samples; the same node with a quarter of its
    noise bits under the same claim is flagged."""
    from dataclasses import replace

    from privbandit.audit import audit_target
    from privbandit.families.concurrent_shuffle import FAMILY
    from privbandit.families.shuffle_linear_bandits.audit import neighbours, vec_sum_target
    from privbandit.runner import config as experiment_files

    config = experiment_files.load_data({**BASE, "preset": "exact", "algorithms": {"alg4@k2": ALGS["alg4@k2"]}})[1]
    targets = FAMILY.audit_targets(config, "alg4@k2")
    assert [t.details["b"] for t in targets] == [v.b for v in alg4_of(FAMILY.public_task(config, "alg4@k2", [0])).vec]
    r = audit_target(targets[0], 20_000, None, 0.95, np.random.default_rng(2))
    assert r["verdict"] == "consistent" and r["claim"]["epsilon_at_delta"] <= 0.5, r
    a = alg4_of(FAMILY.public_task(config, "alg4@k2", [0]))
    e0, e1 = neighbours(a.d, 1.0)
    weak = replace(a.vec[0], b=max(1, a.vec[0].b // 16))
    broken = vec_sum_target(FAMILY.name, "broken", "cs-linucb", weak, e0, e1, a.tree.sizes[0], targets[0].claim,
                            targets[0].delta, "a level-1 node with a sixteenth of its noise bits", {"level": 1})
    flagged = audit_target(broken, 20_000, None, 0.95, np.random.default_rng(2))
    assert flagged["verdict"] == "violation", flagged["audit"]
