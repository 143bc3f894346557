"""Distributed throughput of LinUCB-SDP-Vec (Chowdhury & Zhou 2022): every party its own process.

    python benchmarks/bench_linear_distributed.py [--broker all|private|system|embedded] [--horizon 20000]

The paper's setting (K = 100, d = 5, B = 20, ε = 1, δ = 0.1, preset paper-code), one run, two fleets.
Prints, per broker:
- users/s of the MQTT run (the observer's time for the task: announced to scored, about first plan to last truth) and of the
  whole session including process start-up, next to the in-process engine on the same run;
- the time per batch (one plan → B reports → release → update round trip);
- wire bytes per user (users → shuffler, MQTT 3.1.1 framing + PUBACK) and payload bytes, next to the
  theoretical P_Vec bits per user, (d + d²)(g + b), and the count encoding's size.

Brokers: ``private`` starts Mosquitto with the generated configuration (per-role accounts and ACLs,
``set_tcp_nodelay``); ``system`` is the Mosquitto at 127.0.0.1:1883 as installed (anonymous; no
TCP_NODELAY on its side); ``embedded`` is the amqtt broker ``privbandit run`` starts by default.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import tempfile
import time
from pathlib import Path

from privbandit.families.shuffle_linear_bandits.params import vec_bits
from privbandit.runner import config as experiment_files
from privbandit.runner.tasks import Task, execute
from privbandit.services.launcher import launch, plan_parties
from privbandit.services.mosquitto_process import start_with_broker_config
from _session import run_parties

EXPERIMENT = """
family = "shuffle-linear-bandits"
name = "bench-linear-distributed"
horizon = {horizon}
seed = 3
epsilon = 1
delta = 0.1
runs = 1
preset = "paper-code"
[environment]
arms = 100
dim = 5
[algorithms.LinUCB-SDP-Vec]
batch = 20
"""
LABEL = "LinUCB-SDP-Vec"


def run_session(family, config, path: Path, out: Path, broker: str) -> float:
    """Wall seconds of one distributed session (process start to results written)."""
    t0 = time.perf_counter()
    if broker == "embedded":
        assert launch(family, config, path, [], out, broker_url=None, shards=2) == 0
        return time.perf_counter() - t0
    if broker == "system":
        assert launch(family, config, path, [], out, broker_url="mqtt://127.0.0.1:1883", shards=2,
                      insecure_broker=True) == 0  # anonymous, no ACL: the probe would refuse it
        return time.perf_counter() - t0
    run_id = "b" + secrets.token_hex(4)
    mosquitto, files = start_with_broker_config(out.parent / f"broker-{run_id}", run_id)
    with mosquitto:
        t0 = time.perf_counter()
        passwords = {r.value: p for r, p in files.passwords.items()}
        parties = plan_parties(family, config, path, [], out, mosquitto.url, run_id, 2, passwords,
                               observer_log=out.parent / "obs.log")
        run_parties(parties, out.parent / "obs.log")
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default="all", choices=["all", "private", "system", "embedded"])
    ap.add_argument("--horizon", type=int, default=20_000)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load {load:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(EXPERIMENT.format(horizon=args.horizon))
        family, config = experiment_files.load(path)
        _, _, _, secs = execute(Task(family.name, config, LABEL, (0,)))
        vec = family.setup(config, LABEL).vec
        comm = vec_bits(vec, config.environment.dim)
        T, B = config.horizon, family.algorithm(config, LABEL).batch
        print(f"{LABEL}: K = 100, d = 5, B = {B}, ε = 1, T = {T:,} ({T // B:,} batches), 1 run, 2 fleets")
        print(f"  in-process engine          {T / secs:>12,.0f} users/s")
        brokers = ["private", "system", "embedded"] if args.broker == "all" else [args.broker]
        for broker in brokers:
            session = Path(tmp) / broker / "out"
            wall = run_session(family, config, path, session, broker)
            summary = json.loads((session / "summary.json").read_text())
            ups = summary["algorithms"][LABEL]["users_per_s"]
            mq = summary["communication"][LABEL]
            print(f"  MQTT, {broker:<8} broker      {ups:>12,.0f} users/s   ({1e3 * B / ups:.1f} ms per batch; "
                  f"whole session {T / wall:,.0f} users/s, {wall:.1f} s)")
            print(f"    wire bytes per user      {mq['bytes_per_user_wire']:>12.2f}   (payload "
                  f"{mq['bytes_per_user_payload']:.2f}; analyzer received report bytes: "
                  f"{mq['roles']['analyzer'].get('payload.received.report', 0)})")
        print(f"  P_Vec bits per user        {comm['bits_per_user_theory']:>12,}   theoretical (d + d²)(g + b), "
              f"g = {vec.g}, b = {vec.b}; upper triangle only "
              f"{comm['bits_per_user_upper']:,}; count-encoded {comm['bytes_per_user_wire']} B")


if __name__ == "__main__":
    main()
