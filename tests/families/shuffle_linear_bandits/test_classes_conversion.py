"""The linear family with per-user contexts (``environment.conversion = "classes"``, issue #34 item 3):
each user chooses from her own arm set {φ(c_t, a)} with the batch's broadcast (Algorithm 1 line 4),
her reward is her label's 1{a = y_t}, and the regret is the mistake count."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privbandit.protocol.spine.events import Join, Plan
from privbandit.protocol.spine.observer import checkpoints_in
from privbandit.runner import load_experiment, run_file
from privbandit.runner.config import ConfigError
from tests.test_real_data import offline  # noqa: F401  (a fixture: every socket refused)

BASE = {"family": "shuffle-linear-bandits", "name": "t", "horizon": 1000, "seed": 5, "epsilon": 1, "runs": 2,
        "environment": {"generator": "wine", "conversion": "classes", "arms": 3, "dim": 12}}


def _config(algorithms: dict, **over):
    data = json.loads(json.dumps(BASE))
    data.update(over)
    data["algorithms"] = algorithms
    return load_experiment(data, [])


@pytest.mark.parametrize("env, message", [
    ({"generator": "paper"}, r"environment.conversion = 'classes' needs a real dataset in environment.generator "
                             r".* not generator = 'paper'"),
    ({"arms": 4}, r"the wine instance has K = 3 arms .* got arms = 4, dim = 12"),
    ({"dim": 13}, r"d in 6, 9, …, 42\); got arms = 3, dim = 13"),
    ({"conversion": "context"}, r"conversion")])
def test_a_bad_conversion_is_refused_when_read(env, message):
    data = json.loads(json.dumps(BASE))
    data["environment"].update(env)
    data["algorithms"] = {"LinUCB": {}}
    with pytest.raises(ConfigError, match=message):
        load_experiment(data, [])


def _scores(phi, theta, v_inv, beta):
    """Line 4 written out for one user: ⟨φ, θ̂⟩ + β‖φ‖_{V⁻¹} of each arm (a check, not the kernel)."""
    return phi @ theta + beta * np.sqrt(np.maximum(np.einsum("kd,de,ke->k", phi, v_inv, phi), 0))


def test_users_choose_from_their_own_contexts_get_their_label_and_count_mistakes():
    """One batch of 50 users per run, a random broadcast: every user's arm is the argmax of her own
    scores, the φ she reports is her arm's, her reward is 1{a = label}, and the block's regret
    (pseudo and realized, at the end and at the checkpoints inside) is the running mistake count."""
    fam, config = _config({"LinUCB": {"batch": 50}}, checkpoints=40, horizon=500)
    users = fam.users(config, "LinUCB", [0, 1])
    s = users.s
    rng = np.random.default_rng(3)
    theta = rng.normal(size=(2, 12))
    a = rng.normal(size=(2, 12, 12))
    v_inv = np.linalg.inv(np.eye(12) + np.matmul(a, np.swapaxes(a, 1, 2)))
    plan = Plan(1, 50, 50, {"batch": 1, "theta": theta, "v_inv": v_inv, "beta": 0.7}, (s.round(1),),
                (Join(1, 50, 50, 50),))
    answer = users.act(plan, 0, 50, 50, None)
    values = answer.reports[0][2]  # (R, 50, d + 1): raw (φ, y) to the trusted analyzer
    phi, labels = users.world.users(50, 50)
    for r in range(2):
        for t in range(50):
            arm = int(np.argmax(_scores(phi[r, t], theta[r], v_inv[r], 0.7)))
            assert np.array_equal(values[r, t, :12], phi[r, t, arm])
            assert values[r, t, 12] == float(arm == labels[r, t])
    mistakes = (1 - values[..., 12]).cumsum(axis=1)
    truth = answer.truth
    assert np.array_equal(truth.pseudo, mistakes[:, -1]) and np.array_equal(truth.realized, mistakes[:, -1])
    at = checkpoints_in(users.checkpoints, 50, 50) - 50 - 1
    assert at.size  # a checkpoint lies inside this block
    assert np.array_equal(truth.pseudo_at, mistakes[:, at]) and np.array_equal(truth.realized_at, mistakes[:, at])
    assert users.oracle is None  # the look-ahead assumes fixed arms: one plan per batch


def test_a_run_learns_the_labels_and_reports_mistakes(offline, tmp_path):
    """wine, T = 3000, with every socket refused: the summary names the regret as mistakes;
    non-private LinUCB errs on well under half the users (a random arm errs on 2/3: 2000), SDP-Amp's
    regret is a whole number of mistakes ≤ T, and the private ledgers read (ε, δ) at equal guarantees."""
    path = tmp_path / "classes.toml"
    path.write_text("""
family = "shuffle-linear-bandits"
name = "classes"
horizon = 3000
seed = 8
epsilon = 1
runs = 2
checkpoints = 5
preset = "exact"
calibrate = true
[environment]
generator = "wine"
conversion = "classes"
arms = 3
dim = 12
[algorithms.LinUCB]
[algorithms.LinUCB-SDP-Amp]
batch = 100
""")
    run_file(path, out=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["conversion"] == "classes" and "mistakes" in summary["regret"]
    rows = [line.split(",") for line in (tmp_path / "out" / "runs.csv").read_text().splitlines()[1:]]
    runs = {label: np.array([float(r[3]) for r in rows if r[0] == label and r[2] == "3000"])
            for label in summary["algorithms"]}
    assert all(v.size == 2 for v in runs.values())
    assert all(r[3] == r[4] for r in rows)  # realized = pseudo: the reward is deterministic
    assert runs["LinUCB"].max() < 1000
    amp = runs["LinUCB-SDP-Amp"]
    assert np.array_equal(amp, np.round(amp)) and (amp >= 0).all() and (amp <= 3000).all()
    assert summary["privacy"]["LinUCB-SDP-Amp"]["epsilon_at_delta"] == pytest.approx(1.0, rel=1e-6)


def test_the_shipped_classes_files_read_as_documented():
    """experiments/real_{wine,digits}_classes_linear.toml: the sizes docs/real-data.md tabulates."""
    from pathlib import Path

    from privbandit.runner import config as experiment_files

    root = Path(__file__).resolve().parents[3] / "experiments"
    for name, arms, dim, labels in [("wine", 3, 12, 5), ("digits", 10, 40, 4)]:
        fam, config = experiment_files.load(root / f"real_{name}_classes_linear.toml")
        env = config.environment
        assert (config.generator, env.conversion, env.arms, env.dim) == (name, "classes", arms, dim)
        assert (config.horizon, config.runs, config.calibrate, len(config.algorithms)) == (20000, 5, True, labels)


def test_the_policy_refuses_a_classes_world():
    """A caller's world brings its own arms: the dataset's users and labels are a simulated world."""
    import privbandit

    data = json.loads(json.dumps(BASE))
    data["algorithms"] = {"LinUCB": {}}
    with pytest.raises(Exception, match="conversion = 'classes' is a simulated world"):
        privbandit.Policy(data, "LinUCB", contexts=np.zeros((3, 12)))
