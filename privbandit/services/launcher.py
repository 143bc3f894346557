"""Start a distributed session: a broker (embedded by default), then every party as its own OS
process, then wait for the observer to write the results.

Each process gets only what its role may know, through its environment:
the broker URL and its role's credentials for everyone; the experiment file (world seed, arm means)
for the user fleets and the observer only; the analyzer's own key for the analyzer; the
shuffler's key for the shuffler. The analyzer is never given the experiment file. The session's
secrets (:class:`~privbandit.protocol.primitives.report_auth.SessionKeys`: the users' report key,
the fleets' chunk keys, the users' identities) are drawn here from the OS's randomness for each
session, never from the seed, and reach each party that needs them through its environment only:
never its command line, never the results directory. The
intermediaries are those the family names (``family.intermediaries(config)``): ``aggregator``,
``shuffler``, or several of one role (``shuffler-1`` … ``shuffler-k``), each then its own process
with its own broker account (``privbandit shuffler --name shuffler-2``).

The analyzer and the intermediaries each checkpoint to their own ``<out>/state/<party>``; with
``restart_on_crash`` the launcher restarts a party that dies (SIGKILL, a crash) up to that many
times in all, and the restarted process resumes from its checkpoint (docs/distributed.md, "Faults
and restarts"). A party that exits with status 2 (bad configuration, a foreign checkpoint) is not
restarted: it would only fail again.

On a broker the launcher did not start (``broker_url``), no party starts before
:func:`~privbandit.services.broker_probe.check_broker` has found that the broker keeps every role
to what the trust model lets it read, unless ``insecure_broker``; the launcher's own embedded broker
is probed the same way. The verdict reaches ``summary.json`` (``broker.acl``) through the observer's
environment. Credentials for an external broker (one password per role) and TLS files reach each
party through its environment only, each party its own role's password and no other.

An experiment's ``traffic_adversaries`` become hostile processes (``privbandit attack KIND``)
started with the parties, each with the account its attack needs; they are not parties the
observer waits for, and the launcher stops them (SIGTERM: they write their reports) as soon as the
session ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from privbandit.protocol.primitives.report_auth import SessionKeys
from privbandit.protocol.primitives.seeding import analyzer_master_key, shuffler_master_key
from privbandit.runner.provenance import BROKER_ACL_ENV
from privbandit.services.acl import Role, account_role, is_instance, password_env

PARTY_EXIT_WAIT_S = 20.0
USAGE_ERROR = 2  # a party's exit status for bad input: restarting cannot help
CHECKPOINTED = ("observer", "analyzer", "aggregator", "shuffler")  # fleets hold no state to keep
HOSTILE_MAX_S = 24 * 3600  # a traffic adversary of the experiment attacks until the session shuts down
HOSTILE_READY_S = 60.0  # how long the session waits for its traffic adversaries to subscribe
HOSTILE_STOP_S = 30.0  # how long the traffic adversaries get to write their reports once told to stop
TLS_FIELDS = ("ca_file", "cert_file", "key_file")  # BusSettings fields, PRIVBANDIT_<FIELD> for the parties


# What a party must not inherit from the launcher's environment: the launcher gives each party its
# own account, TLS files and (the observer) the probe's verdict, or none of them.
_NOT_INHERITED = {f"PRIVBANDIT_{k.upper()}" for k in ("username", "credentials_file", *TLS_FIELDS)} | {BROKER_ACL_ENV}


def _inherited_env() -> dict[str, str]:
    """The launcher's environment minus every broker secret and setting, and every key: the launcher
    may hold all roles' passwords (PRIVBANDIT_<ROLE>_PASSWORD, a credentials file) and, in a shell
    set up for a deployment, parties' keys (PRIVBANDIT_*_KEY, *_KEY_FILE); a party gets only its own."""
    secret = ("_PASSWORD", "_KEY", "_KEY_FILE")
    return {k: v for k, v in os.environ.items()
            if not (k.startswith("PRIVBANDIT_") and k.endswith(secret)) and k not in _NOT_INHERITED}


@dataclass
class Party:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path | None  # None: inherit the terminal (the observer draws progress there)
    proc: subprocess.Popen | None = field(default=None, repr=False)
    hostile: bool = False  # a traffic adversary of the experiment: stopped as soon as the session ends
    ready_file: Path | None = None  # a hostile party creates it once subscribed

    def start(self) -> None:
        out = None if self.log is None else open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "privbandit", *self.argv],
            env={**_inherited_env(), **self.env}, stdout=out, stderr=out if out else None,
        )

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(*procs: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    """SIGTERM to each, then SIGKILL to those still running ``grace_s`` after; a no-op for a process
    that already exited. Several are signalled together and share the one grace period."""
    running = [p for p in procs if p and p.poll() is None]
    for proc in running:
        proc.terminate()
    end = time.monotonic() + grace_s
    for proc in running:
        try:
            proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_subscribed(hostile: list[Party], timeout_s: float = HOSTILE_READY_S) -> None:
    """Wait until every started hostile party has created its ready file (it is subscribed).
    One that exits first, or not ready within ``timeout_s``, raises, naming it and its log."""
    deadline = time.monotonic() + timeout_s
    while waiting := [p for p in hostile if p.ready_file is not None and not p.ready_file.exists()]:
        for p in waiting:
            if p.proc is not None and p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} exited with {p.proc.returncode} before it subscribed; "
                                   f"see {p.log}:\n{log_tail(p.log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{', '.join(p.name for p in waiting)} not subscribed within {timeout_s:.0f} s; "
                               f"see {waiting[0].log}")
        time.sleep(0.05)


def party_roles(family, config) -> list[str]:
    """The broker accounts a session's parties log in with."""
    hostile = ["analyzer" if k == "curious-analyzer" else "users" for k in getattr(config, "traffic_adversaries", [])]
    return list(dict.fromkeys(["observer", "analyzer", *family.intermediaries(config), "users", *hostile]))


def plan_parties(family, config, experiment: Path, overrides: list[str], out: Path,
                 broker_url: str, run_id: str, shards: int, passwords: Mapping[str, str] | None,
                 observer_log: Path | None = None, checkpoint: bool = True,
                 tls_files: Mapping[str, str] | None = None, broker_acl: str | None = None,
                 dashboard_port: int | None = None, secagg_step_s: float | None = None,
                 session_keys: SessionKeys | None = None) -> list[Party]:
    """The parties of a session, not started. ``tls_files``: BusSettings' ``ca_file``, ``cert_file``,
    ``key_file`` for every party; ``broker_acl``: the probe's verdict, for the observer's summary;
    ``dashboard_port``: the observer serves its web page there, on 127.0.0.1; ``secagg_step_s``: the
    aggregator's ``--secagg-step-deadline`` (None: its default); ``session_keys``: the session's
    secrets (default: drawn now; a restarted party is given its environment again, so the same)."""
    keys = SessionKeys.draw() if session_keys is None else session_keys
    sets = [x for o in overrides for x in ("--set", o)]
    world = ["--experiment", str(experiment), *sets]
    intermediaries = family.intermediaries(config)
    users = [f"users-{i}" for i in range(shards)]
    names = ["analyzer", *intermediaries, *users]
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def state(name: str) -> list[str]:
        checkpointed = name in CHECKPOINTED or (is_instance(name) and account_role(name).value in CHECKPOINTED)
        return ["--state-dir", str(out / "state" / name)] if checkpoint and checkpointed else []

    def env(role: str, **extra) -> dict[str, str]:
        base = {"PRIVBANDIT_BROKER_URL": broker_url, "PRIVBANDIT_RUN_ID": run_id}
        base |= {f"PRIVBANDIT_{k.upper()}": str(v) for k, v in (tls_files or {}).items() if v}
        if passwords:
            base |= {"PRIVBANDIT_USERNAME": role, "PRIVBANDIT_PASSWORD": passwords[role]}
        return base | extra

    page = [] if dashboard_port is None else ["--dashboard", "--dashboard-port", str(dashboard_port)]
    users_key = hex(keys.users)  # the users' MAC keys, as registered with the intermediaries
    parties = [Party("observer", ["observer", *world, "--out", str(out), "--parties", ",".join(names),
                                  *state("observer"), *page],
                     env("observer", PRIVBANDIT_REPORT_AUTH_KEY=users_key,
                         **({BROKER_ACL_ENV: broker_acl} if broker_acl else {})), observer_log)]
    parties.append(Party("analyzer", ["analyzer", *state("analyzer")], env("analyzer", PRIVBANDIT_ANALYZER_KEY=hex(
        analyzer_master_key(config.seed))), logs / "analyzer.log"))
    for name in intermediaries:  # "aggregator", "shuffler", or one of k: "shuffler-2" (its own account)
        role = account_role(name)
        command = [role.value, *(["--name", name] if name != role.value else []), *state(name)]
        given = {"PRIVBANDIT_REPORT_AUTH_KEY": users_key}
        if role is Role.AGGREGATOR:  # every fleet's chunk key, through their master
            given["PRIVBANDIT_FLEET_MASTER_KEY"] = hex(keys.fleets)
            if secagg_step_s is not None:
                command += ["--secagg-step-deadline", repr(float(secagg_step_s))]
        else:  # its own master, the one the in-process engine gives it: same seed, same numbers
            given["PRIVBANDIT_SHUFFLE_KEY"] = hex(shuffler_master_key(config.seed, name))
        parties.append(Party(name, command, env(name, **given), logs / f"{name}.log"))
    for i, name in enumerate(users):  # each fleet its own chunk key; all of them the users' keys
        parties.append(Party(name, ["users", "--shard", f"{i}/{shards}", *world],
                             env("users", PRIVBANDIT_REPORT_AUTH_KEY=users_key, PRIVBANDIT_FLEET_KEY=hex(keys.fleet(i)),
                                 PRIVBANDIT_IDENTITY_KEY=hex(keys.identities)), logs / f"{name}.log"))
    # The experiment's traffic adversaries: hostile clients with the account their attack needs;
    # each leaves when the session shuts down and writes what it did to <out>/adversaries/<kind>.json.
    for kind in getattr(config, "traffic_adversaries", []):
        role = "analyzer" if kind == "curious-analyzer" else "users"
        ready = out / "adversaries" / f"{kind}.subscribed"
        file = [str(experiment), *sets] if kind == "forge" else []  # it attacks with the file's seed
        parties.append(Party(f"hostile-{kind}", ["attack", kind, *file, "--duration", str(HOSTILE_MAX_S),
                                                 "--report", str(out / "adversaries" / f"{kind}.json"),
                                                 "--ready-file", str(ready)],
                             env(role), logs / f"hostile-{kind}.log", hostile=True, ready_file=ready))
    return parties


def launch(family, config, experiment: Path, overrides: list[str], out: Path,
           broker_url: str | None = None, shards: int = 2, timeout_s: float | None = None,
           restart_on_crash: int = 0, started: Callable[[list[Party]], None] | None = None,
           checkpoint: bool = True, *, passwords: Mapping[str, str] | None = None,
           tls_files: Mapping[str, str] | None = None, insecure_broker: bool = False,
           run_id: str | None = None, dashboard_port: int | None = None, secagg_step_s: float | None = None) -> int:
    """Run the experiment distributed; returns the observer's exit code (0 on success).

    ``broker_url``: an external broker (default: an embedded one started here). ``passwords``
    (role → password) and ``tls_files`` (``ca_file``, ``cert_file``, ``key_file``) are for it;
    ``run_id`` must be the one its ACL was written for (default: a fresh one). The broker is
    probed first (:func:`~privbandit.services.broker_probe.check_broker`): one that lets a role or
    an anonymous client read what the ACL denies raises BrokerInsecure before any party starts,
    unless ``insecure_broker``.
    ``restart_on_crash``: how many party crashes in all to survive by restarting the party.
    ``started``: called with the parties once they are all started (fault-injection tests).
    ``checkpoint``: give the analyzer and intermediaries state directories (benchmarks turn it off).
    ``dashboard_port``: the observer serves the session's web page on 127.0.0.1 there.
    ``secagg_step_s``: how long a secure-aggregation step waits for every fleet (the aggregator's
    ``--secagg-step-deadline``; None: its default)."""
    from privbandit.services.broker_probe import check_broker
    from privbandit.services.bus import BusSettings

    run_id = run_id or "r" + secrets.token_hex(4)
    needed = party_roles(family, config)
    if broker_url is None and (passwords or tls_files):
        raise ValueError("credentials and TLS files are for an external broker: give its URL (--broker)")
    if passwords and (missing := [r for r in needed if r not in passwords]):
        raise ValueError(f"credentials: no password for the {', '.join(missing)} account(s) "
                         f"({password_env(missing[0])}; `privbandit broker-config --instance NAME` writes "
                         "an intermediary instance's)")
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "state", ignore_errors=True)  # a new session: earlier checkpoints are another run's
    shutil.rmtree(out / "adversaries", ignore_errors=True)  # and earlier attack reports another session's
    with ExitStack() as stack:
        if broker_url is None:
            from privbandit.services.embedded_broker import start_embedded_broker

            # Every role's account, and each intermediary instance's (shuffler-1 … shuffler-k)
            passwords = {a: secrets.token_urlsafe(16) for a in dict.fromkeys([*(r.value for r in Role), *needed])}
            broker = start_embedded_broker(run_id, passwords)
            stack.callback(broker.stop)
            broker_url = broker.url
        settings = BusSettings(broker_url=broker_url, run_id=run_id, username=None, password=None,
                               credentials_file=None, **{k: None for k in TLS_FIELDS} | dict(tls_files or {}))
        settings.tls_context()  # a TLS file that cannot be used is named here, not in six party logs
        acl_state, probe = check_broker(settings, run_id, passwords, insecure_broker)
        if acl_state != "enforced":
            print(f"[launcher] --insecure-broker: the broker at {broker_url} does not enforce the trust model "
                  f"({probe.describe()}); running anyway", file=sys.stderr)
        parties = plan_parties(family, config, experiment, overrides, out, broker_url, run_id, shards, passwords,
                               checkpoint=checkpoint, tls_files=tls_files, broker_acl=acl_state,
                               dashboard_port=dashboard_port, secagg_step_s=secagg_step_s)
        # The experiment's adversaries first, subscribed before the session can begin: an attack
        # that connects after the first plans would miss them, and attack less than it reports.
        hostile = [p for p in parties if p.hostile]
        for p in hostile:
            p.start()
            stack.callback(p.stop)
        wait_subscribed(hostile)
        for p in parties:
            if not p.hostile:
                p.start()
                stack.callback(p.stop)
        if started is not None:
            started(parties)
        observer = parties[0]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        restarts = restart_on_crash
        while True:
            # The observer's own exit ends the session (0: results written, 1: the session failed),
            # unless a signal killed it: then it is restarted like any party, and resumes.
            if observer.proc.poll() is not None and (observer.proc.returncode >= 0 or restarts <= 0):
                break
            crashed = [p for p in parties if p.proc.poll() not in (None, 0)
                       and (p is not observer or p.proc.returncode < 0)]
            for p in crashed:
                code = p.proc.returncode
                if restarts <= 0 or code == USAGE_ERROR:
                    raise RuntimeError(f"{p.name} exited with {code}; see {p.log}:\n{log_tail(p.log)}")
                restarts -= 1
                with open(p.log or os.devnull, "a") as fh:
                    fh.write(f"\n--- launcher: {p.name} exited with {code}; restarting it "
                             f"({restarts} restarts left) ---\n")
                p.start()
            if deadline and time.monotonic() > deadline:
                raise TimeoutError(f"the distributed run did not finish in {timeout_s:.0f} s; logs in {out / 'logs'}")
            time.sleep(0.2)
        # SIGTERM: each writes its report and leaves, wherever its backlog stands. All at once and
        # with a long grace: on a loaded machine a hostile process gets a sliver of a core, and the
        # payload it is building (an 8 MiB forged report, a decoding bomb) can hold its event loop,
        # and the report, past a few seconds; SIGKILL then leaves no report (the likely cause of a
        # suite run with no volley report, 2026-11-29, when each got 5 s in turn).
        stop_process(*(p.proc for p in parties if p.hostile), grace_s=HOSTILE_STOP_S)
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
