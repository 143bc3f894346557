"""privbandit audit (issue #17): the testers are sound, the family's targets sample what the analyzer
receives through the project's own code, correct mechanisms pass, broken ones are flagged.

Every test has a fixed seed; tolerances are stated where they are used."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import binomtest
from typer.testing import CliRunner

from privbandit import registry
from privbandit.audit import audit_target, clopper_pearson, histogram_test, likelihood_ratio_test
from privbandit.audit.targets import modular_row_sums
from privbandit.cli import app
from privbandit.families.distributed_dp_mab.audit import mechanism_target
from privbandit.families.distributed_dp_mab.mechanisms import CentralDiscreteLaplace, PolyaSecAgg
from privbandit.protocol.primitives import encoding
from privbandit.protocol.primitives.noise import sample_discrete_laplace, sample_polya
from privbandit.runner import config as experiment_files

MAB = registry.family("distributed-dp-mab")
ALGORITHMS = ("dist-dp-se", "dist-rdp-se", "dist-cdp-se", "cdp-se", "ldp-se", "dp-se")
PURE = ("dist-dp-se", "cdp-se", "ldp-se")


def mab_config(epsilon: float = 1.0, intermediary: str = "auto", **extra):
    algos = {a: {"algorithm": a} | ({"intermediary": intermediary} if a.startswith("dist") else {})
             for a in (*ALGORITHMS, "se")}
    data = {"family": "distributed-dp-mab", "horizon": 100_000, "epsilon": epsilon, "algorithms": algos} | extra
    return experiment_files.load_data(data)[1]


def target(label: str, cohort: int = 16, **kw):
    (t,) = MAB.audit_targets(mab_config(**kw), label, cohort)
    return t


# --- testers ---------------------------------------------------------------------------------


def test_clopper_pearson_is_the_exact_interval():
    """One-sided bounds at α are the two-sided exact interval at 1 − 2α (scipy's binomtest)."""
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (1234, 10_000)]:
        lo, hi = clopper_pearson(np.array([k]), n, 0.025)
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert lo[0] == pytest.approx(ci.low, abs=1e-12) and hi[0] == pytest.approx(ci.high, abs=1e-12)


def test_lr_test_covers_at_its_confidence():
    """Two discrete Laplace samples whose true ε is 1 (shift 2, scale 2): over 200 audits at
    confidence 0.8, the bound exceeds 1 in at most 20% of them. Bonferroni over the events makes
    it conservative (we see 0); a tester whose bounds were too narrow, or that counted on the
    samples it chose its events with, fails this."""
    rng = np.random.default_rng(7)
    over = 0
    for _ in range(200):
        x0 = sample_discrete_laplace(2.0, 4000, rng)
        x1 = 2 + sample_discrete_laplace(2.0, 4000, rng)
        over += likelihood_ratio_test(x0, x1, 0.0, 0.8).epsilon > 1.0
    assert over <= 40


def test_lr_test_finds_the_epsilon_and_the_delta():
    """Tight on the discrete Laplace (ratio exactly e^ε on half the mass), and a δ a mechanism
    spends shows up: a release that publishes the input with probability 0.05 is not (ε, 0.01)-DP
    for any ε, and the tester says so at δ = 0.01."""
    rng = np.random.default_rng(8)
    x0 = sample_discrete_laplace(3.0, 200_000, rng)
    x1 = 3 + sample_discrete_laplace(3.0, 200_000, rng)
    b = likelihood_ratio_test(x0, x1, 0.0, 0.95)
    assert 0.93 < b.epsilon <= 1.0
    assert b.curve[0] == (0.0, pytest.approx(max(d for _, d in b.curve)))  # δ(ε) falls with ε
    leak0 = np.where(rng.random(100_000) < 0.05, -10**6, sample_discrete_laplace(3.0, 100_000, rng))
    leak1 = np.where(rng.random(100_000) < 0.05, 10**6, 3 + sample_discrete_laplace(3.0, 100_000, rng))
    assert likelihood_ratio_test(leak0, leak1, 0.01, 0.95).epsilon > 5


def test_histogram_test_on_real_releases():
    rng = np.random.default_rng(9)
    x0 = rng.laplace(0.0, 1.0, 200_000)
    x1 = rng.laplace(1.0, 1.0, 200_000)
    b = histogram_test(x0, x1, 0.0, 0.95)
    assert 0.85 < b.epsilon <= 1.0  # float Laplace's own ε is 1 up to its floating-point defects
    with pytest.raises(ValueError, match="integer"):
        likelihood_ratio_test(x0, x1, 0.0, 0.95)


# --- the family's targets sample the project's own code ------------------------------------------


def test_modular_row_sums_match_the_aggregator():
    rng = np.random.default_rng(10)
    for m in (7, 33257, 2**62 - 57):
        rows = rng.integers(0, m, size=(5, 9), dtype=np.int64)
        assert modular_row_sums(rows, m).tolist() == [encoding.modular_sum(r, m) for r in rows]


def test_central_noise_is_drawn_by_the_same_code_as_analyze():
    """analyze() draws its central noise through protect() (a batch of one): the audit's batches
    and a run's releases come from one function, stream for stream."""
    mech = CentralDiscreteLaplace(1.0, 1e-3)
    q = mech.params(16)
    _, eta = mech.protect(np.full(20, 5, dtype=np.int64), q, np.random.default_rng(11))
    est = mech.analyze(5, q, np.random.default_rng(11))
    assert round(est.central_noise * q.g) == int(eta[0])
    assert np.std(eta) > 0  # 20 draws, not one repeated


def test_every_mab_algorithm_has_a_target_with_the_ledgers_claim():
    config = mab_config(epsilon=0.5)
    for label in ALGORITHMS:
        (t,) = MAB.audit_targets(config, label, 16)
        claim = t.claim(1e-6)
        assert claim["guarantee"] == "proven"
        pure = label in PURE or label == "dp-se"
        assert (claim["epsilon_at_delta"] == 0.5) == pure  # the RDP/CDP ones state more at δ = 1e-6
        assert t.delta == pytest.approx(1 / (10 * 100_000))
    assert target("dist-dp-se", intermediary="shuffler-residues").claim(1e-6)["guarantee"] == "none proven"
    assert target("se").claim(1e-6)["guarantee"] == "non-private"


# --- soundness, tightness, power -------------------------------------------------------------------


@pytest.mark.parametrize("label", ALGORITHMS)
def test_correct_mechanisms_are_never_flagged(label):
    """Soundness: on every correct mechanism of the family the audited bound stays at or below the
    ledger's ε at the run's δ (confidence 0.95, 10⁵ releases per neighbour, 16 users)."""
    r = audit_target(target(label), 100_000, None, 0.95, np.random.default_rng(12))
    assert r["verdict"] == "consistent", r["audit"]
    assert r["audit"]["epsilon"] <= r["claim"]["epsilon_at_delta"]


@pytest.mark.parametrize("label", PURE)
def test_pure_dp_mechanisms_are_audited_tightly(label):
    """Tightness: at 3·10⁵ releases per neighbour the bound reaches 0.8 of the claimed ε (the
    issue asks it at 10⁷; docs/audit.md records what 10⁷ gives)."""
    r = audit_target(target(label), 300_000, None, 0.95, np.random.default_rng(13))
    assert r["tightness"] >= 0.8, r["audit"]


class InvertedPolya(PolyaSecAgg):
    """The authors' sampler (spec §6): Gamma scale (1−β)/β, i.e. shares Pólya(1/n, 1 − β)."""

    def local_shares(self, size, params, rng):
        beta = math.exp(-self.epsilon / params.g)
        n = params.shares_for
        return sample_polya(1.0 / n, 1 - beta, size, rng) - sample_polya(1.0 / n, 1 - beta, size, rng)


class HalfScaleLaplace(CentralDiscreteLaplace):
    """CDP-SE with its Laplace scale off by 2×: g/(2ε), so it is 2ε-DP while the ledger says ε."""

    def central_noises(self, params, size, rng):
        return sample_discrete_laplace(params.g / (2 * self.epsilon), size, rng)


def broken_target(mechanism, label: str, n: int, event=None):
    """The family's own target path, with a broken mechanism (or a wrong ledger event) in it."""
    correct = target(label, cohort=n, epsilon=mechanism.epsilon)
    server = MAB.analyzer(MAB.public_task(mab_config(epsilon=mechanism.epsilon), label, [0]), [0])
    rnd = server.round_of(0, n, mechanism.params(n))

    def claim(ev, delta):
        ledger = MAB.ledger({**MAB.public_task(mab_config(epsilon=mechanism.epsilon), label, [0]), "delta": delta})
        ledger.record(event or ev)
        return ledger.summary()

    return mechanism_target(mechanism, rnd, n, claim, correct.delta, "test", label, label)


def test_the_authors_inverted_polya_scale_is_flagged():
    """Their settings (ε = 0.5, n = 4⁵, so g = 16): total noise std 0.26 where 45 is required. 3,000
    releases per neighbour already prove ε > 0.5 many times over."""
    mech = InvertedPolya(0.5, 0.1)
    r = audit_target(broken_target(mech, "dist-dp-se", 1024), 3_000, None, 0.95, np.random.default_rng(14))
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 3, r["audit"]
    ok = audit_target(broken_target(PolyaSecAgg(0.5, 0.1), "dist-dp-se", 1024), 3_000, None, 0.95,
                      np.random.default_rng(14))
    assert ok["verdict"] == "consistent"


def test_a_laplace_scale_off_by_two_is_flagged():
    r = audit_target(broken_target(HalfScaleLaplace(1.0, 1e-3), "cdp-se", 16), 100_000, None, 0.95,
                     np.random.default_rng(15))
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 1.5, r["audit"]


def test_a_shuffled_release_ledgered_as_secure_aggregation_is_flagged():
    """Dist-DP-SE's residues behind a shuffler: the pre-#13 ledger recorded Theorem 1's ε for them.
    The audit proves far more; today's ledger states none proven (verdict "no claim")."""
    mech = PolyaSecAgg(1.0, 1e-3)
    n = 16
    secagg_event = mech.privacy_event(mech.params(n), n)
    wrong = broken_target(mech, "dist-dp-se", n, event=secagg_event)
    shuffled = target("dist-dp-se", cohort=n, intermediary="shuffler-residues")
    wrong = replace(wrong, sample=shuffled.sample, release=shuffled.release, details=shuffled.details)
    r = audit_target(wrong, 20_000, None, 0.95, np.random.default_rng(16))
    assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 2, r["audit"]
    today = audit_target(shuffled, 20_000, None, 0.95, np.random.default_rng(16))
    assert today["verdict"] == "no claim" and today["audit"]["epsilon"] > 2


# --- the command -----------------------------------------------------------------------------------


def test_cli_writes_audit_json_and_plots(tmp_path):
    runner = CliRunner()
    args = ["audit", "--family", "distributed-dp-mab", "--algorithm", "cdp-se", "--samples", "2000",
            "--out", str(tmp_path / "a"), "--seed", "3"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "a" / "audit.json").read_text())
    (r,) = report["targets"]
    assert r["verdict"] == "consistent" and r["claim"]["epsilon_at_delta"] == 1.0
    assert (tmp_path / "a" / "distributed-dp-mab_cdp-se.png").stat().st_size > 0
    again = runner.invoke(app, args[:-4] + ["--out", str(tmp_path / "b"), "--seed", "3"])
    assert again.exit_code == 0
    assert json.loads((tmp_path / "b" / "audit.json").read_text())["targets"][0]["audit"] == r["audit"]


@pytest.mark.parametrize("args, message", [
    (["--transport", "tcp"], "--transport 'tcp': choose inproc or mqtt"),
    (["--samples", "10"], "--samples 10: must lie in [100, 10^9]"),
    (["--delta", "1.5"], "--delta 1.5: must lie in (0, 1)"),
    (["--delta", "0"], "--delta 0.0: must lie in (0, 1)"),
    (["--confidence", "1"], "--confidence 1.0: must lie in (0, 1)"),
    (["--cohort", "0"], "--cohort 0: must lie in [1, 10^6]"),
    (["--jobs", "0"], "--jobs 0: must lie in [1, 64]"),
])
def test_cli_refuses_bad_options(args, message):
    res = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "cdp-se", *args])
    assert res.exit_code == 2 and message in res.output


def test_cli_names_a_family_without_targets():
    """Labels with no audit target (here the GLM family's non-private baselines) are refused by
    name, not audited as "consistent"."""
    res = CliRunner().invoke(app, ["audit", "experiments/glm_demo.toml", "--algorithm", "gloc",
                                   "--algorithm", "glm-ucb"])
    assert res.exit_code == 2 and "family glm-bandits: no release of glm-ucb, gloc" in res.output


def test_another_family_is_audited_through_the_same_path(tmp_path):
    """private-online-learning's DP-SE (central Laplace, and Pólya secure sums under distributed
    trust) runs on this family's analyzer: audited with no code of its own; its other algorithms
    are listed as not audited."""
    res = CliRunner().invoke(app, ["audit", "experiments/pol_setting1.toml", "--samples", "20000",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "audit.json").read_text())
    assert {r["label"] for r in report["targets"]} >= {"dp-se", "dp-se@distributed"}
    assert all(r["verdict"] == "consistent" for r in report["targets"])
    assert report["not_audited"] == []  # every algorithm of the file has a target


def test_linear_ldp_reports_are_audited_and_consistent():
    """shuffle-linear-bandits' LinUCB-LDP: real-valued Gaussian reports through the histogram
    tester. Sound (below the ledger's ε), and close to the exact Gaussian ε of the pair audited
    (within 10% at 2·10⁵ samples): the rest of the gap to the claim is the sensitivity bound's."""
    from privbandit.protocol.privacy.amplification import gaussian_epsilon

    fam, config = experiment_files.load("experiments/linear_fig1b_eps1.toml")
    assert fam.audit_targets(config, "LinUCB") == []  # non-private: no target
    (t,) = fam.audit_targets(config, "LinUCB-LDP")
    r = audit_target(t, 200_000, None, 0.95, np.random.default_rng(17))
    assert r["verdict"] == "consistent"
    exact = gaussian_epsilon(t.details["distance"], t.details["sigma"], r["audit"]["delta"])
    assert 0.9 * exact <= r["audit"]["epsilon"] <= exact


def test_linear_vec_label_counts_are_audited():
    """P_Vec's shuffler totals, drawn by every user's bit-sum randomizer: under the theorem's
    constants (preset theory) and the exact accountant's fair bits (exact) consistent with the ledger; under the authors' constants the ledger
    claims nothing, and the audit still measures something (its verdict says "no claim")."""
    for preset, verdict in (("theory", "consistent"), ("exact", "consistent"), ("paper-code", "no claim")):
        fam, config = experiment_files.load("experiments/linear_fig1b_eps1.toml", [f"preset={preset}"])
        (t,) = fam.audit_targets(config, "LinUCB-SDP-Vec")
        r = audit_target(t, 10_000, None, 0.95, np.random.default_rng(18))
        assert r["verdict"] == verdict, r["claim"]
        assert t.details["per_release"] == 20 * 20  # B users × D entries drawn per release


def test_cli_exits_1_on_a_violation_and_writes_no_infinity(tmp_path, monkeypatch):
    """A broken mechanism behind the family's hook: the command flags it and exits 1 (a CI guard).
    SE's events never seen under the other input give an unbounded estimate: null in the JSON."""
    broken = broken_target(HalfScaleLaplace(1.0, 1e-3), "cdp-se", 16)
    se = target("se")
    monkeypatch.setattr(type(MAB), "audit_targets", lambda self, config, label, cohort=None: [broken, se])
    res = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "cdp-se",
                                   "--samples", "50000", "--out", str(tmp_path)])
    assert res.exit_code == 1, res.output
    report = json.loads((tmp_path / "audit.json").read_text())
    assert [r["verdict"] for r in report["targets"]] == ["violation", "no claim"]
    assert report["targets"][1]["audit"]["epsilon_estimate"] is None


def test_linear_amp_shuffled_reports_are_audited():
    """P_Amp's shuffled multiset, read as its largest S1 projection (computable under independent
    S1/S2 permutations): consistent with the ledger's amplification bound at both presets, and the
    paper-code σ (the ledger's ε ≈ 49 at δ = 0.1) shows a large measured ε."""
    fam, config = experiment_files.load("experiments/linear_fig1b_eps1.toml")
    (t,) = fam.audit_targets(config, "LinUCB-SDP-Amp")
    r = audit_target(t, 20_000, None, 0.95, np.random.default_rng(19))
    assert r["verdict"] == "consistent" and r["audit"]["epsilon"] > 3, r["audit"]
    fam, config = experiment_files.load("experiments/linear_fig1b_eps1.toml", ["preset=theory"])
    (t,) = fam.audit_targets(config, "LinUCB-SDP-Amp")
    assert audit_target(t, 20_000, None, 0.95, np.random.default_rng(19))["verdict"] == "consistent"


def test_dropouts_are_audited_against_the_partial_share_epsilon():
    """A quarter of a Dist-DP-SE cohort drops out (⌊0.25·16⌋ = 4, as the spine drops them): the
    survivors' shares carry 3/4 of the noise, and the ledger's computed ε for them
    (polya_sum_epsilon, 1.44 at ε = 1) is met within 10% by the audit. A ledger that ignored
    dropouts (Theorem 1's ε = 1 for the partial sum) would be flagged by the same samples."""
    from privbandit.protocol.privacy import PureDP

    data = {"family": "distributed-dp-mab", "horizon": 100_000, "epsilon": 1.0,
            "algorithms": {"dist-dp-se": {"dropout_rate": 0.25}}}
    fam, config = experiment_files.load_data(data)
    (t,) = fam.audit_targets(config, "dist-dp-se", 16)
    assert t.details["reports"] == 12
    r = audit_target(t, 300_000, None, 0.95, np.random.default_rng(20))
    claimed = r["claim"]["epsilon_at_delta"]
    assert claimed > 1.3 and r["verdict"] == "consistent" and r["tightness"] >= 0.9, r["audit"]
    ignoring = replace(t, claim=lambda delta: {"guarantee": "proven", "epsilon_at_delta": PureDP(1.0).epsilon})
    assert audit_target(ignoring, 300_000, None, 0.95, np.random.default_rng(20))["verdict"] == "violation"


def test_a_plugin_mechanism_is_audited_with_no_audit_code(tmp_path):
    """examples/mab-plugins' randomized response (#18), installed as its own package: the family's
    hook builds its target from the plug-in's randomizer and privacy event, as for its own."""
    import subprocess
    import sys

    from tests.examples import ROOT, install_example

    env = install_example("mab-plugins", tmp_path / "pkg")
    res = subprocess.run([sys.executable, "-m", "privbandit", "audit", str(ROOT / "examples" / "mab-plugins" / "rr.toml"),
                          "--algorithm", "rr-se", "--samples", "20000", "--cohort", "1", "--out", str(tmp_path / "out")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (r,) = json.loads((tmp_path / "out" / "audit.json").read_text())["targets"]
    # one user: the sum is the report itself, ε-RR exactly; 20,000 samples reach 0.8 of it
    assert r["verdict"] == "consistent" and r["tightness"] > 0.8, r["audit"]


def test_jobs_do_not_change_the_results(tmp_path):
    """--jobs 2 rebuilds each target in a worker and audits it from the same stream: the same numbers."""
    runner = CliRunner()
    base = ["audit", "experiments/fig4_trust_models.toml", "--algorithm", "CDP-SE", "--algorithm", "Dist-DP-SE",
            "--samples", "5000"]
    assert runner.invoke(app, [*base, "--out", str(tmp_path / "one")]).exit_code == 0
    assert runner.invoke(app, [*base, "--jobs", "2", "--out", str(tmp_path / "two")]).exit_code == 0
    one, two = (json.loads((tmp_path / d / "audit.json").read_text())["targets"] for d in ("one", "two"))
    assert [r["audit"] for r in one] == [r["audit"] for r in two] and len(one) == 2
