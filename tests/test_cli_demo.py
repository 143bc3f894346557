"""``privbandit demo`` needs no checkout: its experiment is package data (issue #35)."""

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.runner import config as experiment_files

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_experiment_is_package_data_with_the_repositorys_demo_toml():
    with experiment_files.demo_experiment() as path:
        assert path.is_file()
        assert path.parent == Path(experiment_files.__file__).parent  # beside runner/config.py
        # Two copies (compose mounts experiments/; the Dockerfile copies privbandit/ alone): one TOML.
        assert tomllib.loads(path.read_text()) == tomllib.loads((ROOT / "experiments" / "demo.toml").read_text())
        family, config = experiment_files.load(path)
    assert (family.name, config.name, list(config.algorithms)) == ("distributed-dp-mab", "demo", ["Dist-DP-SE"])


def test_demo_runs_the_package_data_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no experiments/ here
    seen = {}

    def launch(family, config, experiment, overrides, out, **kwargs):
        seen.update(experiment=Path(experiment), overrides=overrides, horizon=config.horizon)
        return 3  # the observer's exit code: the CLI reports a failed session

    monkeypatch.setattr("privbandit.services.launcher.launch", launch)
    result = CliRunner().invoke(app, ["demo", "--set", "horizon=5000", "--out", str(tmp_path / "o")])
    with experiment_files.demo_experiment() as path:
        assert seen == {"experiment": path, "overrides": ["horizon=5000"], "horizon": 5000}
    assert result.exit_code == 1 and "observer exit 3" in result.stderr, result.stderr


def test_a_package_without_the_demo_experiment_is_named(monkeypatch):
    monkeypatch.setattr(experiment_files, "DEMO_FILE", "no-such-demo.toml")
    result = CliRunner().invoke(app, ["demo", "--out", "unused"])
    assert result.exit_code == 2
    assert "the demo experiment no-such-demo.toml is not installed with privbandit" in result.stderr


def _pip(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_privbandit_demo_runs_from_a_wheel_in_an_empty_directory(tmp_path):
    """The real thing, about 25 s on 2 busy cores: a wheel built from the package's files alone (as
    the Dockerfile copies them: no experiments/), installed in a fresh virtualenv, and ``privbandit
    demo`` (one short run) from an empty directory. The fresh environment reads its dependencies
    from this one's site-packages (a .pth file), not privbandit: the wheel's copy comes first."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "privbandit", src / "privbandit", ignore=shutil.ignore_patterns("__pycache__"))
    built = _pip("wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src))
    if built.returncode != 0 and "satisfies the requirement setuptools" in built.stderr:
        pytest.skip("no package index to build the wheel with (pip cannot fetch setuptools)")
    assert built.returncode == 0, built.stderr
    wheel, = (tmp_path / "dist").glob("privbandit-*.whl")

    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    python = fresh / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "privbandit-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = _pip("--python", str(python), "install", "-q", "--no-deps", str(wheel))
    assert installed.returncode == 0, installed.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    where = subprocess.run([python, "-c", "import privbandit; print(privbandit.__file__)"], cwd=empty,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(site), where  # the wheel's privbandit, not this checkout's
    demo = subprocess.run([fresh / "bin" / "privbandit", "demo", "--set", "runs=1", "--set", "horizon=20000",
                           "--out", "out"], cwd=empty, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr[-3000:]
    summary = json.loads((empty / "out" / "summary.json").read_text())
    assert (summary["experiment"], summary["transport"], summary["horizon"]) == ("demo", "mqtt", 20_000)
    assert summary["provenance"]["git"] is None  # run from the wheel: no checkout to name
    assert sorted(p.name for p in empty.iterdir()) == ["out"]
