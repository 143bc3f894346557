"""Start a distributed session: a broker (embedded by default), then every party as its own OS
process, then wait for the observer to write the results.

Each process gets only what its role may know, through its environment:
the broker URL and its role's credentials for everyone; the experiment file (world seed, arm means)
for the user fleets and the observer only; the analyzer's own key for the analyzer; the
shuffler's key for the shuffler. The analyzer is never given the experiment file.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from privbandit.experiment.config import ExperimentConfig, resolve_algorithm
from privbandit.protocol.seeding import analyzer_master_key, shuffler_master_key

PARTY_EXIT_WAIT_S = 20.0


@dataclass
class Party:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path | None  # None: inherit the terminal (the observer draws progress there)
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        out = None if self.log is None else open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "privbandit", *self.argv],
            env={**os.environ, **self.env}, stdout=out, stderr=out if out else None,
        )

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; a no-op for a process that already exited."""
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def intermediaries_of(config) -> list[str]:
    """The intermediaries a session needs: the shuffle-model linear bandits use the shuffler only;
    the MAB family always starts the aggregator, and the shuffler when an algorithm routes through it."""
    if getattr(config, "family", None) == "shuffle-linear-bandits":
        return ["shuffler"]
    needs_shuffler = any(resolve_algorithm(config, label).intermediary == "shuffler" for label in config.algorithms)
    return ["aggregator", *(["shuffler"] if needs_shuffler else [])]


def plan_parties(config: ExperimentConfig, experiment: Path, overrides: list[str], out: Path,
                 broker_url: str, run_id: str, shards: int, passwords: dict[str, str] | None,
                 observer_log: Path | None = None) -> list[Party]:
    sets = [x for o in overrides for x in ("--set", o)]
    world = ["--experiment", str(experiment), *sets]
    intermediaries = intermediaries_of(config)
    users = [f"users-{i}" for i in range(shards)]
    names = ["analyzer", *intermediaries, *users]
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def env(role: str, **extra) -> dict[str, str]:
        base = {"PRIVBANDIT_BROKER_URL": broker_url, "PRIVBANDIT_RUN_ID": run_id}
        if passwords:
            base |= {"PRIVBANDIT_USERNAME": role, "PRIVBANDIT_PASSWORD": passwords[role]}
        return base | extra

    parties = [Party("observer", ["observer", *world, "--out", str(out), "--parties", ",".join(names)],
                     env("observer"), observer_log)]
    parties.append(Party("analyzer", ["analyzer"], env("analyzer", PRIVBANDIT_ANALYZER_KEY=hex(
        analyzer_master_key(config.seed))), logs / "analyzer.log"))
    if "aggregator" in intermediaries:
        parties.append(Party("aggregator", ["aggregator"], env("aggregator"), logs / "aggregator.log"))
    if "shuffler" in intermediaries:
        parties.append(Party("shuffler", ["shuffler"], env("shuffler", PRIVBANDIT_SHUFFLE_KEY=hex(
            shuffler_master_key(config.seed))), logs / "shuffler.log"))
    for i, name in enumerate(users):
        parties.append(Party(name, ["users", "--shard", f"{i}/{shards}", *world], env("users"), logs / f"{name}.log"))
    return parties


def launch(config: ExperimentConfig, experiment: Path, overrides: list[str], out: Path,
           broker_url: str | None = None, shards: int = 2, timeout_s: float | None = None) -> int:
    """Run the experiment distributed; returns the observer's exit code (0 on success)."""
    run_id = "r" + secrets.token_hex(4)
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        passwords = None
        if broker_url is None:
            from privbandit.services.acl import Role
            from privbandit.services.embedded_broker import start_embedded_broker

            passwords = {r.value: secrets.token_urlsafe(16) for r in Role}
            broker = start_embedded_broker(run_id, passwords)
            stack.callback(broker.stop)
            broker_url = broker.url
        parties = plan_parties(config, experiment, overrides, out, broker_url, run_id, shards, passwords)
        for p in parties:
            p.start()
            stack.callback(p.stop)
        observer = parties[0]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while observer.proc.poll() is None:
            dead = [p for p in parties[1:] if p.proc.poll() not in (None, 0)]
            if dead:
                p = dead[0]
                raise RuntimeError(f"{p.name} exited with {p.proc.returncode}; see {p.log}:\n{log_tail(p.log)}")
            if deadline and time.monotonic() > deadline:
                raise TimeoutError(f"the distributed run did not finish in {timeout_s:.0f} s; logs in {out / 'logs'}")
            time.sleep(0.2)
        end = time.monotonic() + PARTY_EXIT_WAIT_S
        for p in parties[1:]:
            try:
                p.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return observer.proc.returncode


def log_tail(path: Path | None, lines: int = 20) -> str:
    text = path.read_text(errors="replace") if path is not None and path.exists() else ""
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"
