"""What a crash costs: the same distributed session with no fault, then with one party SIGKILLed
mid-run and restarted by the launcher (``restart_on_crash``); wall time, and whether every number
of the results (summary.json's algorithms and privacy, rounds.csv, curves.csv) came out the same.

    python benchmarks/bench_faults.py [--broker mqtt://127.0.0.1:1883] [--horizon 1000000]
        [--victims analyzer,aggregator,users-1,observer]

A victim is killed once its checkpoint shows three released rounds (fleets: once the analyzer's
does), so the fault lands early in the session, in the middle of a batch.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import threading
import time
from pathlib import Path

from privbandit.experiment.config import load_experiment
from privbandit.services.checkpoint import decode_checkpoint
from privbandit.services.launcher import launch

EXPERIMENT = """
name = "bench-faults"
horizon = {horizon}
seed = 9
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
[algorithms.Dist-DP-SE]
"""


def rounds_done(out: Path, party: str) -> int:
    try:
        state = decode_checkpoint((out / "state" / party / "checkpoint.bin").read_bytes())[2].state
    except FileNotFoundError:
        return 0
    return len(state.get("releases", state.get("closed", [])))


def session(config, path: Path, out: Path, broker: str, victim: str | None) -> float:
    parties: dict = {}
    started = threading.Event()

    def on_start(ps):
        parties.update({p.name: p for p in ps})
        started.set()

    result: dict = {}
    t0 = time.perf_counter()
    worker = threading.Thread(target=lambda: result.update(code=launch(
        config, path, [], out, broker_url=broker, shards=2, restart_on_crash=1, started=on_start)))
    worker.start()
    if victim is not None:
        started.wait()
        watched = victim if victim in ("analyzer", "aggregator", "observer") else "analyzer"
        while rounds_done(out, "analyzer" if watched == "observer" else watched) < 3 and worker.is_alive():
            time.sleep(0.02)
        parties[victim].proc.kill()
    worker.join()
    assert result.get("code") == 0, f"the session with {victim} killed failed"
    return time.perf_counter() - t0


def same_numbers(a: Path, b: Path) -> bool:
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    algos = all({k: v for k, v in sa["algorithms"][x].items() if k != "users_per_s"}
                == {k: v for k, v in sb["algorithms"][x].items() if k != "users_per_s"} for x in sa["algorithms"])
    return (algos and sa["privacy"] == sb["privacy"]
            and all((a / f).read_bytes() == (b / f).read_bytes() for f in ("rounds.csv", "curves.csv")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default="mqtt://127.0.0.1:1883")
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--victims", default="analyzer,aggregator,users-1,observer")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, python {platform.python_version()}, broker {args.broker}, "
          f"Dist-DP-SE T = {args.horizon:,}, 2 fleets")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(EXPERIMENT.format(horizon=args.horizon))
        config, _ = load_experiment(path)
        base = session(config, path, Path(tmp) / "none", args.broker, None)
        print(f"no fault                 {base:6.1f} s")
        for victim in args.victims.split(","):
            out = Path(tmp) / victim
            wall = session(config, path, out, args.broker, victim)
            print(f"{victim + ' SIGKILLed':<24} {wall:6.1f} s   ({wall - base:+5.1f} s)   "
                  f"identical results: {same_numbers(Path(tmp) / 'none', out)}")


if __name__ == "__main__":
    main()
