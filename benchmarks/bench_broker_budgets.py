"""How much a flood from the users' account slows a session (issue #32 item 3).

Dist-DP-SE at ``--horizon`` (Fig. 2's easy instance, one run), every party its own process, on the
embedded broker (amqtt, with the project's per-account budgets) and/or on Mosquitto with the
generated configuration, its budget plugin loaded (``mosquitto``) or not (``mosquitto-unbudgeted``)
(``--brokers``). Each session runs clean, then with each traffic adversary
of ``--kinds`` next to it (the users' account): ``volley`` answers every plan message,
re-announcements included, with 15 forged reports, one of 8 MiB (the issue's attack); ``bombs``
sends one of the costliest messages to decode per plan; ``flood`` the older junk flood; ``forge``
signs every invited user's report and a fleet's error status with the keys the experiment file's
seed gave before session secrets (item 1). Printed per session: its exit status, its wall time and
the observer's own session time, their ratio to the clean session's, the final regret, whether
rounds.csv and curves.csv are byte-identical to the in-process run's, what the attacker sent, the
analyzer's plan re-announcements and the parties' refusals; on Mosquitto, the messages its budget
plugin dropped and the broker's own CPU time; the attacker's and the parties' CPU time.

The threat model puts the attacker on a machine of its own; on one machine its CPU comes out of the
session's. ``--attacker-cpu`` confines it (Linux, root): each attacker is moved, once every party
has started and before the first plan, into a cgroup of its own whose CPU is capped at that many
cores (``free``: not capped, only counted; v1's ``cpu.cfs_quota_us`` beside a v2 hierarchy, or
v2's ``cpu.max``). Its CPU is then read from the cgroup (``cpu.stat``), and what it put on the
wire from an iptables rule matching the cgroup (IP bytes and packets, the attacker's sockets
only): its achieved rate over the observer's session time, so that a confined attacker is reported
with the rate it reached, not as "an attacker". ``--hog`` adds, for each cap, a clean session
beside a busy loop under the same cap: the CPU an attacker of that cap takes, without its traffic.
``--pairs N`` repeats every broker's sessions N times, clean first each time.

``--refusal-cost N`` measures instead what a refused message costs Mosquitto: N PUBLISHes (QoS 1,
as the attacker's) of each ``--sizes`` from a users' connection, to a broker whose plugin refuses
all of them, to one whose plugin accepts all of them, and to one without the plugin (no subscriber
in any, so an accepted message is read and routed to nobody); the broker's CPU per message.

    .venv/bin/python benchmarks/bench_broker_budgets.py [--horizon 1000000] [--kinds volley bombs]
                                                       [--brokers embedded mosquitto mosquitto-unbudgeted]
                                                       [--attacker-cpu free 0.25] [--hog] [--pairs 2]
    .venv/bin/python benchmarks/bench_broker_budgets.py --refusal-cost 20000 [--sizes 100 65536 8388608]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import secrets
import socket
import struct
import subprocess
import sys
import threading
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privbandit.runner import config as experiment_files  # noqa: E402
from privbandit.runner import run_file  # noqa: E402
from privbandit.services.launcher import launch  # noqa: E402

EXPERIMENT = """name = "budgets"
horizon = {horizon}
seed = 17
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
[algorithms.Dist-DP-SE]
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a running process (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """The CPU time of the processes whose command line names ``mark`` (the session's results
    directory: every party's, and the attacker's ``--report``), sampled from /proc every 0.2 s
    until :meth:`stop`; split into the attacker's (``attack``) and the parties'. A process's last
    sample counts, so up to 0.2 s of each is missed."""

    def __init__(self, mark: str):
        self.mark, self.seen, self.done = mark, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.2):
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if self.mark in cmd and "mosquitto -c" not in cmd:  # the broker (its files' directory
                    # starts with the mark) is counted apart, as broker_cpu_s
                    cpu = cpu_seconds(int(pid))
                    if cpu is not None:
                        words = cmd.split(" -m privbandit ", 1)[-1].split()
                        name = words[0] + (words[2] if words[:2] == ["users", "--shard"] else "")
                        self.seen[pid] = (" attack " in cmd, cpu, name)

    def stop(self) -> tuple[float, float]:
        """(attacker's, parties') CPU seconds."""
        self.done.set()
        self.thread.join()
        return (sum(c for a, c, _ in self.seen.values() if a), sum(c for a, c, _ in self.seen.values() if not a))

    def by_party(self) -> dict[str, float]:
        """CPU seconds per party (``users0/2`` for a fleet), the attacker's under ``attack``."""
        out: dict[str, float] = {}
        for _, cpu, name in self.seen.values():
            out[name] = round(out.get(name, 0.0) + cpu, 2)
        return out


def tcp_ports(pid: int) -> set[int]:
    """The local ports of the established TCP connections of ``pid`` (its fds' socket inodes looked up
    in /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in inodes and f[3] == "01":
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


class Confinement:
    """A cgroup for one session's attacker (or a busy loop): its CPU counted (v2 ``cpu.stat``) and,
    with ``cores``, capped (CFS quota over a 100-ms period); its IP output counted by an iptables
    rule matching the cgroup's v2 path (``-m cgroup --path``). Linux and root only."""

    PERIOD_US = 100_000

    def __init__(self, tag: str, cores: float | None):
        root = Path("/sys/fs/cgroup")
        pure_v2 = (root / "cgroup.controllers").exists()
        self.v2_root = root if pure_v2 else root / "unified"
        if not (self.v2_root / "cgroup.procs").exists():
            raise RuntimeError(f"--attacker-cpu/--hog: no cgroup v2 hierarchy at {root} or {root / 'unified'}")
        self.name = f"privbandit-{tag}-{os.getpid()}"
        self.chain = f"PB{tag[:8].upper()}{os.getpid()}"
        self.dirs = [self.v2_root / self.name]
        self.dirs[0].mkdir()
        if cores is not None:
            quota = max(1000, int(cores * self.PERIOD_US))
            if pure_v2:
                controllers = (root / "cgroup.subtree_control").read_text().split()
                if "cpu" not in controllers:
                    (root / "cgroup.subtree_control").write_text("+cpu")
                (self.dirs[0] / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
            else:
                self.dirs.append(root / "cpu" / self.name)
                self.dirs[1].mkdir()
                (self.dirs[1] / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
                (self.dirs[1] / "cpu.cfs_quota_us").write_text(str(quota))
        self._iptables("-N", self.chain)
        self._iptables("-A", self.chain, "-m", "cgroup", "--path", "/" + self.name, "-j", "RETURN")
        self._iptables("-I", "OUTPUT", "-j", self.chain)

    @staticmethod
    def _iptables(*args: str) -> str:
        return subprocess.run(["iptables", "-w", *args], check=True, capture_output=True, text=True).stdout

    def add(self, pid: int) -> None:
        """Move ``pid`` in. A socket keeps the cgroup it was created in, so the TCP connections it
        already holds (the attacker's MQTT connection) are counted by their local ports."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))
        for port in tcp_ports(pid):
            self._iptables("-A", self.chain, "-p", "tcp", "--sport", str(port), "-j", "RETURN")

    def cpu_s(self) -> float:
        stat = dict(line.split() for line in (self.dirs[0] / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    def throttled_s(self) -> float | None:
        if len(self.dirs) > 1:
            stat = dict(line.split() for line in (self.dirs[1] / "cpu.stat").read_text().splitlines())
            return int(stat["throttled_time"]) / 1e9
        if (self.dirs[0] / "cpu.max").exists():
            stat = dict(line.split() for line in (self.dirs[0] / "cpu.stat").read_text().splitlines())
            return int(stat.get("throttled_usec", 0)) / 1e6
        return None

    def sent(self) -> tuple[int, int]:
        """(packets, IP bytes) the cgroup's sockets sent so far (each packet counted by one rule)."""
        rules = [line.split() for line in self._iptables("-L", self.chain, "-v", "-n", "-x").splitlines()[2:]]
        return sum(int(r[0]) for r in rules), sum(int(r[1]) for r in rules)

    def close(self) -> None:
        self._iptables("-D", "OUTPUT", "-j", self.chain)
        self._iptables("-F", self.chain)
        self._iptables("-X", self.chain)
        for d in reversed(self.dirs):
            for _ in range(50):  # its processes have been stopped; the kernel empties the cgroup shortly after
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def session(tmp: Path, text: str, kind: str | None, broker: str, timeout_s: float,
            cores: str | None = None, hog: bool = False, users_budget=None) -> dict:
    """One session. ``cores``: None, the attacker as it comes; ``"free"`` or a number of cores, the
    attacker moved into a :class:`Confinement` (counted; capped unless free). ``hog`` (no ``kind``):
    the session runs clean beside a busy loop confined to ``cores``."""
    name = (kind or "clean") + ("+hog" if hog else "") + (f"@{cores}" if cores is not None else "")
    path = tmp / f"{broker}-{name}.toml"
    path.write_text((f'traffic_adversaries = ["{kind}"]\n' if kind else "") + text)
    family, config = experiment_files.load(path)
    out = tmp / f"{broker}-{name}"
    options: dict = {}
    stack = None
    row: dict = {}
    if broker.startswith("mosquitto"):
        from privbandit.services.acl import Role
        from privbandit.services.mosquitto_process import start_with_broker_config

        run_id = "b" + secrets.token_hex(4)
        budgets = {} if users_budget is None else {"publish_budgets": {Role.USERS.value: users_budget}}
        # a directory of its own: a second pair's broker would append to the first one's log
        stack, files = start_with_broker_config(tmp / f"{broker}-{name}-broker-{run_id}", run_id,
                                                budgets=broker == "mosquitto", **budgets)
        options = {"broker_url": stack.url, "run_id": run_id,
                   "passwords": {r.value: files.password(r) for r in Role}}
    cap = None if cores in (None, "free") else float(cores)
    cell = Confinement("hog" if hog else "attacker", cap) if cores is not None else None
    busy = None
    if hog:  # the CPU a capped attacker takes, without its traffic
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        cell.add(busy.pid)

    def confine(parties) -> None:  # every party started, the attackers subscribed, no plan yet
        if cell is not None and not hog:
            for p in parties:
                if p.hostile:
                    cell.add(p.proc.pid)

    sampler = CpuSampler(str(out)) if os.path.isdir("/proc") else None
    t0 = time.perf_counter()
    try:
        code = launch(family, config, path, [], out, shards=2, timeout_s=timeout_s, started=confine, **options)
    except (RuntimeError, TimeoutError) as exc:
        code = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
        if cell is not None:
            row["cell_cpu_s"], row["cell_throttled_s"] = cell.cpu_s(), cell.throttled_s()
            row["cell_packets"], row["cell_bytes"] = cell.sent()
            cell.close()
        if stack is not None:
            row["broker_cpu_s"] = cpu_seconds(stack.proc.pid)
            stack.stop()
            log = stack.log.read_text(errors="replace")
            refused = [int(m) for m in re.findall(r"(?:disconnected|at shutdown) after (\d+) messages", log)]
            row["broker_refused"] = sum(refused) if refused else 0
            # of which the plugin's limits refused as over-limit (the unpacker's bounds), not its budget
            row["broker_over_limit"] = sum(int(m) for m in re.findall(r"refused, (\d+) of them over-limit", log))
    wall = time.perf_counter() - t0
    if sampler is not None:
        row["attacker_cpu_s"], row["parties_cpu_s"] = sampler.stop()
        row["cpu_by_party"] = sampler.by_party()
    row.update({"broker": broker, "kind": name, "exit": code, "wall_s": wall, "cores": cores})
    summary_path = out / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        row["session_s"] = summary["elapsed_s"]
        row["regret"] = summary["algorithms"]["Dist-DP-SE"]["regret_final_mean"]
        row["rejected"] = summary["rejected"]
        row["identical"] = all((out / f).read_bytes() == (tmp / "inproc" / f).read_bytes()
                               for f in ("rounds.csv", "curves.csv"))
    log = out / "logs" / "analyzer.log"
    row["re_announcements"] = log.read_text(errors="replace").count("announcing plans") if log.exists() else None
    report = out / "adversaries" / f"{kind}.json"
    if kind and report.exists():
        r = json.loads(report.read_text())
        row["attacker"] = {k: r[k] for k in ("plans_seen", "messages_sent", "ended_by") if k in r}
    return row


def describe(row: dict, clean: dict | None) -> str:
    ratio = ""
    if clean is not None and "session_s" in row and "session_s" in clean:
        ratio = (f" ({row['wall_s'] / clean['wall_s']:.2f}× wall, "
                 f"{row['session_s'] / clean['session_s']:.2f}× session)")
    text = (f"{row['broker']:<9} {row['kind']:<16} exit {row['exit']}, wall {row['wall_s']:6.1f} s, session "
            f"{row.get('session_s', float('nan')):6.1f} s{ratio}, regret {row.get('regret', float('nan')):,.0f}, "
            f"identical {row.get('identical')}, "
            f"re-announcements {row['re_announcements']}, attacker {row.get('attacker')}, "
            f"refused {row.get('rejected')}, broker dropped {row.get('broker_refused')} "
            f"({row.get('broker_over_limit')} over-limit), CPU s: broker {row.get('broker_cpu_s')}, "
            f"attacker {row.get('attacker_cpu_s', 0):.1f}, parties {row.get('parties_cpu_s', 0):.1f} {row.get('cpu_by_party')}")
    if "cell_cpu_s" in row:
        who = "busy loop" if "+hog" in row["kind"] else "attacker"
        text += (f"; {who} in its cgroup (cap {row['cores']} cores): CPU {row['cell_cpu_s']:.2f} s, "
                 f"throttled {row['cell_throttled_s']}")
        if who == "attacker" and row.get("session_s"):
            sent = (row.get("attacker") or {}).get("messages_sent", 0)
            text += (f", on the wire {row['cell_bytes'] / 1e6:.1f} MB in {row['cell_packets']:,} packets: "
                     f"rate {sent / row['session_s']:.0f} msg/s, {row['cell_bytes'] / 1e6 / row['session_s']:.1f} MB/s "
                     f"over the session")
    return text + f"  (load {load()})"


def summarize(rows: list[dict]) -> None:
    """Per broker and setting, paired with the clean session of the same pair: the session-time
    ratio (mean ± standard error), the added seconds (mean ± SE, t), pairs slower than clean, and
    the attacker's rate (messages and IP MB per second of session)."""
    from statistics import mean, stdev

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "ratio" in r:
            groups.setdefault((r["broker"], r["kind"]), []).append(r)
    cleans = {(r["broker"], r["pair"]): r for r in rows if r["kind"] == "clean"}
    print("summary, paired with each pair's clean session (n pairs; ratio mean ± SE; added s mean ± SE, t; "
          "pairs slower; attacker's rate; all identical):")
    for (broker, kind), rs in groups.items():
        ratios = [r["ratio"] for r in rs]
        added = [r["session_s"] - cleans[broker, r["pair"]]["session_s"] for r in rs]
        n = len(rs)
        se_r = stdev(ratios) / n ** 0.5 if n > 1 else float("nan")
        se_a = stdev(added) / n ** 0.5 if n > 1 else float("nan")
        t = mean(added) / se_a if n > 1 and se_a > 0 else float("nan")
        rate = ""
        if all("cell_bytes" in r for r in rs) and "+hog" not in kind:
            # an attacker killed before it wrote its report (SIGKILL after the stop's grace) has no count
            sent = [r["attacker"]["messages_sent"] / r["session_s"] for r in rs if r.get("attacker")]
            msgs = f"{mean(sent):.0f} msg/s ({len(sent)} reports)" if sent else "? msg/s (no report)"
            mbs = mean(r["cell_bytes"] / 1e6 / r["session_s"] for r in rs)
            rate = f", attacker {msgs}, {mbs:.1f} MB/s, CPU {mean(r['cell_cpu_s'] for r in rs):.2f} s"
        print(f"  {broker:<20} {kind:<16} n={n} ratio {mean(ratios):.2f} ± {se_r:.2f} (max {max(ratios):.2f}), "
              f"+{mean(added):.2f} ± {se_a:.2f} s, t = {t:.1f}, slower {sum(a > 0 for a in added)}/{n}{rate}, "
              f"identical {all(r.get('identical') for r in rs)}, exits {sorted({str(r['exit']) for r in rs})}")
    # The plugin against none, pair by pair (the two brokers' sessions of one pass ran minutes apart)
    for (broker, kind), rs in groups.items():
        if broker != "mosquitto" or ("mosquitto-unbudgeted", kind) not in groups:
            continue
        without = {r["pair"]: r["ratio"] for r in groups["mosquitto-unbudgeted", kind]}
        diffs = [r["ratio"] - without[r["pair"]] for r in rs if r["pair"] in without]
        if len(diffs) > 1:
            se = stdev(diffs) / len(diffs) ** 0.5
            print(f"  plugin − none, {kind:<16} ratio {mean(diffs):+.2f} ± {se:.2f}, t = {mean(diffs) / se if se else float('nan'):.1f}, "
                  f"plugin lower in {sum(d < 0 for d in diffs)}/{len(diffs)} pairs")


def _remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _mqtt_string(b: bytes) -> bytes:
    return struct.pack("!H", len(b)) + b


def publish_raw(port: int, username: str, password: str, topic_name: str, size: int, n: int) -> float:
    """``n`` QoS-1 PUBLISHes of ``size`` bytes, pipelined on one MQTT 3.1.1 connection as fast as
    the socket takes them (PUBACKs read by a thread); returns once every PUBACK is in, its seconds."""
    sock = socket.create_connection(("127.0.0.1", port))
    body = (_mqtt_string(b"MQTT") + bytes([4, 0xC2]) + struct.pack("!H", 60) + _mqtt_string(b"refusal-cost")
            + _mqtt_string(username.encode()) + _mqtt_string(password.encode()))
    sock.sendall(b"\x10" + _remaining_length(len(body)) + body)
    connack = sock.recv(4)
    if len(connack) < 4 or connack[3] != 0:
        raise RuntimeError(f"CONNACK {connack!r}")
    acks = threading.Event()

    def read() -> None:
        need = 4 * n
        while need > 0:
            chunk = sock.recv(min(need, 1 << 16))
            if not chunk:
                break
            need -= len(chunk)
        acks.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    payload = b"\0" * size
    t0 = time.perf_counter()
    for pid in range(1, n + 1):
        var = _mqtt_string(topic_name.encode()) + struct.pack("!H", (pid % 65535) + 1)
        sock.sendall(b"\x32" + _remaining_length(len(var) + size) + var)
        sock.sendall(payload)
    if not acks.wait(600):
        raise TimeoutError("PUBACKs")
    elapsed = time.perf_counter() - t0
    sock.sendall(b"\xe0\x00")
    sock.close()
    return elapsed


def refusal_cost(tmp: Path, n: int, sizes: list[int]) -> None:
    """The broker's CPU per message refused by the plugin, accepted by it, and without it."""
    from privbandit.services.acl import PublishBudget, Role
    from privbandit.services.acl.broker_files import MAX_PACKET_BYTES
    from privbandit.services.bus import topic
    from privbandit.services.mosquitto_process import start_with_broker_config

    setups = {  # a budget of one message, never refilled in the run's time: all but the first refused
        "plugin, refusing": dict(budgets=True, publish_budgets={"users": PublishBudget(1e-6, MAX_PACKET_BYTES, 1e-6, 1, 64)}),
        "plugin, accepting": dict(budgets=True, publish_budgets={"users": PublishBudget(1e12, 2**62, 1e12, 2**62, 64)}),
        "no plugin": dict(budgets=False),
    }
    for size in sizes:
        count = max(20, min(n, int(4e9 // max(size, 1))))  # at most about 4 GB per broker
        for label, options in setups.items():
            run_id = "c" + secrets.token_hex(4)
            stack, files = start_with_broker_config(tmp / f"cost-{size}-{label.replace(' ', '')}", run_id, **options)
            try:
                before = cpu_seconds(stack.proc.pid)
                elapsed = publish_raw(stack.port, Role.USERS.value, files.password(Role.USERS),
                                      topic(run_id, "report", "aggregator"), size, count)
                time.sleep(0.3)
                used = cpu_seconds(stack.proc.pid) - before
            finally:
                stack.stop()
            refused = [int(m) for m in re.findall(r"(?:disconnected|at shutdown) after (\d+) messages",
                                                  stack.log.read_text(errors="replace"))]
            print(f"{size:>9,} B x {count:>7,}  {label:<18} broker CPU {used:6.3f} s = {used / count * 1e6:8.2f} µs "
                  f"per message ({used / (count * size) * 1e9 if size else 0:6.3f} ns/B), publisher {elapsed:5.2f} s "
                  f"({count * size / elapsed / 1e6:7.1f} MB/s), refused {sum(refused):,}  (load {load()})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--kinds", nargs="*", default=["volley", "bombs"], help="none: the clean session alone")
    ap.add_argument("--brokers", nargs="+", default=["embedded"], choices=["embedded", "mosquitto", "mosquitto-unbudgeted"])
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--attacker-cpu", nargs="+", default=None, metavar="CORES",
                    help="confine each attacker to a cgroup: 'free' (counted, not capped) or a CPU cap in cores (> 0)")
    ap.add_argument("--hog", action="store_true", help="for each cap, a clean session beside a busy loop under it")
    ap.add_argument("--pairs", type=int, default=1, help="repeat each broker's sessions this many times")
    ap.add_argument("--refusal-cost", type=int, default=0, metavar="N",
                    help="measure Mosquitto's CPU per refused message with N messages of each size, and stop")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 65_536, 8 * 2**20 - 4096])
    ap.add_argument("--json", help="append every session's row to this file (JSON lines)")
    ap.add_argument("--users-budget", metavar="B/S,BURST_B,MSG/S,BURST_MSG,CONNECTIONS",
                    help="the users' account's budget on the plugin's Mosquitto (default: acl.PUBLISH_BUDGETS)")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL",
                    help="print the paired summary of earlier --json files (pairs numbered per file) and stop")
    args = ap.parse_args()
    if args.summarize:
        rows = []
        for i, name in enumerate(args.summarize):
            for line in Path(name).read_text().splitlines():
                row = json.loads(line)
                row["pair"] = (i, row["pair"])
                rows.append(row)
        summarize(rows)
        return
    for c in args.attacker_cpu or []:
        if c != "free" and not (c.replace(".", "", 1).isdigit() and 0 < float(c) <= (os.cpu_count() or 1)):
            ap.error(f"--attacker-cpu: {c!r} is neither 'free' nor a number of cores in (0, {os.cpu_count()}]")
    if args.hog and not any(c != "free" for c in args.attacker_cpu or []):
        ap.error("--hog needs a CPU cap in --attacker-cpu")
    if args.pairs < 1:
        ap.error("--pairs: at least 1")
    users_budget = None
    if args.users_budget:
        from privbandit.services.acl import PublishBudget

        try:
            r, b, m, bm, c = args.users_budget.split(",")
            users_budget = PublishBudget(float(r), int(b), float(m), int(bm), int(c))
        except ValueError as exc:
            ap.error(f"--users-budget {args.users_budget!r}: {exc}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average {load()}", flush=True)
    text = EXPERIMENT.format(horizon=args.horizon)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.refusal_cost:
            refusal_cost(tmp, args.refusal_cost, args.sizes)
            return
        (tmp / "e.toml").write_text(text)
        run_file(tmp / "e.toml", out=tmp / "inproc")
        caps = args.attacker_cpu or [None]
        rows = []

        def record(row: dict, clean: dict | None, rep: int) -> None:
            row["pair"] = rep
            if clean is not None and row.get("session_s") and clean.get("session_s"):
                row["ratio"] = row["session_s"] / clean["session_s"]
            rows.append(row)
            print(describe(row, clean), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row, default=str) + "\n")

        for rep in range(args.pairs):
            for broker in args.brokers:
                clean = session(tmp, text, None, broker, args.timeout, users_budget=users_budget)
                record(clean, None, rep)
                for kind in args.kinds:
                    for cores in caps:
                        record(session(tmp, text, kind, broker, args.timeout, cores, users_budget=users_budget), clean, rep)
                if args.hog:
                    for cores in caps:
                        if cores not in (None, "free"):
                            record(session(tmp, text, None, broker, args.timeout, cores, hog=True,
                                           users_budget=users_budget), clean, rep)
        summarize(rows)


if __name__ == "__main__":
    main()
