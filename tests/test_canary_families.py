"""The one-run canary audit of the families after the MAB one, and the neighbour search of
``privbandit audit --search`` (issue #17). Canary runs: soundness (a correct run's bound never
exceeds its ledger's ε, fixed seed) and power (a deliberately broken randomizer or noise under the
same ledger is flagged), each through the spine's in-process engine with small horizons. Search:
it picks the pair a known-asymmetric mechanism makes worst, and the same seed gives the same result."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from privbandit.audit.canary import audit_delta, guess_and_bound
from privbandit.audit.search import search_release
from privbandit.runner import config as experiment_files


def load(path: str, *overrides: str):
    return experiment_files.load_data(experiment_files.read_experiment_data(path, list(overrides)), path)


def online(horizon: int, arms: int, **algorithms):
    data = {"family": "private-online-learning", "name": "c", "horizon": horizon, "epsilon": 1.0,
            "environment": {"means": [0.5] * arms}, "algorithms": algorithms}
    return experiment_files.load_data(data)


# --- the shared pieces (privbandit/audit/canary.py) ---------------------------------------------


def test_ceiling_is_the_bound_of_guesses_all_right_and_the_delta_keeps_the_run_s_when_small():
    """``ceiling`` equals the bound of perfect scores (and caps noisy ones); audit_delta leaves a δ
    with 2mδ ≤ β/10 alone and otherwise moves to β/(20m) only where the ledger states an ε there."""
    from privbandit.protocol.privacy import ApproxDP, Ledger, PureDP

    inc = np.random.default_rng(0).permutation(np.arange(400) < 200)  # balanced: every guess can be right
    r = guess_and_bound(inc.astype(float), inc, 1e-6, 0.95)
    assert r["epsilon"] == pytest.approx(r["ceiling"]) and r["ceiling"] > 3
    noisy = guess_and_bound(inc + np.random.default_rng(1).normal(0, 1, 400), inc, 1e-6, 0.95)
    assert 0 < noisy["epsilon"] < noisy["ceiling"] == r["ceiling"]
    # canaries never scored (rounds never released) still count in Theorem 3's δ term: less is shown
    loose = guess_and_bound(inc.astype(float), inc, 1e-4, 0.95)
    assert guess_and_bound(inc.astype(float), inc, 1e-4, 0.95, planted=4000)["epsilon"] < loose["epsilon"]
    pure = Ledger("central", 1.0, 0.1, users=10)
    pure.record(PureDP(1.0))
    assert audit_delta(pure, 100, 0.95) == pytest.approx(0.05 / 2000)
    approx = Ledger("shuffle", 1.0, 0.1, users=10)
    approx.record(ApproxDP(1.0, 0.1))
    assert audit_delta(approx, 100, 0.95) == 0.1  # (ε, δ) at 0.1 only: no claim below it
    assert audit_delta(pure, 100, 0.95) != audit_delta(replace(pure, delta=1e-8), 100, 0.95) == 1e-8


# --- private-online-learning -------------------------------------------------------------------


def test_lazy_ucb_canary_runs_are_consistent_and_a_louder_release_is_flagged():
    """Anytime-Lazy-UCB, 4000 users over 50 arms (313 arrays, one canary each), central and
    distributed: bound ≤ ε = 1 (seed 0); the central analyzer adding Laplace noise at 20ε while its
    ledger still records ε is flagged (bound > 2)."""
    from privbandit.families.private_online_learning.audit import online_canary_audit
    from privbandit.families.private_online_learning.mechanisms import ArraySumRelease

    fam, config = online(4000, 50, lazy={"algorithm": "anytime-lazy-ucb"},
                         lazyd={"algorithm": "anytime-lazy-ucb", "trust": "distributed"})
    for label in ("lazy", "lazyd"):
        r = fam.canary_audit(config, label, 0, 0.95)
        assert r["canaries"] > 300 and r["verdict"] == "consistent" and 0 < r["epsilon"] <= 1.0, r

    class Quiet(ArraySumRelease):  # noise for 20ε, the event of ε
        def privacy_event(self, n):
            return ArraySumRelease(1.0).privacy_event(n)

    r = online_canary_audit(fam, config, "lazy", 0, 0.95, release=Quiet(20.0))
    assert r["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    assert r["verdict"] == "violation" and r["epsilon"] > 2, r


def test_online_canary_refuses_hybrid_ucb_by_name():
    fam, config = online(1000, 5, hy={"algorithm": "hybrid-ucb"})
    with pytest.raises(NotImplementedError, match="Hybrid-UCB"):
        fam.canary_audit(config, "hy", 0, 0.95)


# --- shuffle-linear-bandits ----------------------------------------------------------------------


def test_linear_canary_runs_are_consistent_and_under_noised_randomizers_are_flagged():
    """Fig. 1(b)'s world at the theorems' constants, δ = 10⁻⁶, 4000 users: LinUCB-LDP (4000
    canaries, one per user) and LinUCB-SDP-Amp (200 batches) stay under their ledgers' ε; every
    user's Gaussian at σ/1000 (the ledger unchanged) is flagged in one run."""
    from privbandit.families.shuffle_linear_bandits import mechanisms as slb
    from privbandit.families.shuffle_linear_bandits.audit import linear_canary_audit

    fam, config = load("experiments/linear_fig1b_eps1.toml", "horizon=4000", "preset=theory", "delta=1e-6")
    for label, m in (("LinUCB-LDP", 4000), ("LinUCB-SDP-Amp", 200)):
        r = fam.canary_audit(config, label, 0, 0.95)
        assert r["canaries"] == m and r["verdict"] == "consistent", r
        sigma = fam.analyzer(fam.public_task(config, label, [0]), [0]).s.sigma
        bad = linear_canary_audit(fam, config, label, 0, 0.95, randomizer=slb.GaussianRandomizer(sigma / 1000))
        assert bad["claim"] == r["claim"] and bad["verdict"] == "violation" and bad["epsilon"] > 2.5, bad
    with pytest.raises(NotImplementedError, match="LinUCB-JDP"):
        fam.canary_audit(config, "LinUCB-JDP", 0, 0.95)


def test_linear_canary_at_delta_one_tenth_states_its_powerlessness():
    """At the paper's δ = 0.1 the shuffle ledgers state ε only there, where Theorem 3's 2mδ term
    leaves no room: the ceiling (guesses all right) is 0, and says so."""
    fam, config = load("experiments/linear_fig1b_eps1.toml", "horizon=2000", "preset=theory")
    r = fam.canary_audit(config, "LinUCB-SDP-Vec", 0, 0.95)
    assert r["delta"] == 0.1 and r["ceiling"] == 0 and r["epsilon"] == 0


# --- concurrent-shuffle ---------------------------------------------------------------------------


def test_counter_canary_runs_are_consistent_and_noiseless_nodes_are_flagged():
    """audit_concurrent.toml (n = 2048): every counter's run stays under its ledger's ε (RR's, with
    every user a canary, reaches over half of it); csta@k2-bin's users with no noise bits (ℓ = 0,
    the ledger unchanged), and csta@k2's split-mix users with Pólya shares of a 100× smaller scale,
    are flagged. Algorithm 4 is refused."""
    from privbandit.families.concurrent_shuffle.audit import counter_canary_audit

    fam, config = load("experiments/audit_concurrent.toml")
    for label in ("sequential", "csta@k2", "csta@k2-bin", "csta@k2-pvec", "central_tree", "ldp"):
        r = fam.canary_audit(config, label, 0, 0.95)
        assert r["verdict"] == "consistent", r
    assert r["canaries"] == 2048 and r["epsilon"] > 0.5  # RR: every user a canary of her own report
    for label, broken in (("csta@k2-bin", lambda m: replace(m, ell=0)),
                          ("csta@k2", lambda m: replace(m, epsilon=100 * m.epsilon))):
        spec = fam.spec(config, label)
        bad = counter_canary_audit(fam, config, label, 0, 0.95, mechanisms=tuple(broken(m) for m in spec.mechanisms))
        assert bad["canaries"] > 400 and bad["verdict"] == "violation" and bad["epsilon"] > 2, (label, bad)
    with pytest.raises(NotImplementedError, match="Algorithm 4"):
        fam.canary_audit(config, "alg4@k2", 0, 0.95)


# --- glm-bandits ------------------------------------------------------------------------------------


def test_shuffle_glm_canary_run_is_consistent_and_private_glm_is_refused():
    """ShuffleGLM's run (audit_glm.toml, T = 20000): one canary per P_Vec round, consistent.
    Private-GLM is refused."""
    fam, config = load("experiments/audit_glm.toml", "horizon=20000")
    r = fam.canary_audit(config, "shuffle-glm", 0, 0.95)
    assert r["canaries"] > 40 and r["verdict"] == "consistent", r
    with pytest.raises(NotImplementedError, match="Private-GLM"):
        fam.canary_audit(config, "private-glm", 0, 0.95)


def test_shuffle_glm_with_one_noise_bit_per_label_is_flagged():
    """T = 10⁵, ε = 4, δ = 10⁻⁶, up to 1000 𝒫_GD iterations (493 P_Vec rounds, ceiling 4.66 over
    the claim 3.02): every user's randomizer at eq. (127)'s constant 10⁻¹² (one noise bit per label,
    the ledger unchanged) is flagged in one run. Smaller runs cannot: their ceiling is under the
    claim (docs/audit.md)."""
    from privbandit.families.glm_bandits.audit import glm_canary_audit

    fam, config = load("experiments/audit_glm.toml", "horizon=100000", "delta=1e-6", "epsilon=4",
                       "algorithms.shuffle-glm.max_iterations=1000")
    r = glm_canary_audit(fam, config, "shuffle-glm", 0, 0.95, vec_constant=1e-12)
    assert r["ceiling"] > r["claim"]["epsilon_at_delta"] > 3
    assert r["verdict"] == "violation" and r["epsilon"] > 3.1, r


# --- the neighbour search (privbandit/audit/search.py) -------------------------------------------


def skips_noise_at_one(epsilon: float, p: float):
    """Dist-DP-SE whose users skip their noise share when their reward is 1: at the theorem's pair
    (all 0, user 0's 1) only user 0's share goes missing, but with every reward 1 the sum carries no
    noise at all, so the pair (all 1, user 0's 0) is the worst."""
    from privbandit.families.distributed_dp_mab.mechanisms import PolyaSecAgg
    from privbandit.protocol.primitives import encoding

    class SkipsAtOne(PolyaSecAgg):
        def randomize(self, rewards, params, rng):
            out = super().randomize(rewards, params, rng)
            x_hat = out.encoded
            quiet = np.asarray(rewards) >= 1
            y = np.where(quiet, encoding.reduce_mod(x_hat, params.m), out.messages)
            return replace(out, messages=y)

    return SkipsAtOne(epsilon, p)


def test_search_picks_the_pair_an_asymmetric_mechanism_makes_worst_and_is_reproducible():
    """The MAB family's four candidates for Dist-DP-SE, the mechanism replaced by one that skips its
    noise at reward 1 (same ledger): the pilots (1000 samples each) pick candidate 1 (all 1, user 0's
    0), whose fresh 2·10⁴-sample audit is a violation; the theorem's own pair stays near ε. The same
    seed gives the same numbers; the correct mechanism's search is consistent."""
    from privbandit import registry
    from privbandit.families.distributed_dp_mab.audit import CANDIDATE_PAIRS, mechanism_target

    fam = registry.family("distributed-dp-mab")
    _, config = experiment_files.load_data({"family": "distributed-dp-mab", "name": "s", "horizon": 1_000_000,
                                            "epsilon": 1.0, "algorithms": {"dist-dp-se": {}}})
    correct = fam.audit_candidates(config, "dist-dp-se")
    assert len(correct) == 1 and [c.neighbours for c in correct[0]][0].startswith("16 users with reward 0 vs")
    public = fam.public_task(config, "dist-dp-se", [0])
    server = fam.analyzer(public, [0])
    bad = skips_noise_at_one(server.mechanism.epsilon, server.mechanism.p)
    rnd = server.round_of(0, 16, bad.params(16))
    default = correct[0][0]

    def claim(event, delta):
        return default.claim(delta)

    group = [mechanism_target(bad, rnd, 16, claim, default.delta, fam.name, "dist-dp-se", "dist-dp-se", 16, o, (a, b))
             for o, a, b in CANDIDATE_PAIRS]
    r = search_release(group, 20_000, None, 0.95, seed=5)
    pilots = [row["pilot_epsilon"] for row in r["search"]["candidates"]]
    assert r["search"]["chosen"] == 1 and pilots[1] > 2 * max(pilots[0], pilots[2], pilots[3]), pilots
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 3, r["audit"]
    again = search_release(group, 20_000, None, 0.95, seed=5)
    def numbers(result):
        return result["audit"]["epsilon"], [(c["pilot_epsilon"], c["pilot_estimate"]) for c in
                                            result["search"]["candidates"]], result["search"]["chosen"]

    assert numbers(again) == numbers(r)
    fine = search_release(correct[0], 20_000, None, 0.95, seed=5)
    assert fine["verdict"] == "consistent"


def test_cli_search_and_canary_write_audit_json(tmp_path):
    """``--search`` records the candidates, their pilot bounds and the chosen pair's fresh audit;
    ``--canary`` on a family other than the MAB one writes its run; a refused algorithm exits 2
    naming the reason."""
    from privbandit.cli import app

    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["audit", "experiments/audit_concurrent.toml", "--algorithm", "csta@k2",
                                   "--samples", "2000", "--search", "--canary", "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "audit.json").read_text())
    assert [s["name"] for s in report["searches"]] == ["concurrent-shuffle/csta@k2/level-1",
                                                      "concurrent-shuffle/csta@k2/level-2"]
    for s in report["searches"]:
        assert len(s["search"]["candidates"]) == 2 and s["search"]["pilot_samples"] == 1000
        assert s["samples"] == 2000 and s["verdict"] == "consistent"
    (run,) = report["canary_runs"]
    assert run["name"] == "concurrent-shuffle/csta@k2" and run["verdict"] == "consistent" and run["ceiling"] > 0
    assert "search concurrent-shuffle/csta@k2/level-1" in res.output
    res = CliRunner().invoke(app, ["audit", "experiments/audit_glm.toml", "--algorithm", "private-glm", "--samples",
                                   "100", "--search", "--out", str(tmp_path / "g")])
    assert res.exit_code == 2 and "offers no candidate pairs" in res.output
