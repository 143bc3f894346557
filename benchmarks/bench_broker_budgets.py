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

    .venv/bin/python benchmarks/bench_broker_budgets.py [--horizon 1000000] [--kinds volley bombs]
                                                       [--brokers embedded mosquitto mosquitto-unbudgeted]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import secrets
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
                if self.mark in cmd:
                    cpu = cpu_seconds(int(pid))
                    if cpu is not None:
                        self.seen[pid] = (" attack " in cmd, cpu)

    def stop(self) -> tuple[float, float]:
        """(attacker's, parties') CPU seconds."""
        self.done.set()
        self.thread.join()
        return (sum(c for a, c in self.seen.values() if a), sum(c for a, c in self.seen.values() if not a))


def session(tmp: Path, text: str, kind: str | None, broker: str, timeout_s: float) -> dict:
    name = kind or "clean"
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
        stack, files = start_with_broker_config(tmp / f"{broker}-{name}-broker", run_id,
                                                budgets=broker == "mosquitto")
        options = {"broker_url": stack.url, "run_id": run_id,
                   "passwords": {r.value: files.password(r) for r in Role}}
    sampler = CpuSampler(str(out)) if os.path.isdir("/proc") else None
    t0 = time.perf_counter()
    try:
        code = launch(family, config, path, [], out, shards=2, timeout_s=timeout_s, **options)
    except (RuntimeError, TimeoutError) as exc:
        code = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        if stack is not None:
            row["broker_cpu_s"] = cpu_seconds(stack.proc.pid)
            stack.stop()
            log = stack.log.read_text(errors="replace")
            refused = [int(m) for m in re.findall(r"(?:disconnected|at shutdown) after (\d+) messages", log)]
            row["broker_refused"] = sum(refused) if refused else 0
    wall = time.perf_counter() - t0
    if sampler is not None:
        row["attacker_cpu_s"], row["parties_cpu_s"] = sampler.stop()
    row.update({"broker": broker, "kind": name, "exit": code, "wall_s": wall})
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=int, default=1_000_000)
    ap.add_argument("--kinds", nargs="*", default=["volley", "bombs"], help="none: the clean session alone")
    ap.add_argument("--brokers", nargs="+", default=["embedded"], choices=["embedded", "mosquitto", "mosquitto-unbudgeted"])
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average {load()}", flush=True)
    text = EXPERIMENT.format(horizon=args.horizon)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "e.toml").write_text(text)
        run_file(tmp / "e.toml", out=tmp / "inproc")
        for broker in args.brokers:
            clean = None
            for kind in [None, *args.kinds]:
                row = session(tmp, text, kind, broker, args.timeout)
                if kind is None:
                    clean = row
                ratio = ""
                if clean is not None and "session_s" in row and "session_s" in clean:
                    ratio = (f" ({row['wall_s'] / clean['wall_s']:.2f}× wall, "
                             f"{row['session_s'] / clean['session_s']:.2f}× session)")
                print(f"{broker:<9} {row['kind']:<7} exit {row['exit']}, wall {row['wall_s']:6.1f} s, session "
                      f"{row.get('session_s', float('nan')):6.1f} s{ratio}, regret {row.get('regret', float('nan')):,.0f}, "
                      f"identical {row.get('identical')}, "
                      f"re-announcements {row['re_announcements']}, attacker {row.get('attacker')}, "
                      f"refused {row.get('rejected')}, broker dropped {row.get('broker_refused')}, CPU s: broker {row.get('broker_cpu_s')}, "
                      f"attacker {row.get('attacker_cpu_s', 0):.1f}, parties {row.get('parties_cpu_s', 0):.1f}  (load {load()})", flush=True)


if __name__ == "__main__":
    main()
