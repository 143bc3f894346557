"""``privbandit sweep``: grid points are experiments of their own, tasks are hermetic and kept, and a
real Ray cluster (head and worker nodes started here, on loopback) gives the local pool's numbers."""

from __future__ import annotations

import csv
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import privbandit
from privbandit.runner.config import ConfigError
from privbandit.runner.sweep import run_sweep, split_values
from tests.services.test_distributed import assert_same_numbers

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "experiments" / "quickstart.toml"
BASE = ["horizon=3000", "runs=1"]
GRID = ["epsilon=0.5,1", "algorithms.Dist-RDP-SE.s=10,100"]


def test_values_split_at_top_level_commas():
    assert split_values('0.1, 0.5,[1, 2],"a,b"') == ["0.1", "0.5", "[1, 2]", '"a,b"']


def test_every_point_is_its_own_experiment_and_kept_tasks_are_reused_only_for_the_same_config(tmp_path):
    out = tmp_path / "sweep"
    report = run_sweep(QUICK, GRID, out, BASE, jobs=2)
    assert len(report["points"]) == 4 and report["reused"] == 0 and report["computed"] == 4 * 7
    alone = privbandit.run(QUICK, [*BASE, "epsilon=1", "algorithms.Dist-RDP-SE.s=10"], out=tmp_path / "alone")
    point = out / "epsilon=1,algorithms.Dist-RDP-SE.s=10"
    for name in ("runs.csv", "curves.csv", "rounds.csv"):
        assert (point / name).read_bytes() == (tmp_path / "alone" / name).read_bytes(), name
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert len(rows) == 4 * 7 and {r["epsilon"] for r in rows} == {"0.5", "1"}
    row = next(r for r in rows if r["point"] == point.name and r["algorithm"] == "Dist-RDP-SE")
    assert float(row["regret_final_mean"]) == alone.summary["algorithms"]["Dist-RDP-SE"]["regret_final_mean"]
    assert float(row["epsilon_at_delta"]) == alone.summary["privacy"]["Dist-RDP-SE"]["epsilon_at_delta"]

    again = run_sweep(QUICK, GRID, out, BASE, jobs=2, resume=True)
    assert again["computed"] == 0 and again["reused"] == 28
    assert (point / "runs.csv").read_bytes() == (tmp_path / "alone" / "runs.csv").read_bytes()
    changed = run_sweep(QUICK, GRID, out, [*BASE, "seed=9"], jobs=2, resume=True)
    assert changed["computed"] == 28 and changed["reused"] == 0  # a changed config reuses nothing


def test_an_interrupted_sweep_keeps_its_finished_points_and_resume_completes_it(tmp_path):
    """Each point is written as its last task comes in: interrupted after 8 of 14 tasks, the first
    point's directory and its sweep.csv rows are there; --resume computes the 6 missing tasks only,
    with the numbers the point gives alone."""
    grid, out = ["epsilon=0.5,1"], tmp_path / "stopped"

    def interrupt(done: int, total: int) -> None:
        if done == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(QUICK, grid, out, BASE, jobs=1, progress=interrupt)
    assert (out / "epsilon=0.5" / "regret.png").exists() and not (out / "epsilon=1").exists()
    assert {r["point"] for r in csv.DictReader(open(out / "sweep.csv"))} == {"epsilon=0.5"}
    assert len(list((out / ".tasks").glob("*.pkl"))) == 8
    again = run_sweep(QUICK, grid, out, BASE, jobs=1, resume=True)
    assert again["computed"] == 6 and again["reused"] == 8
    # epsilon=1: one task before the interrupt, six after it
    alone = privbandit.run(QUICK, [*BASE, "epsilon=1"]).summary["algorithms"]
    assert {k: a["regret_final_mean"] for k, a in again["points"]["epsilon=1"]["algorithms"].items()} == \
        {k: a["regret_final_mean"] for k, a in alone.items()}


def test_overwrite_replaces_an_earlier_sweeps_points_and_only_after_every_check(tmp_path):
    out = tmp_path / "s"
    for point in ("epsilon=0.5", "epsilon=9"):  # an earlier sweep's points: a results directory, a failed session
        (out / point / "logs").mkdir(parents=True)
    (out / "epsilon=0.5" / "summary.json").write_text("{}")
    (out / "sweep.csv").write_text("an earlier sweep's")
    (out / "mine").mkdir()
    (out / "mine" / "notes.txt").write_text("the user's")
    with pytest.raises(ConfigError, match="not empty"):
        run_sweep(QUICK, ["epsilon=2"], out, BASE)
    with pytest.raises(ConfigError, match="--shards 0"):
        run_sweep(QUICK, ["epsilon=2"], out, BASE, transport="mqtt", shards=0, overwrite=True)
    assert (out / "sweep.csv").read_text() == "an earlier sweep's"  # refused: nothing removed
    run_sweep(QUICK, ["epsilon=2"], out, BASE, jobs=1, overwrite=True)
    assert sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != ".tasks") == ["epsilon=2", "mine"]
    assert {r["point"] for r in csv.DictReader(open(out / "sweep.csv"))} == {"epsilon=2"}
    assert (out / "mine" / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize(("grid", "match"), [
    (["epsilon"], "expected key=v1,v2"), (["epsilon=0.5,"], "expected key=v1,v2"),
    (["epsilon=1", "epsilon=2"], "given twice"), ([], "at least one --grid"),
    (["algorithms.DP-SE.s=0,1"], "algorithms.DP-SE.s: Input should be greater than or equal to 1"),
])
def test_a_bad_grid_is_refused_before_any_work(tmp_path, grid, match):
    with pytest.raises(ConfigError, match=match):
        run_sweep(QUICK, grid, tmp_path / "o", BASE)
    assert not (tmp_path / "o").exists()


def test_the_local_executor_refuses_a_ray_address(tmp_path):
    with pytest.raises(ConfigError, match="--address: only with --executor ray"):
        run_sweep(QUICK, ["epsilon=1"], tmp_path / "o", BASE, address="127.0.0.1:1")


@pytest.mark.parametrize(("address", "match"), [
    ("127.0.0.1:9", "--address 127.0.0.1:9: no Ray head answers there"),
    ("ray://127.0.0.1:9", "no Ray Client server answers there"), ("nohost", "expected HOST:PORT")])
def test_a_ray_address_nothing_answers_at_is_refused_before_any_work(tmp_path, address, match):
    """Ray itself would retry it for minutes, after --out was prepared."""
    with pytest.raises(ConfigError, match=match):
        run_sweep(QUICK, ["epsilon=1"], tmp_path / "o", BASE, executor="ray", address=address)
    assert not (tmp_path / "o").exists()


def _free_port() -> int:
    """A free port below the ephemeral range: a Ray head on a port the kernel hands out for
    outgoing connections (bind to port 0) never became available here."""
    for port in random.Random().sample(range(20000, 30000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000–29999")


@pytest.fixture
def ray_cluster():
    """A head node and one worker node, each `ray start --block` in its own process group (so the
    test stops exactly these), on 127.0.0.1, one CPU each, in a private temp dir."""
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        pytest.fail("ray is not installed (pip install -e '.[test]' installs it)", pytrace=False)
    temp = tempfile.mkdtemp(prefix="pbray-", dir="/tmp")  # Ray's socket paths must stay short
    port = _free_port()
    common = ["--num-cpus", "1", "--disable-usage-stats", "--block", "--node-ip-address", "127.0.0.1"]
    # A private HOME: Ray turns token authentication on when it finds ~/.ray/auth_token (a local
    # ray.init leaves one), and a cluster started that way refuses this test's client.
    env = {**os.environ, "HOME": temp}
    nodes = [subprocess.Popen([ray, "start", "--head", "--port", str(port), "--include-dashboard", "false",
                               "--temp-dir", temp, *common], start_new_session=True, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150  # a loaded machine starts Ray slowly
        while subprocess.run([ray, "status", "--address", address], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and nodes[0].poll() is None, "the Ray head did not start"
            time.sleep(0.5)
        nodes.append(subprocess.Popen([ray, "start", "--address", address, *common], start_new_session=True,
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while "2.0 CPU" not in subprocess.run([ray, "status", "--address", address], capture_output=True,
                                              text=True).stdout:
            assert time.monotonic() < deadline and nodes[1].poll() is None, "the Ray worker did not join"
            time.sleep(0.5)
        yield address
    finally:
        for node in reversed(nodes):
            with __import__("contextlib").suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            with __import__("contextlib").suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)  # Ray's own processes too: they share the group
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow_e2e
def test_a_real_ray_cluster_gives_the_local_pools_numbers(tmp_path, ray_cluster):
    grid = ["epsilon=0.5,1"]
    local = run_sweep(QUICK, grid, tmp_path / "local", BASE, jobs=2)
    remote = run_sweep(QUICK, grid, tmp_path / "ray", BASE, executor="ray", address=ray_cluster)
    assert remote["computed"] == local["computed"] == 2 * 7
    for name in local["points"]:
        for f in ("runs.csv", "curves.csv", "rounds.csv"):
            assert (tmp_path / "ray" / name / f).read_bytes() == (tmp_path / "local" / name / f).read_bytes(), (name, f)
        assert remote["points"][name]["sweep"]["executor"] == "ray"
    # Over MQTT a Ray task is a whole session on its node, with its own embedded broker: the
    # numbers are still the in-process sweep's.
    small = _small(tmp_path)
    inproc = run_sweep(small, ["epsilon=1"], tmp_path / "inproc", jobs=2)
    sessions = run_sweep(small, ["epsilon=1"], tmp_path / "ray-mqtt", executor="ray", address=ray_cluster,
                         transport="mqtt", timeout_s=240)
    assert sessions["failed"] == {} and sessions["computed"] == 1
    for name in inproc["points"]:
        assert_same_numbers(tmp_path / "inproc" / name, tmp_path / "ray-mqtt" / name)


def _small(tmp_path) -> Path:
    """A small experiment whose arm means come from a file named relative to it: an MQTT session
    runs elsewhere (a scratch directory, another Ray node), and must still find it."""
    (tmp_path / "data").mkdir(exist_ok=True)
    shutil.copy(ROOT / "experiments" / "data" / "mslr_standin_k50.json", tmp_path / "data" / "means.json")
    path = tmp_path / "small.toml"
    path.write_text('name = "small"\nhorizon = 3000\nseed = 3\nepsilon = 0.5\nruns = 1\n'
                    '[environment]\nkind = "means-file"\npath = "data/means.json"\n'
                    '[algorithms.Dist-DP-SE]\n[algorithms.CDP-SE]\n')
    return path


def test_an_mqtt_sweep_runs_each_point_as_its_own_session_with_the_in_process_numbers(tmp_path):
    """Two sessions at once, each with its own embedded broker on its own port; a point kept from
    the same config is reused; a session that cannot finish is named, its logs kept, the rest go on."""
    small, grid = _small(tmp_path), ["epsilon=0.5,1"]
    inproc = run_sweep(small, grid, tmp_path / "inproc", jobs=2)
    mqtt = run_sweep(small, grid, tmp_path / "mqtt", jobs=2, transport="mqtt", timeout_s=240)
    assert mqtt["failed"] == {} and mqtt["computed"] == 2 and mqtt["reused"] == 0
    for name in inproc["points"]:
        assert_same_numbers(tmp_path / "inproc" / name, tmp_path / "mqtt" / name)
        assert (tmp_path / "mqtt" / name / "logs" / "analyzer.log").exists()
        assert not (tmp_path / "mqtt" / name / "state").exists()  # checkpoints stay in the scratch directory
    assert (tmp_path / "mqtt" / "sweep.csv").read_text().splitlines()[1:] == \
        (tmp_path / "inproc" / "sweep.csv").read_text().splitlines()[1:]
    again = run_sweep(small, grid, tmp_path / "mqtt", jobs=2, transport="mqtt", resume=True)
    assert again["computed"] == 0 and again["reused"] == 2

    # A third point whose session times out: named with the reason; the kept points still reused.
    failed = run_sweep(small, ["epsilon=0.5,1,2"], tmp_path / "mqtt", transport="mqtt", resume=True, timeout_s=0.5)
    assert failed["computed"] == 1 and failed["reused"] == 2 and list(failed["failed"]) == ["epsilon=2"]
    assert "did not finish in 0 s" in failed["failed"]["epsilon=2"]
    assert (tmp_path / "mqtt" / "epsilon=2" / "logs").is_dir() and set(failed["points"]) == {"epsilon=0.5", "epsilon=1"}


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"transport": "tcp"}, "--transport 'tcp': choose inproc or mqtt"),
    ({"transport": "mqtt", "shards": 0}, "--shards 0: must be ≥ 1"),
    ({"transport": "mqtt", "timeout_s": 0}, "--timeout 0: must be > 0 seconds"),
])
def test_bad_mqtt_sweep_options_are_refused_before_any_work(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        run_sweep(_small(tmp_path), ["epsilon=1"], tmp_path / "o", **kwargs)
    assert not (tmp_path / "o" / "epsilon=1").exists()


def test_rays_banner_stays_out_of_the_sweeps_output(caplog):
    """#35: a local Ray's warnings ("Token authentication is enabled for this Ray cluster …") went
    to stderr through Python's last-resort handler (Ray's loggers have none with
    configure_logging=False); around ray.init and the tasks they are held back below ERROR."""
    import logging

    from privbandit.runner.sweep import quiet_ray

    banner = logging.getLogger("ray._private.authentication.authentication_token_setup")
    caplog.set_level(logging.INFO)
    banner.warning("Token authentication is enabled for this Ray cluster.")
    assert [r.getMessage() for r in caplog.records] == ["Token authentication is enabled for this Ray cluster."]
    caplog.clear()
    with quiet_ray():
        banner.warning("Token authentication is enabled for this Ray cluster.")
        logging.getLogger("ray").info("Started a local Ray instance.")
        banner.error("a Ray error is still shown")
    assert [r.getMessage() for r in caplog.records] == ["a Ray error is still shown"]
    caplog.clear()
    banner.warning("after the sweep, as before")
    assert len(caplog.records) == 1  # the level is restored
