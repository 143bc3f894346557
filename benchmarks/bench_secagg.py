"""Secure aggregation cost: per-user CPU and bytes sent, aggregator CPU, complete vs sparse graph.

    .venv/bin/python benchmarks/bench_secagg.py                          # the table, n ∈ {100, 1000, 10000}
    .venv/bin/python benchmarks/bench_secagg.py --plot docs/figures/secagg_cost.png --json out.json
    .venv/bin/python benchmarks/bench_secagg.py --largest-in 60           # bisection, both modes
    .venv/bin/python benchmarks/bench_secagg.py --corrupt-fraction 0.05 --dropout-rate 0.1   # the threat model
    .venv/bin/python benchmarks/bench_secagg.py --fleets 2 --n 100 1000 10000   # between real processes
    .venv/bin/python benchmarks/bench_secagg.py --wire --n 10000          # the services' code, one process
    .venv/bin/python benchmarks/bench_secagg.py --wire --fleets 2 --hosting ring --n 10000   # … as two fleets

The graph's degree k and threshold t come from a threat model (``parameters.graph_for``; defaults
γ = 0.05 corrupt, δ = 0.1 dropouts, 2⁻⁴⁰ / 2⁻²⁰): what a run with those settings would use. The
in-process rounds measured have no dropouts; δ only sets (k, t). The ``--fleets`` and ``--wire``
rounds are a run's: ⌊δ·n⌋ users drop out after sharing (:func:`fleet_round`, :func:`wire_round`).

One round of Bonawitz et al. 2017 (rounds 0–2 and 4; SecAgg+ graph of Bell et al. 2020 in sparse
mode), no dropouts, m = 2⁶² − 57, ``--length`` residues per user, every party in this one process.

Full rounds: every user and the aggregator run every step. CPU is ``time.process_time`` around
each party's calls; a user's "advertise" step includes constructing its ``SecAggUser`` (that draws
its ephemeral X25519 key pairs). Bytes sent are the payload sizes of each user's four messages
(``wire_bytes``; no framing). The sparse survivor-connectivity check is memoized per round and so
is charged to the first user that asks (it shows up in the max, not the mean).

Sampled rounds (``--full-max`` exceeded, or ``--sampled``): a genuine n-user round in which all n
users are constructed and advertise, the aggregator builds all key directories, and only a random
sample of users runs share_keys → masked_input → unmask through the unchanged code. What a sampled
user consumes from the others is produced for real, with one shortcut: each non-sampled user seals
(``SecAggUser._seal``: its own X25519 + HKDF key, ChaCha20-Poly1305) a share pair for each sampled
recipient whose limbs are drawn uniformly from GF(p). That is exactly the distribution of genuine
shares: at most t − 1 evaluations of a polynomial with uniform coefficients of degree t − 1 are
i.i.d. uniform (Shamir 1979). The non-sampled users' full dealing, the aggregator's routing of the
n(n−1) ciphertexts and its unmasking are not run; the aggregator cell reports only what was run
(key directories), marked as a lower bound.

``--largest-in S``: bisection on n for full in-process rounds whose wall time (from building the
graph and the users to the released sum; long-term identity keys excluded) stays under S seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import secrets
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privbandit.protocol.primitives.secagg import (
    MaskingGraph,
    RoundConfig,
    SecAggServer,
    SecAggUser,
)
from privbandit.protocol.primitives.secagg.parameters import ThreatModel, graph_for
from privbandit.protocol.primitives.secagg.protocol import LIMBS, SharesDelivery, UnmaskRequest
from privbandit.protocol.primitives.secagg.shamir import random_field

M = 2**62 - 57
ADVERT_BYTES = 8 + 32 + 32 + 64
STEPS = ("advertise", "share_keys", "masked_input", "unmask")
SERVER_STEPS = ("key_directories", "route_shares", "unmask_request", "finalize")


class OverTime(Exception):
    pass


THREAT = ThreatModel(corrupt_fraction=0.05, dropout_rate=0.1)  # set by --corrupt-fraction / --dropout-rate


def _graph(ids: list[int], mode: str) -> MaskingGraph:
    p = graph_for(mode, len(ids), THREAT)
    return MaskingGraph(ids, mode, seed=b"bench", degree=p.k, threshold=p.t)


class Clock:
    """Per-party, per-step CPU; optional wall-clock deadline checked after every call."""

    def __init__(self, deadline: float | None = None):
        self.user: dict[str, dict[int, float]] = {s: {} for s in STEPS}
        self.server = dict.fromkeys(SERVER_STEPS, 0.0)
        self.deadline = deadline

    def _check(self):
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise OverTime

    def u(self, step, u, fn, *args):
        t0 = time.process_time()
        out = fn(*args)
        self.user[step][u] = self.user[step].get(u, 0.0) + time.process_time() - t0
        self._check()
        return out

    def s(self, step, fn, *args):
        t0 = time.process_time()
        out = fn(*args)
        self.server[step] += time.process_time() - t0
        self._check()
        return out


def _identities(n: int) -> dict[int, Ed25519PrivateKey]:
    return {u: Ed25519PrivateKey.generate() for u in range(n)}  # long-term (PKI), not timed


def _without_gc(fn):
    """Cyclic GC off during a round: with all n parties in one process its pauses grow with every
    party's heap, a cost no real (separate) party pays. Reference counting still frees memory."""

    def run(*args, **kwargs):
        gc.collect()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
            gc.collect()

    return run


@_without_gc
def full_round(n: int, mode: str, length: int, deadline_s: float | None = None) -> dict:
    ids = list(range(n))
    identities = _identities(n)
    pki = {u: k.public_key() for u, k in identities.items()}
    rng = np.random.default_rng(n)
    inputs = {u: rng.integers(0, M, size=length, dtype=np.int64) for u in ids}
    wall = time.perf_counter()
    clock = Clock(None if deadline_s is None else wall + deadline_s)
    cfg = RoundConfig(run_id=b"bench", round_id=1, m=M, length=length)
    graph = _graph(ids, mode)  # public set-up: in the wall time, no party's CPU
    server = SecAggServer(cfg, graph)
    users = {u: clock.u("advertise", u, SecAggUser, u, identities[u], pki, cfg, graph) for u in ids}
    adverts = [clock.u("advertise", u, users[u].advertise) for u in ids]
    dirs = clock.s("key_directories", server.key_directories, adverts)
    shares = [clock.u("share_keys", u, users[u].share_keys, dirs[u]) for u in ids]
    delivery = clock.s("route_shares", server.route_shares, shares)
    masked = [clock.u("masked_input", u, users[u].masked_input, delivery[u], inputs[u]) for u in ids]
    request = clock.s("unmask_request", server.unmask_request, masked)
    responses = [clock.u("unmask", u, users[u].unmask, request) for u in ids]
    result = clock.s("finalize", server.finalize, responses)
    wall = time.perf_counter() - wall
    expected = [sum(int(v[i]) for v in inputs.values()) % M for i in range(length)]
    assert result.value.tolist() == expected, "benchmark round released a wrong sum"
    sent = dict.fromkeys(ids, ADVERT_BYTES)
    for msg in (*shares, *masked, *responses):
        sent[msg.sender] += msg.wire_bytes()
    return _summary(n, mode, graph, clock, sent, wall, sampled=None)


@_without_gc
def sampled_round(n: int, mode: str, length: int, sample: int, seed: int = 0) -> dict:
    ids = list(range(n))
    identities = _identities(n)
    pki = {u: k.public_key() for u, k in identities.items()}
    rng = np.random.default_rng(seed)
    chosen = sorted(int(u) for u in rng.choice(n, size=min(sample, n), replace=False))
    wall = time.perf_counter()
    clock = Clock()
    cfg = RoundConfig(run_id=b"bench", round_id=1, m=M, length=length)
    graph = _graph(ids, mode)
    server = SecAggServer(cfg, graph)
    users = {u: clock.u("advertise", u, SecAggUser, u, identities[u], pki, cfg, graph) for u in ids}
    adverts = {u: clock.u("advertise", u, users[u].advertise) for u in ids}
    dirs = clock.s("key_directories", server.key_directories, adverts.values())
    shares = {u: clock.u("share_keys", u, users[u].share_keys, dirs[u]) for u in chosen}
    # What route_shares would hand each sampled user: a ciphertext from every neighbour.
    deliveries = {}
    for s in chosen:
        box = {}
        for v in graph.neighbours(s):
            if v in shares:
                box[v] = shares[v].ciphertexts[s]
            else:
                limbs = random_field((2, LIMBS))  # ≤ t − 1 genuine shares are i.i.d. uniform
                box[v] = users[v]._seal(adverts[s], limbs[0], limbs[1])
        deliveries[s] = SharesDelivery(box)
    masked = {u: clock.u("masked_input", u, users[u].masked_input, deliveries[u], rng.integers(0, M, size=length, dtype=np.int64)) for u in chosen}
    request = UnmaskRequest(frozenset(ids))  # no dropouts: everybody survives
    responses = {u: clock.u("unmask", u, users[u].unmask, request) for u in chosen}
    wall = time.perf_counter() - wall
    for s in chosen:  # a sampled user revealed one b-share per neighbour and no s^SK share
        assert len(responses[s].self_mask_shares) == graph.degree + 1 and not responses[s].mask_key_shares
    sent = {u: ADVERT_BYTES + shares[u].wire_bytes() + masked[u].wire_bytes() + responses[u].wire_bytes() for u in chosen}
    return _summary(n, mode, graph, clock, sent, wall, sampled=chosen)


def _summary(n, mode, graph, clock, sent, wall, sampled) -> dict:
    users = sorted(sent)
    per_step = {s: np.array([clock.user[s].get(u, 0.0) for u in users]) for s in STEPS}
    total = sum(per_step.values())
    b = np.array([sent[u] for u in users], dtype=float)
    return {
        "n": n, "mode": mode, "k": graph.degree, "t": graph.threshold,
        "sampled": None if sampled is None else len(sampled),
        "user_ms": 1e3 * total.mean(), "user_max_ms": 1e3 * total.max(),
        "step_ms": {s: [1e3 * v.mean(), 1e3 * v.max()] for s, v in per_step.items()},
        "user_bytes": b.mean(), "user_bytes_max": b.max(),
        "server_s": sum(clock.server.values()), "server_step_s": clock.server,
        "server_partial": sampled is not None, "wall_s": wall,
    }


def print_table(rows: list[dict]) -> None:
    print(f"{'n':>6} {'mode':>8} {'k':>5} {'t':>5} {'measured':>9} | {'user CPU ms mean / max':>22} | "
          f"{'per step, mean ms: adv / share / mask / unmask':>46} | {'KB sent':>7} | {'agg CPU s':>9} | {'wall s':>6}")
    for r in rows:
        who = "all" if r["sampled"] is None else f"{r['sampled']} users"
        steps = " / ".join(f"{r['step_ms'][s][0]:.1f}" for s in STEPS)
        agg = f"≥{r['server_s']:.2f}" if r["server_partial"] else f"{r['server_s']:.2f}"
        print(f"{r['n']:>6} {r['mode']:>8} {r['k']:>5} {r['t']:>5} {who:>9} | {r['user_ms']:>10.1f} / {r['user_max_ms']:<9.1f} | "
              f"{steps:>46} | {r['user_bytes'] / 1e3:>7.2f} | {agg:>9} | {r['wall_s']:>6.1f}", flush=True)


def largest_in(mode: str, seconds: float, length: int, start: int) -> tuple[int, int, list[tuple[int, float | None]]]:
    """Largest n (to ~3 %) whose full round finishes within ``seconds`` of wall time.

    Doubles n from ``start`` until a round is too slow, then bisects. A trial is stopped as soon as
    its wall time passes ``seconds`` (it could only finish later), so failures cost ``seconds``.
    """
    trials: list[tuple[int, float | None]] = []

    def ok(n: int) -> bool:
        try:
            wall = full_round(n, mode, length, deadline_s=seconds)["wall_s"]
        except OverTime:
            wall = None
        trials.append((n, wall))
        print(f"  {mode:>8} n={n:>6}: " + (f"{wall:.1f} s" if wall is not None else f"> {seconds:g} s (stopped)"), flush=True)
        return wall is not None and wall <= seconds

    lo, hi = 0, start
    while ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > max(10, lo // 33):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo, hi, trials


# --- --fleets: one secure round between real processes over Mosquitto ------------------------------

FLEET_EXPERIMENT = """
name = "bench-secagg-fleets"
horizon = {horizon}
seed = {seed}
epsilon = 0.5
runs = 1
[environment]
kind = "means"
means = [0.5, 0.5]
[algorithms.Dist-DP-SE]
intermediary = "secagg"
secagg_graph = "sparse"
batch_growth = {eta!r}
dropout_rate = {dropout}
corrupt_fraction = {corrupt}
"""
COST_LINE = re.compile(r"secagg cost: (?P<party>\S+) round (?P<round>\d+) (?P<outcome>\w+): users (?P<users>\d+)"
                       r"(?:, survivors (?P<survivors>\d+))?, k (?P<k>\d+), t (?P<t>\d+), cpu_s (?P<cpu>[\d.]+) "
                       r"\((?P<steps>[^)]*)\), sent_bytes (?P<sent>\d+) \((?P<sent_steps>[^)]*)\), wall_s (?P<wall>[\d.]+)")


def batches_ending_at(n: int) -> tuple[float, list[int]]:
    """A batch growth η ≤ 64 (the experiment's limit) whose batches ⌈η^b⌉, b = 1 … B, end at
    exactly n users: Dist-DP-SE's last batch is then one secure round of n users per arm."""
    for last in range(1, 64):
        eta = n ** (1 / last)
        if eta > 64:
            continue
        while math.ceil(eta ** last) > n:  # float rounding: step to the largest η with ⌈η^B⌉ = n
            eta = math.nextafter(eta, 0)
        while math.ceil(eta ** last) < n:
            eta = math.nextafter(eta, math.inf)
        sizes = [math.ceil(eta ** b) for b in range(1, last + 1)]
        if eta > 1 and sizes[-1] == n:
            return eta, sizes
    raise ValueError(f"no batch growth ends at n = {n}")


class CpuSampler(threading.Thread):
    """Each process's user + system CPU seconds, sampled every ``period`` s until stopped (the last
    sample before a process exits is kept: a process's final ``period`` can be missed)."""

    def __init__(self, pids: dict[str, int], period: float = 0.2):
        import psutil

        super().__init__(daemon=True)
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.cpu = dict.fromkeys(pids, 0.0)
        self.period, self.halt = period, threading.Event()

    def run(self):
        while not self.halt.is_set():
            for name, proc in self.procs.items():
                try:
                    t = proc.cpu_times()
                    self.cpu[name] = t.user + t.system
                except Exception:  # exited (psutil.NoSuchProcess) or a zombie: keep the last sample
                    pass
            self.halt.wait(self.period)

    def stop(self) -> dict[str, float]:
        self.halt.set()
        self.join()
        return dict(self.cpu)


def fleet_round(n: int, fleets: int, step_deadline_s: float, seed: int, keep: Path | None = None,
                stall_timeout_s: float = 1200.0) -> dict:
    """One sparse secure round of ``n`` users, as ``privbandit run FILE --transport mqtt`` runs it:
    the analyzer, the aggregator, ``fleets`` user fleets and the observer, each its own process,
    over a private Mosquitto with the run's ACLs. The experiment is Dist-DP-SE on two equal arms
    whose last batch is n users per arm and whose horizon ends after arm 0's round of it, so the
    session's last secure round has n users (the batches before it are smaller rounds).

    Per-party CPU and bytes of that round come from the ``secagg cost:`` lines the aggregator and
    the fleets log (:class:`privbandit.services.secagg_rounds.RoundCost`); whole-session CPU per
    process (start-up and the smaller rounds included) from sampling /proc."""
    from privbandit.runner import config as experiment_files
    from privbandit.services.launcher import plan_parties
    from privbandit.services.mosquitto_process import start_with_broker_config

    eta, sizes = batches_ending_at(n)
    horizon = 2 * sum(sizes[:-1]) + n
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(keep) if keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        path = base / "bench-secagg-fleets.toml"
        path.write_text(FLEET_EXPERIMENT.format(horizon=horizon, seed=seed, eta=eta, dropout=THREAT.dropout_rate,
                                                corrupt=THREAT.corrupt_fraction))
        family, config = experiment_files.load(path)
        out = base / f"out-{n}"
        run_id = "s" + secrets.token_hex(4)
        load_before = os.getloadavg()
        mosquitto, files = start_with_broker_config(base / f"broker-{run_id}", run_id)
        with mosquitto:
            passwords = {str(r): p for r, p in files.passwords.items()}
            parties = plan_parties(family, config, path, [], out, mosquitto.url, run_id, fleets, passwords,
                                   observer_log=out / "observer.log", checkpoint=False)
            for p in parties:  # a fleet may need longer than the default 30 s for one step of a large round
                if p.name == "aggregator":
                    p.argv += ["--secagg-step-deadline", str(step_deadline_s)]
                if p.name == "observer":  # … and a round of 10⁴ users on a loaded machine over 240 s
                    p.argv += ["--stall-timeout", str(stall_timeout_s)]
            wall = time.perf_counter()
            sampler = None
            try:
                for p in parties:
                    p.start()
                sampler = CpuSampler({p.name: p.proc.pid for p in parties} | {"mosquitto": mosquitto.proc.pid})
                sampler.start()
                code = parties[0].proc.wait(3600)
                if code != 0:
                    raise RuntimeError(f"the session failed ({code}): see {out}/observer.log and {out}/logs")
            finally:
                session_cpu = sampler.stop() if sampler else {}
                for p in parties:
                    p.stop()
            wall = time.perf_counter() - wall
        load_after = os.getloadavg()
        lines = {}
        for log in sorted((out / "logs").glob("*.log")):
            for m in COST_LINE.finditer(log.read_text()):
                lines.setdefault(int(m["round"]), []).append(m.groupdict())
        summary = json.loads((out / "summary.json").read_text())
    target = [r for r, ls in lines.items() if any(x["party"] == "aggregator" and int(x["users"]) == n for x in ls)]
    if not target:
        raise RuntimeError(f"no secure round of {n} users in the logs (rounds: {sorted(lines)})")
    rows = lines[max(target)]
    agg = next(x for x in rows if x["party"] == "aggregator")
    if agg["outcome"] != "released":
        raise RuntimeError(f"the round of {n} users was not released: {agg}")
    fleet_rows = sorted((x for x in rows if x["party"].startswith("users-")), key=lambda x: x["party"])

    def steps(text: str) -> dict[str, float]:
        return {k: float(v) for k, v in (item.rsplit(" ", 1) for item in text.split(", ") if item)}

    fleet_cpu = {x["party"]: float(x["cpu"]) for x in fleet_rows}
    fleet_sent = {x["party"]: int(x["sent"]) for x in fleet_rows}
    return {
        "n": n, "fleets": fleets, "k": int(agg["k"]), "t": int(agg["t"]), "survivors": int(agg["survivors"]),
        "hosted": {x["party"]: int(x["users"]) for x in fleet_rows},
        "fleet_cpu_s": fleet_cpu, "fleet_steps_s": {x["party"]: steps(x["steps"]) for x in fleet_rows},
        "aggregator_cpu_s": float(agg["cpu"]), "aggregator_steps_s": steps(agg["steps"]),
        "user_cpu_ms": 1e3 * sum(fleet_cpu.values()) / n, "user_bytes": sum(fleet_sent.values()) / n,
        "fleet_sent_bytes": fleet_sent, "aggregator_sent_bytes": int(agg["sent"]),
        "round_wall_s": float(agg["wall"]), "fleet_wall_s": {x["party"]: float(x["wall"]) for x in fleet_rows},
        # On an idle machine the round's steps run one after another along fleet → aggregator →
        # fleet …, and only the fleet hosting the cohort works, so its CPU plus the aggregator's is
        # the round's wall time without the broker's transfers: an estimate, not a measurement.
        "idle_estimate_s": max(fleet_cpu.values()) + float(agg["cpu"]),
        "session_wall_s": wall, "session_cpu_s": session_cpu, "load_before": load_before, "load_after": load_after,
        "eta": eta, "batches": sizes, "horizon": horizon,
        "reports_dropped": summary["algorithms"]["Dist-DP-SE"].get("reports_dropped"),
    }


def wire_round(n: int, seed: int = 1, shards: int = 1, hosting: str = "id") -> dict:
    """The round of :func:`fleet_round` (n users, ⌊dropout_rate·n⌋ of them dropping after sharing,
    (k, t) from the threat model) through the services' step machines (``shards`` × ``FleetSecAgg``
    hosting the cohort by the ``hosting`` rule, as in the distributed run, and ``AggregatorSecAgg``)
    in this one process, every message encoded and decoded by the codec, no broker: each party's CPU
    (``time.process_time``) without the broker's and the other processes' noise. The fleets run one
    after another here; with one core each, the round's wall time would be about the busiest
    fleet's CPU plus the aggregator's (``idle_estimate_s``). Long-term identities are derived before
    the clock starts (the PKI). Also reported, per fleet: the signatures it verified and the
    pairwise keys it derived, and the fraction of the graph's edges within one fleet."""
    import asyncio
    import inspect
    from collections import Counter

    from privbandit.protocol.primitives.report_auth import FleetKeys, ReportAuthenticator, fleet_key
    from privbandit.protocol.primitives.secagg.batch import UserIdentities, round_setup
    from privbandit.protocol.spine.events import Round
    from privbandit.services import codec
    from privbandit.services import secagg_rounds as sr

    g = graph_for("sparse", n, THREAT)
    rnd = Round(7, "aggregator", "sum", n, m=M, secagg="sparse", secagg_degree=g.k, secagg_threshold=g.t)
    rng = np.random.default_rng(seed)
    values = {u: int(v) for u, v in enumerate(rng.integers(0, M, n))}
    dropped = sorted(rng.choice(n, int(THREAT.dropout_rate * n), replace=False).tolist())
    for u in dropped:
        values.pop(u)
    identities = UserIdentities(bytes(range(32)))
    for u in range(n):
        identities.public(u)
    queue, out, cpu = [], [], Counter()
    # the code before issue #33 has no hosting rule (user u on fleet u mod N): measure it as it is
    rule = {"hosting": hosting} if "hosting" in inspect.signature(sr.FleetSecAgg).parameters else {}
    if hosting != "id" and not rule:
        raise SystemExit("this checkout's FleetSecAgg has only the id hosting rule")

    async def up(msg):
        queue.append(("aggregator", codec.decode(codec.encode(msg))))

    async def down(msg):
        queue.append(("fleets", codec.decode(codec.encode(msg))))

    async def release(round_id, value, count):
        out.append((value, count))

    async def abort(round_id, why):
        raise RuntimeError(why)

    agg = sr.AggregatorSecAgg("bench", 0, 1e9, down, release, abort, Counter(), FleetKeys(5), **rule)
    fleets = [sr.FleetSecAgg("bench", 0, i, shards, identities, up, ReportAuthenticator(fleet_key(5, i)), **rule)
              for i in range(shards)]
    books = {}

    async def run():
        cohort = np.arange(rnd.expected)
        agg.open(rnd, cohort)
        for i, fleet in enumerate(fleets):  # every fleet is handed every input; each keeps its own
            mine = (lambda u: True) if rule else (lambda u: u % shards == i)  # noqa: E731  (the old code keeps all)
            t0 = time.process_time()
            await fleet.start(rnd, cohort, {u: v for u, v in values.items() if mine(u)}, [u for u in dropped if mine(u)])
            cpu[f"users-{i}"] += time.process_time() - t0
            books[i] = fleet.rounds[rnd.id].adverts
        while queue:
            where, msg = queue.pop(0)
            parties = [("aggregator", agg)] if where == "aggregator" else [(f"users-{i}", f) for i, f in enumerate(fleets)]
            for name, party in parties:
                t0 = time.process_time()
                await party.on_message(msg)
                cpu[name] += time.process_time() - t0

    wall = time.perf_counter()
    _without_gc(asyncio.run)(run())
    wall = time.perf_counter() - wall
    assert out == [(sum(values.values()) % M, len(values))], "the round released a wrong sum"
    _, graph = round_setup("bench", 0, rnd.id, np.arange(n), M, "sparse", g.k, g.t)
    hosts = getattr(sr, "round_hosts", None)
    where = (hosts(graph, np.arange(n), shards, hosting) if hosts else sr.secure_host(np.arange(n), shards)).tolist()
    intra = sum(where[u] == where[v] for u in range(n) for v in graph.neighbours(u)) / (n * g.k)
    fleet_cpu = {f"users-{i}": cpu[f"users-{i}"] for i in range(shards)}
    return {"n": n, "k": g.k, "t": g.t, "survivors": len(values), "shards": shards, "hosting": hosting,
            "fleet_cpu_s": fleet_cpu, "hosted": {f"users-{i}": where.count(i) for i in range(shards)},
            "verified": {f"users-{i}": b.verified for i, b in books.items()},
            "agreed": {f"users-{i}": getattr(b, "agreed", None) for i, b in books.items()},
            "intra_fraction": intra, "aggregator_cpu_s": cpu["aggregator"],
            "user_cpu_ms": 1e3 * sum(fleet_cpu.values()) / n,
            "idle_estimate_s": max(fleet_cpu.values()) + cpu["aggregator"], "wall_s": wall,
            "load": os.getloadavg()}


def print_fleet_rows(rows: list[dict]) -> None:
    print(f"{'n':>6} {'k':>3} {'t':>3} {'kept':>6} | {'fleet CPU s (users hosted)':>34} | {'agg CPU s':>9} | "
          f"{'user CPU ms':>11} | {'KB sent/user':>12} | {'round wall s':>12} | {'idle est. s':>11} | load before/after")
    for r in rows:
        fleets = ", ".join(f"{r['fleet_cpu_s'][f]:.2f} ({r['hosted'][f]})" for f in sorted(r["fleet_cpu_s"]))
        print(f"{r['n']:>6} {r['k']:>3} {r['t']:>3} {r['survivors']:>6} | {fleets:>34} | {r['aggregator_cpu_s']:>9.2f} | "
              f"{r['user_cpu_ms']:>11.2f} | {r['user_bytes'] / 1e3:>12.2f} | {r['round_wall_s']:>12.1f} | "
              f"{r['idle_estimate_s']:>11.1f} | {r['load_before'][0]:.2f} / {r['load_after'][0]:.2f}", flush=True)
        print("       per step, fleet CPU s: " + "; ".join(
            f"{f}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["fleet_steps_s"][f].items()) for f in sorted(r["fleet_steps_s"]))
            + " | aggregator: " + ", ".join(f"{k} {v:.2f}" for k, v in r["aggregator_steps_s"].items()))
        print("       whole session, CPU s per process: " + ", ".join(f"{k} {v:.1f}" for k, v in r["session_cpu_s"].items())
              + f" | session wall {r['session_wall_s']:.1f} s", flush=True)


def plot(rows: list[dict], path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "user_ms", "per-user CPU (ms, mean)"), (axes[1], "user_bytes", "per-user bytes sent")):
        for mode, colour in (("complete", "C0"), ("sparse", "C1")):
            rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["n"])
            if not rs:
                continue
            n = np.array([r["n"] for r in rs], float)
            y = np.array([r[key] for r in rs], float)
            ax.plot(n, y, "o-", color=colour, label=mode)
            for r, yy in zip(rs, y):
                if r["sampled"] is not None:
                    # Left of the point and just above it: the last n sits at the axes' right edge,
                    # where a label to its right was cut off by the figure's; below it, the curve
                    # rising into the point (and the CPU panel's O(n) line) ran through the word.
                    ax.annotate("sampled", (r["n"], yy), textcoords="offset points", xytext=(-9, 2), ha="right",
                                va="bottom", fontsize=8)
            grid = np.geomspace(n[0], n[-1], 50)
            if mode == "complete":
                ax.plot(grid, y[0] * grid / n[0], ":", color=colour, label="O(n) reference")
                if key == "user_ms":
                    ax.plot(grid, y[0] * (grid / n[0]) ** 2, "--", color=colour, alpha=0.4, label="O(n²) reference")
            else:
                ax.plot(grid, y[0] * np.log2(grid) / math.log2(n[0]), ":", color=colour, label="O(log n) reference")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.margins(y=0.1)  # headroom for the "sampled" label above the largest n's point
        ax.set_xlabel("users n")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("SecAgg one round, in-process (2-core AMD EPYC); length = %d residues" % rows[0].get("length", 0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")
    return fig


def rows_from_table(path: str) -> list[dict]:
    """The plotted fields of the measured rows as docs/secagg-performance.md's "Per-round cost" table
    prints them (user CPU ms to 0.1 or 4 digits, KB = 10³ B to 0.01, the length from its set-up):
    what the figure is redrawn from when the run's --json is not on disk."""
    text = Path(path).read_text()
    length = int(re.search(r"(\d+) residues per user", text).group(1))
    section = text[text.index("## Per-round cost"):]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 8 or not cells[0].isdigit() or cells[1] not in ("complete", "sparse"):
            continue
        sampled = re.search(r"sampled\*{0,2} \((\d+)\)", cells[4])
        rows.append({"n": int(cells[0]), "mode": cells[1], "length": length,
                     "sampled": int(sampled.group(1)) if sampled else None,
                     "user_ms": float(cells[5].split("/")[0]), "user_bytes": 1e3 * float(cells[7])})
    if not rows:
        raise ValueError(f"{path}: no rows of the 'Per-round cost' table found")
    return rows


def main() -> None:
    global THREAT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--modes", nargs="+", default=["complete", "sparse"], choices=["complete", "sparse"])
    ap.add_argument("--length", type=int, default=10, help="residues per user (e.g. one per arm)")
    ap.add_argument("--full-max", type=int, default=2_000_000, help="complete mode: sample users above this n·(n−1) pair count")
    ap.add_argument("--sample", type=int, default=8, help="users measured in a sampled round")
    ap.add_argument("--sampled", action="store_true", help="sample every round (to compare with full rounds)")
    ap.add_argument("--json", help="write the measured rows here")
    ap.add_argument("--from-json", help="skip measuring; load rows (for --plot)")
    ap.add_argument("--from-table", help="skip measuring; --plot the rows docs/secagg-performance.md's table prints")
    ap.add_argument("--plot", help="write the log-log figure here")
    ap.add_argument("--largest-in", type=float, help="instead: bisect the largest n whose full round takes ≤ this many seconds")
    ap.add_argument("--start", type=int, help="--largest-in: first n tried (default 200 complete, 2000 sparse)")
    ap.add_argument("--corrupt-fraction", type=float, default=THREAT.corrupt_fraction)
    ap.add_argument("--dropout-rate", type=float, default=THREAT.dropout_rate)
    ap.add_argument("--fleets", type=int, help="instead: one sparse round of each --n between real processes over a "
                    "private Mosquitto, the users in this many fleets (as privbandit run --transport mqtt runs it; "
                    "dropout_rate users of the cohort really drop out after sharing)")
    ap.add_argument("--wire", action="store_true", help="instead: the round of --fleets through the services' "
                    "step machines and the codec in this one process, no broker (each side's CPU alone); "
                    "--fleets N: N fleet objects, one after another")
    ap.add_argument("--hosting", default="id", choices=["id", "ring"], help="--wire: the rule that puts users on "
                    "fleets (secagg_rounds.round_hosts): id = u mod N, ring = one arc of the masking graph per fleet")
    ap.add_argument("--step-deadline", type=float, default=600.0, help="--fleets: the aggregator's "
                    "--secagg-step-deadline (s)")
    ap.add_argument("--stall-timeout", type=float, default=1200.0, help="--fleets: the observer's --stall-timeout "
                    "(s): at load 15–20 a round of 10⁴ users took 227 s, near the default 240 s")
    ap.add_argument("--seed", type=int, default=3, help="--fleets: the experiment's seed")
    ap.add_argument("--keep", help="--fleets: keep the sessions' files (logs, summaries) under this directory")
    args = ap.parse_args()
    THREAT = ThreatModel(args.corrupt_fraction, args.dropout_rate)
    print(f"threat model: corrupt_fraction = {THREAT.corrupt_fraction:g}, dropout_rate = {THREAT.dropout_rate:g}, "
          f"security 2^-{THREAT.security_bits:g}, failure 2^-{THREAT.failure_bits:g}", flush=True)
    if args.wire:
        rows = []
        for n in args.n:
            r = wire_round(n, shards=args.fleets or 1, hosting=args.hosting)
            rows.append(r)
            fleets = ", ".join(f"{r['fleet_cpu_s'][f]:.2f} ({r['hosted'][f]} users, {r['verified'][f]} verified, "
                               f"{r['agreed'][f]} keys)" for f in sorted(r["fleet_cpu_s"]))
            print(f"wire, one process, {r['shards']} fleet(s), hosting {r['hosting']}: n = {n}, k = {r['k']}, t = {r['t']}, "
                  f"survivors {r['survivors']}, edges within a fleet {r['intra_fraction']:.4f}: fleet CPU s {fleets}; "
                  f"{r['user_cpu_ms']:.2f} ms/user; aggregator CPU {r['aggregator_cpu_s']:.2f} s; idle estimate "
                  f"{r['idle_estimate_s']:.2f} s; wall {r['wall_s']:.1f} s, load {r['load'][0]:.2f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    if args.fleets:
        rows = []
        for n in args.n:
            rows.append(fleet_round(n, args.fleets, args.step_deadline, args.seed, args.keep and Path(args.keep) / str(n),
                                    args.stall_timeout))
            print_fleet_rows(rows[-1:])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    if args.largest_in:
        for mode in args.modes:
            lo, hi, _ = largest_in(mode, args.largest_in, args.length, start=args.start or (200 if mode == "complete" else 2000))
            print(f"{mode}: largest n completing in {args.largest_in:g} s: {lo} (n = {hi} did not)", flush=True)
        return
    if args.from_table:
        if not args.plot:
            ap.error("--from-table: only with --plot (the table's rows hold the plotted fields only)")
        plot(rows_from_table(args.from_table), args.plot)
        return
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)
    else:
        rows = []
        for n in args.n:
            for mode in args.modes:
                sample = args.sampled or (mode == "complete" and n * (n - 1) > args.full_max)
                r = sampled_round(n, mode, args.length, args.sample) if sample else full_round(n, mode, args.length)
                r["length"] = args.length
                rows.append(r)
                print_table([r])
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
