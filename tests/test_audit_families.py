"""privbandit audit (issue #17) on the families audited after the MAB and linear ones: the
concurrent-shuffle counters, the GLM bandits and private-online-learning's own releases. Per family:
every target samples through the family's own mechanism code, every correct release is consistent
with its ledger at a small sample (soundness), and a deliberately broken variant with the same claim
is flagged (power). Fixed seeds throughout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from privbandit import registry
from privbandit.audit import audit_target
from privbandit.runner import config as experiment_files

CS = registry.family("concurrent-shuffle")


def load(path: str, *overrides: str):
    return experiment_files.load_data(experiment_files.read_experiment_data(path, list(overrides)), path)


def audit(t, samples: int, seed: int = 0, delta: float | None = None) -> dict:
    return audit_target(t, samples, delta, 0.95, np.random.default_rng(seed))


# --- concurrent-shuffle ----------------------------------------------------------------------


def cs_targets():
    fam, config = load("experiments/audit_concurrent.toml")
    return config, {t.label: t for label in fam.labels(config) for t in fam.audit_targets(config, label)}


def test_concurrent_shuffle_targets_cover_every_level_with_the_ledgers_claim():
    """One target per executed level of each shuffle mode, the central tree, RR; the claim is the
    level's (ε/k, δ/k) (the analyzer's lane level-i), stated at the node's δ/k by default."""
    config, targets = cs_targets()
    assert set(targets) == {"sequential/level-1", "csta@k2/level-1", "csta@k2/level-2", "csta@k2-pvec/level-1",
                            "csta@k2-pvec/level-2", "central_tree", "ldp"}
    delta = 1 / (10 * config.horizon)
    for label in ("csta@k2/level-1", "csta@k2/level-2"):
        t = targets[label]
        assert t.delta == pytest.approx(delta / 2)
        c = t.claim(t.delta)
        assert c["guarantee"] == "proven" and c["epsilon_at_delta"] == pytest.approx(0.5)
        assert t.claim(t.delta / 10)["epsilon_at_delta"] is None  # below the node's δ the ledger states nothing
    assert targets["central_tree"].claim(delta)["epsilon_pure"] == pytest.approx(1.0)
    assert targets["ldp"].claim(delta)["epsilon_pure"] == pytest.approx(1.0)


def test_concurrent_shuffle_node_release_is_the_counters_own():
    """The target's node total has the law of what simulate() hands the server: for the bin-a
    stand-in Σb + Bin(s·ℓ, q), mean ℓq·s + b and variance s·ℓq(1 − q) (5σ tolerances over 2·10⁵)."""
    _, targets = cs_targets()
    t = targets["csta@k2/level-1"]
    s, ell, q = t.details["n"], t.details["ell"], t.details["q"]
    rng = np.random.default_rng(3)
    for which in (0, 1):
        x = t.sample(which, 200_000, rng)
        var = s * ell * q * (1 - q)
        assert abs(x.mean() - (s * ell * q + which)) < 5 * np.sqrt(var / x.size)
        assert abs(x.var() / var - 1) < 5 * np.sqrt(2 / x.size)


@pytest.mark.parametrize("label", ["sequential/level-1", "csta@k2/level-1", "csta@k2/level-2",
                                   "csta@k2-pvec/level-1", "central_tree", "ldp"])
def test_concurrent_shuffle_correct_releases_are_consistent(label):
    _, targets = cs_targets()
    r = audit(targets[label], 20_000)
    assert r["verdict"] == "consistent", r["audit"]


def test_concurrent_shuffle_rr_and_central_tree_are_tight():
    """Pure DP: RR reaches 0.95 of its ε at 10⁶ samples; the central tree (11 nodes, ε/11 each)
    0.7 (its worst event, every node's noise ≥ 1, has probability ~10⁻⁴)."""
    _, targets = cs_targets()
    assert audit(targets["ldp"], 1_000_000)["tightness"] > 0.95
    assert audit(targets["central_tree"], 1_000_000)["tightness"] > 0.7


def test_concurrent_shuffle_stand_in_with_half_its_noise_bits_is_flagged():
    """The bin-a stand-in of the sequential counter (13 users, ℓ = 4 fair bits each) with ℓ = 2 but
    the same claim (1, δ/k): its exact ε at that δ is ≈ 1.6; 10⁶ samples show > 1. The same audit of
    the real stand-in stays consistent."""
    from privbandit.families.concurrent_shuffle.audit import node_target

    fam, config = load("experiments/audit_concurrent.toml")
    spec = fam.spec(config, "sequential")
    m = spec.mechanisms[0]
    assert m.ell == 4
    broken = audit(node_target(spec, 1, "broken", replace(m, ell=m.ell // 2)), 1_000_000, seed=1)
    assert broken["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    assert broken["verdict"] == "violation" and broken["audit"]["epsilon"] > 1.05
    assert audit(node_target(spec, 1, "ok"), 1_000_000, seed=1)["verdict"] == "consistent"


def test_concurrent_shuffle_bandit_has_no_target():
    fam, config = load("experiments/cs_alg4.toml")
    assert fam.audit_targets(config, "alg4@k1") == []
