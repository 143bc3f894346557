"""ShuffleGLM (Algorithm 1) under the ``exact`` preset (issue #30 item 4): fair noise bits, the fewest
the exact count accountant allows, and a ledger that names that accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.families.glm_bandits import mechanisms as mech
from privbandit.families.glm_bandits import shuffle_parties as sp
from privbandit.families.glm_bandits.config import GLMExperiment, resolved
from privbandit.families.glm_bandits.family import FAMILY
from privbandit.families.glm_bandits.world import unit_ball
from privbandit.families.shuffle_linear_bandits.mechanisms import BitSumAnalyzer, BitSumRandomizer
from privbandit.protocol.privacy import counts
from privbandit.runner.config import ConfigError, validate_experiment
from privbandit.runner.tasks import Task, execute

TOML = """
family = "glm-bandits"
name = "alg1-exact"
horizon = 2000
seed = 3
epsilon = 1.0
delta = 0.1
runs = 1
checkpoints = 20
preset = "{preset}"
[environment]
link = "logistic"
dim = 3
arms = 10
norm = 2.0
[algorithms.{label}]
{extra}
"""


def _config(tmp_path, preset="exact", label="shuffle-glm", extra="warmup = 400\nmax_iterations = 20"):
    p = tmp_path / "exact.toml"
    p.write_text(TOML.format(preset=preset, label=label, extra=extra))
    return validate_experiment(GLMExperiment, p)[0]


def _setup(config) -> sp.ShuffleSetup:
    return sp.shuffle_setup(FAMILY.public_task(config, "shuffle-glm", [0]))


def test_every_p_vec_call_has_the_fewest_fair_bits_the_accountant_allows(tmp_path):
    """Covariance rounds at (ε/2, δ/2) over d(d+1)/2 labels, each batch's 𝒫_GD rounds together at
    (ε/2, δ/2) over d·T_it labels: b meets the target, b − 1 misses it."""
    s = _setup(_config(tmp_path))
    eps, dlt = s.epsilon / 2, s.delta / 2
    for k in range(s.batches - 1):
        n = s.schedule[k]
        for vec, labels in ((s.cov_vec(k), 6), (s.pgd(k).vec, 3 * s.pgd(k).iterations)):
            assert vec.p == 0.5 and vec.span == 2 * vec.shift and vec.b > 1
            assert counts.count_delta(n * vec.b, vec.g, labels, eps) <= dlt
            assert counts.count_delta(n * (vec.b - 1), vec.g, labels, eps) > dlt


def test_the_ledger_names_the_exact_accountant_and_meets_the_target(tmp_path):
    """Two lanes, each calibrated to (ε/2, δ/2) by the fewest bits: the run's ε at δ lies just under ε
    (within 1 %: b − 1 would exceed it), and every basis is the exact accountant's."""
    config = _config(tmp_path)
    _, _, res, _ = execute(Task(FAMILY.name, config, "shuffle-glm", (0,)))
    p = res.privacy
    assert p["guarantee"] == "proven" and p["trust_model"].startswith("shuffle")
    assert 0.99 < p["epsilon_at_delta"] <= 1.0 and p["delta_from_theorems"] <= 0.1
    assert set(p["basis"]) == {counts.BASIS, sp.EXACT_GRADIENT_BASIS}
    s = _setup(config)
    assert p["releases"] == sum(1 + s.pgd(k).iterations for k in range(s.batches - 1))
    assert s.describe()["accountant"]["covariance"] == counts.BASIS and s.describe()["vec_constant"] is None


def test_gradient_rounds_so_far_cost_their_exact_composition(tmp_path):
    """The ledger charges k of a batch's gradient rounds the exact k-fold ε at δ/2: increasing in k,
    ≤ ε/2 at k = T_it, and below what advanced composition charges the same rounds."""
    s = _setup(_config(tmp_path))
    event, T = s.grad_event(0), s.pgd(0).iterations
    eps = [event.composed(k)[0] for k in (1, T // 2, T)]
    assert eps[0] < eps[1] < eps[2] <= s.epsilon / 2 and event.composed(T)[1] == s.delta / 2
    assert isinstance(s.cov_event(0), sp.ApproxDP) and s.cov_event(0).basis == counts.BASIS
    assert s.cov_event(0).epsilon <= s.epsilon / 2


def test_exact_gradient_rounds_decode_with_the_fair_bits_variance():
    """One exact 𝒫_GD round for n = 300 users: the decoded sum's error is unbiased with the variance
    BitSumAnalyzer states for p = ½ (400 repetitions × 3 labels; tolerances 4/√N on the mean, ±10 % on
    the variance, as the eq. (127) test beside it)."""
    d, n = 3, 300
    plan = mech.pgd_plan(n, d, 1.0, 0.05, 2.0, 1.0, 50, exact=True)
    assert plan.vec.p == 0.5
    rng = np.random.default_rng(13)
    grads = unit_ball(rng, (400, n), d)
    totals = BitSumRandomizer(plan.vec).randomize(grads, rng).sum(axis=1)
    err = BitSumAnalyzer(plan.vec).analyze(totals, n) - grads.sum(axis=1)
    z = (err / np.sqrt(BitSumAnalyzer(plan.vec).error_variance(grads))).ravel()
    assert abs(z.mean()) < 4 / math.sqrt(z.size) and 0.9 < z.var() < 1.1


def test_exact_needs_far_fewer_bits_than_eq_127(tmp_path):
    s, paper = _setup(_config(tmp_path)), _setup(_config(tmp_path, preset="paper"))
    assert s.cov_vec(0).b * 100 < paper.cov_vec(0).b and s.pgd(0).vec.b * 100 < paper.pgd(0).vec.b
    assert s.consts.sigma * 100 < paper.consts.sigma  # λ's σ̃ is the calibration's, not eq. (127)'s


def test_vec_constant_is_refused_under_exact_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithms\.shuffle-glm\.vec_constant.*exact"):
        _config(tmp_path, extra="warmup = 400\nvec_constant = 1.0")
    _config(tmp_path, preset="paper", extra="warmup = 400\nvec_constant = 1.0")  # the paper preset takes it


def test_other_algorithms_run_under_exact_as_under_paper(tmp_path):
    """Private-GLM's resolved settings and its run are the paper preset's, number for number."""
    a = _config(tmp_path, label="private-glm", extra="")
    b = _config(tmp_path, preset="paper", label="private-glm", extra="")
    assert resolved(a, "private-glm") == resolved(b, "private-glm")
    assert (a.theta_generator, a.reuse_contexts) == (b.theta_generator, b.reuse_contexts)
    ra, rb = (execute(Task(FAMILY.name, c, "private-glm", (0,)))[2] for c in (a, b))
    assert np.array_equal(ra.pseudo, rb.pseudo) and ra.privacy == rb.privacy
