"""Real-data instances from scikit-learn's bundled sets (privbandit/datasets/real.py, docs/real-data.md)."""

import json
import math
import socket
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.datasets import real
from privbandit.datasets.letor import cluster_arms, zscore
from privbandit.families.distributed_dp_mab.config import EnvironmentConfig
from privbandit.families.distributed_dp_mab.family import build_instance
from privbandit.families.glm_bandits.world import mu, world_of
from privbandit.families.shuffle_linear_bandits.world import bounds, instances
from privbandit.protocol.primitives.seeding import stream

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"digits": (1797, 64, 10), "wine": (178, 13, 3), "iris": (150, 4, 3), "breast_cancer": (569, 30, 2)}


@pytest.fixture
def offline(monkeypatch):
    """No socket can be opened: a loader that downloads fails loudly."""
    def refuse(*args, **kwargs):
        raise OSError("network access in a test of the bundled datasets")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for cached in (real.load, real.contexts, real._glm_fit):
        cached.cache_clear()
    yield
    for cached in (real.load, real.contexts, real._glm_fit):
        cached.cache_clear()


@pytest.mark.parametrize("name", real.DATASETS)
def test_every_bundled_set_loads_offline_with_its_documented_shape(offline, name):
    x, y = real.load(name)
    rows, cols, classes = SHAPES[name]
    assert x.shape == (rows, cols) and y.shape == (rows,)
    assert sorted(np.unique(y)) == list(range(classes)) and real.classes(name) == classes
    assert real.SHAPES[name] == (rows, cols)  # the table the configs check sizes against, unloaded


@pytest.mark.parametrize("name, p", [("digits", 4), ("wine", 3), ("breast_cancer", 6)])
def test_contexts_are_the_scaled_principal_components_and_an_intercept(name, p):
    x = real.contexts(name, p)
    assert x.shape == (SHAPES[name][0], p + 1)
    h = 1 / math.sqrt(2)
    assert np.all(x[:, -1] == h)
    norms = np.linalg.norm(x, axis=1)
    assert norms.max() == pytest.approx(1.0, abs=1e-12) and norms.max() <= 1 + 1e-12  # one row on the sphere
    # the scores span the top-p principal subspace of the z-scored table: their covariance is diagonal,
    # with decreasing variances (the first p eigenvalues of zᵀz, up to the common scale)
    z = x[:, :-1]
    cov = z.T @ z
    assert np.allclose(cov - np.diag(np.diag(cov)), 0, atol=1e-9 * cov.max())
    eig = np.linalg.eigvalsh(zscore(real.load(name)[0]).T @ zscore(real.load(name)[0]))[::-1][:p]
    assert np.allclose(np.diag(cov) / np.diag(cov)[0], eig / eig[0], rtol=1e-9)


def test_the_loader_is_deterministic_across_processes_caches():
    a = np.array(real.contexts("digits", 4))
    real.contexts.cache_clear()
    real.load.cache_clear()
    assert np.array_equal(a, real.contexts("digits", 4))
    i1, i2 = instances("digits", 50, 5, 7, [0, 3]), instances("digits", 50, 5, 7, [3])
    assert np.array_equal(i1.arms[1], i2.arms[0]) and np.array_equal(i1.theta[1], i2.theta[0])
    assert not np.array_equal(i1.arms[0], i1.arms[1])  # each run draws its own rows


def test_bad_sizes_name_the_field_and_the_range():
    with pytest.raises(ValueError, match=r"environment.arms = 2000: .* must lie in \[2, 1797\]"):
        instances("digits", 2000, 5, 1, [0])
    with pytest.raises(ValueError, match=r"environment.dim = 66: .* must lie in \[2, 65\]"):
        instances("digits", 10, 66, 1, [0])
    with pytest.raises(ValueError, match="65 principal components asked, need 1 … 64"):
        real.contexts("digits", 65)
    with pytest.raises(ValueError, match=r"K = 3 arms .* got arms = 4, dim = 12"):
        world_of("logistic", "wine", 1, [0], 10, 4, 12, 2.0, False)
    with pytest.raises(ValueError, match="dataset = 'wine': the MAB arms need a binary label"):
        real.mab_arms("wine", 5)


@pytest.mark.parametrize("family, arms, dim, message", [
    ("shuffle-linear-bandits", 2000, 5, r"environment.arms = 2000: .* must lie in \[2, 1797\]"),
    ("shuffle-linear-bandits", 10, 16, r"environment.dim = 16: .* must lie in \[2, 5\]"),
    ("concurrent-shuffle", 1798, 5, r"environment.arms = 1798: .* must lie in \[2, 1797\]")])
def test_an_experiment_too_large_for_its_dataset_is_refused_when_read(family, arms, dim, message):
    """The sizes are checked as the file is read (a one-line error, no traceback from a running task)."""
    from privbandit.runner import load_experiment
    from privbandit.runner.config import ConfigError

    algorithm = {"shuffle-linear-bandits": "linucb", "concurrent-shuffle": "cs-linucb-exact"}[family]
    generator = "iris" if dim == 16 else "digits"  # iris: 4 columns, so dim ≤ 5
    data = {"family": family, "name": "t", "horizon": 1000,
            "environment": {"generator": generator, "arms": arms, "dim": dim},
            "algorithms": {"a": {"algorithm": algorithm, **({"k": 1} if family == "concurrent-shuffle" else {})}}}
    with pytest.raises(ConfigError, match=message):
        load_experiment(data, [])
    data["environment"]["arms"], data["environment"]["dim"] = 10, 5
    load_experiment(data, [])  # and a size that fits is accepted


@pytest.mark.parametrize("name", real.DATASETS)
def test_linear_instances_meet_assumption_3_1_and_fit_the_target_class(name):
    """‖φ‖ ≤ 1, ‖θ*‖ ≤ 1, every row's mean in [0, 1] (the generator's public bounds (1, 1) hold), and
    θ* is the target class's fit: rows of that class score higher than the others on average."""
    assert bounds(name) == (1.0, 1.0)
    x, (_, y) = real.contexts(name, 4), real.load(name)
    for r in range(4):
        rng = stream(5, "linear-instance", r)
        arms, theta = real.linear_instance(name, 20, 5, rng)
        assert np.linalg.norm(arms, axis=1).max() <= 1 + 1e-12 and np.linalg.norm(theta) <= 1 + 1e-12
        means = x @ theta
        assert means.min() >= 0 and means.max() <= 1
        assert {tuple(a) for a in arms} <= {tuple(row) for row in x}  # the arms are rows of the set
        rng2 = stream(5, "linear-instance", r)
        rng2.choice(x.shape[0], size=20, replace=False)
        target = int(rng2.integers(real.classes(name)))
        # OLS with an intercept: the class-mean gap of the fitted values is ‖ŷ − ȳ‖²·n/(n_c(n − n_c)) > 0,
        # and the shrink toward ½ keeps its sign (an unrelated θ* fails one of these 16 checks w.p. 1 − 2⁻¹⁶)
        assert means[y == target].mean() > means[y != target].mean()


def test_glm_arms_are_the_disjoint_encoding_and_the_fit_picks_the_label():
    """Arm a of user t is e_a ⊗ x_t (its block a holds a row of the set, every other block is 0),
    and under θ* the label's arm has the largest mean for almost every wine (the fit's accuracy)."""
    w = world_of("logistic", "wine", 3, [0], 500, 3, 12, 4.0, False)
    arms = w.arms[0].reshape(500, 3, 3, 4)  # (T, arm, block, p + 1)
    x = real.contexts("wine", 3)
    for a in range(3):
        others = [b for b in range(3) if b != a]
        assert np.all(arms[:, a, others] == 0)
    rows = arms[:, np.arange(3), np.arange(3)]  # (T, arm, p + 1): the same row in every arm's block
    assert np.all(rows == rows[:, :1])
    assert np.linalg.norm(w.theta[0]) == pytest.approx(4.0)
    assert np.allclose(w.means[0], mu("logistic", np.einsum("tkd,d->tk", w.arms[0], w.theta[0])))
    _, y = real.load("wine")
    theta = w.theta[0].reshape(3, 4)
    assert ((x @ theta.T).argmax(axis=1) == y).mean() > 0.9
    # rows drawn uniformly: every wine index is a row of the set
    index = {tuple(r): i for i, r in enumerate(x)}
    drawn = np.array([index[tuple(r)] for r in rows[:, 0]])
    assert np.unique(drawn).size > 100


def test_mab_arms_are_the_clusters_fractions_of_benign_tumours():
    arms, assign = cluster_arms(real.load("breast_cancer")[1], real.load("breast_cancer")[0], 10, 0,
                                     max_label=1, return_assignment=True)
    got = real.mab_arms("breast_cancer", 10)
    _, y = real.load("breast_cancer")
    fractions = np.array([y[assign == k].mean() for k in range(10)])
    assert np.allclose(got.means, fractions) and sum(got.counts) == 569
    assert got == real.mab_arms("breast_cancer", 10)  # deterministic (seed 0)
    inst = build_instance(EnvironmentConfig(kind="bundled", arms=10, reward="bernoulli"), np.random.default_rng(1))
    assert np.allclose(inst.means, fractions)
    draws = inst.sample(int(np.argmax(fractions == fractions[fractions < 1].max())), 20_000, np.random.default_rng(2))
    p = fractions[fractions < 1].max()
    # Bernoulli(p): the mean of 20,000 draws is within 5 standard errors of p
    assert abs(draws.mean() - p) < 5 * math.sqrt(p * (1 - p) / 20_000)


def test_real_digits_linear_runs_end_to_end_offline(offline, tmp_path):
    """The issue's done-when: ``privbandit run experiments/real_digits_linear.toml`` (short horizon),
    no network; its regret columns are pseudo-regret against the instance's best arm. About 9 s at
    load 20 (the CLI, scikit-learn's import, five algorithms): it is the issue's done-when."""
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(ROOT / "experiments/real_digits_linear.toml"), "--out", str(out),
                                   "--jobs", "1", "--set", "horizon=600", "--set", "runs=1",
                                   "--set", "algorithms.LinUCB-SDP-Amp.batch=100",
                                   "--set", "algorithms.LinUCB-SDP-Vec.batch=100"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generator"] == "digits"
    inst = instances("digits", summary["arms"], summary["dim"], summary["seed"], [0])
    gap = inst.means[0].max() - inst.means[0].min()
    for label, a in summary["algorithms"].items():
        assert 0 <= a["regret_final_mean"] <= 600 * gap + 1e-9, label
