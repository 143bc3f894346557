"""Labels are validated, and the dashboard shows whatever it reads as text (issue #32 item 6).

An algorithm label such as ``<img src=x onerror=alert(1)>`` was accepted by the config, written to
``curves.csv`` and put into the chart's legend with ``innerHTML``: ``privbandit dashboard DIR`` on a
results directory someone handed over ran it. Now the config refuses such a label, naming the field
and the pattern; and a results directory written before (or by hand) with markup in every place the
page shows text runs no script in headless Chromium, which shows that markup as text.

The browser test needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium``; it skips
without them, unless CI=true, where it fails."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.runner import config as experiment_files
from privbandit.runner.config import LABEL_PATTERN, ConfigError
from privbandit.services.dashboard import Dashboard, results_snapshot
from tests.services.test_dashboard import _browser, _free_port

HOSTILE = '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">'
LABEL = "Dist-DP-SE"
EXPERIMENT = f"""
name = "escape"
horizon = 20_000
seed = 1
runs = 1
[algorithms.{LABEL}]
"""


@pytest.mark.parametrize("label", [HOSTILE, "<script>", "a/b", "x\ny", "", " lead", "_x", "x" * 65, "a&b", 'q"'])
def test_a_label_outside_the_pattern_is_refused_naming_the_field_and_the_pattern(label):
    with pytest.raises(ConfigError) as err:
        experiment_files.load_data({"horizon": 1000, "algorithms": {label: {"algorithm": "dist-dp-se"}}})
    assert "algorithms" in str(err.value) and LABEL_PATTERN in str(err.value) and repr(label) in str(err.value)


@pytest.mark.parametrize("label", ["Dist-DP-SE", "dp rho=0.2, 20% drop", "hybrid@r+1", "ftnl@c=2", "dp ε=0.5",
                                   "x" * 64])
def test_the_labels_the_experiment_files_use_are_accepted(label):
    _, config = experiment_files.load_data({"horizon": 1000, "algorithms": {label: {"algorithm": "dist-dp-se"}}})
    assert list(config.algorithms) == [label]


def test_run_refuses_a_markup_label_with_exit_2(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(EXPERIMENT.replace(f"[algorithms.{LABEL}]", f"[algorithms.'{HOSTILE}']\nalgorithm = 'dist-dp-se'"))
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "the label" in res.output and "is not allowed" in res.output
    assert not (tmp_path / "out" / "curves.csv").exists()


READ = """
const legend = document.getElementById('legend');
return {pwned: window.__pwned || 0, phase: document.getElementById('phase').textContent,
        imgs: [...document.querySelectorAll('img')].map((i) => i.getAttribute('src')),
        legend: legend.textContent, legendTags: [...legend.querySelectorAll('*')].map((e) => e.tagName),
        summary: [...document.querySelectorAll('#summary tbody td:first-child')].map((td) => td.textContent),
        audit: [...document.querySelectorAll('#audit tbody td:first-child')].map((td) => td.textContent),
        final: [...document.querySelectorAll('#final tbody td:first-child')].map((td) => td.textContent),
        files: [...document.querySelectorAll('#results-files a')].map((a) => a.textContent)};
"""


def test_a_handed_over_results_directory_with_markup_runs_no_script(tmp_path):
    """A real results directory and audit (the label valid), then the label replaced by markup in
    every file, as a directory written before the check, or by hand, would hold it. The page shows
    the markup as text in the legend, the tables and the audit, creates no element from it, and no
    handler runs; the only image is regret.png."""
    driver = _browser()
    path = tmp_path / "escape.toml"
    path.write_text(EXPERIMENT)
    out = tmp_path / "results"
    assert CliRunner().invoke(app, ["run", str(path), "--out", str(out)]).exit_code == 0
    res = CliRunner().invoke(app, ["audit", str(path), "--samples", "200", "--out", str(out / "audit")])
    assert res.exit_code == 0, res.output
    for name in ("summary.json", "curves.csv", "rounds.csv", "audit/audit.json"):
        text = (out / name).read_text()
        assert LABEL in text, name
        hostile = json.dumps(HOSTILE)[1:-1] if name.endswith(".json") else f'"{HOSTILE.replace(chr(34), chr(34) * 2)}"'
        (out / name).write_text(text.replace(LABEL, hostile))
    snap = results_snapshot(out)["results"]
    assert HOSTILE in snap["summary"]["algorithms"] and HOSTILE in snap["curves"]["pseudo"], "the files hold the markup"

    port = _free_port()
    stop = threading.Event()

    async def serve():
        async with Dashboard("127.0.0.1", port).serving(lambda: results_snapshot(out), out):
            while not stop.is_set():
                await asyncio.sleep(0.05)

    server = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    server.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                driver.get(f"http://127.0.0.1:{port}/")
                break
            except Exception:  # noqa: BLE001 — the server is still binding
                assert time.monotonic() < deadline, "the dashboard never came up"
                time.sleep(0.2)
        deadline = time.monotonic() + 30
        page = driver.execute_script(READ)
        while not (page["phase"] == "finished" and page["summary"] and page["audit"]):
            assert time.monotonic() < deadline, page
            time.sleep(0.2)
            page = driver.execute_script(READ)
        time.sleep(0.5)  # an onerror handler would have fired by now (src=x fails at once)
        page = driver.execute_script(READ)
    finally:
        driver.quit()
        stop.set()
        server.join(10)
    assert page["pwned"] == 0, page
    assert page["imgs"] == ["/results/regret.png"], page["imgs"]
    assert HOSTILE in page["legend"] and page["legendTags"] == ["SPAN", "I"], page
    assert page["summary"] == [HOSTILE] and page["final"] == [HOSTILE]
    assert any(HOSTILE in name for name in page["audit"]), page["audit"]
