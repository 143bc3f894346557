"""The dashboard (docs/dashboard.md): its snapshot of a fed observer, its bad input, its server, and
a real distributed session watched in headless Chromium.

The end-to-end test needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium``
package (the ``test`` extra); without them it skips, unless CI=true, where it fails.
"""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.services import codec
from privbandit.services.bus import BusSettings
from privbandit.services.dashboard import (
    Dashboard,
    DashboardError,
    bind,
    live_snapshot,
    results_snapshot,
)
from privbandit.services.observer import ObserverService
from privbandit import registry
from tests.services.test_checkpoint import RUN_ID, USERS_KEY, _mab, _Net, _services
from tests.services.test_families_e2e import EXPERIMENTS
from tests.needs import missing

PARTIES = ["analyzer", "aggregator", "users-0", "users-1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the snapshot of a fed observer --------------------------------------------------------------

async def _step_session(net: _Net, services: list, until) -> None:
    """Deliver messages until ``until()``; when the net is quiet, run every party's timer once."""
    for _ in range(100_000):
        if until():
            return
        if not await net.step():
            for service in services:
                await service.tick()
    raise AssertionError(f"the session stalled: {net.handled}")


def test_the_snapshot_shows_what_the_observer_holds_and_ends_as_its_results(tmp_path):
    """A whole session (2 runs of Dist-DP-SE) through the real services on an in-memory broker,
    the observer among them. Mid-task the running curve is the finished curve's prefix; at the end
    every figure of the snapshot is summary.json's, and the round counts the intermediary sent add
    up to the analyzer's records and rounds.csv."""
    fam, config, label = _mab("Dist-DP-SE", {}, horizon=40_000, arms=3)
    config = config.model_copy(update={"runs": 2})
    obs, early = _fed(fam, config, tmp_path, lambda obs: obs.index == 0 and obs.observer.served() > 0)
    end = live_snapshot(obs)
    summary = obs.write()

    assert early["phase"] == "running" and early["tasks"]["current"]["label"] == label
    running = [c for c in early["regret"]["curves"] if c["kind"] == "running"][0]
    known = [i for i, v in enumerate(running["pseudo"]) if v is not None]
    assert 0 < len(known) < len(running["pseudo"])  # part of the run, not all of it
    assert known == list(range(len(known)))  # a prefix: no value past a gap
    full = obs.results[label][0].pseudo[0]
    assert [running["pseudo"][i] for i in known] == [float(full[i]) for i in known]

    assert end["phase"] == "finishing" and end["tasks"] == {"total": 2, "done": 2, "current": None}
    assert end["regret"]["final"][label] == {"mean": summary["algorithms"][label]["regret_final_mean"], "runs": 2}
    with open(tmp_path / "out" / "curves.csv", newline="") as fh:
        last = list(csv.DictReader(fh))[-1]
    (curve,) = end["regret"]["curves"]
    assert curve["pseudo"][-1] == float(last[f"{label}.pseudo_mean"]) and end["regret"]["t"][-1] == config.horizon
    with open(tmp_path / "out" / "rounds.csv", newline="") as fh:
        rows = sum(1 for _ in csv.DictReader(fh))
    assert end["rounds"]["records"] == rows > 0
    assert end["rounds"]["intermediaries"] == {"aggregator": {"open": 0, "complete": 0, "released": rows, "failed": 0,
                                                              "reports": 0}}
    for key in ("guarantee", "epsilon_pure", "epsilon_at_delta", "users_protected"):
        assert end["privacy"][label][key] == summary["privacy"][label][key], key
    assert end["rejected"] == summary["rejected"]
    assert {p["name"]: p["state"] for p in end["parties"]} == dict.fromkeys(PARTIES, "stopped")
    json.dumps(end, allow_nan=False)  # what the page gets: plain JSON

    finished = results_snapshot(tmp_path / "out")
    assert finished["phase"] == "finished" and finished["results"]["summary"] == summary
    assert finished["results"]["rounds_rows"] == {label: rows}
    assert finished["results"]["curves"]["pseudo"][label][-1] == curve["pseudo"][-1]


def test_a_results_directory_with_an_audit_shows_its_claims_against_the_bounds(tmp_path):
    """#19: after the run the page shows the audit when there is one: `privbandit audit … --out
    <results>/audit` beside the run's files. The rows are audit.json's, claim against bound; a
    damaged audit.json is named on the page and the rest is still served."""
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "dist-dp-se",
                                      "--samples", "2000", "--out", str(out / "audit")])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "audit" / "audit.json").read_text())
    snap = results_snapshot(out)["results"]
    (target,) = report["targets"]
    assert snap["audit"] == [{"name": target["name"], "release": target["release"], "guarantee": "proven",
                              "claimed": target["claim"]["epsilon_at_delta"], "delta": target["audit"]["delta"],
                              "audited": target["audit"]["epsilon"], "verdict": "consistent", "samples": 2000}]
    assert results_snapshot(tmp_path)["results"]["audit"] is None  # no audit: no rows, no error
    (out / "audit" / "audit.json").write_text('{"targets": [{"name": 1}]}')
    damaged = results_snapshot(out)["results"]
    assert "KeyError" in damaged["error"] and damaged["files"] == []


def _fed(fam, config, tmp_path: Path, pause=lambda obs: False) -> tuple[ObserverService, dict | None]:
    """An observer fed by a whole session of the real services on an in-memory broker, once it
    has the parties' final counters; and its snapshot when ``pause(observer)`` first held."""
    net = _Net()
    names = ["analyzer", *fam.intermediaries(config), "users-0", "users-1"]
    parties = [_services(fam, config, name, tmp_path / "state") for name in names]
    for name, service in zip(names, parties):
        net.attach(name, service)
    obs = ObserverService(BusSettings(run_id=RUN_ID), fam, config, names, tmp_path / "out", report_key=USERS_KEY)
    net.attach("observer", obs)

    async def go():
        for service in parties:  # as on connecting
            await service.on_connect()
        await _step_session(net, [*parties, obs], lambda: obs.finished or pause(obs))
        early = None if obs.finished else live_snapshot(obs)
        await _step_session(net, [*parties, obs], lambda: obs.finished)
        return early

    return obs, asyncio.run(go())


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_family_is_shown_from_the_observers_state_alone(tmp_path, name):
    """Every family (tests/services/test_families_e2e.py's experiments, their first and last
    algorithms: seconds, not a minute): the snapshot at the end says what summary.json says, and
    the intermediaries' released rounds are the analyzer's records."""
    data = tomllib.loads(EXPERIMENTS[name])
    algorithms = list(data["algorithms"].items())
    data["algorithms"] = dict([algorithms[0], algorithms[-1]])
    fam = registry.family(data.get("family", "distributed-dp-mab"))
    config = fam.load(data, tmp_path / "e.toml")
    obs, _ = _fed(fam, config, tmp_path)
    end = live_snapshot(obs)
    summary = obs.write()
    assert end["tasks"]["done"] == end["tasks"]["total"] == len(summary["algorithms"]) * config.runs
    assert {k: v["mean"] for k, v in end["regret"]["final"].items()} == {
        label: a["regret_final_mean"] for label, a in summary["algorithms"].items()}
    assert {k: p["guarantee"] for k, p in end["privacy"].items()} == {
        label: p["guarantee"] for label, p in summary["privacy"].items()}
    released = sum(c["released"] for c in end["rounds"]["intermediaries"].values())
    assert released == end["rounds"]["records"] > 0
    assert set(end["rounds"]["intermediaries"]) <= set(obs.parties)
    assert all(c["failed"] == c["open"] == 0 for c in end["rounds"]["intermediaries"].values())
    json.dumps(end, allow_nan=False)


def test_round_counts_are_the_intermediaries_own_and_checked():
    fam, config, label = _mab("Dist-DP-SE", {}, horizon=1_000, arms=2)
    obs = ObserverService(BusSettings(run_id=RUN_ID), fam, config, PARTIES, Path("unused"), report_key=1)
    counts = {"open": 1, "complete": 0, "released": 2, "failed": 0, "reports": 7}

    def status(party, body, task=0):
        return f"pb/{RUN_ID}/metrics/{party}", codec.StatusMsg(run=RUN_ID, party=party, state="rounds", task=task,
                                                               body=body)

    async def feed(*messages):
        for name, msg in messages:
            await obs.on_message(name, msg)

    before = obs.last_metrics
    asyncio.run(feed(status("aggregator", counts), status("analyzer", counts),
                     status("aggregator", {**counts, "open": -1}), status("aggregator", {**counts, "extra": 1}),
                     status("aggregator", {**counts, "released": "2"}), status("aggregator", counts, task=None),
                     status("aggregator", counts, task=len(obs.tasks))))  # no such task: memory stays bounded
    assert obs.round_counts == {(0, "aggregator"): counts}
    assert obs.rejected["bad-status"] == 6
    assert obs.last_metrics == before  # round counts come whatever happens: they never put off a resync
    assert obs.heard["aggregator"] > before  # but they say the intermediary is up


# --- bad input -----------------------------------------------------------------------------------

def test_a_port_in_use_is_named():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(DashboardError, match=rf"dashboard port {port} on 127\.0\.0\.1 is in use"):
            Dashboard("127.0.0.1", port)
        result = CliRunner().invoke(app, ["demo", "--dashboard", "--dashboard-port", str(port), "--out", "unused"])
        assert result.exit_code == 2
        assert f"dashboard port {port} on 127.0.0.1 is in use" in " ".join(result.output.split())


@pytest.mark.parametrize("port", [0, 65536, -1, "8050", 1.5, True])
def test_a_bad_port_names_the_range(port):
    with pytest.raises(DashboardError, match=r"must be an integer in 1\.\.65535"):
        bind("127.0.0.1", port)


@pytest.mark.parametrize("value", ["70000", "0", "http"])
def test_a_bad_port_option_names_the_option_and_its_range(value):
    result = CliRunner().invoke(app, ["demo", "--dashboard", "--dashboard-port", value])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"Invalid value for '--dashboard-port': '{value}': must be an integer in 1..65535" in text, text


def test_the_dashboard_is_for_distributed_runs_only(tmp_path):
    result = CliRunner().invoke(app, ["run", "experiments/demo.toml", "--dashboard", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--dashboard: only with --transport mqtt" in " ".join(result.output.split())


@pytest.mark.parametrize("command", [["demo"], ["run", "experiments/demo.toml", "--transport", "mqtt"]])
def test_a_dashboard_port_without_the_dashboard_is_refused_not_ignored(tmp_path, command):
    result = CliRunner().invoke(app, [*command, "--dashboard-port", "9000", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "--dashboard-port 9000: only with --dashboard" in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()  # refused before any work


def test_the_observer_serves_the_page_with_its_own_account_only(tmp_path):
    """The page lives in the observer's process: it gets the observer's password and no other's
    (tests/services/test_acl.py proves the broker keeps that account from reports, releases and plans)."""
    from privbandit.runner import config as experiment_files
    from privbandit.services.launcher import plan_parties

    experiment = Path(__file__).resolve().parents[2] / "experiments" / "demo.toml"
    family, config = experiment_files.load(experiment)
    passwords = {r: f"pw-{r}" for r in ("observer", "analyzer", "aggregator", "users", "shuffler")}
    parties = plan_parties(family, config, experiment, [], tmp_path, "mqtt://127.0.0.1:1", "r1", 2, passwords,
                           dashboard_port=8123)
    observer = parties[0]
    assert observer.name == "observer" and observer.argv[-3:] == ["--dashboard", "--dashboard-port", "8123"]
    assert observer.env["PRIVBANDIT_USERNAME"] == "observer" and observer.env["PRIVBANDIT_PASSWORD"] == "pw-observer"
    assert not [v for v in observer.env.values() if v.startswith("pw-") and v != "pw-observer"]
    assert all("--dashboard" not in p.argv for p in parties[1:])


# --- the server ------------------------------------------------------------------------------------

def _get(url: str, host: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _first_event(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response:
            if line.startswith(b"data: "):
                return json.loads(line[6:])
    raise AssertionError("no event")


def test_the_server_serves_the_page_the_stream_and_only_the_result_files(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"experiment": "x", "algorithms": {}}))
    (out / "secret.txt").write_text("not a result file")
    (tmp_path / "outside.json").write_text("{}")
    port = _free_port()
    dashboard = Dashboard("127.0.0.1", port)
    base = f"http://127.0.0.1:{port}"

    async def go():
        async with dashboard.serving(lambda: results_snapshot(out), out):
            page = await asyncio.to_thread(_get, base + "/")
            snap = await asyncio.to_thread(_get, base + "/api/snapshot")
            event = await asyncio.to_thread(_first_event, base + "/api/stream")
            files = {name: (await asyncio.to_thread(_get, f"{base}/results/{name}"))[0]
                     for name in ("summary.json", "secret.txt", "..%2Foutside.json", "regret.png")}
            rebound = await asyncio.to_thread(_get, base + "/api/snapshot", "evil.example:8050")
            return page, snap, event, files, rebound

    page, snap, event, files, rebound = asyncio.run(go())
    assert page[0] == 200 and b'id="regret"' in page[1] and b"http" not in page[1].split(b"<script>")[1]
    assert snap[0] == 200 and json.loads(snap[1])["results"]["summary"]["experiment"] == "x"
    assert event["phase"] == "finished" and event["results"]["files"] == ["summary.json"]
    assert files == {"summary.json": 200, "secret.txt": 404, "..%2Foutside.json": 404, "regret.png": 404}
    assert rebound[0] == 400  # a page of another site, its name rebound to the loopback
    with pytest.raises(OSError):  # stopped: the port is free again
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# --- end to end: a real session in headless Chromium ----------------------------------------------

def _browser():
    absent = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        absent.append("selenium (pip install -e '.[test]')")
    if absent:
        missing(f"not installed: {', '.join(absent)} (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,2000"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


READ_PAGE = """
const rows = (sel) => [...document.querySelectorAll(sel + ' tbody tr')].map((tr) => ({...tr.dataset}));
const png = document.getElementById('regret-png');
return {phase: document.getElementById('phase').textContent,
        points: Number(document.getElementById('regret').dataset.points || 0),
        final: rows('#final'), rounds: rows('#rounds'), records: document.getElementById('records').dataset.records,
        summary: rows('#summary'), png: png ? png.complete && png.naturalWidth : 0};
"""


def test_a_session_watched_in_chromium_shows_the_observers_numbers(tmp_path):
    driver = _browser()
    port = _free_port()
    out = tmp_path / "demo"
    demo = subprocess.Popen([sys.executable, "-m", "privbandit", "demo", "--out", str(out), "--dashboard",
                             "--dashboard-port", str(port), "--set", "runs=2", "--set", "horizon=200000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 40
        while _get_quietly(f"http://127.0.0.1:{port}/api/snapshot") is None:
            assert demo.poll() is None, demo.communicate()
            assert time.monotonic() < deadline, "the dashboard never came up"
            time.sleep(0.2)
        driver.get(f"http://127.0.0.1:{port}/")
        live_with_data = last = None
        deadline = time.monotonic() + 90
        while not (last and last["phase"].startswith("finished") and last["summary"] and last["png"]):
            assert time.monotonic() < deadline, f"the page never showed the results: {last}"
            assert demo.poll() is None, demo.communicate()
            last = driver.execute_script(READ_PAGE)
            released = sum(int(r.get("released", 0)) for r in last["rounds"])
            if not last["phase"].startswith("finished") and last["points"] and released:
                live_with_data = last
            time.sleep(0.25)
        assert live_with_data is not None, "the regret chart and the round table never had data while live"
        driver.save_screenshot(str(out / "dashboard.png"))

        summary = json.loads((out / "summary.json").read_text())
        with open(out / "rounds.csv", newline="") as fh:
            rows = sum(1 for _ in csv.DictReader(fh))
        ((final,),) = [last["final"]]
        algo = summary["algorithms"][final["label"]]
        # What the page showed live (the observer's last snapshot) is what the results say.
        assert float(final["live"]) == algo["regret_final_mean"] and int(final["runs"]) == algo["runs"] == 2
        assert float(final["summary"]) == algo["regret_final_mean"]
        assert last["rounds"] == [{"party": "aggregator", "released": str(rows), "failed": "0"}]
        assert int(last["records"]) == rows > 0
        assert [r["label"] for r in last["summary"]] == list(summary["algorithms"])
    finally:
        driver.quit()
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)  # Ctrl-C: stop serving the results
        try:
            stdout, stderr = demo.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            demo.kill()
            stdout, stderr = demo.communicate()
    assert demo.returncode == 0, stderr
    assert f"serving {out} at http://127.0.0.1:{port}/ until Ctrl-C" in " ".join(stderr.split())
    assert (out / "dashboard.png").stat().st_size > 10_000


def _get_quietly(url: str):
    try:
        return _get(url)
    except OSError:
        return None


# --- several results directories compared (issue #35) ---------------------------------------------

def _two_results(tmp_path: Path) -> tuple[Path, Path]:
    """Two small in-process runs of the quickstart at different ε and seeds (seconds each, most of it
    regret.png)."""
    dirs = []
    for name, eps in (("eps-low", 0.5), ("eps-high", 4)):
        out = tmp_path / name
        result = CliRunner().invoke(app, ["run", "experiments/quickstart.toml", "--set", "horizon=3000", "--set",
                                          "runs=1", "--set", f"epsilon={eps}", "--set", f"seed={int(eps * 10)}",
                                          "--out", str(out)])
        assert result.exit_code == 0, result.output
        dirs.append(out)
    return dirs[0], dirs[1]


def test_a_sweeps_directory_is_its_points_and_a_stray_path_is_named(tmp_path):
    a, b = _two_results(tmp_path)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shutil.copytree(a, sweep / "epsilon=0.5")
    shutil.copytree(b, sweep / "epsilon=4")
    (sweep / "sweep.csv").write_text("point,epsilon,algorithm\nepsilon=4,4,SE\nepsilon=0.5,0.5,SE\n")
    from privbandit.services.dashboard import DirectoryError, compare_snapshot, results_dirs

    dirs = results_dirs([a, sweep, a])
    assert [name for name, _ in dirs] == ["eps-low", "sweep/epsilon=4", "sweep/epsilon=0.5", "eps-low (2)"]
    snap = compare_snapshot(dirs)
    assert [r["name"] for r in snap["runs"]] == [name for name, _ in dirs] and snap["results"] == snap["runs"][0]
    low, high = snap["runs"][0], snap["runs"][1]
    assert low["summary"]["algorithms"].keys() == high["summary"]["algorithms"].keys()
    assert low["curves"]["pseudo"] != high["curves"]["pseudo"]  # each directory's own curves
    with open(a / "rounds.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for label, c in low["rounds"].items():  # the Rounds panel after a run: rounds.csv per algorithm
        mine = [r for r in rows if r["algorithm"] == label]
        assert c == {"rounds": len(mine), "reports": sum(int(r["reports"]) for r in mine), "runs": 1}
    assert low["parties"] is None and low["cumulative"] is False  # in-process; regret.png: Reg(t)/t, log t
    linear = tmp_path / "linear"  # the linear family's regret.png is cumulative: the chart starts so too
    result = CliRunner().invoke(app, ["run", "experiments/linear_fig1b_eps1.toml", "--set", "horizon=200", "--set",
                                      "runs=1", "--out", str(linear)])
    assert result.exit_code == 0, result.output
    assert results_snapshot(linear)["results"]["cumulative"] is True
    with pytest.raises(DirectoryError, match=rf"{tmp_path}: neither a results directory \(summary.json\) nor a sweep's"):
        results_dirs([a, tmp_path])
    result = CliRunner().invoke(app, ["dashboard", str(a), str(tmp_path)])
    assert result.exit_code == 2 and "neither a results directory" in " ".join(result.output.split())


READ_COMPARISON = """
const svg = document.getElementById('regret'), m = svg.getScreenCTM(), box = svg.getBoundingClientRect();
const label = [...svg.querySelectorAll('text')].find((t) => t.textContent.startsWith('t (users')) || svg.querySelector('text');
const bbox = label.getBBox(), rect = label.getBoundingClientRect();
const rows = (sel) => [...document.querySelectorAll(sel + ' tbody tr')].map((tr) => ({...tr.dataset}));
return {legend: [...document.querySelectorAll('#legend span')].map((s) => s.dataset.series),
        points: Number(svg.dataset.points || 0), title: document.getElementById('regret-title').textContent,
        scale: [m.a, m.d], viewbox: svg.viewBox.baseVal.width, width: box.width,
        text: [rect.width / bbox.width, rect.height / bbox.height],
        rounds: rows('#rounds'), parties: document.querySelector('#parties tbody').textContent,
        traffic: [...document.querySelectorAll('#traffic th')].map((th) => th.textContent),
        summary: rows('#summary'), picker: [...document.querySelectorAll('#run-picker input')].map((i) => i.dataset.run)};
"""


# One script, found and clicked at once: the picker is built anew at each drawing.
TICK = "[...document.querySelectorAll('#run-picker input')].find((i) => i.dataset.run === arguments[0]).click()"


def test_two_runs_compared_in_chromium_are_both_in_the_legend_and_the_text_keeps_its_shape(tmp_path):
    """#35: `privbandit dashboard A B` overlays both runs' curves (one colour per run and algorithm,
    both in the legend); the chart is drawn at one user unit per CSS pixel both ways (the text is
    not stretched); a run can be unticked; the axis starts as regret.png's and toggles; the Rounds
    panel shows rounds.csv after the run. A screenshot is kept beside the results."""
    driver = _browser()
    a, b = _two_results(tmp_path)
    # A directory's name is data too: markup in it is shown as text, never run.
    b = b.rename(tmp_path / "eps-high<img src=x onerror=window.__pwned=1>")
    labels = list(json.loads((a / "summary.json").read_text())["algorithms"])
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "privbandit", "dashboard", str(a), str(b), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while _get_quietly(f"http://127.0.0.1:{port}/api/snapshot") is None:
            assert server.poll() is None, server.communicate()
            assert time.monotonic() < deadline, "the dashboard never came up"
            time.sleep(0.2)
        for width in (1400, 700):  # a narrow window too: the old chart squeezed its text there
            driver.set_window_size(width, 2000)
            driver.get(f"http://127.0.0.1:{port}/")
            deadline = time.monotonic() + 20
            # drawn, and drawn again at its final width once the page's layout settled (a scrollbar)
            while not ((page := driver.execute_script(READ_COMPARISON))["legend"]
                       and abs(page["viewbox"] - page["width"]) <= 1):
                assert time.monotonic() < deadline, f"the legend stayed empty or the chart's width unfit: {page}"
                time.sleep(0.2)
            assert page["scale"][0] == pytest.approx(page["scale"][1], rel=1e-6), page  # never stretched
            assert page["legend"] == [f"{d.name} · {label}" for d in (a, b) for label in labels]
            assert page["picker"] == [a.name, b.name]
            assert page["scale"] == pytest.approx([1, 1], abs=1e-3), page  # one unit a pixel, both ways
            assert page["text"] == pytest.approx([1, 1], abs=0.02), page  # its box is its drawn glyphs' box
            assert page["title"].startswith("Time-average pseudo-regret Reg(t)/t")  # as regret.png
            assert {r["run"] for r in page["rounds"]} == {a.name, b.name} and all(int(r["released"]) > 0
                                                                                for r in page["rounds"])
            assert "no live data" not in page["parties"] and "in-process" in page["parties"]
            assert page["traffic"][1:3] == ["sent, total", "received, total"]
            assert [(r["run"], r["label"]) for r in page["summary"]] == [(d.name, x) for d in (a, b) for x in labels]
        driver.set_window_size(1400, 2000)
        driver.execute_script(TICK, b.name)
        driver.execute_script("const s = document.getElementById('axis'); s.value = 'cumulative';"
                              "s.dispatchEvent(new Event('change'));")
        page = driver.execute_script(READ_COMPARISON)
        assert page["legend"] == [f"{a.name} · {label}" for label in labels] and page["points"] > 0
        assert page["title"] == "Pseudo-regret Reg(t) against t"
        driver.execute_script(TICK, b.name)
        assert driver.execute_script("return window.__pwned === undefined && !document.querySelector('#legend img')")
        driver.save_screenshot(str(tmp_path / "comparison.png"))
    finally:
        driver.quit()
        server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
    assert (tmp_path / "comparison.png").stat().st_size > 10_000
