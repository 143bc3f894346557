"""The concurrent-shuffle family on the spine: experiment files, the in-process run against the
vectorized counter, stacked runs against one task per run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privbandit.families.concurrent_shuffle import FAMILY
from privbandit.families.concurrent_shuffle import counter as cnt
from privbandit.runner import config as experiment_files
from privbandit.runner.tasks import Task, analyzer_keys, execute

BASE = """
family = "concurrent-shuffle"
name = "t"
horizon = 600
seed = 4
epsilon = 1.0
runs = 3
[algorithms.sequential]
[algorithms."csta@k2"]
algorithm = "csta_k"
k = 2
[algorithms.central_tree]
[algorithms.ldp]
[algorithms."lowest@k2"]
algorithm = "lowest_k_binary"
k = 2
"""


def _load(tmp_path, text, overrides=()):
    path = tmp_path / "x.toml"
    path.write_text(text)
    return experiment_files.load(path, list(overrides))


@pytest.mark.parametrize("overrides,words", [
    (["algorithms.csta@k2.k=0"], "algorithms.csta@k2.k"),
    (["algorithms.csta@k2.k=12"], "algorithms.csta@k2: k = 12 must lie in"),
    (["algorithms.csta@k2.protocol=laplace"], "algorithms.csta@k2.protocol"),
    (["algorithms.csta@k2.d_low=2", "algorithms.csta@k2.D_tree=3"], "must be ≥ n = 600"),
    (["input=adversarial"], "input"),
    (["delta=0.7"], "delta"),
    (["horizon=2"], "horizon"),
])
def test_bad_files_name_the_field(tmp_path, overrides, words):
    with pytest.raises(experiment_files.ConfigError, match=words.replace("(", r"\(")):
        _load(tmp_path, BASE, overrides)


def test_mode_needing_k_says_so(tmp_path):
    with pytest.raises(experiment_files.ConfigError, match=r"algorithms.h.k: mode highest_k_binary needs k"):
        _load(tmp_path, BASE + '[algorithms.h]\nalgorithm = "highest_k_binary"\n')


@pytest.mark.parametrize("label", ["sequential", "csta@k2", "central_tree", "ldp", "lowest@k2"])
def test_spine_run_equals_the_vectorized_counter_and_stacking(tmp_path, label):
    fam, config = _load(tmp_path, BASE)
    _, _, stacked, _ = execute(Task(fam.name, config, label, (0, 1, 2)))
    spec = fam.spec(config, label)
    run = cnt.simulate(spec, cnt.stream_bits("iid", 0.5, spec, 4, [0, 1, 2]), 4, label, [0, 1, 2],
                       keys=analyzer_keys(4, label, [0, 1, 2]))
    want = cnt.metrics(run)
    for i in range(3):
        for key, value in want[i].items():
            assert stacked.learner[i][key] == value, (label, i, key)
        _, _, single, _ = execute(Task(fam.name, config, label, (i,)))
        assert single.learner[0] == stacked.learner[i]
        assert single.privacy == stacked.privacy
    assert stacked.privacy["guarantee"] == "proven"
    if label in ("central_tree", "ldp"):  # pure ε: L nodes at ε/L, or one RR report on the 2⁻⁵³ grid
        assert 1.0 - 1e-9 < stacked.privacy["epsilon_pure"] <= 1.0 + 1e-12
    else:
        assert stacked.privacy["epsilon_at_delta"] == pytest.approx(1.0)
        assert 0 < stacked.privacy["delta_from_theorems"] <= stacked.privacy["delta"]


def test_every_user_reports_to_k_shufflers(tmp_path):
    """n = 3^5 with k = 2 (d_low = 3, d = 9): 243 users × 2 reports, in 81 + 9 released nodes."""
    fam, config = _load(tmp_path, BASE, ["horizon=243", "runs=1"])
    _, _, res, _ = execute(Task(fam.name, config, "csta@k2", (0,)))
    assert res.reports == 2 * 243 and res.privacy["releases"] == 81 + 9
    levels = [r["level"] for r in res.rounds]
    assert levels.count(1) == 81 and levels.count(2) == 9
    noise = np.array([r["noise"] for r in res.rounds])
    assert np.all(np.isfinite(noise)) and not np.all(noise == 0)


def test_check_plan_refuses_foreign_bodies():
    from privbandit.protocol.spine.events import Plan

    FAMILY.check_plan(Plan(0, 0, 10, {"segment": 0, "level": 1}))
    for body in ({"segment": 0}, {"segment": 0, "level": True}, {"segment": -1, "level": 1}, {"theta": 1}):
        with pytest.raises(ValueError):
            FAMILY.check_plan(Plan(0, 0, 10, body))


def test_demo_file_runs_in_process(tmp_path):
    from privbandit.runner import run_file

    res = run_file("experiments/cs_demo.toml", out=tmp_path / "out", overrides=["horizon=512", "runs=1"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["algorithms"]) == set(res.summary["algorithms"])
    for label, a in summary["algorithms"].items():
        assert a["max_abs_error_mean"] >= 0 and a["counter"]["n"] == 512, label
