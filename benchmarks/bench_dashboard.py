"""What the dashboard costs (docs/dashboard.md, "Cost").

1. The observer's time per live snapshot (it runs on the observer's event loop, once per 0.5 s
   however many pages are open), for an experiment's worth of finished tasks plus one running
   task holding every block's truth (the worst moment of a task):

       python benchmarks/bench_dashboard.py [--experiment F] [--horizon T] [--runs R]

2. With ``--session``: a real `privbandit demo --dashboard` session on the embedded broker; the
   bytes the intermediaries' round counts add (the aggregator's metrics traffic, which before the
   dashboard carried nothing within a task) against the users' report bytes, and the latency of
   /api/snapshot seen by a client polling it every 0.25 s during the session.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from privbandit.protocol.spine import engine
from privbandit.runner import config as experiment_files, tasks
from privbandit.services.bus import BusSettings
from privbandit.services.dashboard import live_snapshot
from privbandit.services.observer import ObserverService


def snapshot_cost(experiment: str, horizon: int, runs: int) -> None:
    family, config = experiment_files.load(experiment, [f"horizon={horizon}", f"runs={runs}"])
    results, _, _ = tasks.run_experiment(family, config, jobs=1)
    with tempfile.TemporaryDirectory() as tmp:
        obs = ObserverService(BusSettings(run_id="bench"), family, config, ["analyzer", "aggregator", "users-0"],
                              Path(tmp), report_key=1)
    for label, done in results.items():
        for r in done:
            for i, run in enumerate(r.runs):
                obs.results[label][run] = dataclasses.replace(r, runs=[run], pseudo=r.pseudo[i:i + 1],
                                                              realized=r.realized[i:i + 1])
    # The last task runs again, every block's truth in: the longest pass a snapshot makes.
    run, label = obs.tasks[-1]
    obs.results[label][run] = None
    _, analyzer, users, boxes, observer = tasks.parties(family, config, label, [run])
    engine.run(analyzer, users, boxes, observer)
    obs.index, obs.observer, obs.analyzer_done = len(obs.tasks) - 1, observer, None
    times = []
    for _ in range(20):
        start = time.perf_counter()
        snap = live_snapshot(obs)
        times.append(time.perf_counter() - start)
    size = len(json.dumps(snap, allow_nan=False))
    print(f"{config.name}: {len(obs.labels)} algorithms × {runs} runs, T = {horizon:,}, {len(observer.truths)} truths "
          f"in the running task: {statistics.median(times) * 1e3:.2f} ms per snapshot (median of 20, max "
          f"{max(times) * 1e3:.2f} ms), {size / 1e3:.1f} kB of JSON")


def session_cost() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo"
        demo = subprocess.Popen([sys.executable, "-m", "privbandit", "demo", "--out", str(out), "--dashboard",
                                 "--dashboard-port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        latencies = []
        while not (out / "summary.json").exists() and demo.poll() is None:
            start = time.perf_counter()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/snapshot", timeout=5).read()
                latencies.append(time.perf_counter() - start)
            except OSError:
                pass
            time.sleep(0.25)
        time.sleep(1)
        demo.send_signal(2)  # Ctrl-C: stop serving the results
        demo.wait(30)
        summary = json.loads((out / "summary.json").read_text())
    (label, comm), = summary["communication"].items()
    reports = comm["reports_per_run"] * summary["runs"]
    aggregator = comm["roles"]["aggregator"]
    counts = aggregator.get("wire.sent.metrics", 0) * reports
    users = comm["roles"]["users"].get("wire.sent.report", 0) * reports
    print(f"demo ({label}, {summary['runs']} runs, T = {summary['horizon']:,}): the aggregator's round counts "
          f"{counts:,.0f} wire bytes in all, {counts / users:.2e} of the users' {users:,.0f} report bytes "
          f"({aggregator.get('wire.sent.metrics', 0):.4f} bytes per reporting user)")
    print(f"/api/snapshot during the session: {len(latencies)} requests, median "
          f"{statistics.median(latencies) * 1e3:.1f} ms, max {max(latencies) * 1e3:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="experiments/quickstart.toml")
    parser.add_argument("--horizon", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--session", action="store_true", help="also measure a real demo session")
    args = parser.parse_args()
    snapshot_cost(args.experiment, args.horizon, args.runs)
    if args.session:
        session_cost()
