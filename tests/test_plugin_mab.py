"""Plug-ins for an existing family (#18): ``examples/mab-plugins``, pip-installed as its own package
into a scratch directory, adds a mechanism (``rr-se``) and a learner (``fixed-batches``) to the
distributed-DP MAB family through entry points, with no line of privbandit changed. They reach the
TOML file, ``privbandit list`` and both transports; without the package the names are refused."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples import install_example

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mab-plugins"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    return install_example("mab-plugins", tmp_path_factory.mktemp("mab-plugins"))


def privbandit(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privbandit", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def experiment(tmp_path: Path, extra: str = "") -> Path:
    text = (EXAMPLE / "rr.toml").read_text().replace("horizon = 100_000", "horizon = 20_000")
    path = tmp_path / "rr.toml"
    path.write_text(text.replace("runs = 4", "runs = 2") + extra)
    return path


def test_without_the_package_the_names_are_refused_with_the_built_in_choices(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this privbandit, without the example package
    done = privbandit(env, "run", str(experiment(tmp_path)), "--out", str(tmp_path / "o"))
    said = " ".join((done.stderr + done.stdout).split())
    assert done.returncode == 2 and "(got 'rr-se')" in said and "'dist-dp-se'" in said
    assert "learner: Input should be 'auto' (got 'fixed-batches')" in said


def test_plugins_run_in_process_and_over_mqtt_identically_with_an_honest_ledger(installed, tmp_path):
    path = experiment(tmp_path)
    inproc, mqtt = tmp_path / "inproc", tmp_path / "mqtt"
    for out, extra in ((inproc, ()), (mqtt, ("--transport", "mqtt"))):
        done = privbandit(installed, "run", str(path), "--out", str(out), *extra)
        assert done.returncode == 0, done.stderr[-3000:]
    for name in ("curves.csv", "rounds.csv"):
        assert (inproc / name).read_bytes() == (mqtt / name).read_bytes(), name
    summary = json.loads((inproc / "summary.json").read_text())
    # the numbers depend on the plug-ins' code: their package and version are on record
    assert summary["provenance"]["plugins"] == {
        "privbandit.plugins:distributed-dp-mab.learner.fixed-batches": "privbandit-mab-plugins 0.1.0",
        "privbandit.plugins:distributed-dp-mab.mechanism.rr-se": "privbandit-mab-plugins 0.1.0"}
    for label in ("rr-se", "rr-se@fixed"):
        priv = summary["privacy"][label]
        # the ε of the sampled law (the keep-probability on its 2^-53 grid), never above nominal
        assert priv["trust_model"] == "local" and priv["guarantee"] == "proven"
        assert 1.0 - 1e-12 < priv["epsilon_pure"] <= 1.0
    rows = list(csv.DictReader(open(inproc / "rounds.csv")))
    fixed = [r for r in rows if r["algorithm"] == "rr-se@fixed"]
    assert fixed and {int(r["n"]) for r in fixed} == {2000}  # the learner's batches, not Algorithm 1's
    assert {int(r["n"]) for r in rows if r["algorithm"] == "rr-se"} > {2, 4, 8}
    # The debiased sums stay within the mechanism's stated Assumption-1 bound (p = 1/T per round).
    for r in (r for r in rows if r["algorithm"].startswith("rr-se")):
        assert abs(float(r["noise"])) <= float(r["noise_bound"]), r
    listed = " ".join(privbandit(installed, "list").stdout.split())
    assert "rr-se" in listed and "distributed-dp-mab.learner.fixed-batches" in listed and "privbandit-mab-plugins 0.1.0" in listed


@pytest.mark.parametrize(("extra", "message"), [
    ('[algorithms."rr-se@typo"]\nalgorithm = "rr-se"\nlearner = "fixed-batches"\noptions = { batchh = 5 }\n',
     "options: batchh read by no plug-in of this table (rr-se reads none, fixed-batches reads batch)"),
    ('[algorithms."rr-se@zero"]\nalgorithm = "rr-se"\nlearner = "fixed-batches"\noptions = { batch = 0 }\n',
     "options.batch = 0: the users per arm in every batch, an integer ≥ 1"),
    ('[algorithms."dp@opts"]\nalgorithm = "dp-se"\noptions = { batch = 5 }\n',
     "options: only a plug-in mechanism or learner reads options"),
])
def test_plugin_options_are_checked_by_name(installed, tmp_path, extra, message):
    done = privbandit(installed, "run", str(experiment(tmp_path, "\n" + extra)), "--out", str(tmp_path / "o"))
    said = " ".join((done.stderr + done.stdout).split())
    assert done.returncode == 2 and message in said, said


def test_editing_a_plugin_without_a_new_version_changes_the_task_cache_key(installed):
    """--resume must not reuse a task computed by a plug-in's code before an edit that kept its
    version: the key hashes the plug-in's source file too."""
    code = "from privbandit.runner.store import code_fingerprint, plugin_files; print(code_fingerprint()); " \
           "print([str(p) for p in plugin_files()])"

    def fingerprint() -> tuple[str, list[str]]:
        done = subprocess.run([sys.executable, "-c", code], env=installed, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        key, files = done.stdout.splitlines()
        return key, json.loads(files.replace("'", '"'))

    key, files = fingerprint()
    (module,) = [Path(f) for f in files if f.endswith("mab_plugins.py")]
    original = module.read_bytes()
    try:
        module.write_bytes(original + b"\n# an edit that keeps the version\n")
        assert fingerprint()[0] != key
    finally:
        module.write_bytes(original)
    assert fingerprint()[0] == key
