"""Distributed throughput: Dist-DP-SE, K = 10, T = 10⁶ users, every party its own process.

    python benchmarks/bench_distributed.py [--broker generated|mqtt://127.0.0.1:1883] [--horizon 1000000]
    python benchmarks/bench_distributed.py --checkpoint-cost [--intermediary shuffler]
    python benchmarks/bench_distributed.py --arms 256  # many rounds open at once (one per arm)
    python benchmarks/bench_distributed.py --horizon 100000000 --only-mqtt --py-spy aggregator

The broker, by default (``--broker generated``), is a Mosquitto started for the session from the
project's generated configuration (``privbandit broker-config``'s: an account per role, the run's
ACL, ``set_tcp_nodelay true``), probed like any deployment's; ``--broker embedded`` is the
launcher's own amqtt broker, the default of ``privbandit run --transport mqtt``. ``--broker URL`` times an existing
broker instead, anonymously and without the probe (e.g. the system Mosquitto at 127.0.0.1:1883,
whose default configuration leaves Nagle's algorithm on: docs/performance.md).

Prints, for the same experiment and seed:
- users/s of the in-process engine (one process) and of the MQTT run (observer's wall time for the
  task: from its announcing the task, just before the first plan, to its scoring it, just after
  the last truth; "first plan to last truth" below and in the docs), and their ratio;
- the CPU seconds (user + system) each party's process used, start-up included, and (with the
  in-process engine) CPU per user of every party together against the in-process task's (its own
  ``time.process_time``; issue #33's "distributed CPU per user against in-process");
- wire bytes per user against the budget 2·(⌈log₂ m⌉/8) + 8;
- the raw broker rate measured with the same client library: QoS 1 messages of one report block
  (65,536 users) from one publisher to one subscriber — the ceiling for users/s (on the generated
  broker the publisher is the users' account and keeps to its publish budget, as a fleet does).

``--only-mqtt`` skips the in-process engine and the broker rates (the MQTT session alone, e.g. to
compare two commits' parties back to back); ``--py-spy PARTY`` records that party's stacks at
100 Hz (py-spy's raw format, to ``--py-spy-out``) and prints the functions holding most samples.
To time another commit, run from its worktree with it on PYTHONPATH: the parties start as
``python -m privbandit``, which imports from the working directory first.

With ``--checkpoint-cost``: the same session with and without checkpoints (state directories for
the analyzer and the intermediary), alternating, ``--repeat`` times each; the wall-time difference
per released round, the final checkpoint sizes, and the time of one atomic checkpoint write
(write, fsync, rename, directory fsync) of each party's final state.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiomqtt

from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.runner import config as experiment_files, tasks
from privbandit.services import acl
from privbandit.services.budget import PublishBucket
from privbandit.services.bus import publish_wire_bytes
from privbandit.services.launcher import launch
from privbandit.services.mosquitto_process import start_with_broker_config

EXPERIMENT = """
name = "bench-distributed"
horizon = {horizon}
seed = 5
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
{arms}
[algorithms.{label}]
{extra}"""
SHUFFLED = 'algorithm = "dist-rdp-se"\nintermediary = "shuffler"\n'


class PartyCPU:
    """CPU seconds (user + system) of every party's process, read from /proc every ``every_s`` while
    it runs; the last reading stands (after the session a party does nothing but leave). Pass
    :meth:`started` as :func:`launch`'s ``started``. ``py_spy``: a party to record with py-spy."""

    def __init__(self, every_s: float = 0.1, py_spy: str | None = None, py_spy_out: Path | None = None):
        self.every_s = every_s
        self.cpu: dict[str, float] = {}
        self.py_spy, self.py_spy_out = py_spy, py_spy_out
        self.spy: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self, parties) -> None:
        if self.py_spy is not None:
            party = next((p for p in parties if p.name == self.py_spy), None)
            if party is None:
                raise ValueError(f"--py-spy: no party named {self.py_spy!r} (parties: {[p.name for p in parties]})")
            spy = Path(sys.executable).with_name("py-spy")
            self.spy = subprocess.Popen([str(spy), "record", "--pid", str(party.proc.pid), "--rate", "100",
                                         "--format", "raw", "--output", str(self.py_spy_out)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._thread = threading.Thread(target=self._watch, args=(parties,), daemon=True)
        self._thread.start()

    def _watch(self, parties) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.is_set():
            for p in parties:
                try:
                    with open(f"/proc/{p.proc.pid}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue  # gone (reaped) or not yet readable: the last reading stands
                self.cpu[p.name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            self._stop.wait(self.every_s)

    def finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.spy is not None:
            self.spy.wait(60)  # py-spy ends when its party exits, and writes its file then


def top_functions(raw: Path, count: int = 15) -> tuple[int, list[tuple[str, int]]]:
    """Samples in a py-spy raw file, and the functions in most of them (each counted once per
    sample: the share of time inside it, callees included)."""
    total, inside = 0, Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        total += int(n)
        # a frame is "function (path/file.py:line)": the line number would split one function
        inside.update(dict.fromkeys({re.sub(r":\d+\)$", ")", f) for f in stack.split(";")}, int(n)))
    return total, inside.most_common(count)


@dataclass(frozen=True)
class Broker:
    """Where a session's parties connect. ``passwords`` (role → password) and ``run_id``: the
    accounts and the run a generated configuration was written for; None for a broker given by
    URL, used anonymously and without the trust-model probe."""

    url: str | None  # None: the launcher's embedded broker
    run_id: str | None = None
    passwords: dict[str, str] | None = None

    def launch_args(self) -> dict:
        if self.url is None:
            return {}
        if self.passwords is None:  # timed here, never trusted: the probe would refuse it
            return {"broker_url": self.url, "insecure_broker": True}
        return {"broker_url": self.url, "run_id": self.run_id, "passwords": self.passwords}

    def rate(self, payload_bytes: int, count: int) -> float:
        """:func:`broker_rate` as the roles may use this broker (users publish, the aggregator reads)."""
        if self.url is None:
            raise ValueError("the embedded broker lives only as long as its session: time it with --only-mqtt")
        if self.passwords is None:
            return asyncio.run(broker_rate(self.url, payload_bytes, count))
        return asyncio.run(broker_rate(self.url, payload_bytes, count, budget=acl.PUBLISH_BUDGETS.get("users"),
                                       **report_route(self.run_id, self.passwords.__getitem__)))


@contextlib.contextmanager
def started_broker(spec: str, directory: Path):
    """``spec`` ``generated``: a Mosquitto from the project's generated configuration for a fresh
    run id, stopped on exit; ``embedded``: the launcher's own (amqtt, as `privbandit run
    --transport mqtt` without ``--broker``); otherwise ``spec`` is a broker's URL."""
    if spec == "embedded":
        yield Broker(None)
        return
    if spec != "generated":
        yield Broker(spec)
        return
    run_id = "b" + secrets.token_hex(4)
    broker, files = start_with_broker_config(directory, run_id)
    with broker:
        yield Broker(broker.url, run_id, {str(role): pw for role, pw in files.passwords.items()})


def _session(family, config, path: Path, out: Path, broker: Broker, shards: int, checkpoint: bool) -> tuple[float, dict]:
    t0 = time.perf_counter()
    assert launch(family, config, path, [], out, shards=shards, checkpoint=checkpoint, **broker.launch_args()) == 0
    return time.perf_counter() - t0, json.loads((out / "summary.json").read_text())


def checkpoint_cost(args, family, config, path: Path, tmp: Path, label: str, broker: Broker) -> None:
    from statistics import median

    from privbandit.services.checkpoint import StateDir, decode_checkpoint

    walls = {True: [], False: []}
    for i in range(args.repeat):
        for checkpoint in (True, False):
            _, summary = _session(family, config, path, tmp / f"out-{checkpoint}-{i}", broker, args.shards,
                                  checkpoint)
            # the observer's time for the task (announced to scored), without process start-up
            walls[checkpoint].append(args.horizon / summary["algorithms"][label]["users_per_s"])
    rounds = summary["algorithms"][label]["rounds_per_run"]
    on, off = median(walls[True]), median(walls[False])
    print(f"task time, median of {args.repeat}: with checkpoints {on:.2f} s, without {off:.2f} s "
          f"(all: {[round(w, 2) for w in walls[True]]} vs {[round(w, 2) for w in walls[False]]}); "
          f"{rounds:.0f} releases → {(on - off) / rounds * 1e3:+.1f} ms per round")
    for party_dir in sorted((tmp / "out-True-0" / "state").iterdir()):
        data = (party_dir / "checkpoint.bin").read_bytes()
        run, party, ckpt = decode_checkpoint(data)
        target = StateDir(tmp / "bench-state" / party, run, party)
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            target.save(ckpt.task, ckpt.spec, ckpt.state)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"checkpoint {party:<11} {len(data):>10,} B   one atomic write: median {median(times) * 1e3:.2f} ms, "
              f"90th percentile {times[179] * 1e3:.2f} ms")


def report_route(run_id: str, password) -> dict:
    """:func:`broker_rate`'s topic and accounts on a broker with the run's ACL: the users' account
    publishes on the aggregator's report topic, the aggregator's reads it. ``password(role)``."""
    return {"topic": acl.report_topic(run_id, "aggregator"),
            "sub_auth": {"username": "aggregator", "password": password("aggregator")},
            "pub_auth": {"username": "users", "password": password("users")}}


async def broker_rate(url: str, payload_bytes: int, count: int, *, pub_urls: Sequence[str] | None = None,
                      topic: str | None = None, sub_auth: dict | None = None, pub_auth: dict | None = None,
                      persistent: bool = False, budget: acl.PublishBudget | None = None) -> float:
    """QoS 1 messages/s from publishers (one per URL in ``pub_urls``, default one on ``url``) to one
    subscriber on ``url``, ``count`` messages in all, shared out among the publishers. Each publisher
    awaits a message's PUBACK before sending the next, as a fleet's bus does: with one publisher
    the rate is bound by the round trip, with several it shows whether the broker has capacity left.
    ``*_auth``: aiomqtt's ``username``/``password`` for a broker with accounts. ``persistent``: every
    client connects with a client id and ``clean_session=False``, as the parties' bus does (a
    broker may then store QoS 1 messages durably: RabbitMQ's durable queues), not as clean sessions.
    ``budget``: the publishers' account's publish budget, which each keeps to as a party's bus does
    (``budget.PublishBucket.pacing``): past it a budgeted broker holds a publisher back or drops."""
    host, port = url.removeprefix("mqtt://").split(":")
    pub_urls = list(pub_urls or [url])
    topic = topic or f"bench/{time.time_ns()}"
    payload = b"\x01" * payload_bytes
    nonce = time.time_ns()

    def session(i: int) -> dict:
        return {"identifier": f"rate-{nonce}-{i}", "clean_session": False} if persistent else {}

    async with contextlib.AsyncExitStack() as stack:
        sub = await stack.enter_async_context(aiomqtt.Client(host, int(port), **(sub_auth or {}), **session(0)))
        pubs = []
        for i, purl in enumerate(pub_urls, 1):
            phost, pport = purl.removeprefix("mqtt://").split(":")
            pubs.append(await stack.enter_async_context(aiomqtt.Client(phost, int(pport), **(pub_auth or {}),
                                                                       **session(i))))
        await sub.subscribe(topic, qos=1)
        got = 0
        start = time.perf_counter()

        async def receive():
            nonlocal got
            async for _ in sub.messages:
                got += 1
                if got == count:
                    return

        async def send(pub, n: int):
            pacer = None if budget is None else PublishBucket.pacing(budget, "rate")
            for _ in range(n):
                if pacer is not None:
                    await pacer.spend(publish_wire_bytes(topic, len(payload)))
                await pub.publish(topic, payload, qos=1)

        receiver = asyncio.create_task(receive())
        shares = [count // len(pubs) + (i < count % len(pubs)) for i in range(len(pubs))]
        await asyncio.gather(*(send(p, n) for p, n in zip(pubs, shares)))
        await asyncio.wait_for(receiver, 120)
        return count / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default="generated",
                    help="generated (a Mosquitto from the project's configuration, started here), embedded "
                         "(the launcher's amqtt broker; with --only-mqtt) or a broker's URL")
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--checkpoint-cost", action="store_true", help="measure what checkpointing costs per round")
    ap.add_argument("--intermediary", choices=("aggregator", "shuffler"), default="aggregator")
    ap.add_argument("--repeat", type=int, default=3, help="sessions of each kind, with --checkpoint-cost")
    ap.add_argument("--arms", type=int, default=None, help="K (default: the uniform environment's)")
    ap.add_argument("--only-mqtt", action="store_true", help="the MQTT session only: no in-process engine, no broker rates")
    ap.add_argument("--py-spy", metavar="PARTY", default=None, help="record this party (e.g. aggregator) with py-spy")
    ap.add_argument("--py-spy-out", type=Path, default=Path("py-spy.raw"), help="py-spy's raw output (with --py-spy)")
    args = ap.parse_args()
    if args.broker == "embedded" and not (args.only_mqtt or args.checkpoint_cost):
        ap.error("--broker embedded: the broker lives only as long as its session, so its raw rate cannot be "
                 "timed; add --only-mqtt")
    print(f"machine: {platform.machine()}, python {platform.python_version()}, broker {args.broker}")
    label = "Dist-DP-SE" if args.intermediary == "aggregator" else "Dist-RDP-shuffled"
    with tempfile.TemporaryDirectory() as tmp, started_broker(args.broker, Path(tmp) / "broker") as broker:
        path = Path(tmp) / "bench.toml"
        path.write_text(EXPERIMENT.format(horizon=args.horizon, label=label,
                                          arms="" if args.arms is None else f"arms = {args.arms}",
                                          extra=SHUFFLED if args.intermediary == "shuffler" else ""))
        family, config = experiment_files.load(path)
        if args.checkpoint_cost:
            return checkpoint_cost(args, family, config, path, Path(tmp), label, broker)
        if not args.only_mqtt:
            tasks.run_experiment(family, config, jobs=1)  # warm: the first task pays lazy imports (dp-accounting, scipy)
            inproc_cpu = time.process_time()
            _, compute, _ = tasks.run_experiment(family, config, jobs=1)
            inproc_cpu = time.process_time() - inproc_cpu
            inproc = args.horizon / compute[label]
        cpu = PartyCPU(py_spy=args.py_spy, py_spy_out=args.py_spy_out)
        t0 = time.perf_counter()
        try:
            assert launch(family, config, path, [], Path(tmp) / "out", shards=args.shards, started=cpu.started,
                          **broker.launch_args()) == 0
        finally:
            cpu.finish()
        wall = time.perf_counter() - t0
        summary = json.loads((Path(tmp) / "out" / "summary.json").read_text())
        if not args.only_mqtt:
            block = int(summary["communication"][label]["bytes_per_user_payload"] * USER_BLOCK)
            rates = broker.rate(block, 300), broker.rate(100, 20_000)
    a = summary["algorithms"][label]
    comm = summary["communication"][label]
    mqtt = a["users_per_s"]
    budget = 2 * comm["bits_per_user_protocol_max"] / 8 + 8
    if not args.only_mqtt:
        print(f"in-process engine       {inproc:>12,.0f} users/s")
    print(f"MQTT, {args.shards} fleets          {mqtt:>12,.0f} users/s   (whole session incl. process start: "
          f"{args.horizon / wall:,.0f} users/s, {wall:.1f} s)")
    print("CPU seconds per party   " + ", ".join(f"{name} {s:.2f}" for name, s in cpu.cpu.items()))
    if args.py_spy is not None:
        total, top = top_functions(args.py_spy_out)
        task_s = args.horizon / mqtt
        print(f"py-spy, {args.py_spy}: {total} samples at 100 Hz over a task of {task_s:.1f} s "
              f"(busy ≈ {total / (100 * task_s):.0%} of it, start-up included); functions in most samples:")
        for frame, n in top:
            print(f"  {n / total:6.1%}  {frame}")
    print(f"wire bytes per user     {comm['bytes_per_user_wire']:>12.2f}   (payload {comm['bytes_per_user_payload']:.2f}; "
          f"budget 2·({comm['bits_per_user_protocol_max']}/8) + 8 = {budget:.2f})")
    print(f"load average            {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.only_mqtt:
        return
    print(f"ratio in-process/MQTT   {inproc / mqtt:>12.1f}×")
    parties = sum(cpu.cpu.values())
    print(f"CPU per user            in-process {1e9 * inproc_cpu / args.horizon:.1f} ns, every party together "
          f"{1e9 * parties / args.horizon:.1f} ns (their start-up included; the broker's not): "
          f"{parties / inproc_cpu:.1f}×")
    block = int(comm["bytes_per_user_payload"] * USER_BLOCK)
    print(f"raw broker rate         {rates[0]:>12,.0f} msgs/s of {block:,} B (one block) "
          f"= {rates[0] * USER_BLOCK:,.0f} users/s ceiling")
    print(f"raw broker rate         {rates[1]:>12,.0f} msgs/s of 100 B")

if __name__ == "__main__":
    main()
