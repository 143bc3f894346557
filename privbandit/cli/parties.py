"""The parties, each its own process: analyzer, aggregator, shuffler, users and observer; their keys
(keys), checkpoints (reset-state) and healthcheck (health); and `privbandit up`, which runs a
docker-compose topology as local processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from privbandit.cli.broker import InsecureBrokerOption
from privbandit.cli.common import SetOption, _error, _settings, _world, err
from privbandit.cli.dashboard import PageOnlyPortOption, _page_port
from privbandit.runner.config import ConfigError

BrokerOption = Annotated[Optional[str], typer.Option(
    "--broker", help="mqtt://host:port or mqtts://host:port [default: $PRIVBANDIT_BROKER_URL]")]
RunIdOption = Annotated[Optional[str], typer.Option("--run-id", help="[default: $PRIVBANDIT_RUN_ID]")]
StateDirOption = Annotated[Optional[Path], typer.Option(
    "--state-dir", help="checkpoint here at every round boundary and resume from it after a restart "
                        "(one directory per party)")]


def _serve(make_service) -> None:
    """Build the service (``make_service()``: it may refuse its checkpoint) and run it."""
    import asyncio
    import faulthandler
    import logging
    import signal

    from privbandit.services.allocator import keep_freed_memory
    from privbandit.services.bus import SubscriptionDenied
    from privbandit.services.checkpoint import CheckpointError

    keep_freed_memory()  # a block's temporaries reuse the last block's pages (services/allocator.py)
    try:
        service = make_service()
    except CheckpointError as exc:
        _error(exc)
        raise typer.Exit(2)
    level = getattr(logging, os.environ.get("PRIVBANDIT_LOG_LEVEL", "INFO").upper(), logging.INFO)
    logging.basicConfig(level=level, format=f"%(asctime)s {service.name} %(levelname)s %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: stacks to the party's log
    try:
        asyncio.run(service.serve())
    except (ConnectionError, SubscriptionDenied) as exc:
        _error(f"{service.name}: {exc}")
        raise typer.Exit(1)
    except CheckpointError as exc:
        _error(f"{service.name}: {exc}")
        raise typer.Exit(2)


def parse_key(name: str, text: str) -> int:
    """A key as ``privbandit keys`` writes it: a hexadecimal integer (``0x`` optional), < 2**256."""
    try:
        key = int(text.strip(), 16)
    except ValueError:
        raise ValueError(f"{name} must be a hexadecimal integer, got {text[:20]!r}") from None
    if not 0 <= key < 2**256:
        raise ValueError(f"{name} must lie in [0, 2**256), got {key.bit_length()} bits")
    return key


def _key(name: str) -> int | None:
    """A party's key: ``$NAME``, or the ``NAME=value`` line of the file ``$NAME_FILE`` names
    (written by ``privbandit keys``; docker-compose.yml mounts it for that party alone)."""
    text = _key_text(name)
    if text is None:
        return None
    try:
        return parse_key(name, text)
    except ValueError as exc:
        _error(exc)
        raise typer.Exit(2)


def _key_text(name: str) -> str | None:
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if not path:
        return None
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        _error(f"{name}_FILE={path}: {exc.strerror}")
        raise typer.Exit(2)
    except UnicodeDecodeError:
        _error(f"{name}_FILE={path}: not UTF-8 text")
        raise typer.Exit(2)
    found = [line.split("=", 1)[1].strip() for line in lines if line.startswith(f"{name}=")]
    if not found:
        _error(f"{name}_FILE={path} has no {name}=... line")
        raise typer.Exit(2)
    return found[0]


def analyzer(broker: BrokerOption = None, run_id: RunIdOption = None, state_dir: StateDirOption = None):
    """The analyzer server: runs the learner, publishes plans, reads releases only.

    Its key comes from PRIVBANDIT_ANALYZER_KEY (hex) or PRIVBANDIT_ANALYZER_KEY_FILE; it is never
    given the experiment file."""
    from privbandit.services.analyzer import AnalyzerService

    key = _key("PRIVBANDIT_ANALYZER_KEY")
    if key is None:
        _error("neither PRIVBANDIT_ANALYZER_KEY nor PRIVBANDIT_ANALYZER_KEY_FILE is set "
                  "(the launcher sets the key)")
        raise typer.Exit(2)
    settings = _settings(broker, run_id)
    _serve(lambda: AnalyzerService(settings, key, state_dir))


def _required_key(name: str, writer: str) -> int:
    """A key without which the party could check or sign nothing: it refuses to start."""
    key = _key(name)
    if key is None:
        _error(f"neither {name} nor {name}_FILE is set (`{writer}` writes it; the launcher "
                  f"sets it)")
        raise typer.Exit(2)
    return key


def _report_key() -> int:
    """The users' report-authentication master, a secret of the session (the fleets sign with it,
    the intermediaries and the observer check)."""
    return _required_key("PRIVBANDIT_REPORT_AUTH_KEY", "privbandit keys --party session")


IntermediaryName = Annotated[Optional[str], typer.Option(
    "--name", help="this party's name and broker account when the session has several of its role: "
                   "<role>-<i>, e.g. shuffler-2 (default: the role)")]


def _intermediary_name(role: str, name: str | None) -> str:
    """The party's name: its role, or one of several of that role (``shuffler-2``)."""
    from privbandit.services.acl import account_role, is_instance
    from privbandit.services.acl.topics import MAX_INSTANCE

    if name is None or name == role:
        return role
    if not is_instance(name) or account_role(name).value != role:
        _error(f"--name {name!r}: expected {role} or {role}-<i> with i in 1..{MAX_INSTANCE}")
        raise typer.Exit(2)
    return name


def aggregator(
    deadline: Annotated[float, typer.Option(help="seconds a round may stay incomplete")] = 120.0,
    secagg_step_deadline: Annotated[float, typer.Option(
        help="with intermediary = secagg: seconds a protocol step waits for every fleet before "
             "treating the silent users as dropouts")] = 30.0,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
    state_dir: StateDirOption = None,
    name: IntermediaryName = None,
):
    """The aggregator: releases (Σ y) mod m and nothing else, as the ideal modular sum or, with
    intermediary = secagg, by running the server side of secure aggregation."""
    from privbandit.services.intermediary import IntermediaryService

    party = _intermediary_name("aggregator", name)
    if not secagg_step_deadline > 0 or not deadline > 0:
        _error("--deadline and --secagg-step-deadline must be > 0 seconds")
        raise typer.Exit(2)
    settings = _settings(broker, run_id)
    report_key = _report_key()
    fleets = _required_key("PRIVBANDIT_FLEET_MASTER_KEY", "privbandit keys --party session")  # their chunk keys
    _serve(lambda: IntermediaryService(settings, report_key, party, deadline,
                                       secagg_step_s=secagg_step_deadline, state_dir=state_dir, fleet_master=fleets))


def shuffler(
    deadline: Annotated[float, typer.Option(help="seconds a round may stay incomplete")] = 120.0,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
    state_dir: StateDirOption = None,
    name: IntermediaryName = None,
):
    """The shuffler: releases a uniformly permuted multiset, without senders, order or timing.
    With ``--name shuffler-i``, the i-th of several shufflers (the concurrent-shuffle family's k)."""
    from privbandit.services.intermediary import IntermediaryService

    party = _intermediary_name("shuffler", name)
    key = _key("PRIVBANDIT_SHUFFLE_KEY")
    settings = _settings(broker, run_id)
    _serve(lambda: IntermediaryService(settings, _report_key(), party, deadline, key, state_dir=state_dir))


def users(
    shard: Annotated[str, typer.Option(help="i/N: host every user block b with b mod N = i")],
    experiment: Annotated[Path, typer.Option(help="experiment file (the simulated world)")],
    set_: SetOption = None,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
):
    """A fleet of users: each randomizes locally; records are batched into few MQTT messages."""
    from privbandit.services.users import UserFleetService, parse_shard

    try:
        i, n = parse_shard(shard)
    except ValueError as exc:
        _error(exc)
        raise typer.Exit(2)
    settings, (family, config) = _settings(broker, run_id), _world(experiment, set_)
    # The session's keys: the users' report key, the fleet's own chunk key (no other fleet holds
    # it) and the users' identities; none derives from the experiment's seed.
    report_key = _report_key()
    key = _required_key("PRIVBANDIT_FLEET_KEY", "privbandit keys --party session")
    identity_key = _required_key("PRIVBANDIT_IDENTITY_KEY", "privbandit keys --party session")
    _serve(lambda: UserFleetService(settings, family, config, i, n, report_key=report_key, fleet_key=key,
                                    identity_key=identity_key))


def observer(
    experiment: Annotated[Path, typer.Option(help="experiment file")],
    parties: Annotated[str, typer.Option(help="comma-separated parties to wait for")],
    out: Annotated[Path, typer.Option(help="results directory")],
    set_: SetOption = None,
    ready_timeout: Annotated[float, typer.Option(help="seconds to wait for every party to be ready")] = 60.0,
    stall_timeout: Annotated[float, typer.Option(
        help="fail the session when a task makes no progress for this many seconds")] = 240.0,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
    state_dir: StateDirOption = None,
    dashboard: Annotated[bool, typer.Option("--dashboard", help="serve the session's live web page")] = False,
    dashboard_port: PageOnlyPortOption = None,
    dashboard_host: Annotated[str, typer.Option(help="the dashboard's address (0.0.0.0 in a container whose "
                                                     "port is published on the host's loopback)")] = "127.0.0.1",
):
    """Collects metrics, paces the session and writes the results directory."""
    from privbandit.services.dashboard import Dashboard, DashboardError
    from privbandit.services.observer import ObserverService, SessionFailed

    if not stall_timeout > 0:
        _error(f"--stall-timeout {stall_timeout}: must be > 0 seconds")
        raise typer.Exit(2)
    every = _progress_period()
    settings, (family, config), built = _settings(broker, run_id), _world(experiment, set_), []
    report_key = _report_key()  # checks the fleets' truths and statuses
    try:
        port = _page_port(dashboard, dashboard_port)
        page = Dashboard(dashboard_host, port) if port is not None else None
    except (DashboardError, ConfigError) as exc:
        _error(exc)
        raise typer.Exit(2)
    _serve(lambda: built.append(ObserverService(settings, family, config, parties.split(","), out, ready_timeout,
                                                state_dir, stall_timeout, dashboard=page, report_key=report_key,
                                                progress_log_s=every))
           or built[0])
    service = built[0]
    try:
        service.write()
    except SessionFailed as exc:
        _error(f"the session failed: {exc}")
        raise typer.Exit(1)


def _progress_period() -> float:
    """PRIVBANDIT_PROGRESS_LOG_S: seconds between the observer's progress lines where its stderr is
    not a terminal (services/observer.py, PROGRESS_LOG_S)."""
    from privbandit.services.observer import PROGRESS_LOG_S

    text = os.environ.get("PRIVBANDIT_PROGRESS_LOG_S")
    if text is None:
        return PROGRESS_LOG_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 1 <= seconds <= 86_400:  # the observer looks once a second (its tick): no finer period
        _error(f"PRIVBANDIT_PROGRESS_LOG_S={text!r}: must be a number of seconds in [1, 86400]")
        raise typer.Exit(2)
    return seconds


def health(
    file: Annotated[Path, typer.Argument(help="the party's PRIVBANDIT_HEALTH_FILE")],
    max_age: Annotated[float, typer.Option(min=0.1, help="seconds since the party last marked itself alive")] = 15.0,
):
    """A container healthcheck: exit 0 if the party marked itself alive and connected (it touches
    PRIVBANDIT_HEALTH_FILE every tick) within --max-age seconds, 1 otherwise, saying why."""
    import time

    try:
        age = time.time() - file.stat().st_mtime
    except OSError as exc:
        err.print(f"unhealthy: {file}: {exc.strerror or exc} (the party has not marked itself alive yet)",
                  highlight=False)
        raise typer.Exit(1)
    if age > max_age:
        err.print(f"unhealthy: {file} last marked {age:.1f} s ago (> --max-age {max_age:g} s): the party is hung "
                  f"or has lost the broker", highlight=False)
        raise typer.Exit(1)
    print(f"healthy: marked {age:.1f} s ago")


def reset_state(
    state_dir: Annotated[list[Path], typer.Argument(help="a party's --state-dir")],
):
    """Remove the checkpoints in the parties' state directories, so a new session starts afresh
    (docker-compose.yml runs it before every session; a party restarted within one resumes). Other
    files are left alone."""
    from privbandit.services.checkpoint import FILE_NAME

    for directory in state_dir:
        if directory.exists() and not directory.is_dir():
            _error(f"STATE_DIR {directory}: not a directory")
            raise typer.Exit(2)
        # the checkpoint, and what a writer killed mid-write left (checkpoint.atomic_write)
        for path in [directory / FILE_NAME, *directory.glob(f".{FILE_NAME}.tmp-*")]:
            try:
                path.unlink()
                err.print(f"removed {path}", highlight=False)
            except FileNotFoundError:
                pass
            except OSError as exc:
                _error(f"STATE_DIR {directory}: cannot remove {path.name}: {exc.strerror}")
                raise typer.Exit(2)


def keys(
    out: Annotated[Path, typer.Option(help="directory for <party>.env")],
    experiment: Annotated[Optional[Path], typer.Option(
        help="experiment file (its seed), for analyzer and shuffler")] = None,
    party: Annotated[str, typer.Option(
        help="analyzer, shuffler (their keys, from the seed) or session (the session's secrets, drawn "
             "afresh: the users' report key and the fleets' keys): each key file is for its parties "
             "alone")] = "analyzer",
    fleet_dir: Annotated[Optional[list[Path]], typer.Option(
        "--fleet-dir", help="with --party session: fleet i's directory for its fleet.env, once per fleet in "
                            "shard order")] = None,
    observer_dir: Annotated[Optional[Path], typer.Option(
        "--observer-dir", help="with --party session: the observer's directory for its observer.env")] = None,
    set_: SetOption = None,
    name: Annotated[Optional[str], typer.Option(
        "--name", help="with --party shuffler: which shuffler, shuffler-<i> (each has its own key) "
                       "[default: shuffler]")] = None,
):
    """Write a party's key file: derived from the run seed, so compose deployments reproduce
    `privbandit run` (analyzer, shuffler), or the session's secrets, drawn afresh (session).

    The analyzer gets analyzer.env, never the experiment; the shuffler's key (which would undo the
    shuffle) must never sit where the analyzer can read it. The session's secrets authenticate the
    users and the fleets, so they come from the OS's randomness, never from the seed every fleet
    and every results directory holds (issue #32): --out gets intermediary.env (the users' report
    key, for the intermediaries) and fleets.env (the fleets' master, for the aggregator alone);
    each --fleet-dir gets that fleet's fleet.env (the users' report and identity keys, and its own
    chunk key); --observer-dir gets observer.env (the users' report key, to check truths)."""
    from privbandit.protocol.primitives.report_auth import SessionKeys
    from privbandit.protocol.primitives.seeding import analyzer_master_key, shuffler_master_key

    derive = {"analyzer": ("PRIVBANDIT_ANALYZER_KEY", analyzer_master_key),
              "shuffler": ("PRIVBANDIT_SHUFFLE_KEY", shuffler_master_key)}
    if party in ("session", "fleets"):  # "fleets": its name before the users' keys joined it
        if not fleet_dir:
            _error(f"--party {party}: give --fleet-dir once per fleet (its fleet.env goes there)")
            raise typer.Exit(2)
        drawn = SessionKeys.draw()
        _write_key_file(out / "intermediary.env", {"PRIVBANDIT_REPORT_AUTH_KEY": drawn.users})
        _write_key_file(out / "fleets.env", {"PRIVBANDIT_FLEET_MASTER_KEY": drawn.fleets})
        for i, directory in enumerate(fleet_dir):
            _write_key_file(directory / "fleet.env", {"PRIVBANDIT_REPORT_AUTH_KEY": drawn.users,
                                                      "PRIVBANDIT_FLEET_KEY": drawn.fleet(i),
                                                      "PRIVBANDIT_IDENTITY_KEY": drawn.identities})
        if observer_dir is not None:
            _write_key_file(observer_dir / "observer.env", {"PRIVBANDIT_REPORT_AUTH_KEY": drawn.users})
        return
    if party == "intermediary":
        _error("--party intermediary: the users' report keys no longer derive from the seed, which every "
               "experiment file holds (issue #32); `privbandit keys --party session` draws them with the "
               "fleets' keys, in one go (its intermediary.env is the intermediaries')")
        raise typer.Exit(2)
    if party not in derive:
        _error(f"--party {party!r}: choose analyzer, shuffler or session")
        raise typer.Exit(2)
    if experiment is None:
        _error(f"--party {party}: --experiment is required (the key derives from its seed)")
        raise typer.Exit(2)
    if fleet_dir or observer_dir:
        _error("--fleet-dir, --observer-dir: only with --party session")
        raise typer.Exit(2)
    if name is not None and party != "shuffler":
        _error("--name: only with --party shuffler")
        raise typer.Exit(2)
    var, master = derive[party]
    _, config = _world(experiment, set_)
    if party == "shuffler":
        name = _intermediary_name("shuffler", name)
        _write_key_file(out / f"{name}.env", {var: master(config.seed, name)})
    else:
        _write_key_file(out / f"{party}.env", {var: master(config.seed)})


def _write_key_file(path: Path, keys: dict[str, int]) -> None:
    from privbandit.services.acl.broker_files import write_with_mode

    path.parent.mkdir(parents=True, exist_ok=True)
    # never readable by others, even if it was before
    write_with_mode(path, "".join(f"{var}={hex(key)}\n" for var, key in keys.items()), 0o600)
    err.print(f"wrote {path}")


def up(
    file: Annotated[Path, typer.Option("-f", "--file", help="compose file")] = Path("docker-compose.yml"),
    broker: Annotated[Optional[str], typer.Option(help="mqtt://host:port: use this broker, not the file's")] = None,
    insecure_broker: InsecureBrokerOption = False,
    profile: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="also run the services of this compose profile, e.g. cluster (repeatable)")] = None,
    env_file: Annotated[Optional[Path], typer.Option(
        help="variables for the file's ${VAR} (the environment's win), e.g. cluster.env")] = None,
):
    """Run a docker-compose topology here, every service a local process (no Docker needed)."""
    from privbandit.services.compose import ComposeError, up as compose_up

    try:
        code = compose_up(file, broker, insecure_broker=insecure_broker, profiles=profile or (), env_file=env_file)
    except ComposeError as exc:
        _error(exc)
        raise typer.Exit(1)
    raise typer.Exit(code)
