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
    assert set(targets) == {"sequential/level-1", "sequential-bin/level-1", "csta@k2/level-1", "csta@k2/level-2",
                            "csta@k2-bin/level-1", "csta@k2-bin/level-2", "csta@k2-pvec/level-1",
                            "csta@k2-pvec/level-2", "central_tree", "ldp", "alg4@k2/level-1", "alg4@k2/level-2"}
    delta = 1 / (10 * config.horizon)
    for label in ("csta@k2/level-1", "csta@k2/level-2", "csta@k2-bin/level-1", "csta@k2-bin/level-2",
                  "alg4@k2/level-1", "alg4@k2/level-2"):
        t = targets[label]
        assert t.delta == pytest.approx(delta / 2)
        c = t.claim(t.delta)
        assert c["guarantee"] == "proven" and c["epsilon_at_delta"] == pytest.approx(0.5)
        # below what the node spends the ledger states nothing (split-mix spends less than its δ/k)
        assert t.claim(c.get("delta_from_theorems", t.delta) / 10)["epsilon_at_delta"] is None
    assert targets["central_tree"].claim(delta)["epsilon_pure"] == pytest.approx(1.0)
    assert targets["ldp"].claim(delta)["epsilon_pure"] == pytest.approx(1.0)


def test_concurrent_shuffle_node_release_is_the_counters_own():
    """The target's node total has the law of what simulate() hands the server: for the bin-a
    baseline Σb + Bin(s·ℓ, q), mean ℓq·s + b and variance s·ℓq(1 − q); for split-mix the decoded
    sum Σb + Lap_Z(2/ε), mean b and the discrete Laplace's variance (5σ tolerances over 2·10⁵)."""
    from privbandit.protocol.primitives.noise import discrete_laplace_variance

    _, targets = cs_targets()
    mixed = targets["csta@k2/level-1"]
    for which in (0, 1):
        x = mixed.sample(which, 200_000, np.random.default_rng(4))
        var = discrete_laplace_variance(1 / 0.5)
        assert abs(x.mean() - which) < 5 * np.sqrt(var / x.size)
        assert abs(x.var() / var - 1) < 5 * np.sqrt(2 / x.size)
    t = targets["csta@k2-bin/level-1"]
    s, ell, q = t.details["n"], t.details["ell"], t.details["q"]
    rng = np.random.default_rng(3)
    for which in (0, 1):
        x = t.sample(which, 200_000, rng)
        var = s * ell * q * (1 - q)
        assert abs(x.mean() - (s * ell * q + which)) < 5 * np.sqrt(var / x.size)
        assert abs(x.var() / var - 1) < 5 * np.sqrt(2 / x.size)


@pytest.mark.parametrize("label", ["sequential/level-1", "sequential-bin/level-1", "csta@k2/level-1",
                                   "csta@k2/level-2", "csta@k2-bin/level-2", "csta@k2-pvec/level-1", "central_tree",
                                   "ldp", "alg4@k2/level-1"])
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
    """The bin-a baseline of the sequential counter (13 users, ℓ = 4 fair bits each) with ℓ = 2 but
    the same claim (1, δ/k): its exact ε at that δ is ≈ 1.6; 10⁶ samples show > 1. The same audit of
    the real baseline stays consistent."""
    from privbandit.families.concurrent_shuffle.audit import node_target

    fam, config = load("experiments/audit_concurrent.toml")
    spec = fam.spec(config, "sequential-bin")
    m = spec.mechanisms[0]
    assert m.ell == 4
    broken = audit(node_target(spec, 1, "broken", replace(m, ell=m.ell // 2)), 1_000_000, seed=1)
    assert broken["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    assert broken["verdict"] == "violation" and broken["audit"]["epsilon"] > 1.05
    assert audit(node_target(spec, 1, "ok"), 1_000_000, seed=1)["verdict"] == "consistent"


def test_concurrent_shuffle_alg4_nodes_use_their_levels_pvec():
    """Algorithm 4's node targets sample with the level's own P_Vec parameters (b, g of Alg4.vec)
    and claim its event; the exact-sum twin has no target."""
    from privbandit.families.concurrent_shuffle.bandit import alg4_of

    fam, config = load("experiments/cs_alg4.toml")
    assert fam.audit_targets(config, "exact@k2") == []
    a = alg4_of(fam.public_task(config, "alg4@k2", [0]))
    targets = fam.audit_targets(config, "alg4@k2")
    assert [(t.details["b"], t.details["g"], t.details["n"]) for t in targets] == [
        (v.b, v.g, s) for v, s in zip(a.vec, a.tree.sizes)]
    assert targets[0].claim(targets[0].delta)["epsilon_at_delta"] == pytest.approx(0.5)


# --- GLM bandits ---------------------------------------------------------------------------------


def glm_targets():
    fam, config = load("experiments/audit_glm.toml")
    return fam, config, {t.label: t for label in fam.labels(config) for t in fam.audit_targets(config, label)}


def test_glm_targets_and_their_claims():
    """ShuffleGLM: a covariance and a gradient round of the first two batches, claims (ε/2, δ/2) and
    one 𝒫_GD round's (ε₀, δ₀) at their own δ; constant 1: none proven. Private-GLM: the V tree,
    claim the per-user ZCDP(ρ_V + ρ_H) the analyzer spends. The baselines have none."""
    fam, config, targets = glm_targets()
    assert set(targets) == {f"{a}/{r}-{k}" for a in ("shuffle-glm", "shuffle-glm@C1") for r in ("covariance", "gradient")
                            for k in (1, 2)} | {"private-glm/tree-V"}
    cov = targets["shuffle-glm/covariance-1"]
    assert cov.delta == pytest.approx(0.01) and cov.claim(0.01)["epsilon_at_delta"] == pytest.approx(2.0)
    grad = targets["shuffle-glm/gradient-1"]
    assert grad.claim(grad.delta)["epsilon_at_delta"] == pytest.approx(grad.details["eps_iter"])
    assert targets["shuffle-glm@C1/covariance-1"].claim(0.02)["guarantee"] == "none proven"
    tree = targets["private-glm/tree-V"]
    rho = tree.details["rho_V"] + tree.details["rho_H"]
    assert tree.claim(0.02)["cdp_epsilon"] == pytest.approx(np.sqrt(2 * rho))
    _, demo = load("experiments/glm_demo.toml")
    assert fam.audit_targets(demo, "gloc") == [] and fam.audit_targets(demo, "rs-glinucb") == []


def test_glm_tree_nodes_have_the_trees_law():
    """The tree target's statistic Σ_j ⟨x_j, Δq⟩ over m nodes: mean m⟨q_which, Δq⟩, variance
    m·s²·‖Δq‖², with Δq the tree's own rounding of e₂e₂ᵀ − e₁e₁ᵀ (= 256 on two diagonal entries) and
    s² = 2⌈σ²_grid/2⌉ the diagonal law of App. I.1's noise. 5σ tolerances over 2·10⁴ draws."""
    _, _, targets = glm_targets()
    t = targets["private-glm/tree-V"]
    m, s2 = t.details["levels"], (t.details["sigma"] / t.details["grid"]) ** 2
    rng = np.random.default_rng(4)
    x0, x1 = t.sample(0, 20_000, rng), t.sample(1, 20_000, rng)
    var = m * 2 * np.ceil(s2 / 2) * 2 * 256**2
    assert abs(x0.mean() + m * 256**2) < 5 * np.sqrt(var / x0.size)
    assert abs(x1.mean() - m * 256**2) < 5 * np.sqrt(var / x1.size)
    assert abs(x0.var() / var - 1) < 5 * np.sqrt(2 / x0.size)


@pytest.mark.parametrize("label", ["shuffle-glm/covariance-1", "shuffle-glm/gradient-1", "shuffle-glm/covariance-2",
                                   "private-glm/tree-V"])
def test_glm_correct_releases_are_consistent(label):
    _, _, targets = glm_targets()
    assert audit(targets[label], 20_000)["verdict"] == "consistent"


def test_glm_none_proven_pvec_says_so_and_is_measured():
    """Eq. (127)'s constant 1: the ledger states no guarantee (verdict "no claim"), and the audit
    still measures what the covariance round gives (ε ≥ 0.15 at δ = 0.02 from 2·10⁴ samples)."""
    _, _, targets = glm_targets()
    r = audit(targets["shuffle-glm@C1/covariance-1"], 20_000)
    assert r["verdict"] == "no claim" and r["claim"]["epsilon_at_delta"] is None and r["audit"]["epsilon"] > 0.15


def test_glm_tree_with_a_tenth_of_its_noise_is_flagged():
    """Private-GLM's V tree with σ/10 but the analyzer's own claim: flagged at 2·10⁴ samples."""
    from privbandit.families.glm_bandits import parties as gp
    from privbandit.families.glm_bandits.audit import tree_target

    fam, config = load("experiments/audit_glm.toml")
    cal = gp.setup(fam.public_task(config, "private-glm", [0])).spec.tree_v[0]
    r = audit(tree_target(fam, config, "private-glm", replace(cal, sigma=cal.sigma / 10)), 20_000)
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 1.5 * r["claim"]["epsilon_at_delta"]


# --- private-online-learning ---------------------------------------------------------------------


def pol_targets(path: str, *overrides: str):
    fam, config = load(path, *overrides)
    return fam, config, {t.label: t for label in fam.labels(config) for t in fam.audit_targets(config, label)}


def test_online_targets_and_claims():
    """Lazy-UCB's arrays (central and distributed), Hybrid-UCB's tree 1 (1.5ε at the paper's depth r)
    and DP-SE's rounds; FTNL at 2ε/c, and Kε/c when the K sums leave the intermediary."""
    fam, config, targets = pol_targets("experiments/pol_setting1.toml")
    assert set(targets) == {"anytime-lazy-ucb", "anytime-lazy-ucb@distributed", "dp-se", "dp-se@distributed",
                            "hybrid-ucb"}
    assert targets["hybrid-ucb"].claim(1e-6)["epsilon_pure"] == pytest.approx(1.5)
    assert targets["anytime-lazy-ucb"].claim(1e-6)["epsilon_pure"] == pytest.approx(1.0)
    fam, config, targets = pol_targets("experiments/pol_ftnl.toml")
    assert set(targets) == {"ftnl", "ftnl@c=2", "ftnl@distributed", "ftnl@distributed-analyzer"}
    claims = {label: t.claim(1e-6)["epsilon_pure"] for label, t in targets.items()}
    assert claims == pytest.approx({"ftnl": 2.0, "ftnl@c=2": 1.0, "ftnl@distributed": 2.0,
                                    "ftnl@distributed-analyzer": 5.0})
    assert targets["ftnl@distributed"].details["rule"] == "argmax"


def test_online_central_samplers_have_the_mechanisms_law():
    """The central targets call grid_laplace on many releases at once (docs/audit.md): their law is
    that of the analyzer's own ArraySumRelease.release and ReportNoisyMax.select, called once per
    release (two-sample KS and χ² tests at p > 10⁻³ over 2·10⁴ draws each, fixed seeds)."""
    from scipy.stats import chi2_contingency, ks_2samp

    fam, config, lazy = pol_targets("experiments/pol_setting1.toml")
    t = lazy["anytime-lazy-ucb"]
    server = fam.analyzer(fam.public_task(config, "anytime-lazy-ucb", [0]), [0])
    rng = np.random.default_rng(5)
    own = np.array([server.release.release(1.0, 16, rng) for _ in range(20_000)])
    assert ks_2samp(own, t.sample(1, 20_000, rng)).pvalue > 1e-3
    fam, config, ftnl = pol_targets("experiments/pol_ftnl.toml")
    t = ftnl["ftnl@c=2"]  # c = 2: the noise scale is c/ε, which the target must read from the mechanism
    rnm = fam.analyzer(fam.public_task(config, "ftnl@c=2", [0]), [0]).rnm
    h = t.details["head_start"]
    own = np.array([rnm.select(np.array([1.0, h, 0, 0, 0]), rng) for _ in range(20_000)])
    ours = t.sample(0, 20_000, rng)
    table = np.array([np.bincount(own, minlength=5), np.bincount(ours, minlength=5)])
    assert chi2_contingency(table[:, table.sum(axis=0) > 0]).pvalue > 1e-3


@pytest.mark.parametrize("path,label", [("experiments/pol_setting1.toml", "anytime-lazy-ucb"),
                                        ("experiments/pol_setting1.toml", "anytime-lazy-ucb@distributed"),
                                        ("experiments/pol_setting1.toml", "hybrid-ucb"),
                                        ("experiments/pol_ftnl.toml", "ftnl"), ("experiments/pol_ftnl.toml", "ftnl@c=2"),
                                        ("experiments/pol_ftnl.toml", "ftnl@distributed"),
                                        ("experiments/pol_ftnl.toml", "ftnl@distributed-analyzer")])
def test_online_correct_releases_are_consistent(path, label):
    _, _, targets = pol_targets(path)
    assert audit(targets[label], 20_000)["verdict"] == "consistent"


def test_online_lazy_array_with_half_its_laplace_scale_is_flagged():
    """Lazy-UCB's central array release with the Laplace scale halved (ArraySumRelease(2ε)) under
    the analyzer's claim ε = 1: flagged at 10⁵ samples (bound > 1.5)."""
    from privbandit.families.private_online_learning.audit import lazy_target
    from privbandit.families.private_online_learning.mechanisms import ArraySumRelease

    fam, config = load("experiments/pol_setting1.toml")
    r = audit(lazy_target(fam, config, "anytime-lazy-ucb", None, ArraySumRelease(2.0)), 100_000)
    assert r["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 1.5


def test_online_ftnl_with_dwork_roths_epsilon_for_replacement_is_flagged():
    """FTNL at c = 1 ledgered at ε (Dwork–Roth's claim, which needs monotone queries) instead of
    2ε/c: the replacement pair e₀ → e₁ shows more than ε = 1 at 10⁵ samples."""
    from privbandit.protocol.privacy import Ledger, PureDP

    _, _, targets = pol_targets("experiments/pol_ftnl.toml")

    def paper_claim(delta: float) -> dict:
        book = Ledger("central", 1.0, delta, users=10)
        book.record(PureDP(1.0))
        return book.summary()

    r = audit(replace(targets["ftnl"], claim=paper_claim), 100_000)
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 1.3


# --- shuffle-linear-bandits: LinUCB-JDP's tree ----------------------------------------------------


def jdp(*overrides: str):
    fam, config = load("experiments/linear_fig1b_eps1.toml", *overrides)
    (t,) = fam.audit_targets(config, "LinUCB-JDP")
    return fam, config, t


def test_jdp_tree_target_has_the_trees_law_and_the_ledgers_claim():
    """L = 15 nodes hold batch 0 (T = 20000 one-user batches); the statistic Σ_j ⟨x_j, Δe⟩ has mean
    L⟨e_which, Δe⟩ and variance Lσ²‖Δe‖² (5σ tolerances over 2·10⁴ draws); the claim is L node
    events (ρ = L·Δ²/(2σ²) with the report's sensitivity bound Δ)."""
    from privbandit.families.shuffle_linear_bandits.params import report_sensitivity

    _, _, t = jdp()
    L, sigma, dist = t.details["levels"], t.details["sigma"], t.details["distance"]
    assert L == 15
    rng = np.random.default_rng(6)
    x0, x1 = t.sample(0, 20_000, rng), t.sample(1, 20_000, rng)
    sd = np.sqrt(L) * sigma * dist
    assert abs((x1.mean() - x0.mean()) - L * dist**2) < 5 * sd * np.sqrt(2 / x0.size)
    assert abs(x0.std() / sd - 1) < 5 / np.sqrt(2 * x0.size)
    rho = L * report_sensitivity(np.sqrt(2)) ** 2 / (2 * sigma**2)
    assert t.claim(0.1)["cdp_epsilon"] == pytest.approx(np.sqrt(2 * rho))


@pytest.mark.parametrize("preset", ["paper-code", "theory"])
def test_jdp_tree_is_consistent(preset):
    _, _, t = jdp(f"preset={preset}")
    assert audit(t, 20_000)["verdict"] == "consistent"


def test_jdp_tree_with_a_quarter_of_its_noise_is_flagged():
    """The tree with σ/4 under the analyzer's claim (4.42 at δ = 0.1): flagged at 2·10⁴ samples."""
    from privbandit.families.shuffle_linear_bandits.audit import jdp_target
    from privbandit.families.shuffle_linear_bandits.parties import setup

    fam, config, t = jdp()
    public = fam.public_task(config, "LinUCB-JDP", [0])
    s = setup(public)
    r = audit(jdp_target(fam, public, "LinUCB-JDP", s, s.sigma / 4), 20_000)
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 5


# --- the one-run canary audit (Steinke, Nasr & Jagielski 2023) -----------------------------------


def test_canary_bound_is_monotone_and_sound_on_randomized_response():
    """At ε = 0 and δ = 0 the p-value is the fair-coin tail; m = 1000 canaries with all r guesses
    right: the bound grows with r and stays finite at δ > 0; randomized response at ε = 1 on 10⁴
    canaries never yields more than 1 (10 seeds at 95%), and reaches 0.85."""
    from scipy.stats import binom

    from privbandit.audit.canary import epsilon_lower_bound, guess_and_bound, p_value

    assert p_value(1000, 100, 50, 0.0, 0.0) == pytest.approx(binom.sf(49, 100, 0.5))
    bounds = [epsilon_lower_bound(1000, r, r, 1e-5, 0.05) for r in (10, 100, 600)]
    assert bounds[0] < bounds[1] < bounds[2] < 10
    rng = np.random.default_rng(9)
    top = []
    for _ in range(10):
        inc = rng.random(10_000) < 0.5
        keep = rng.random(10_000) < np.e / (1 + np.e)
        top.append(guess_and_bound(np.where(keep, inc, ~inc) + 1e-3 * rng.random(10_000), inc, 0.0, 0.95)["epsilon"])
    assert max(top) <= 1.0 and min(top) > 0.85


def canary_config(*labels: str):
    data = {"family": "distributed-dp-mab", "horizon": 100_000, "epsilon": 1.0, "environment": {"arms": 100},
            "algorithms": {a: {"algorithm": a} for a in labels}}
    return experiment_files.load_data(data)


def test_canary_runs_of_correct_algorithms_are_consistent():
    """A whole run of 10⁵ users and 100 arms through the in-process spine: ~900 canaries (one per
    round); Dist-DP-SE and CDP-SE reach > 0.6 of their ε = 1 in one run and never exceed it; SE's
    raw sums are guessed without error (no claim to exceed)."""
    from privbandit.families.distributed_dp_mab.audit import canary_audit

    fam, config = canary_config("dist-dp-se", "cdp-se", "se")
    for label in ("dist-dp-se", "cdp-se"):
        r = canary_audit(fam, config, label, 0, 0.95)
        assert r["canaries"] > 800 and r["verdict"] == "consistent" and 0.6 < r["epsilon"] <= 1.0, r
    se = canary_audit(fam, config, "se", 0, 0.95)
    assert se["verdict"] == "no claim" and se["correct"] == se["guesses"] and se["epsilon"] > 4


def test_canary_run_with_the_inverted_polya_scale_is_flagged():
    """Dist-DP-SE whose users draw the authors' inverted Pólya shares, with the run's own claim
    (ε = 1): one run shows ε > 2."""
    from privbandit.families.distributed_dp_mab.audit import canary_audit
    from tests.test_audit import InvertedPolya

    fam, config = canary_config("dist-dp-se")
    own = fam.analyzer(fam.public_task(config, "dist-dp-se", [0]), [0]).mechanism
    r = canary_audit(fam, config, "dist-dp-se", 0, 0.95, mechanism=InvertedPolya(own.epsilon, own.p))
    assert r["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    assert r["verdict"] == "violation" and r["epsilon"] > 2, r


def test_cli_canary_writes_the_runs_and_refuses_algorithms_without_one(tmp_path):
    import json

    from typer.testing import CliRunner

    from privbandit.cli import app

    exp = tmp_path / "canary.toml"
    exp.write_text('name = "c"\nhorizon = 100000\nepsilon = 1.0\n[environment]\narms = 100\n'
                   '[algorithms.cdp-se]\n[algorithms.se]\n')
    res = CliRunner().invoke(app, ["audit", str(exp), "--canary", "--samples", "1000", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    runs = json.loads((tmp_path / "o" / "audit.json").read_text())["canary_runs"]
    assert [(r["label"], r["verdict"]) for r in runs] == [("cdp-se", "consistent"), ("se", "no claim")]
    assert "one run of distributed-dp-mab/cdp-se" in res.output
    res = CliRunner().invoke(app, ["audit", "experiments/pol_setting1.toml", "--algorithm", "hybrid-ucb", "--canary",
                                   "--samples", "100", "--out", str(tmp_path / "p")])
    assert res.exit_code == 2 and "no one-run audit of Hybrid-UCB" in res.output
    # a whole file: the algorithms that have a one-run audit get theirs, the others are listed with why
    whole = tmp_path / "whole.toml"
    whole.write_text('family = "private-online-learning"\nname = "w"\nhorizon = 20000\nruns = 1\nepsilon = 1.0\n'
                     '[environment]\nsetting = 1\n[algorithms.dp-se]\n[algorithms.hybrid-ucb]\n')
    res = CliRunner().invoke(app, ["audit", str(whole), "--canary", "--samples", "100", "--out", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "w" / "audit.json").read_text())
    assert [r["label"] for r in report["canary_runs"]] == ["dp-se"]
    assert [r["label"] for r in report["no_canary_run"]] == ["hybrid-ucb"]
    assert "no one-run audit of private-online-learning/hybrid-ucb" in " ".join(res.output.split())


def test_distributed_ftnl_index_is_the_intermediarys_argmax_of_the_decoded_sums():
    """The argmax release goes through the spine's Intermediary: under input 0 (user 0 on action
    0, a head start of 3 on action 1), index 1 wins most often and index 0 more often than under
    input 1 (2·10⁴ draws, fixed seed)."""
    _, _, targets = pol_targets("experiments/pol_ftnl.toml")
    t = targets["ftnl@distributed"]
    rng = np.random.default_rng(11)
    x0, x1 = t.sample(0, 20_000, rng), t.sample(1, 20_000, rng)
    assert set(np.unique(x0)) <= set(range(5)) and np.bincount(x0).argmax() == 1
    assert (x0 == 0).mean() > 2 * (x1 == 0).mean() > 0


def test_hybrid_ucb_at_the_papers_depth_spends_more_than_its_nominal_epsilon():
    """Hybrid-UCB with the paper's tree noise depth r: the ledger's 1.5ε holds, and a ledger stating
    the paper's nominal ε = 1 is flagged at 2·10⁴ samples (bound > 1.1). At depth r + 1 the claim is
    ε and the audit stays under it."""
    from privbandit.protocol.privacy import Ledger, PureDP

    _, _, targets = pol_targets("experiments/pol_setting1.toml")
    t = targets["hybrid-ucb"]

    def nominal(delta: float) -> dict:
        book = Ledger("central", 1.0, delta, users=10)
        book.record(PureDP(1.0))
        return book.summary()

    assert audit(t, 20_000)["verdict"] == "consistent"
    r = audit(replace(t, claim=nominal), 20_000)
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 1.1
    _, _, deeper = pol_targets("experiments/pol_setting1.toml", "algorithms.hybrid-ucb.tree_depth=r+1")
    d = audit(deeper["hybrid-ucb"], 20_000)
    assert d["claim"]["epsilon_at_delta"] == pytest.approx(1.0) and d["verdict"] == "consistent"

