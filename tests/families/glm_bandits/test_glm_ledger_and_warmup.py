"""Private-GLM's ledger replayed from its calls (equal guarantees), a stacked task's ledger as its
most-spending run's, the nominal ε solved for a target, and eq. (6)'s warm-up B_1."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from privbandit.families.glm_bandits import parties as gp
from privbandit.families.glm_bandits import shuffle_glm as sg
from privbandit.families.glm_bandits.config import GLMExperiment
from privbandit.families.glm_bandits.family import FAMILY
from privbandit.runner.config import validate_experiment
from privbandit.runner.tasks import Task, execute

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"

TOML = """
family = "glm-bandits"
horizon = {T}
seed = 5
epsilon = 8.0
delta = 0.02
runs = {runs}
checkpoints = 8
preset = "paper-code"
[environment]
link = "probit"
dim = 3
arms = 20
norm = 3.0
reuse_contexts = true
[algorithms.private-glm]
"""


def _config(tmp_path, T=1200, runs=3, seed=5):
    p = tmp_path / "g.toml"
    p.write_text(TOML.format(T=T, runs=runs).replace("seed = 5", f"seed = {seed}"))
    return validate_experiment(GLMExperiment, p)[0]


def _replayed(config, label, runs, count1, count2, epsilon=None) -> float:
    public = FAMILY.public_task(config, label, runs)
    if epsilon is not None:
        public = {**public, "algorithm": {**public["algorithm"], "epsilon": epsilon}}
    ledger = FAMILY.ledger(public)
    gp.record_private_glm(gp.setup(public), ledger, count1, count2)
    return ledger.summary()["epsilon_at_delta"]


def test_the_ledger_replayed_from_the_calls_is_the_runs_ledger(tmp_path):
    """At S = 3 Criterion II switches in every run and Criterion I fires in one (seed 7; with App.
    I.1's noise it fires rarely at ε = 8 and T = 1200): both optimizers' calls are charged."""
    config = _config(tmp_path, seed=7)
    _, _, res, _ = execute(Task(FAMILY.name, config, "private-glm", (0, 1, 2)))
    c1 = [r["count1"] for r in res.learner]
    c2 = [r["count2"] for r in res.learner]
    assert max(c1) > 0 and min(c2) > 0
    got = _replayed(config, "private-glm", [0, 1, 2], c1, c2)
    assert got == pytest.approx(res.privacy["epsilon_at_delta"], rel=1e-12)
    # one call fewer reads less: the replay counts the calls, it does not only copy a constant
    fewer = list(c1)
    fewer[int(np.argmax(c1))] -= 1
    if max(fewer) < max(c1):
        assert _replayed(config, "private-glm", [0, 1, 2], fewer, c2) < got


def test_a_stacked_task_reads_its_most_spending_runs_ledger(tmp_path):
    """Each run alone (as over MQTT) spends at most what the stacked task's ledger reads, and the
    stack reads no more than its worst run plus the δ it takes from another run."""
    config = _config(tmp_path, T=1200, runs=3)
    _, _, both, _ = execute(Task(FAMILY.name, config, "private-glm", (0, 1, 2)))
    alone = [execute(Task(FAMILY.name, config, "private-glm", (r,)))[2].privacy["epsilon_at_delta"] for r in range(3)]
    stacked = both.privacy["epsilon_at_delta"]
    assert max(alone) <= stacked + 1e-9
    assert stacked <= max(alone) + 0.05


def test_the_worst_run_is_not_the_most_theta_o_calls_of_one_run_plus_the_most_theta_tau_of_another():
    """Table 2's S = 3, ε = 8 calls (θ̂_o, θ̂_τ) per run: the old ledger added run 6's 16 θ̂_o calls
    to run 8's 4 θ̂_τ calls and read 8.007 > 8; no run spent that. Now the stack reads its worst
    run (16, 3), up to the larger δ of run (5, 4)."""
    config = validate_experiment(GLMExperiment, EXPERIMENTS / "glm_table2_S3.toml")[0]
    label, runs = "private-glm@eps8", list(range(10))
    calls = [(3, 3), (5, 3), (3, 3), (7, 2), (14, 3), (16, 3), (10, 3), (5, 4), (7, 3), (6, 3)]
    stacked = _replayed(config, label, runs, [a for a, _ in calls], [b for _, b in calls])
    worst_run = max(_replayed(config, label, [0], [a], [b]) for a, b in calls)
    mixed = _replayed(config, label, [0], [16], [4])
    assert worst_run <= stacked < mixed
    assert stacked - worst_run < 0.03
    assert mixed == pytest.approx(8.0069, abs=1e-3) and stacked < 8


def test_the_solved_nominal_epsilon_meets_the_target():
    spec = importlib.util.spec_from_file_location("reproduce_glm", EXPERIMENTS / "reproduce_glm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = validate_experiment(GLMExperiment, EXPERIMENTS / "glm_table2_S3.toml")[0]
    public = FAMILY.public_task(config, "private-glm@eps8", [0])
    for target, (c1, c2) in ((8.0, (16, 4)), (4.0, (0, 2)), (2.0, (30, 9))):
        eps = mod.solve_nominal(FAMILY, public, target, c1, c2)
        got = mod.ledger_epsilon(FAMILY, public, eps, c1, c2)
        assert 0.999 * target <= got <= target
        assert mod.ledger_epsilon(FAMILY, public, eps * 1.01, c1, c2) > target


def test_eq6_warmup_is_the_schedules_first_batch():
    T, M, kappa, S, d, gamma = 10**6, 3, 1.0, 0.5, 2, 1.0
    alpha = T ** (1 / (2 * (1 - 2.0 ** (-M + 1))))  # eq. (7): T^{2/3}
    b1 = (math.sqrt(kappa) * math.exp(3 * S) * d**2 * gamma**2 * alpha / S) ** (2 / 3)
    assert sg.eq6_warmup(T, M, kappa, S, d, gamma) == pytest.approx(b1, rel=1e-12)
    assert b1 == pytest.approx(5048, rel=1e-3)
    schedule = sg.batch_schedule(T, M, kappa, S, d, gamma)
    assert schedule[0] == math.ceil(b1) and schedule[1] == math.ceil(alpha) and sum(schedule) == T
    # γ enters squared (eq. 6), not as App. F's φ (γ¹): doubling γ multiplies B_1 by 4^{2/3}
    assert sg.eq6_warmup(T, M, kappa, S, d, 2 * gamma) == pytest.approx(b1 * 4 ** (2 / 3), rel=1e-12)
