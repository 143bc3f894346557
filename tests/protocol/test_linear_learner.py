"""Batched LinUCB (Algorithm 1), its non-PD safeguard, the accountant, the privacy events each release
declares, and the linear family's experiment files and runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privbandit import registry
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.families.shuffle_linear_bandits.learners import BatchedLinUCB, ucb_actions
from privbandit.protocol.privacy import ApproxDP, Ledger, NoneProven, ZCDP
from privbandit.protocol.privacy import amplification as amp
from privbandit.protocol.privacy.events import ORDERS
from privbandit.protocol.privacy.ledger import rdp_to_dp
from privbandit.runner import config as experiment_files, run_file
from privbandit.runner.config import ConfigError


def test_learner_matches_direct_solution():
    rng = np.random.default_rng(0)
    d, runs = 4, 3
    learner = BatchedLinUCB(runs, d, lam=2.0, floor=1.0, beta_fn=lambda t: 1.0)
    xs = rng.normal(size=(10, runs, d))
    ys = rng.normal(size=(10, runs))
    for x, y in zip(xs, ys):
        learner.update(x * y[:, None], x[:, :, None] * x[:, None, :], 1)
    v = 2.0 * np.eye(d) + np.einsum("tri,trj->rij", xs, xs)
    u = np.einsum("tri,tr->ri", xs, ys)
    np.testing.assert_allclose(learner.theta, np.linalg.solve(v, u[..., None])[..., 0], rtol=1e-10)
    # the Sherman–Morrison fast path agrees with the eigen/inverse path
    fast = BatchedLinUCB(runs, d, lam=2.0, floor=1.0, beta_fn=lambda t: 1.0)
    for x, y in zip(xs, ys):
        fast.update_rank_one(x, y)
    np.testing.assert_allclose(fast.v_inv, np.linalg.inv(v), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fast.theta, learner.theta, rtol=1e-9)


def test_not_positive_definite_V_is_clipped_logged_and_usable():
    d = 3
    learner = BatchedLinUCB(2, d, lam=1.0, floor=0.5, beta_fn=lambda t: 1.0)
    noise = np.zeros((2, d, d))
    noise[0] = np.diag([-5.0, 0.0, 0.0])  # run 0: V = diag(−4, 1, 1), indefinite
    noise[1] = np.diag([-0.7, 0.0, 0.0])  # run 1: V = diag(0.3, 1, 1), PD but below the floor
    learner.update(np.ones((2, d)), noise, 1)
    assert learner.not_pd.tolist() == [1, 0]
    assert learner.clipped.tolist() == [1, 1]
    np.testing.assert_allclose(learner.smallest_eigenvalues(), [-4.0, 0.3])
    np.testing.assert_allclose(np.linalg.eigvalsh(learner.v_inv).max(axis=1), [2.0, 2.0])  # 1/floor
    assert np.isfinite(learner.theta).all()
    np.testing.assert_allclose(learner.V[0], np.diag([-4.0, 1.0, 1.0]))  # released V kept as is
    arms = np.broadcast_to(np.eye(d), (2, d, d))
    assert ucb_actions(arms, learner.theta, learner.v_inv, 1.0).shape == (2,)
    # a later batch that restores PD stops the clipping
    learner.update(np.zeros((2, d)), -noise, 1)
    assert learner.clipped.tolist() == [1, 1]


def test_ucb_actions_pick_optimistic_arm():
    arms = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    theta = np.array([[0.5, 0.4]])
    v_inv = np.array([[[0.01, 0.0], [0.0, 4.0]]])
    assert ucb_actions(arms, theta, v_inv, 0.0).tolist() == [0]
    assert ucb_actions(arms, theta, v_inv, 1.0).tolist() == [1]


def test_shuffle_accountant_properties():
    assert amp.shuffle_epsilon(1, 1.0, 1e-9) == pytest.approx(1.0, abs=1e-5)  # nothing to hide among
    eps = [amp.shuffle_epsilon(n, 2.0, 1e-6) for n in (10, 100, 1000)]
    assert eps[0] > eps[1] > eps[2]
    for n, e0, delta in [(1000, 1.0, 1e-6), (5000, 2.0, 1e-6)]:
        closed = amp.fmt_closed_form(n, e0, delta)
        assert closed is not None and amp.shuffle_epsilon(n, e0, delta) <= closed
    assert amp.fmt_closed_form(20, 1.0, 0.05) is None  # outside Lemma B.4's range


def test_gaussian_epsilon_is_exact():
    eps = amp.gaussian_epsilon(1.0, 2.0, 1e-5)
    assert amp.gaussian_delta(eps, 1.0, 2.0) == pytest.approx(1e-5, rel=1e-4)
    assert eps < math.sqrt(2 * math.log(1.25 / 1e-5)) / 2.0  # tighter than the classic calibration


def test_composition_and_zcdp():
    eps, dlt = amp.advanced_composition(0.01, 1e-7, 100, 1e-6)
    assert eps == pytest.approx(math.sqrt(200 * math.log(1e6)) * 0.01 + 100 * 0.01 * math.expm1(0.01))
    assert dlt == pytest.approx(1e-5 + 1e-6)
    rho = amp.zcdp_rho(1.0, 1e-5)
    assert amp.zcdp_epsilon(rho, 1e-5) == pytest.approx(1.0)


def _ledger(events, delta=0.1, group=None) -> dict:
    ledger = Ledger("shuffle", 1.0, delta, users=10**6)
    for e in events:
        ledger.record(e, group=group)
    return ledger.summary()


def test_amp_event_and_warning_outside_theorem_range():
    budget = lp.batch_budget(1.0, 0.1, 1)
    sigma = lp.amp_sigma("theory", budget, 20, 1.0)
    notes = lp.describe("linucb-sdp-amp", "theory", 1.0, 0.1, budget, 20, 1.0, sigma, None, None, 20000)
    assert notes["warnings"] and "Thm 3.2" in notes["warnings"][0]
    event = lp.batch_event("linucb-sdp-amp", "theory", budget, 20, 1.0, sigma, None, None, 5)
    assert isinstance(event, ApproxDP) and event.epsilon < 1.0 and event.delta <= 0.1
    # Unique users: every batch reaches its own users; the run's guarantee is one batch's.
    summary = _ledger([event] * 50)
    assert summary["guarantee"] == "proven" and summary["epsilon_at_delta"] == pytest.approx(event.epsilon)
    small = lp.batch_budget(0.2, 0.1, 1)
    sigma = lp.amp_sigma("theory", small, 20, 1.0)
    assert not lp.describe("linucb-sdp-amp", "theory", 0.2, 0.1, small, 20, 1.0, sigma, None, None, 20000)["warnings"]
    assert lp.batch_event("linucb-sdp-amp", "theory", small, 20, 1.0, sigma, None, None, 5).epsilon <= 0.2


def test_returning_users_budget_and_composition():
    budget = lp.batch_budget(0.5, 0.1, 1000)
    assert budget.epsilon == pytest.approx(0.5 / (2 * math.sqrt(2000 * math.log(20))))
    assert budget.delta == pytest.approx(0.1 / 2000)
    vec = lp.vec_params("theory", budget, 20, 5, 1.0, 1.0, None, "2delta")
    event = lp.batch_event("linucb-sdp-vec", "theory", budget, 20, 1.0, None, vec, None)
    assert isinstance(event, ApproxDP) and (event.epsilon, event.delta) == (budget.epsilon, budget.delta)
    # A returning user joins every batch: the ledger composes the M batches' (ε, δ) statements by
    # basic composition (M·ε_m, M·δ_m), weaker than the advanced composition ε_m was calibrated for.
    summary = _ledger([event] * 1000, group="returning")
    assert summary["epsilon_at_delta"] == pytest.approx(1000 * budget.epsilon) and summary["delta_from_theorems"] <= 0.1
    # More batches than the δ budget covers: no guarantee is stated.
    assert _ledger([event] * 2001, group="returning")["epsilon_at_delta"] is None


def test_vec_without_theorem_coverage_declares_none_proven():
    budget = lp.batch_budget(1.0, 0.1, 1)
    for preset, span, why in (("paper-code", "2delta", "24·10⁴"), ("theory", "delta", "span = Δ")):
        vec = lp.vec_params(preset, budget, 20, 5, 1.0, 1.0, None, span)
        event = lp.batch_event("linucb-sdp-vec", preset, budget, 20, 1.0, None, vec, None)
        assert isinstance(event, NoneProven) and why in event.reason
        assert _ledger([event])["guarantee"] == "none proven" and _ledger([event])["epsilon_at_delta"] is None


def test_jdp_tree_nodes_compose_across_levels_only():
    """Level j's nodes cover disjoint batches (parallel), levels compose: a user pays ⌊log₂ n⌋ + 1
    nodes, what the tree's zCDP bound charges."""
    budget = lp.batch_budget(1.0, 0.1, 1)
    sigma = lp.jdp_sigma("theory", budget, 1000, 1.0, 5)
    node = lp.batch_event("linucb-jdp", "theory", budget, 1, 1.0, sigma, None, None, 5)
    assert isinstance(node, ZCDP)
    from privbandit.families.shuffle_linear_bandits.mechanisms import TreeAggregator, tree_levels

    tree, ledger = TreeAggregator(sigma, (1, 2)), Ledger("central", 1.0, 0.1, users=1000)
    for _ in range(1000):
        ledger.record(node, f"level-{tree.level()}")
        tree.step(np.zeros((1, 2)), np.zeros((1, 2)))
    assert len(ledger.lanes) == tree_levels(1000) == 10
    rho = tree_levels(1000) * node.rho
    assert ledger.summary()["cdp_epsilon"] == pytest.approx(math.sqrt(2 * rho))
    # σ was calibrated so that the composed ρ gives ε = 1 by the classic conversion; the ledger's
    # RDP conversion is at least as tight.
    assert amp.zcdp_epsilon(rho, 0.1) == pytest.approx(1.0)
    assert ledger.summary()["epsilon_at_delta"] <= 1.0


def test_vec_theory_constants_and_bits():
    budget = lp.batch_budget(1.0, 0.1, 1)
    vec = lp.vec_params("theory", budget, 20, 5, 1.0, 1.0, None, "2delta")
    assert vec.g == 9 and vec.p == 0.25
    assert vec.b == math.ceil(24e4 * 81 * math.log(4 * 26 / 0.1) ** 2 / 20)  # ≈ 4.69·10⁷ (spec §7)
    bits = lp.vec_bits(vec, 5)
    assert bits["bits_per_user_theory"] == 30 * (vec.g + vec.b)
    assert bits["bytes_per_user_wire"] == 20 * 4  # 20 labels, uint32 counts


def _write_toml(tmp_path, body: str):
    path = tmp_path / "exp.toml"
    path.write_text('family = "shuffle-linear-bandits"\n' + body)
    return path


def test_family_is_registered_under_its_files_name():
    assert registry.family("shuffle-linear-bandits").name == "shuffle-linear-bandits"


def test_config_errors_name_the_field(tmp_path):
    base = "horizon = 100\n[algorithms.LinUCB]\n"
    with pytest.raises(ConfigError, match="preset"):
        experiment_files.load(_write_toml(tmp_path, 'preset = "paper"\n' + base))
    with pytest.raises(ConfigError, match="algorithms.A.batch"):
        experiment_files.load(_write_toml(tmp_path, "horizon = 100\n[algorithms.A]\nalgorithm = 'linucb-sdp-amp'\n"
                                                    "batch = 200\n"))
    with pytest.raises(ConfigError, match="environment.dim"):
        experiment_files.load(_write_toml(tmp_path, base + "[environment]\ndim = 1\n"))
    with pytest.raises(ConfigError, match="algorithms.X.algorithm"):
        experiment_files.load(_write_toml(tmp_path, "horizon = 100\n[algorithms.X]\nalgorithm = 'ucb'\n"))
    for bad in ("1.5", "0", "-0.1", "nan"):  # the message names the field and its whole range
        with pytest.raises(ConfigError, match=r"delta: .*must lie in \(0, 1\)"):
            experiment_files.load(_write_toml(tmp_path, f"delta = {bad}\n" + base))


def test_delta_defaults_to_a_tenth_of_one_over_the_users_protected(tmp_path):
    """#31 item 4: a file without ``delta`` is held to δ = 1/(10·T), as in every family, and the
    summary and every ledger say so; the figure files keep the paper's explicit δ = 0.1 (§5)."""
    path = _write_toml(tmp_path, "horizon = 400\nseed = 1\n[environment]\narms = 10\ndim = 3\n"
                                 "[algorithms.LinUCB-LDP]\n[algorithms.LinUCB-SDP-Amp]\n")
    _, config = experiment_files.load(path)
    assert config.delta == 1 / (10 * 400)
    summary = run_file(path, out=tmp_path / "out").summary
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    for s in (summary, on_disk):
        assert s["delta"] <= 1 / (10 * 400)
        for label in ("LinUCB-LDP", "LinUCB-SDP-Amp"):
            assert s["privacy"][label]["delta"] <= 1 / (10 * 400) and not s["privacy"][label]["delta_warning"]
    for name in ("linear_fig1a_eps0.2", "linear_fig1b_eps1", "linear_fig1c_eps10", "linear_fig2_d10_eps1",
                 "linear_fig2_d15_eps1"):
        assert experiment_files.load(f"experiments/{name}.toml")[1].delta == 0.1


def test_family_run_is_reproducible_and_independent_of_jobs(tmp_path):
    body = ("horizon = 400\nruns = 3\nseed = 5\nepsilon = 1.0\ndelta = 0.1\n[environment]\narms = 10\ndim = 3\n"
            "[algorithms.LinUCB]\n[algorithms.LinUCB-JDP]\n[algorithms.LinUCB-LDP]\n"
            "[algorithms.LinUCB-SDP-Amp]\nbatch = 20\n[algorithms.LinUCB-SDP-Vec]\nbatch = 20\n")
    path = _write_toml(tmp_path, body)
    a = run_file(path, out=tmp_path / "a", jobs=1)
    run_file(path, out=tmp_path / "b", jobs=2)
    for name in ("curves.csv", "rounds.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    summary = a.summary
    for key in ("experiment", "horizon", "runs", "elapsed_s", "transport", "preset", "dim"):
        assert key in summary
    for label in ("LinUCB", "LinUCB-JDP", "LinUCB-LDP", "LinUCB-SDP-Amp", "LinUCB-SDP-Vec"):
        alg = summary["algorithms"][label]
        assert {"regret_final_mean", "regret_final_stderr", "users_per_s", "batches_clipped", "mechanism"} <= set(alg)
        assert {"epsilon_pure", "epsilon_at_delta", "delta", "guarantee"} <= set(summary["privacy"][label])
        assert summary["communication"][label]["bits_per_user_protocol"] > 0
    assert summary["algorithms"]["LinUCB-SDP-Amp"]["batch"] == 20 and summary["algorithms"]["LinUCB"]["batch"] == 1
    assert summary["privacy"]["LinUCB"]["guarantee"] == "non-private"
    assert summary["privacy"]["LinUCB-SDP-Vec"]["guarantee"] == "none proven"  # paper-code b
    for label in ("LinUCB-JDP", "LinUCB-LDP", "LinUCB-SDP-Amp"):
        assert summary["privacy"][label]["guarantee"] == "proven" and summary["privacy"][label]["epsilon_at_delta"]
    # LDP: every user's one report is ρ-zCDP through the grid's discrete Gaussian (Δ widened by the
    # rounding of D = 9 entries), converted at δ; never better than the continuous Gaussian's curve.
    sigma = lp.ldp_sigma("paper-code", lp.batch_budget(1.0, 0.1, 1), 2**0.5)
    ldp = summary["privacy"]["LinUCB-LDP"]["epsilon_at_delta"]
    assert ldp == pytest.approx(rdp_to_dp(ORDERS * lp.report_rho(2**0.5, 3, sigma), 0.1))
    assert ldp > amp.gaussian_epsilon(lp.report_sensitivity(2**0.5), sigma, 0.1)
    for name in ("summary.json", "config.json", "curves.csv", "rounds.csv", "regret.png"):
        assert (tmp_path / "a" / name).exists()
    json.loads((tmp_path / "a" / "summary.json").read_text())
    rows = (tmp_path / "a" / "rounds.csv").read_text().splitlines()
    assert rows[0].split(",")[:7] == ["algorithm", "run", "round", "n", "reports", "epsilon", "bits"]
    assert {r.split(",")[1] for r in rows[1:]} == {"0", "1", "2"}  # one row per run and diagnostic batch
