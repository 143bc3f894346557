"""What k concurrent shufflers cost each user on the wire: issue #15's table of bytes per user against k.

    python benchmarks/bench_concurrent_wire.py [--n 4096] [--kmax 4] [--seed 15] [--broker embedded|private]

One distributed session (``privbandit run --transport mqtt``'s launcher) of Algorithm 3 for k = 1 … kmax
(ε = 1, δ = 1/(10n), ``bin-a``), every party its own process: the analyzer, the observer, two user
fleets and the shufflers ``shuffler-1`` … ``shuffler-kmax``, each with its own broker account and ACL
(``embedded``: the amqtt broker the launcher starts; ``private``: Mosquitto with the generated
password and ACL files). Level i's batches go to ``shuffler-i``.

Prints per k and per shuffler, per user (all n users of the run; a truncated level serves fewer,
see "reports"): the reports each user makes (records), the MQTT messages the fleets sent (a message
carries one block's records, so a fraction), their payload and wire bytes (MQTT 3.1.1 framing +
PUBACK at QoS 1), next to the protocol's theoretical bits (the one-bit messages of M^sum at that
level) and the count encoding's bits. The MQTT run must equal the in-process run; it is checked.
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

from privbandit.runner import config as experiment_files
from privbandit.runner import run_file
from privbandit.services.acl import is_instance
from privbandit.services.launcher import launch, plan_parties
from privbandit.services.mosquitto_process import start_with_broker_config
from _session import run_parties

HEAD = """
family = "concurrent-shuffle"
name = "bench-concurrent-wire"
horizon = {n}
seed = {seed}
epsilon = 1.0
runs = 1
"""
TABLE = """
[algorithms."csta@k{k}"]
algorithm = "csta_k"
k = {k}
"""


def session(family, config, path: Path, out: Path, broker: str) -> float:
    """Wall seconds of one distributed session (the broker's start to the results written)."""
    t0 = time.perf_counter()
    if broker == "embedded":
        assert launch(family, config, path, [], out, shards=2, checkpoint=False, timeout_s=1800) == 0
        return time.perf_counter() - t0
    run_id = "b" + secrets.token_hex(4)
    instances = [name for name in family.intermediaries(config) if is_instance(name)]
    mosquitto, files = start_with_broker_config(out.parent / f"broker-{run_id}", run_id, instances=instances)
    with mosquitto:
        passwords = {str(r): p for r, p in files.passwords.items()}
        parties = plan_parties(family, config, path, [], out, mosquitto.url, run_id, 2, passwords,
                               observer_log=out.parent / "observer.log", checkpoint=False)
        run_parties(parties, out.parent / "observer.log")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--kmax", type=int, default=4)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--broker", default="embedded", choices=["embedded", "private"])
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(HEAD.format(n=args.n, seed=args.seed)
                        + "".join(TABLE.format(k=k) for k in range(1, args.kmax + 1)))
        family, config = experiment_files.load(path)
        run_file(path, out=Path(tmp) / "inproc")
        wall = session(family, config, path, Path(tmp) / "mqtt", args.broker)
        mq = json.loads((Path(tmp) / "mqtt" / "summary.json").read_text())
        same = ((Path(tmp) / "mqtt" / "rounds.csv").read_bytes() == (Path(tmp) / "inproc" / "rounds.csv").read_bytes())
    print(f"n = {args.n}, ε = 1, δ = 1/(10n), bin-a, 1 run, 2 fleets, {args.broker} broker with per-shuffler "
          f"accounts; session {wall:.0f} s; MQTT rounds.csv equals in-process: {same}; refused or resent "
          f"(would add bytes): {mq['rejected'] or 'none'}")
    print("per user (all n users): reports, MQTT messages, payload bytes, wire bytes; theory bits (one-bit "
          "messages of M^sum), count-encoded bits")
    print("| k | shuffler | batch s_i | reports | MQTT msgs | payload B | wire B | theory bits | count bits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in range(1, args.kmax + 1):
        label = f"csta@k{k}"
        alg, comm = mq["algorithms"][label], mq["communication"][label]
        per_user, counter = comm["per_user"], alg["counter"]
        levels = alg["communication_per_user"]["levels"]
        reports_total = 0.0
        for i, lvl in enumerate(levels, start=1):
            sent = per_user["by_intermediary"].get(lvl["shuffler"], {"messages": 0.0, "payload_bytes": 0.0,
                                                                      "wire_bytes": 0.0})
            reports = counter["nodes_per_level"][i - 1] * lvl["batch"] / args.n
            reports_total += reports
            print(f"| {k} | {lvl['shuffler']} | {lvl['batch']} | {reports:.3f} | {sent['messages']:.4f} | "
                  f"{sent['payload_bytes']:.2f} | {sent['wire_bytes']:.2f} | {lvl['bits_theory']} | "
                  f"{lvl['bits_count_encoded']} |")
        t = per_user["total"]
        c = alg["communication_per_user"]
        print(f"| {k} | **total** | | {reports_total:.3f} | {t['messages']:.4f} | {t['payload_bytes']:.2f} | "
              f"{t['wire_bytes']:.2f} | {c['bits_theory_total']} | {c['bits_count_encoded_total']} |")


if __name__ == "__main__":
    main()
