"""A long MQTT run says how it goes in a log that is not a terminal (issue #35): the observer logs a
progress line every PRIVBANDIT_PROGRESS_LOG_S seconds (30 by default), where rich's bar would draw
nothing until the session ends."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privbandit.cli import app

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"progress: task (\d+)/(\d+) \((.+), run (\d+)\): (\d[\d,]*) rounds recorded, "
                  r"(\d[\d,]*)/(\d[\d,]*) users served, (\d[\d,]*) users/s over (\d+) s; session (\d+) s")


def test_a_session_logged_to_a_file_says_how_its_tasks_go_while_they_run(tmp_path):
    log = tmp_path / "run.log"
    env = {**os.environ, "PRIVBANDIT_PROGRESS_LOG_S": "1"}  # the shortest allowed (the observer's tick)
    with open(log, "w") as fh:  # a file: not a terminal, as `privbandit run … > run.log 2>&1` gives
        proc = subprocess.run([sys.executable, "-m", "privbandit", "run", "experiments/demo.toml", "--transport", "mqtt",
                               "--set", "runs=1", "--set", "horizon=1000000", "--out", str(tmp_path / "out")],
                              cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=300)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    found = [LINE.search(line) for line in text.splitlines() if "progress: task" in line]
    assert all(found), [line for line in text.splitlines() if "progress: task" in line]
    # A line a second while the session runs (T = 10⁶ takes 1.3 s on a quiet machine, more under
    # load: one line at least; log_progress's own test checks the period).
    assert len(found) >= 1, text[-3000:]
    served = [int(m[6].replace(",", "")) for m in found]
    assert served == sorted(served) and all(s <= 1_000_000 for s in served)
    assert all((m[1], m[2], m[3], m[4], m[7]) == ("1", "1", "Dist-DP-SE", "0", "1,000,000") for m in found)
    # every line comes before the results table: the log said something while the task ran
    assert text.index("progress: task") < text.index("results in")


@pytest.mark.parametrize("value", ["0", "0.5", "-5", "soon", "1e9"])
def test_a_bad_progress_period_is_refused_by_name(value, monkeypatch):
    monkeypatch.setenv("PRIVBANDIT_PROGRESS_LOG_S", value)
    result = CliRunner().invoke(app, ["observer", "--experiment", str(ROOT / "experiments" / "demo.toml"),
                                      "--parties", "analyzer", "--out", "unused"])
    assert result.exit_code == 2
    assert f"PRIVBANDIT_PROGRESS_LOG_S={value!r}: must be a number of seconds in [1, 86400]" in result.stderr


def test_the_observer_refuses_a_period_that_is_not_positive():
    from privbandit.runner import config as experiment_files
    from privbandit.services.bus import BusSettings
    from privbandit.services.observer import ObserverService

    family, config = experiment_files.load(ROOT / "experiments" / "demo.toml")
    with pytest.raises(ValueError, match=r"progress_log_s=0: must be > 0 seconds"):
        ObserverService(BusSettings(run_id="r"), family, config, ["analyzer"], Path("unused"), report_key=1,
                        progress_log_s=0)


def test_log_progress_says_where_the_task_is_once_per_period():
    """The period is the observer's: a line at most once every ``progress_log_s`` (ticks between
    say nothing), with the task, its rounds, users served of the horizon and the rate."""
    import time
    from types import SimpleNamespace

    from privbandit.runner import config as experiment_files
    from privbandit.services.bus import BusSettings
    from privbandit.services.observer import ObserverService

    family, config = experiment_files.load(ROOT / "experiments" / "demo.toml")
    svc = ObserverService(BusSettings(run_id="r"), family, config, ["analyzer"], Path("unused"), report_key=1,
                          progress_log_s=5)
    svc.progress_log_s = 5  # as where stderr is not a terminal (pytest's capture may look like one)
    svc.index, svc.task_started = 0, time.perf_counter()
    svc.observer = SimpleNamespace(served=lambda: 12_000, records=[0] * 7)
    t0 = svc.progress_logged_at
    said = [svc.log_progress(t0 + dt) for dt in (1, 4.9, 5.1, 6, 9.9, 10.2)]
    assert [s is not None for s in said] == [False, False, True, False, False, True], said
    assert f"7 rounds recorded, 12,000/{config.horizon:,} users served" in said[2]
