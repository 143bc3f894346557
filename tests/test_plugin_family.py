"""The registry's proof (#14): a family from outside privbandit (``examples/coin-family``), pip-installed
as its own package into a scratch directory, runs in-process and over MQTT with no line of privbandit
changed, and both transports give the same bytes. Without it installed, its experiment file is refused
with an error naming the families that are registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.examples import install_example

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "coin-family"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    env = install_example("coin-family", tmp_path_factory.mktemp("coin-pkg"))
    assert (Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "coin_family.py").exists()
    return env


def run(env: dict, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privbandit", "run", str(EXAMPLE / "coin.toml"), "--out", str(out),
                           *extra], env=env, capture_output=True, text=True, timeout=240)


def test_unregistered_family_is_refused_by_name(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this privbandit, without the example package
    done = run(env, tmp_path)
    assert done.returncode != 0
    said = " ".join((done.stderr + done.stdout).split())  # rich wraps at the terminal's width
    assert "family = 'coin' is not one of" in said and "distributed-dp-mab" in said


def test_installed_family_runs_in_process_and_over_mqtt_identically(installed, tmp_path):
    inproc, mqtt = tmp_path / "inproc", tmp_path / "mqtt"
    for out, extra in ((inproc, ()), (mqtt, ("--transport", "mqtt"))):
        done = run(installed, out, *extra)
        assert done.returncode == 0, done.stderr[-3000:]
    for name in ("curves.csv", "rounds.csv"):
        assert (inproc / name).read_bytes() == (mqtt / name).read_bytes(), name
    a, b = (json.loads((d / "summary.json").read_text()) for d in (inproc, mqtt))
    assert a["privacy"] == b["privacy"] and a["algorithms"].keys() == b["algorithms"].keys()
    assert (a["transport"], b["transport"]) == ("inproc", "mqtt")
    # The ledger states the ε of the sampled law (the keep-probability on its grid), never above nominal.
    for label, eps in (("rr-etc", 1.0), ("rr-etc@eps4", 4.0)):
        got = a["privacy"][label]
        assert got["guarantee"] == "proven" and got["trust_model"] == "local"
        assert eps - 1e-12 < got["epsilon_pure"] <= eps
        assert got["delta"] == pytest.approx(1 / (10 * 20_000))
    # Randomized response debiased: each arm's estimate is within 5 standard errors of its mean.
    rows = [line.split(",") for line in (inproc / "rounds.csv").read_text().splitlines()]
    head, rows = rows[0], rows[1:]
    means = [0.3, 0.5, 0.6]
    for row in rows:
        r = dict(zip(head, row))
        eps, n = (4.0, 300) if r["algorithm"] == "rr-etc@eps4" else (1.0, 1000)
        p = np.exp(eps) / (1 + np.exp(eps))
        se = np.sqrt(p * (1 - p) / n) / (2 * p - 1) + np.sqrt(0.25 / n)
        assert abs(float(r["estimate"]) - means[int(r["arm"])]) < 5 * se, r


def test_keep_probability_is_on_its_grid_and_never_above_nominal(installed):
    code = ("import coin_family as c, math\n"
            "for e in (0.01, 0.5, 1.0, 4.0, 20.0):\n"
            "    k, got = c.keep_probability(e)\n"
            "    assert isinstance(k, int) and 0 < k < c.GRID and got <= e and e - got < 1e-6, (e, k, got)\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], env=installed, capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr
