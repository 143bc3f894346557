"""privbandit.run, the API both transports share (issue #35): keyword settings, the result object."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import privbandit
from privbandit.api import settings_overrides
from privbandit.runner.config import ConfigError
from privbandit.runner.paired import paired, read_runs

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "experiments" / "quickstart.toml"
# Measured, not determined by the seed: they differ between two runs of the same config.
TIMING = ("elapsed_s", "provenance")
MEASURED = ("seconds", "releases_per_second")  # an audit target's timings

# Labels that need quoting in a dotted key (a space, an "=", a dot), as well as bare ones.
TINY = """name = "api"
horizon = 6000
seed = 5
epsilon = 0.5
runs = 2
[environment]
kind = "uniform"
arms = 4
[algorithms."dp rho=0.2"]
algorithm = "dist-rdp-se"
[algorithms."v1.2"]
algorithm = "dp-se"
[algorithms.DP-SE]
"""


def _without_timing(summary: dict) -> dict:
    summary = {k: copy.deepcopy(v) for k, v in summary.items() if k not in TIMING}
    for a in summary["algorithms"].values():
        a.pop("users_per_s")
    return summary


def test_settings_become_the_same_overrides_a_user_would_type():
    assert settings_overrides({"horizon": 20000, "epsilon": 0.5, "name": "x y", "checks": [1, 2],
                               "grid": [{"a": 1.5}, {}]}) == [
        "horizon=20000", "epsilon=0.5", 'name="x y"', "checks=[1, 2]", "grid=[{ a = 1.5 }, {}]"]
    # A dict stands for its dotted keys, leaf by leaf; a label TOML cannot write bare is quoted.
    assert settings_overrides({"algorithms": {"dp rho=0.2": {"epsilon": 2, "s": True}, "DP-SE": {}}}) == [
        'algorithms."dp rho=0.2".epsilon=2', 'algorithms."dp rho=0.2".s=true', "algorithms.DP-SE={}"]
    with pytest.raises(ConfigError, match=r"horizon=.*not a TOML value"):
        settings_overrides({"horizon": object()})
    with pytest.raises(ConfigError, match=r"a key must be a non-empty string"):
        settings_overrides({"algorithms": {"": {"epsilon": 1}}})


def test_keyword_settings_give_the_same_results_as_string_overrides(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    strings = privbandit.run(path, ["runs=3", "horizon=5000", 'algorithms."dp rho=0.2".s=12'],
                             out=tmp_path / "strings")
    keywords = privbandit.run(path, runs=3, horizon=5000, algorithms={"dp rho=0.2": {"s": 12}},
                              out=tmp_path / "keywords")
    a, b = tmp_path / "strings", tmp_path / "keywords"
    for name in ("config.toml", "config.json", "curves.csv", "runs.csv", "rounds.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert json.dumps(_without_timing(sa)) == json.dumps(_without_timing(sb))
    assert sa["runs"] == 3 and sa["horizon"] == 5000
    assert sa["algorithms"]["dp rho=0.2"]["parameters"]["s"] == 12  # the override reached the label
    assert strings.summary["algorithms"] == sa["algorithms"] and keywords.out == b


def test_repr_is_short_and_says_the_regret_and_epsilon(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    res = privbandit.run(path)
    text = repr(res)
    lines = text.splitlines()
    assert len(lines) == 1 + len(res.summary["algorithms"])
    assert lines[0] == "<Results api (distributed-dp-mab): T = 6,000, 2 runs, inproc"
    for label, a in res.summary["algorithms"].items():
        regret = f"{a['regret_final_mean']:,.1f} ± {a['regret_final_stderr']:,.1f}"
        assert any(line.startswith(f"  {label}: regret {regret}, ε spent ") for line in lines), (label, text)
    assert "0.5 (pure)" in text  # DP-SE's ledger
    assert "parameters" not in text and len(text) < 400  # not the config
    html = res._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == 1 + len(res.summary["algorithms"])
    assert "dp rho=0.2" in html and "<script" not in html


def test_plot_writes_a_png_and_compare_is_the_paired_test_of_runs_csv(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    res = privbandit.run(path, runs=3, out=tmp_path / "o")
    png = res.plot(tmp_path / "mine.png")
    assert png == tmp_path / "mine.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000  # two panels of curves, not an empty canvas
    fig = res.plot()
    assert len(fig.axes) == 2 and all(len(ax.lines) == 3 for ax in fig.axes)  # one curve per algorithm
    t, curves = read_runs(tmp_path / "o")
    rows = res.compare(baseline="DP-SE")
    assert [(a, b) for a, b, _ in rows] == [("DP-SE", "dp rho=0.2"), ("DP-SE", "v1.2")]
    for a, b, p in rows:
        assert p == paired(curves[a][:, -1], curves[b][:, -1])
    assert len(res.compare()) == 3  # every pair
    with pytest.raises(ValueError, match=r"at=5001: not a checkpoint; the nearest are 4992, "):
        res.compare(at=5001)
    table = res.table()
    n = len(table)
    assert n == 3 * 3 * t.size  # algorithms × runs × checkpoints, as runs.csv


def test_bad_arguments_are_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"transport='tcp': choose one of inprocess, inproc, mqtt"):
        privbandit.run(QUICK, transport="tcp")
    with pytest.raises(ConfigError, match=r"shards, timeout: only with transport='mqtt'"):
        privbandit.run(QUICK, shards=3, timeout=5)
    with pytest.raises(ConfigError, match=r"jobs=0: must be an integer ≥ 1"):
        privbandit.run(QUICK, jobs=0)
    with pytest.raises(ConfigError, match=r"shards=0: must be an integer ≥ 1"):
        privbandit.run(QUICK, transport="mqtt", shards=0)
    with pytest.raises(ConfigError, match=r"resume: only in-process"):
        privbandit.run(QUICK, transport="mqtt", resume=True)
    with pytest.raises(ConfigError, match=r"overrides='runs=2': a list"):
        privbandit.run(QUICK, "runs=2")
    with pytest.raises(ConfigError, match=r"horizon"):  # the family's own validation, by field
        privbandit.run(QUICK, horizon=-5)


def test_an_mqtt_session_returns_the_same_results_as_the_in_process_run(tmp_path):
    """Real processes over the real embedded broker, the experiment given as a dict with keyword
    settings: the parties read it as a file, and reproduce the in-process numbers bit for bit."""
    data = {"name": "api-mqtt", "horizon": 3000, "seed": 17, "epsilon": 0.5, "runs": 1,
            "environment": {"kind": "uniform", "arms": 3}, "algorithms": {"Dist-DP-SE": {}}}
    inproc = privbandit.run(data, out=tmp_path / "inproc", horizon=4000)
    mqtt = privbandit.run(data, transport="mqtt", out=tmp_path / "mqtt", horizon=4000, timeout=120)
    for name in ("rounds.csv", "curves.csv", "runs.csv"):
        assert (tmp_path / "mqtt" / name).read_bytes() == (tmp_path / "inproc" / name).read_bytes(), name
    assert mqtt.summary["transport"] == "mqtt" and mqtt.summary["horizon"] == 4000
    assert mqtt.summary["broker"]["acl"] == "enforced"
    assert mqtt.results == {} and mqtt.out == tmp_path / "mqtt"
    label = "Dist-DP-SE"
    assert mqtt.summary["algorithms"][label]["regret_final_mean"] == inproc.summary["algorithms"][label][
        "regret_final_mean"]
    assert repr(mqtt).splitlines()[1:] == repr(inproc).splitlines()[1:]  # the same numbers, either transport
    assert mqtt.table() == inproc.table()


def test_sweep_takes_its_grid_as_a_dict_with_the_numbers_of_the_grid_strings(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    grid = {"epsilon": [0.5, 1], 'algorithms."dp rho=0.2".s': [8]}
    by_dict = privbandit.sweep(path, grid, out=tmp_path / "d", jobs=1, horizon=3000)
    by_text = privbandit.sweep(path, ["epsilon=0.5,1", 'algorithms."dp rho=0.2".s=8'], ["horizon=3000"],
                               out=tmp_path / "s", jobs=1)
    assert by_dict["out"] == tmp_path / "d" and list(by_dict["points"]) == list(by_text["points"])
    assert len(by_dict["points"]) == 2 and by_dict["failed"] == {}
    assert (tmp_path / "d" / "sweep.csv").read_bytes() == (tmp_path / "s" / "sweep.csv").read_bytes()
    for name in by_dict["points"]:
        assert (tmp_path / "d" / name / "curves.csv").read_bytes() == (tmp_path / "s" / name / "curves.csv").read_bytes()
    one = privbandit.run(path, horizon=3000, epsilon=1, algorithms={"dp rho=0.2": {"s": 8}})
    point = next(s for s in by_dict["points"].values() if s["epsilon"] == 1)
    assert {k: a["regret_final_mean"] for k, a in point["algorithms"].items()} == {
        k: a["regret_final_mean"] for k, a in one.summary["algorithms"].items()}
    with pytest.raises(ConfigError, match=r"grid\['epsilon'\]=0.5: a list of values"):
        privbandit.sweep(path, {"epsilon": 0.5}, out=tmp_path / "x")
    with pytest.raises(ConfigError, match=r"--transport 'tcp': choose inproc or mqtt"):
        privbandit.sweep(path, grid, out=tmp_path / "x", transport="tcp")


def test_audit_from_python_is_the_commands_audit(tmp_path):
    """privbandit.audit is what `privbandit audit` runs: the same releases, the same bounds, and a
    report whose every number the command wrote too; the package name stays the package."""
    from typer.testing import CliRunner

    from privbandit.cli import app

    res = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "cdp-se", "--samples",
                                   "2000", "--seed", "3", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    seen = []
    report = privbandit.audit(family="distributed-dp-mab", algorithm="cdp-se", samples=2000, seed=3,
                              out=tmp_path / "api", progress=lambda *a: seen.append(a))
    written = json.loads((tmp_path / "cli" / "audit.json").read_text())
    assert report["family"] == written["family"] == "distributed-dp-mab"
    (r,), (w,) = report["targets"], written["targets"]
    assert r["verdict"] == w["verdict"] == "consistent" and r["audit"]["epsilon"] == w["audit"]["epsilon"]
    (mine,) = json.loads((tmp_path / "api" / "audit.json").read_text())["targets"]
    assert {k: v for k, v in mine.items() if k not in MEASURED} == {k: v for k, v in w.items() if k not in MEASURED}
    assert seen == [(0, 1, "distributed-dp-mab/cdp-se"), (1, 1, None)]
    from privbandit.audit.run import write_audit  # the package's own modules import as before

    assert callable(privbandit.audit) and privbandit.audit.write_audit is write_audit
    with pytest.raises(ConfigError, match=r"--samples 10: must lie in \[100, 10\^9\]"):
        privbandit.audit(family="distributed-dp-mab", algorithm="cdp-se", samples=10)
    with pytest.raises(ConfigError, match=r"broker, run_id, .*: only with transport='mqtt'"):
        privbandit.audit(family="distributed-dp-mab", algorithm="cdp-se", broker="mqtt://127.0.0.1:1")
