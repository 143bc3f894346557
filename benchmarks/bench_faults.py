"""What a crash costs: the same distributed session with no fault, then with one party SIGKILLed
mid-run and restarted by the launcher (``restart_on_crash``), or with the broker SIGKILLed and
started again; wall time, seconds from the kill to the session's end, and whether every number of
the results (summary.json's algorithms and privacy, rounds.csv, curves.csv) came out the same.

    python benchmarks/bench_faults.py [--broker mqtt://127.0.0.1:1883] [--horizon 1000000]
        [--victims analyzer,aggregator,users-1,observer,broker] [--repeat N [--seed S]]

A victim is killed once its checkpoint shows three released rounds (fleets, the observer and the
broker: once the analyzer's does), so the fault lands early in the session, in the middle of a batch.

The ``broker`` victim's session runs on a private Mosquitto of its own (not ``--broker``) that
persists its sessions and queues to disk; 0.5 s after the SIGKILL it is started again on the same
port, from what it last saved (it saves every 2 s). Its no-fault baseline is a session on such a
private Mosquitto too, printed next to the ``--broker`` one.

``--repeat N``: each victim's session is run N times, the kill landing after a random number of
released rounds (1–25) plus a random 0–0.3 s, and a session that has not ended ``--stall-after``
seconds after its start counts as stalled. It prints how many stalled, how many gave identical
results, and the median and longest time from the kill to the end. Faults that depend on what was
in flight at the kill show up here, not in one run.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from privbandit.experiment.config import load_experiment
from privbandit.services.checkpoint import progress
from privbandit.services.launcher import launch
from privbandit.services.mosquitto_process import MosquittoProcess, start_on_free_port, write_persistent_conf

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


def session(config, path: Path, out: Path, broker_url: str, victim: str | None,
            broker: MosquittoProcess | None = None, kill_at: tuple[int, float] = (3, 0.0),
            timeout_s: float | None = None) -> tuple[float, float | None]:
    """Wall seconds of one session, and seconds from the kill to its end (None with no victim).
    The victim dies once ``kill_at[0]`` rounds are released, ``kill_at[1]`` s later. Victim
    ``broker``: ``broker``, serving ``broker_url``, is SIGKILLed and started again 0.5 s later.
    Raises TimeoutError if the session does not end within ``timeout_s``."""
    parties: dict = {}
    started = threading.Event()

    def on_start(ps):
        parties.update({p.name: p for p in ps})
        started.set()

    result: dict = {}
    t0 = time.perf_counter()
    def run():
        try:
            result["code"] = launch(config, path, [], out, broker_url=broker_url, shards=2, restart_on_crash=1, insecure_broker=True,
                                    started=on_start, timeout_s=timeout_s)
        except TimeoutError as exc:
            result["stalled"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    killed = None
    if victim is not None:
        started.wait()
        watched = victim if victim in ("analyzer", "aggregator") else "analyzer"
        while progress(out / "state" / watched)[1] < kill_at[0] and worker.is_alive():
            time.sleep(0.02)
        time.sleep(kill_at[1])
        killed = time.perf_counter()
        if victim == "broker":
            broker.kill()
            time.sleep(0.5)  # every party notices the loss and retries meanwhile
            broker.start()
        else:
            parties[victim].proc.kill()
    worker.join()
    if "stalled" in result:
        raise result["stalled"]
    assert result.get("code") == 0, f"the session with {victim} killed failed"
    end = time.perf_counter()
    return end - t0, None if killed is None else end - killed


def private_session(config, path: Path, out: Path, victim: str | None, **kw) -> tuple[float, float | None]:
    """:func:`session` on a private, persistent Mosquitto of its own."""
    with start_on_free_port(lambda port: write_persistent_conf(out.with_name(out.name + "-broker"), port)) as broker:
        return session(config, path, out, broker.url, victim, broker, **kw)


def faulty_session(config, path: Path, out: Path, broker_url: str, victim: str, **kw) -> tuple[float, float]:
    """:func:`session` with ``victim`` killed; the broker victim on a private broker of its own."""
    if victim == "broker":
        return private_session(config, path, out, victim, **kw)
    return session(config, path, out, broker_url, victim, **kw)


def repeated(config, path: Path, tmp: Path, broker_url: str, victim: str, reference: Path, n: int,
             rng: random.Random, stall_after: float) -> None:
    """``n`` sessions with ``victim`` killed at a random moment: stalls, identical results, times."""
    stalled, identical, after = 0, 0, []
    for i in range(n):
        out = tmp / f"{victim}-{i}"
        kw = {"kill_at": (rng.randint(1, 25), rng.uniform(0, 0.3)), "timeout_s": stall_after}
        try:
            after.append(faulty_session(config, path, out, broker_url, victim, **kw)[1])
        except TimeoutError:
            stalled += 1
            print(f"  run {i}: stalled (killed after {kw['kill_at'][0]} rounds + {kw['kill_at'][1]:.3f} s); "
                  f"logs kept in {out / 'logs'}", flush=True)
            continue
        identical += same_numbers(reference, out)
        shutil.rmtree(out, ignore_errors=True)
    times = f"kill to end median {statistics.median(after):.1f} s, longest {max(after):.1f} s" if after else ""
    print(f"{victim + ' SIGKILLed':<24} x{n}: {stalled} stalled, {identical} of {n - stalled} identical; {times}",
          flush=True)


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
    ap.add_argument("--repeat", type=int, default=0, help="N sessions per victim, killed at random moments")
    ap.add_argument("--seed", type=int, default=0, help="for the random kill moments")
    ap.add_argument("--stall-after", type=float, default=120.0, help="with --repeat: a session longer than this stalled")
    args = ap.parse_args()
    known = {"analyzer", "aggregator", "observer", "broker"}
    for victim in args.victims.split(","):
        if victim not in known and not victim.startswith("users-"):
            ap.error(f"--victims: {victim!r} is not one of analyzer, aggregator, users-<i>, observer, broker")
    print(f"machine: {platform.machine()}, python {platform.python_version()}, broker {args.broker}, "
          f"Dist-DP-SE T = {args.horizon:,}, 2 fleets")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(EXPERIMENT.format(horizon=args.horizon))
        config, _ = load_experiment(path)
        victims = args.victims.split(",")
        base = session(config, path, Path(tmp) / "none", args.broker, None)[0]
        print(f"no fault                 {base:6.1f} s")
        if "broker" in victims:
            private_base = private_session(config, path, Path(tmp) / "none-private", None)[0]
            print(f"no fault, private broker {private_base:6.1f} s")
        for victim in victims:
            if args.repeat:
                reference = Path(tmp) / ("none-private" if victim == "broker" else "none")
                repeated(config, path, Path(tmp), args.broker, victim, reference, args.repeat,
                         random.Random(args.seed), args.stall_after)
                continue
            out = Path(tmp) / victim
            wall, after = faulty_session(config, path, out, args.broker, victim)
            # the broker victim is compared with the no-fault session on a private broker
            before, reference = (private_base, "none-private") if victim == "broker" else (base, "none")
            print(f"{victim + ' SIGKILLed':<24} {wall:6.1f} s   ({wall - before:+5.1f} s)   "
                  f"kill to end {after:6.1f} s   identical results: {same_numbers(Path(tmp) / reference, out)}")


if __name__ == "__main__":
    main()
