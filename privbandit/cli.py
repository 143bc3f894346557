"""The ``privbandit`` command."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from privbandit.experiment.config import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
err = Console(stderr=True)


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="experiment file (TOML)")],
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="override a field: dotted.name=value")] = None,
    runs: Annotated[Optional[int], typer.Option(help="number of runs (overrides the file)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="results directory [default: results/<name>]")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="worker processes [default: all cores]")] = None,
    transport: Annotated[str, typer.Option(help="inproc: one process, vectorized; mqtt: every party its own process")] = "inproc",
    broker: Annotated[Optional[str], typer.Option(help="mqtt://host:port [default: an embedded broker]")] = None,
    shards: Annotated[int, typer.Option(help="user fleets, with --transport mqtt")] = 2,
):
    """Run an experiment file: many runs of each algorithm, then a results directory."""
    from privbandit.experiment.families import DEFAULT_FAMILY, family_module, family_of

    overrides = list(set_ or []) + ([f"runs={runs}"] if runs is not None else [])
    try:
        if transport not in ("inproc", "mqtt"):
            raise ConfigError(f"--transport {transport!r}: choose inproc or mqtt")
        if jobs is not None and jobs < 1:
            raise ConfigError(f"--jobs {jobs}: must be ≥ 1")
        if shards < 1:
            raise ConfigError(f"--shards {shards}: must be ≥ 1")
        family_name = family_of(experiment, overrides)
        family = family_module(family_name)
        config = family.load(experiment, overrides)
        out = out or Path("results") / config.name
        if transport == "mqtt":
            check = getattr(family, "check_distributed", None)  # a family that runs over MQTT says what it can run
            if family_name != DEFAULT_FAMILY and check is None:
                raise ConfigError(f"--transport mqtt: not yet available for family {family_name!r}")
            if check is not None:
                check(config)
            return _run_distributed(config, experiment, overrides, out, broker, shards)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=not err.is_terminal) as bar:
            ids = {label: bar.add_task(label, total=config.runs) for label in config.algorithms}
            outcome = family.run(config, jobs=jobs, progress=lambda label, run: bar.advance(ids[label]))
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2)
    summary = family.write(out, config, outcome)
    _print_summary(summary, out)


def _run_distributed(config, experiment: Path, overrides: list[str], out: Path, broker: str | None, shards: int):
    import json

    from privbandit.services.launcher import launch

    code = launch(config, experiment, overrides, out, broker_url=broker, shards=shards)
    if code != 0:
        err.print(f"[bold red]error:[/] the distributed run failed (observer exit {code}); logs in {out / 'logs'}")
        raise typer.Exit(1)
    _print_summary(json.loads((out / "summary.json").read_text()), out)


def _print_summary(summary: dict, out: Path) -> None:
    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"{summary['experiment']}: T = {summary['horizon']:,}, {summary['runs']} runs, "
                        f"{summary['elapsed_s']:.1f} s")
    wire = summary["transport"] == "mqtt"
    cols = ("algorithm", "regret (mean ± se)", "Reg/T", "ε spent", "bits/user", *(("wire B/user",) if wire else ()), "users/s")
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for label, a in summary["algorithms"].items():
        p = summary["privacy"][label]
        eps = p["epsilon_pure"]
        spent = f"{eps:g} (pure)" if eps is not None else (
            f"{p['epsilon_at_delta']:.3g} (δ={p['delta']:g})" if p["epsilon_at_delta"] is not None else "∞")
        ups = a["users_per_s"]
        table.add_row(
            label,
            f"{a['regret_final_mean']:,.1f} ± {a['regret_final_stderr']:,.1f}",
            f"{a['regret_final_mean'] / summary['horizon']:.4f}",
            spent,
            f"{summary['communication'][label]['bits_per_user_protocol']:.1f}",
            *((f"{summary['communication'][label]['bytes_per_user_wire']:.2f}",) if wire else ()),
            f"{ups:,.0f}" if ups else "-",
        )
    console.print(table)
    files = ", ".join(sorted(p.name for p in out.iterdir() if p.is_file()))
    console.print(f"results in {out}/ ({files})")


@app.command("letor-arms")
def letor_arms(
    letor_file: Annotated[Path, typer.Argument(help="LETOR-format file, e.g. MSLR-WEB10K/Fold1/train.txt")],
    arms: Annotated[int, typer.Option(help="number of K-means clusters (arms)")] = 50,
    seed: Annotated[int, typer.Option(help="K-means seed")] = 0,
    out: Annotated[Path, typer.Option(help="arm-means JSON to write")] = Path("arm_means.json"),
    max_rows: Annotated[Optional[int], typer.Option(help="read at most this many rows")] = None,
):
    """Cluster a LETOR data set into arms and write the arm-means file experiments point to."""
    from privbandit.datasets import letor

    argv = [str(letor_file), "--arms", str(arms), "--seed", str(seed), "--out", str(out)]
    if max_rows is not None:
        argv += ["--max-rows", str(max_rows)]
    raise typer.Exit(letor.main(argv))


# --- the parties, each its own process ---------------------------------------------------------

BrokerOption = Annotated[Optional[str], typer.Option(
    "--broker", help="mqtt://host:port [default: $PRIVBANDIT_BROKER_URL]")]
RunIdOption = Annotated[Optional[str], typer.Option("--run-id", help="[default: $PRIVBANDIT_RUN_ID]")]


def _settings(broker: str | None, run_id: str | None):
    """Broker URL, run id and credentials: PRIVBANDIT_* environment variables, CLI options first."""
    from pydantic import ValidationError

    from privbandit.services.bus import BusSettings

    given = {k: v for k, v in (("broker_url", broker), ("run_id", run_id)) if v is not None}
    try:
        settings = BusSettings(**given)
        settings.endpoint()
        return settings
    except (ValidationError, ValueError) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2)


def _serve(service) -> None:
    import asyncio
    import faulthandler
    import logging
    import signal

    from privbandit.services.bus import SubscriptionDenied

    level = getattr(logging, os.environ.get("PRIVBANDIT_LOG_LEVEL", "INFO").upper(), logging.INFO)
    logging.basicConfig(level=level, format=f"%(asctime)s {service.name} %(levelname)s %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: stacks to the party's log
    try:
        asyncio.run(service.serve())
    except (ConnectionError, SubscriptionDenied) as exc:
        err.print(f"[bold red]error:[/] {service.name}: {exc}", highlight=False)
        raise typer.Exit(1)


def _world(experiment: Path, set_: list[str] | None):
    from privbandit.experiment.families import family_module, family_of

    try:
        overrides = list(set_ or [])
        return family_module(family_of(experiment, overrides)).load(experiment, overrides)
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2)


def _key(name: str) -> str | None:
    """A party's key: ``$NAME``, or the ``NAME=value`` line of the file ``$NAME_FILE`` names
    (written by ``privbandit keys``; docker-compose.yml mounts it for that party alone)."""
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if not path:
        return None
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        err.print(f"[bold red]error:[/] {name}_FILE={path}: {exc.strerror}")
        raise typer.Exit(2)
    found = [line.split("=", 1)[1].strip() for line in lines if line.startswith(f"{name}=")]
    if not found:
        err.print(f"[bold red]error:[/] {name}_FILE={path} has no {name}=... line")
        raise typer.Exit(2)
    return found[0]


@app.command()
def analyzer(broker: BrokerOption = None, run_id: RunIdOption = None):
    """The analyzer server: runs the learner, publishes plans, reads releases only.

    Its key comes from PRIVBANDIT_ANALYZER_KEY (hex) or PRIVBANDIT_ANALYZER_KEY_FILE; it is never
    given the experiment file."""
    from privbandit.services.analyzer import AnalyzerService

    key = _key("PRIVBANDIT_ANALYZER_KEY")
    if not key:
        err.print("[bold red]error:[/] neither PRIVBANDIT_ANALYZER_KEY nor PRIVBANDIT_ANALYZER_KEY_FILE is set "
                  "(the launcher sets the key)")
        raise typer.Exit(2)
    _serve(AnalyzerService(_settings(broker, run_id), int(key, 16)))


@app.command()
def aggregator(
    deadline: Annotated[float, typer.Option(help="seconds a round may stay incomplete")] = 120.0,
    secagg_step_deadline: Annotated[float, typer.Option(
        help="with intermediary = secagg: seconds a protocol step waits for every fleet before "
             "treating the silent users as dropouts")] = 30.0,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
):
    """The aggregator: releases (Σ y) mod m and nothing else, as the ideal modular sum or, with
    intermediary = secagg, by running the server side of secure aggregation."""
    from privbandit.services.intermediary import IntermediaryService

    if not secagg_step_deadline > 0 or not deadline > 0:
        err.print("[bold red]error:[/] --deadline and --secagg-step-deadline must be > 0 seconds")
        raise typer.Exit(2)
    _serve(IntermediaryService(_settings(broker, run_id), "aggregator", deadline,
                               secagg_step_s=secagg_step_deadline))


@app.command()
def shuffler(
    deadline: Annotated[float, typer.Option(help="seconds a round may stay incomplete")] = 120.0,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
):
    """The shuffler: releases a uniformly permuted multiset, without senders, order or timing."""
    from privbandit.services.intermediary import IntermediaryService

    key = _key("PRIVBANDIT_SHUFFLE_KEY")
    _serve(IntermediaryService(_settings(broker, run_id), "shuffler", deadline, None if not key else int(key, 16)))


@app.command()
def users(
    shard: Annotated[str, typer.Option(help="i/N: host every user block b with b mod N = i")],
    experiment: Annotated[Path, typer.Option(help="experiment file (the simulated world)")],
    set_: Annotated[Optional[list[str]], typer.Option("--set")] = None,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
):
    """A fleet of users: each randomizes locally; records are batched into few MQTT messages."""
    from privbandit.services.users import UserFleetService, parse_shard

    try:
        i, n = parse_shard(shard)
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2)
    _serve(UserFleetService(_settings(broker, run_id), _world(experiment, set_), i, n))


@app.command()
def observer(
    experiment: Annotated[Path, typer.Option(help="experiment file")],
    parties: Annotated[str, typer.Option(help="comma-separated parties to wait for")],
    out: Annotated[Path, typer.Option(help="results directory")],
    set_: Annotated[Optional[list[str]], typer.Option("--set")] = None,
    ready_timeout: Annotated[float, typer.Option(help="seconds to wait for every party to be ready")] = 60.0,
    broker: BrokerOption = None,
    run_id: RunIdOption = None,
):
    """Collects metrics, paces the session and writes the results directory."""
    from privbandit.services.observer import ObserverService, SessionFailed

    config = _world(experiment, set_)
    if getattr(config, "family", None) == "shuffle-linear-bandits":
        from privbandit.services.linear import LinearObserverService as ObserverService
    service = ObserverService(_settings(broker, run_id), config, parties.split(","), out, ready_timeout)
    _serve(service)
    try:
        service.write()
    except SessionFailed as exc:
        err.print(f"[bold red]error:[/] the session failed: {exc}")
        raise typer.Exit(1)


@app.command("broker-config")
def broker_config(
    out: Annotated[Path, typer.Option(help="directory for mosquitto.conf, passwd, acl, credentials.env")],
    run_id: Annotated[str, typer.Option(help="the run id: topics live under pb/<run-id>/")] = "demo",
    port: Annotated[int, typer.Option(help="the listener port")] = 1883,
    host: Annotated[str, typer.Option(help="the listener address (0.0.0.0 in a container)")] = "127.0.0.1",
    backend: Annotated[str, typer.Option(help="acl_file (portable) or dynsec (refuses SUBSCRIBEs too)")] = "acl_file",
):
    """Write a Mosquitto configuration with one account per role and the run's ACLs."""
    from privbandit.services.broker_cli import broker_config_main

    raise typer.Exit(broker_config_main(out, run_id, port, host=host, backend=backend))


@app.command()
def keys(
    experiment: Annotated[Path, typer.Option(help="experiment file")],
    out: Annotated[Path, typer.Option(help="directory for <party>.env")],
    party: Annotated[str, typer.Option(help="analyzer or shuffler: each key file is for its party alone")] = "analyzer",
    set_: Annotated[Optional[list[str]], typer.Option("--set")] = None,
):
    """Derive a party's key from the run seed, so compose deployments reproduce `privbandit run`.

    The analyzer gets analyzer.env, never the experiment; the shuffler's key (which would undo the
    shuffle) must never sit where the analyzer can read it."""
    from privbandit.protocol.seeding import analyzer_master_key, shuffler_master_key

    derive = {"analyzer": ("PRIVBANDIT_ANALYZER_KEY", analyzer_master_key),
              "shuffler": ("PRIVBANDIT_SHUFFLE_KEY", shuffler_master_key)}
    if party not in derive:
        err.print(f"[bold red]error:[/] --party {party!r}: choose analyzer or shuffler")
        raise typer.Exit(2)
    var, master = derive[party]
    config = _world(experiment, set_)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{party}.env"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{var}={hex(master(config.seed))}\n")
    err.print(f"wrote {path}")


@app.command()
def demo(
    broker: Annotated[Optional[str], typer.Option(help="mqtt://host:port [default: an embedded broker]")] = None,
    out: Annotated[Path, typer.Option(help="results directory")] = Path("results/demo"),
    shards: Annotated[int, typer.Option(help="user fleets")] = 2,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="override a field of experiments/demo.toml")] = None,
):
    """Dist-DP-SE end to end: broker, analyzer, aggregator, user fleets and observer as separate
    processes; prints regret, ε spent and bits per user measured on the wire."""
    experiment = Path(__file__).resolve().parent.parent / "experiments" / "demo.toml"
    if not experiment.exists():  # an installed wheel without the repository's experiments/
        experiment = Path("experiments/demo.toml")
    run(experiment, set_=set_, runs=None, out=out, jobs=None, transport="mqtt", broker=broker, shards=shards)


@app.command()
def up(
    file: Annotated[Path, typer.Option("-f", "--file", help="compose file")] = Path("docker-compose.yml"),
    broker: Annotated[Optional[str], typer.Option(help="mqtt://host:port: use this broker, not the file's")] = None,
):
    """Run a docker-compose topology here, every service a local process (no Docker needed)."""
    from privbandit.services.compose import ComposeError, up as compose_up

    try:
        code = compose_up(file, broker)
    except ComposeError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1)
    raise typer.Exit(code)


def main() -> None:  # pragma: no cover
    sys.exit(app())
