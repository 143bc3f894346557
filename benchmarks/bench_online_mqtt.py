"""The private-online-learning family over MQTT: users/s per algorithm and one user's round trip.

    .venv/bin/python benchmarks/bench_online_mqtt.py [--brokers embedded,generated] \
        [--hybrid-horizon 2000] [--horizon 1048576] [--only hybrid-ucb,dp-se] [--epsilon 1]

For each broker (``embedded``: the launcher's amqtt, what ``privbandit run --transport mqtt`` uses;
``generated``: a Mosquitto from the project's generated configuration; or a broker's URL, used
anonymously) and each online algorithm of ``experiments/pol_setting1.toml`` (central trust), one
session through :func:`~privbandit.services.launcher.launch` as ``privbandit run --transport mqtt``
runs it (two fleets, checkpoints on), then the same experiment in-process. It prints:

- users/s: the observer's figure for the task (T over the task's seconds, announced to scored);
- the time from one release to the next, median and 90th percentile, from the analyzer's log, and
  the users per release: for Hybrid-UCB, whose next arm depends on this user's reward, a plan
  serves the users no reward can send elsewhere (``decided_streak``), so that time is one plan's
  whole round trip (analyzer → plan → fleet → report → aggregator → release → analyzer), and its
  users/s is about users per release over it;
- CPU milliseconds per user of each party (and of the launcher, which holds the embedded broker),
  from ``/proc/<pid>/stat``, counted from the analyzer's first checkpoint (its first release
  decoded: start-up excluded) to the end: what the machine pays per user, whatever else runs on
  it, and which party pays it;
- whether every number (summary, rounds.csv, curves.csv) is the in-process run's, bit for bit.

Hybrid-UCB runs ``--hybrid-horizon`` users (it is sequential), the others ``--horizon``. The load
average is printed with each line: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_distributed import started_broker  # noqa: E402
from privbandit.runner import config as experiment_files  # noqa: E402
from privbandit.runner import run_file  # noqa: E402
from privbandit.services.checkpoint import FILE_NAME  # noqa: E402
from privbandit.services.launcher import launch  # noqa: E402

ALGORITHMS = ("hybrid-ucb", "anytime-lazy-ucb", "dp-se", "ftnl")
TRIPS = re.compile(r"(\d+) releases; from one release to the next: median ([\d.]+) ms, p90 ([\d.]+) ms")


def experiment(directory: Path, algorithm: str, horizon: int, epsilon: float) -> Path:
    path = directory / f"{algorithm}.toml"
    path.write_text(f'family = "private-online-learning"\nname = "bench-{algorithm}"\nhorizon = {horizon}\n'
                    f'runs = 1\nepsilon = {epsilon!r}\nseed = 1\n\n[environment]\nsetting = 1\nreward = "bernoulli"\n\n'
                    f'[algorithms.{algorithm}]\n')
    return path


TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of a live process (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class CpuWatch(threading.Thread):
    """Samples every party's CPU (and this process's) until stopped: the values when the analyzer's
    first checkpoint appears, and the last ones before each process exits."""

    def __init__(self, out: Path):
        super().__init__(daemon=True)
        self.out, self.parties, self.stop = out, [], threading.Event()
        self.first: dict[str, float] | None = None
        self.last: dict[str, float] = {}

    def sample(self) -> dict[str, float]:
        got = {p.name: cpu_of(p.proc.pid) for p in self.parties if p.proc is not None}
        got["launcher+broker"] = cpu_of(os.getpid())
        return {k: v for k, v in got.items() if v is not None}

    def run(self) -> None:
        while not self.stop.wait(0.05):
            now = self.sample()
            self.last.update(now)
            if self.first is None and self.parties and (self.out / "state" / "analyzer" / FILE_NAME).exists():
                self.first = now


def same_numbers(inproc: Path, mqtt: Path) -> bool:
    a, b = (json.loads((d / "summary.json").read_text()) for d in (inproc, mqtt))
    for label, alg in a["algorithms"].items():
        if any(b["algorithms"][label][k] != v for k, v in alg.items() if k != "users_per_s"):
            return False
        if b["privacy"][label] != a["privacy"][label]:
            return False
    return all((mqtt / f).read_bytes() == (inproc / f).read_bytes() for f in ("rounds.csv", "curves.csv"))


def session(path: Path, out: Path, broker) -> tuple[dict, dict[str, float]]:
    """One session; returns its summary and each process's CPU seconds after its first release."""
    family, config = experiment_files.load(path)
    watch = CpuWatch(out)
    watch.start()
    try:
        code = launch(family, config, path, [], out, timeout_s=3600, started=watch.parties.extend,
                      **broker.launch_args())
    finally:
        watch.stop.set()
        watch.join()
    if code != 0:
        raise RuntimeError(f"the session failed ({code}): see {out / 'logs'}")
    first = watch.first or {}
    return json.loads((out / "summary.json").read_text()), {k: v - first.get(k, 0.0) for k, v in watch.last.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="embedded,generated")
    ap.add_argument("--hybrid-horizon", type=int, default=2000)
    ap.add_argument("--horizon", type=int, default=2**20)
    ap.add_argument("--only", default=",".join(ALGORITHMS))
    ap.add_argument("--epsilon", type=float, default=1.0)
    args = ap.parse_args()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    print(f"machine: {model}, {os.cpu_count()} cores, python {platform.python_version()}; "
          f"setting 1 (K = 5), ε = {args.epsilon:g}, central trust, two fleets, checkpoints on")
    with tempfile.TemporaryDirectory(prefix="bench-online-mqtt-") as tmp:
        tmp = Path(tmp)
        for spec in args.brokers.split(","):
            with started_broker(spec, tmp / f"broker-{spec.replace('/', '_').replace(':', '_')}") as broker:
                for algorithm in args.only.split(","):
                    horizon = args.hybrid_horizon if algorithm == "hybrid-ucb" else args.horizon
                    path = experiment(tmp, algorithm, horizon, args.epsilon)
                    out = tmp / f"mqtt-{spec.replace('/', '_').replace(':', '_')}-{algorithm}"
                    load = os.getloadavg()[0]
                    wall = time.perf_counter()
                    summary, cpu = session(path, out, broker)
                    wall = time.perf_counter() - wall
                    rate = summary["algorithms"][algorithm]["users_per_s"]
                    found = TRIPS.findall((out / "logs" / "analyzer.log").read_text())
                    inproc = tmp / f"inproc-{algorithm}"
                    if not inproc.exists():
                        run_file(path, out=inproc)
                    equal = same_numbers(inproc, out)
                    trip = (f"release to release median {float(found[-1][1]):.2f} ms, p90 {float(found[-1][2]):.2f} ms "
                            f"({int(found[-1][0]):,} releases, {horizon / int(found[-1][0]):.1f} users each)"
                            ) if found else "no release"
                    per_user = ", ".join(f"{k} {v / horizon * 1e3:.3f}" for k, v in sorted(cpu.items()))
                    print(f"{spec:9s} {algorithm:16s} T = {horizon:>9,}: {rate:12,.0f} users/s; {trip}; "
                          f"session {wall:.1f} s wall; CPU ms per user after the first release: "
                          f"{sum(cpu.values()) / horizon * 1e3:.3f} ({per_user}); "
                          f"in-process numbers {'equal' if equal else 'DIFFER'}; load {load:.1f}→"
                          f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
