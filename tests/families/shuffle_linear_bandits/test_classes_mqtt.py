"""Per-user contexts over MQTT: ``privbandit run FILE --transport mqtt`` (the embedded broker, every
party its own process, one task per run) gives the bytes of the in-process run (runs stacked, users
acting in the engine's blocks): a user's context, choice and reward do not depend on who computes them."""

from __future__ import annotations

import subprocess
import sys

from privbandit.runner import run_file
from tests.services.test_linear_distributed import assert_same_bytes

# wine, K = 3 classes, d = 12; T = 44 leaves SDP-Vec a trailing partial batch of 4 users (served from the
# last model, never aggregated); LinUCB and LDP plan one user at a time. The three report paths: raw
# (φ, y) (as JDP's), Gaussian-noised entries (as SDP-Amp's), P_Vec's counts through the shuffler.
EXPERIMENT = """
family = "shuffle-linear-bandits"
name = "classes-e2e"
horizon = 44
seed = 29
epsilon = 1
delta = 0.1
runs = 2
checkpoints = 8
[environment]
generator = "wine"
conversion = "classes"
arms = 3
dim = 12
[algorithms.LinUCB]
[algorithms.LinUCB-LDP]
[algorithms.LinUCB-SDP-Vec]
batch = 10
"""


def test_the_classes_conversion_over_mqtt_equals_the_inproc_run(tmp_path):
    path = tmp_path / "classes.toml"
    path.write_text(EXPERIMENT)
    run_file(path, out=tmp_path / "inproc")
    done = subprocess.run([sys.executable, "-m", "privbandit", "run", str(path), "--out", str(tmp_path / "mqtt"),
                           "--transport", "mqtt"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = assert_same_bytes(tmp_path / "inproc", tmp_path / "mqtt")
    assert summary["conversion"] == "classes"
    assert all(a["regret_final_mean"] == a["realized_regret_final_mean"] for a in summary["algorithms"].values())
