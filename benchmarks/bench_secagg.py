"""Secure aggregation cost: per-user CPU and bytes sent, server CPU, complete vs sparse graph.

    .venv/bin/python benchmarks/bench_secagg.py [--n 100 1000] [--modes complete sparse] [--length 10]

One full round (Bonawitz et al. 2017, rounds 0–2 and 4; SecAgg+ graph of Bell et al. 2020 in sparse
mode), no dropouts, m = 2⁶² − 57, every party in this one process. CPU is ``time.process_time``
around each party's calls; user figures are the mean and max over users of the sum of its four
steps. Bytes sent are the payload sizes of each user's four messages (``wire_bytes``; no framing).
The sparse survivor-connectivity check is memoized per round and so is charged to the first user.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privbandit.protocol.secagg import (
    MaskingGraph,
    RoundConfig,
    SecAggServer,
    SecAggUser,
)

ADVERT_BYTES = 8 + 32 + 32 + 64


def bench(n: int, mode: str, length: int) -> dict:
    m = 2**62 - 57
    ids = list(range(n))
    identities = {u: Ed25519PrivateKey.generate() for u in ids}
    pki = {u: k.public_key() for u, k in identities.items()}
    cfg = RoundConfig(run_id=b"bench", round_id=1, m=m, length=length)
    graph = MaskingGraph(ids, mode, seed=b"bench")
    users = {u: SecAggUser(u, identities[u], pki, cfg, graph) for u in ids}
    server = SecAggServer(cfg, graph)
    rng = np.random.default_rng(0)
    inputs = {u: rng.integers(0, m, size=length, dtype=np.int64) for u in ids}
    cpu = dict.fromkeys(ids, 0.0)
    sent = dict.fromkeys(ids, ADVERT_BYTES)
    server_cpu = 0.0

    def timed_user(u, fn, *args):
        t0 = time.process_time()
        out = fn(*args)
        cpu[u] += time.process_time() - t0
        return out

    def timed_server(fn, *args):
        nonlocal server_cpu
        t0 = time.process_time()
        out = fn(*args)
        server_cpu += time.process_time() - t0
        return out

    wall = time.perf_counter()
    adverts = [timed_user(u, users[u].advertise) for u in ids]
    dirs = timed_server(server.key_directories, adverts)
    shares = [timed_user(u, users[u].share_keys, dirs[u]) for u in ids]
    delivery = timed_server(server.route_shares, shares)
    masked = [timed_user(u, users[u].masked_input, delivery[u], inputs[u]) for u in ids]
    request = timed_server(server.unmask_request, masked)
    responses = [timed_user(u, users[u].unmask, request) for u in ids]
    result = timed_server(server.finalize, responses)
    wall = time.perf_counter() - wall
    for msg in (*shares, *masked, *responses):
        sent[msg.sender] += msg.wire_bytes()
    expected = sum(int(v[0]) for v in inputs.values()) % m
    assert int(result.value[0]) == expected, "benchmark round released a wrong sum"
    c = np.fromiter(cpu.values(), float)
    b = np.fromiter(sent.values(), float)
    return {"n": n, "mode": mode, "k": graph.degree, "t": graph.threshold, "user_ms": 1e3 * c.mean(), "user_max_ms": 1e3 * c.max(),
                "user_kb": b.mean() / 1e3, "server_s": server_cpu, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--modes", nargs="+", default=["complete", "sparse"], choices=["complete", "sparse"])
    ap.add_argument("--length", type=int, default=10, help="residues per user (e.g. one per arm)")
    args = ap.parse_args()
    print(f"{'n':>6} {'mode':>8} {'k':>5} {'t':>5} {'user CPU ms (mean/max)':>23} {'user KB sent':>13} {'server CPU s':>13} {'wall s':>8}")
    for n in args.n:
        for mode in args.modes:
            r = bench(n, mode, args.length)
            print(f"{r['n']:>6} {r['mode']:>8} {r['k']:>5} {r['t']:>5} {r['user_ms']:>12.1f} / {r['user_max_ms']:<8.1f} "
                  f"{r['user_kb']:>13.2f} {r['server_s']:>13.2f} {r['wall_s']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
