"""Paired comparisons: the statistic is scipy's paired t, wins are counted per run, and pairing
finds a shift that unpaired standard errors hide."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privbandit.runner.paired import paired


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3)), min_size=2, max_size=40))
def test_t_is_scipys_paired_t(pairs):
    a, b = map(np.array, zip(*pairs))
    p = paired(a, b)
    assert p.a_won + p.b_won + p.ties == len(pairs)
    assert p.a_won == int((a < b).sum()) and p.b_won == int((a > b).sum())
    d = a - b
    if np.ptp(d) > 1e-9 * (1 + np.abs(d).max()):
        assert p.t == pytest.approx(stats.ttest_rel(a, b).statistic, rel=1e-6, abs=1e-9)


def test_pairing_sees_a_shift_hidden_by_instance_variance():
    rng = np.random.default_rng(7)
    instance = rng.normal(0, 100, 20)  # runs differ a lot by instance
    a = instance + 1.0 + rng.normal(0, 0.3, 20)
    b = instance + rng.normal(0, 0.3, 20)
    p = paired(a, b)
    unpaired_se = np.sqrt(a.var(ddof=1) / 20 + b.var(ddof=1) / 20)
    assert p.t > 5 and p.b_won >= 18 and p.verdict() == "a worse"
    assert abs(a.mean() - b.mean()) / unpaired_se < 1  # what unpaired errors would have concluded


def test_refuses_unpaired_samples():
    with pytest.raises(ValueError, match="same ≥ 2 runs"):
        paired(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="same ≥ 2 runs"):
        paired(np.ones(1), np.ones(1))
    assert paired(np.ones(3), np.ones(3)).verdict() == "equal in every run"



EXPERIMENT = """
name = "pair"
horizon = 3000
seed = 3
epsilon = 1.0
runs = 5
[environment]
kind = "uniform"
arms = 4
[algorithms.SE]
[algorithms.DP-SE]
"""


def test_runs_csv_holds_every_run_and_compare_reports_the_paired_difference(tmp_path):
    """runs.csv averages to curves.csv, and `privbandit compare` prints the paired mean difference
    of the two algorithms' per-run regrets; bad arguments get a clear error and exit 2."""
    import csv

    from typer.testing import CliRunner

    from privbandit.cli import app
    from privbandit.runner import run_file
    from privbandit.runner.paired import read_runs

    (tmp_path / "pair.toml").write_text(EXPERIMENT)
    out = tmp_path / "r"
    run_file(tmp_path / "pair.toml", out=out)
    t, curves = read_runs(out)
    with open(out / "curves.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["t"]) for r in rows] == t.tolist()
    for label, grid in curves.items():
        assert grid.shape == (5, t.size)
        assert np.allclose(grid.mean(axis=0), [float(r[f"{label}.pseudo_mean"]) for r in rows])

    expected = paired(curves["SE"][:, -1], curves["DP-SE"][:, -1])
    shown = CliRunner().invoke(app, ["compare", str(out)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert f"{expected.mean_difference:,.2f}" in shown.output and f"{expected.t:.2f}" in shown.output

    for args, message in [(["--at", "99999"], "not a checkpoint"), (["--baseline", "UCB"], "algorithms: SE, DP-SE"),
                          ([], None)]:
        where = str(out) if message else str(tmp_path)
        bad = CliRunner().invoke(app, ["compare", where, *args], terminal_width=200)
        assert bad.exit_code == 2
        assert (message or "runs.csv not found") in " ".join(bad.output.split())  # rich wraps at 80
