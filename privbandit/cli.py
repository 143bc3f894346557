"""privbandit: a distributed protocol simulator for private bandit learning. `privbandit list` shows what
it runs; `privbandit COMMAND --help` the options of a command."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from privbandit.runner.config import ConfigError

try:  # typer 0.2x vendors click as typer._click (constraints.txt pins 0.29.2); earlier ones use click's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors

err = Console(stderr=True, soft_wrap=True)  # errors unwrapped: one line to read, grep or paste


def _error(message: object) -> None:
    """``error: <message>`` on stderr, the message exactly as given: never read as rich markup,
    which would drop whatever it quotes in brackets ("[algorithms.<label>]", "[SSL: …]")."""
    err.print(Text.assemble(("error:", "bold red"), " ", str(message)), highlight=False)


class _UsageError(click_errors.UsageError):
    """A usage error click found (an unknown option, a missing argument, a bad value), shown as
    every other error of the CLI: one ``error: …`` line naming the command's help, exit code 2,
    not click's usage box."""

    def __init__(self, cause: click_errors.UsageError):
        super().__init__(cause.format_message(), ctx=cause.ctx)

    def show(self, file=None) -> None:
        where = f" (see {self.ctx.command_path} -h)" if self.ctx is not None else ""
        _error(f"{self.format_message()}{where}")


# click's names for a value, where typer shows Python's ("<list[str]>", "<int>", "<Path>"): an option
# without a metavar of its own gets one of these; an argument, its name.
_METAVARS = {"int": "INTEGER", "float": "FLOAT", "path": "PATH", "str": "TEXT", "bool": "BOOLEAN"}


class _Argument(typer.core.TyperArgument):
    """An argument whose help line is its name alone (what it is, its help says)."""

    def display_type_rich(self, ctx) -> None:
        return None


def _plain_metavars(command):
    for param in command.params:
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        if param.param_type_name == "argument":
            param.metavar = param.name.upper()
            if type(param) is typer.core.TyperArgument:  # its help names no type: "STATE_DIR <list[Path]>"
                param.__class__ = _Argument
            continue
        # typer's own parameters name their Python type (bare_type); click's, a type object
        bare = param.bare_type() if hasattr(param, "bare_type") else param.type.name
        element = bare.removeprefix("list[").removesuffix("]").lower()
        param.metavar = _METAVARS.get(element, element.upper())
    return command


class _Group(typer.core.TyperGroup):
    """The CLI's commands with ``-h`` as well as ``--help``, plain metavars and one error style."""

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        return None if command is None else _plain_metavars(command)

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click_errors.NoArgsIsHelpError:  # `privbandit` alone: the help, as asked
            raise
        except click_errors.UsageError as exc:
            raise _UsageError(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click_errors.NoArgsIsHelpError:
            raise
        except click_errors.UsageError as exc:
            if isinstance(exc, _UsageError):
                raise
            raise _UsageError(exc) from None


# Every command that reads an experiment file takes the same overrides (runner/config.py, split_assignment).
SetOption = Annotated[Optional[list[str]], typer.Option(
    "--set", metavar="KEY=VALUE", help="override a field of the experiment: dotted.name=value, a label quoted as "
                                       "the file quotes it (algorithms.\"a@b\".epsilon=1); repeatable")]

app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, help=__doc__, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="experiment file (TOML)")],
    set_: SetOption = None,
    runs: Annotated[Optional[int], typer.Option(help="number of runs (overrides the file)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="results directory [default: results/<name>]")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="worker processes [default: all cores]")] = None,
    transport: Annotated[str, typer.Option(help="inproc: one process, vectorized; mqtt: every party its own process")] = "inproc",
    broker: Annotated[Optional[str], typer.Option(
        help="mqtt://host:port or mqtts://host:port (TLS) [default: an embedded broker]")] = None,
    shards: Annotated[Optional[int], typer.Option(help="user fleets (--transport mqtt) [default: 2]")] = None,
    restart_on_crash: Annotated[int, typer.Option(
        help="with --transport mqtt: restart a party that crashes, up to N times in all; the observer, "
             "the analyzer and the intermediaries resume from their checkpoints")] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an earlier run's results in --out")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="reuse the tasks an interrupted run of the same "
                                                          "experiment finished in --out; compute the rest")] = False,
    timeout: Annotated[Optional[float], typer.Option(
        help="with --transport mqtt: stop every party and fail if the session has not ended in this many seconds")] = None,
    secagg_step_deadline: Annotated[Optional[float], typer.Option(
        help="with --transport mqtt and intermediary = secagg: seconds a protocol step waits for every fleet "
             "before treating the silent users as dropouts [default: 30; a 10^4-user round's share step "
             "takes about 20 s on 2 cores, docs/secagg-performance.md]")] = None,
    run_id: RunIdForBroker = None,
    credentials: CredentialsOption = None,
    ca_file: CaFileOption = None,
    cert_file: CertFileOption = None,
    key_file: KeyFileOption = None,
    insecure_broker: InsecureBrokerOption = False,
    dashboard: DashboardOption = False,
    dashboard_port: PageOnlyPortOption = None,
):
    """Run an experiment file: many runs of each algorithm, then a results directory. Each task is
    kept in --out as it finishes: Ctrl-C stops at once and prints the command that resumes."""
    from privbandit import api
    from privbandit.runner import config as experiment_files
    from privbandit.runner.provenance import COMMAND_ENV, command_line

    command = command_line()
    overrides = list(set_ or []) + ([f"runs={runs}"] if runs is not None else [])
    try:
        if transport not in ("inproc", "mqtt"):
            raise ConfigError(f"--transport {transport!r}: choose inproc or mqtt")
        if jobs is not None and jobs < 1:
            raise ConfigError(f"--jobs {jobs}: must be ≥ 1")
        if transport == "inproc":  # silently ignoring them would mislead: nothing here uses a broker
            given = [flag for flag, value in (("--broker", broker), ("--shards", shards),
                                              ("--restart-on-crash", restart_on_crash or None),
                                              ("--timeout", timeout), ("--run-id", run_id),
                                              ("--secagg-step-deadline", secagg_step_deadline),
                                              ("--insecure-broker", insecure_broker or None),
                                              ("--dashboard", dashboard or None)) if value is not None]
            if given:
                raise ConfigError(f"{', '.join(given)}: only with --transport mqtt (this run is in-process)")
        shards = 2 if shards is None else shards
        if shards < 1:
            raise ConfigError(f"--shards {shards}: must be ≥ 1")
        if restart_on_crash < 0:
            raise ConfigError(f"--restart-on-crash {restart_on_crash}: must be ≥ 0")
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"--timeout {timeout}: must be > 0 seconds")
        if secagg_step_deadline is not None and not secagg_step_deadline > 0:
            raise ConfigError(f"--secagg-step-deadline {secagg_step_deadline}: must be > 0 seconds")
        # In-process, only to refuse broker files given without --broker: the broker modules cost 0.2 s to import.
        access = (_broker_access(broker, run_id, credentials, ca_file, cert_file, key_file)
                  if transport == "mqtt" or credentials or ca_file or cert_file or key_file else {})
        if broker is not None:
            _broker_reachable(broker)  # before --out is touched: --overwrite would remove the earlier results
        dashboard_port = _page_port(dashboard, dashboard_port)
        if dashboard_port is not None:
            _dashboard_port_free(dashboard_port)
        if out is None:
            out = Path("results") / experiment_files.load(experiment, overrides)[1].name
        if resume and transport == "mqtt":
            raise ConfigError("--resume: only in-process (an MQTT session resumes from its checkpoints)")
        if transport == "mqtt":
            saved = os.environ.get(COMMAND_ENV)
            os.environ[COMMAND_ENV] = command  # the parties it starts inherit it (the observer writes the summary)
            try:
                return _run_distributed(experiment, overrides, out, broker, shards, restart_on_crash, timeout,
                                        access=access, insecure_broker=insecure_broker, run_id=run_id,
                                        dashboard_port=dashboard_port, secagg_step_s=secagg_step_deadline,
                                        overwrite=overwrite)
            finally:
                if saved is None:
                    os.environ.pop(COMMAND_ENV, None)
                else:
                    os.environ[COMMAND_ENV] = saved
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        bar, ids = Progress(*columns, console=err, transient=not err.is_terminal), {}

        def start_bars(family, config) -> None:  # once --out is ready, as the tasks start
            bar.start()
            ids.update({label: bar.add_task(label, total=config.runs) for label in family.labels(config)})

        try:
            res = api.run(experiment, overrides, out=out, jobs=jobs, overwrite=overwrite, resume=resume,
                          progress=lambda label, run: bar.advance(ids[label]), on_start=start_bars)
        finally:
            bar.stop()
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    except KeyboardInterrupt as exc:
        kept = getattr(exc, "store", None)  # api.Interrupted: the tasks kept so far
        if kept is None:
            raise typer.Exit(130)
        finished = len(list(kept.dir.glob("*.pkl")))
        err.print(f"interrupted: {finished} finished task(s) kept in {kept.dir}; to resume:\n  {_resumed(command)}",
                  highlight=False, markup=False)
        raise typer.Exit(130)
    kept = res.store
    if resume:  # what it reused, before the numbers that rest on it
        damaged = f", {kept.unreadable} damaged set aside and computed again" if kept.unreadable else ""
        err.print(f"resumed: {kept.reused} of {kept.reused + kept.computed} task(s) reused from {kept.dir} "
                  f"(config {kept.config_hash[:12]}), {kept.computed} computed{damaged}",
                  highlight=False, markup=False)
    _print_summary(res.summary, out)


def _resumed(command: str) -> str:
    """The command that resumes an interrupted one."""
    return command if "--resume" in command.split() else f"{command} --resume"


@app.command()
def sweep(
    experiment: Annotated[Path, typer.Argument(help="experiment file (TOML)")],
    grid: Annotated[list[str], typer.Option("--grid", metavar="KEY=V1,V2,…", help="one axis of the grid (TOML values); "
                                                         "repeat for more axes")],
    set_: Annotated[Optional[list[str]], typer.Option("--set", metavar="KEY=VALUE", help="override a field at every point")] = None,
    runs: Annotated[Optional[int], typer.Option(help="number of runs (overrides the file)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="sweep directory [default: results/<name>-sweep]")] = None,
    executor: Annotated[str, typer.Option(help="local: a process pool here; ray: a Ray cluster")] = "local",
    address: Annotated[Optional[str], typer.Option(help="the Ray cluster's HOST:PORT [default: a local Ray]")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="worker processes, local executor [default: all cores]")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an earlier sweep's results in --out")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="reuse the tasks kept in --out; compute the rest")] = False,
    transport: Annotated[str, typer.Option(help="inproc, or mqtt: each point a distributed session with its own "
                                                "embedded broker")] = "inproc",
    shards: Annotated[Optional[int], typer.Option(help="user fleets per session (mqtt only) [default: 2]")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="fail a session after this many seconds (mqtt only)")] = None,
):
    """Run an experiment file over a grid of overrides: every (point, task) a hermetic task, kept in
    --out as it finishes and reused by a later sweep of the same config. Writes a results directory
    per point and sweep.csv. Over MQTT each point is one session; --jobs sessions run at once."""
    from privbandit import api
    from privbandit.runner.provenance import command_line

    command = command_line()
    overrides = list(set_ or []) + ([f"runs={runs}"] if runs is not None else [])
    try:
        if jobs is not None and jobs < 1:
            raise ConfigError(f"--jobs {jobs}: must be ≥ 1")
        if transport != "mqtt" and (shards is not None or timeout is not None):
            given = [f for f, v in (("--shards", shards), ("--timeout", timeout)) if v is not None]
            raise ConfigError(f"{', '.join(given)}: only with --transport mqtt")
        if out is None:
            out = api.default_out(experiment, overrides, sweep=True)
        columns = (TextColumn("tasks"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=not err.is_terminal) as bar:
            ids = []

            def advance(done: int, total: int) -> None:
                if not ids:
                    ids.append(bar.add_task("tasks", total=total))
                bar.update(ids[0], completed=done)

            report = api.sweep(experiment, grid, overrides, out=out, executor=executor, address=address, jobs=jobs,
                               overwrite=overwrite, resume=resume, progress=advance,
                               transport=transport,
                               shards=2 if shards is None else shards, timeout=timeout)
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    except KeyboardInterrupt:
        kept = (f"finished points in {out}/" if transport == "mqtt" else
                f"finished tasks kept in {out}/.tasks, finished points written in {out}/")
        err.print(f"interrupted: {kept}; to resume:\n  {_resumed(command)}", highlight=False, markup=False)
        raise typer.Exit(130)
    console = Console(width=None if sys.stdout.isatty() else 120)
    unit = "sessions" if transport == "mqtt" else "tasks"
    table = Table(title=f"sweep of {experiment.name}: {len(report['points'])} points, {report['computed']} {unit} "
                        f"computed, {report['reused']} reused, {report['elapsed_s']:.1f} s")
    table.add_column("point")
    table.add_column("algorithm")
    table.add_column("regret (mean ± se)", justify="right")
    table.add_column("ε spent", justify="right")
    for name, summary in report["points"].items():
        for label, a in summary["algorithms"].items():
            table.add_row(name, label, f"{a['regret_final_mean']:,.1f} ± {a['regret_final_stderr']:,.1f}",
                          privacy_cell(summary["privacy"][label]))
    console.print(table)
    console.print(f"results in {out}/ (sweep.csv and one directory per point)")
    for name, error in report["failed"].items():
        _error(f"point {name}: {error}")
    if report["failed"]:
        raise typer.Exit(1)


@app.command()
def compare(
    results_dir: Annotated[Path, typer.Argument(help="a results directory (with runs.csv)")],
    at: Annotated[Optional[int], typer.Option(help="compare at this checkpoint t [default: the horizon]")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="compare every algorithm with this one [default: every pair]")] = None,
):
    """Paired comparisons of the algorithms of one results directory: run r of every algorithm shares
    its instance, so the difference is taken run by run (mean, standard error, t, runs won)."""
    from itertools import combinations

    from privbandit.runner.paired import paired, read_runs

    try:
        if not (results_dir / "runs.csv").is_file():
            raise ConfigError(f"{results_dir}/runs.csv not found: give a results directory written by privbandit run")
        t, curves = read_runs(results_dir)
        at = int(t[-1]) if at is None else at
        if at not in set(t.tolist()):
            raise ConfigError(f"--at {at}: not a checkpoint; the nearest are "
                              f"{', '.join(map(str, t[np.argsort(np.abs(t - at))[:3]]))}")
        if baseline is not None and baseline not in curves:
            raise ConfigError(f"--baseline {baseline!r}: not in {results_dir}; algorithms: {', '.join(curves)}")
        column = int(np.searchsorted(t, at))
        pairs = ([(baseline, b) for b in curves if b != baseline] if baseline else list(combinations(curves, 2)))
        if not pairs:
            raise ConfigError(f"{results_dir} holds one algorithm ({', '.join(curves)}): nothing to compare")
        rows = [(a, b, paired(curves[a][:, column], curves[b][:, column])) for a, b in pairs]
    except (ConfigError, ValueError) as exc:
        _error(exc)
        raise typer.Exit(2)
    table = Table(title=f"{results_dir}: paired pseudo-regret at t = {at:,} (a − b)")
    for col in ("a", "b", "runs", "mean a − b", "stderr", "t", "a won", "b won", "verdict"):
        table.add_column(col, justify="right", no_wrap=True)
    for a, b, p in rows:
        table.add_row(a, b, str(p.runs), f"{p.mean_difference:,.2f}", f"{p.stderr:,.2f}", f"{p.t:.2f}",
                      str(p.a_won), str(p.b_won), p.verdict())
    Console(width=None if sys.stdout.isatty() else 160).print(table)


# --- an external broker: its accounts, TLS and the probe of its ACL (docs/distributed.md) ----------

def _run_id_option(when: str):
    return Annotated[Optional[str], typer.Option(
        "--run-id", help=f"{when}the run id the broker's ACL was written for (privbandit broker-config --run-id) "
                         f"[default: a fresh one]")]


RunIdForBroker = _run_id_option("with --transport mqtt: ")
DemoRunId = _run_id_option("")  # demo is always over MQTT: it has no --transport to name
CredentialsOption = Annotated[Optional[Path], typer.Option(
    "--credentials", help="with --broker: a file of PRIVBANDIT_<ROLE>_PASSWORD=... lines, one per role "
                          "(privbandit broker-config writes credentials.env) [default: those variables from the "
                          "environment; none: anonymous]. Passwords never go on the command line.")]
CaFileOption = Annotated[Optional[Path], typer.Option(
    "--ca-file", help="with an mqtts:// --broker: the CA certificates that sign the broker's [default: the system's]")]
CertFileOption = Annotated[Optional[Path], typer.Option(
    "--cert-file", help="with an mqtts:// --broker: the parties' client certificate (PEM)")]
KeyFileOption = Annotated[Optional[Path], typer.Option(
    "--key-file", help="with --cert-file: its private key (PEM) [default: in --cert-file]")]
InsecureBrokerOption = Annotated[bool, typer.Option(
    "--insecure-broker", help="run even if the broker lets a role, or anyone, read what the trust model denies "
                              "(summary.json records broker.acl = \"insecure\")")]


def _dashboard_option(when: str):
    return Annotated[bool, typer.Option(
        "--dashboard", help=f"{when}serve a live web page of the session on 127.0.0.1, and after it the results "
                            f"directory until Ctrl-C (docs/dashboard.md)")]


DashboardOption = _dashboard_option("with --transport mqtt: ")
DemoDashboard = _dashboard_option("")


def _port(text: str) -> int:
    """A port, or an error naming its range (click's own says only the bound it crossed)."""
    from privbandit.services.dashboard import DashboardError, check_port

    try:
        return check_port(int(text))
    except (ValueError, DashboardError):
        raise typer.BadParameter(f"{text!r}: must be an integer in 1..65535") from None


DashboardPortOption = Annotated[int, typer.Option(parser=_port, metavar="PORT", help="the dashboard's port")]
# With --dashboard only: given without it, it is refused rather than silently ignored.
PageOnlyPortOption = Annotated[Optional[int], typer.Option(parser=_port, metavar="PORT",
                                                           help="with --dashboard: its port [default: 8050]")]


def _page_port(dashboard: bool, port: int | None) -> int | None:
    """The dashboard's port, or None without --dashboard; --dashboard-port alone is an error."""
    if port is not None and not dashboard:
        raise ConfigError(f"--dashboard-port {port}: only with --dashboard")
    if not dashboard:
        return None
    from privbandit.services.dashboard import DEFAULT_PORT

    return DEFAULT_PORT if port is None else port


def _broker_access(broker: str | None, run_id: str | None, credentials: Path | None, ca_file: Path | None, cert_file: Path | None,
                   key_file: Path | None) -> dict:
    """The external broker's passwords (role → password; None: anonymous) and TLS files, for the
    launcher. Raises ConfigError naming the option."""
    from privbandit.services.acl import Role, validate_run_id
    from privbandit.services.bus import read_credentials

    if run_id is not None:
        try:
            validate_run_id(run_id, name="--run-id")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    tls = {k: str(v) for k, v in (("ca_file", ca_file), ("cert_file", cert_file), ("key_file", key_file)) if v}
    if broker is None and (credentials or tls):
        flags = ["--credentials"] * bool(credentials) + [f"--{k.replace('_', '-')}" for k in tls]
        raise ConfigError(f"{', '.join(flags)}: only with --broker (the embedded broker makes its own accounts)")
    if credentials is not None:
        try:
            passwords = read_credentials(credentials)
        except ValueError as exc:
            raise ConfigError(f"--credentials: {exc}") from None
        if not passwords:
            raise ConfigError(f"--credentials {credentials}: no PRIVBANDIT_<ROLE>_PASSWORD=... line")
    else:
        passwords = {r.value: os.environ[f"PRIVBANDIT_{r.name}_PASSWORD"] for r in Role
                     if os.environ.get(f"PRIVBANDIT_{r.name}_PASSWORD")}
    from privbandit.services.acl import is_instance

    unknown = sorted(n for n in passwords if n not in {r.value for r in Role} and not is_instance(n))
    if unknown:
        raise ConfigError(f"--credentials: unknown role(s) {', '.join(unknown)}; roles: {', '.join(r.value for r in Role)}, "
                          "or an intermediary instance such as shuffler-2")
    return {"passwords": passwords or None, "tls_files": tls or None}


def _broker_reachable(url: str) -> None:
    """Before any work: ``--broker`` is an MQTT URL whose host accepts a connection (the launcher
    then probes its accounts and ACL). A bad URL is a ConfigError; an unreachable broker exits 1
    with the launcher's words."""
    from privbandit.runner.sweep import unreachable
    from privbandit.services.bus import BusSettings

    try:  # model_construct: the URL alone, not the PRIVBANDIT_* environment the parties read
        host, port = BusSettings.model_construct(broker_url=url).endpoint()
    except ValueError as exc:
        raise ConfigError(f"--broker: {exc}") from None
    problem = unreachable(host, port, min(float(os.environ.get("PRIVBANDIT_CONNECT_TIMEOUT_S", 10)), 10))
    if problem is not None:
        _error(f"cannot reach the broker at {url}: {problem}; nothing was run, --out untouched")
        raise typer.Exit(1)


def _dashboard_port_free(port: int) -> None:
    """Before any work: the dashboard's port can be listened on (the observer listens on it)."""
    from privbandit.services.dashboard import DEFAULT_HOST, DashboardError, bind

    try:
        bind(DEFAULT_HOST, port).close()
    except DashboardError as exc:
        raise ConfigError(str(exc)) from None


def _run_distributed(experiment: Path, overrides: list[str], out: Path, broker: str | None, shards: int,
                     restart_on_crash: int = 0, timeout: float | None = None, *, access: dict | None = None,
                     insecure_broker: bool = False, run_id: str | None = None, dashboard_port: int | None = None,
                     secagg_step_s: float | None = None, overwrite: bool = False):
    """``run --transport mqtt``: the session (:func:`privbandit.api.run`), its failures turned into
    the command's errors, then its summary and, with --dashboard, its results page."""
    from privbandit import api
    from privbandit.services.broker_probe import BrokerInsecure, BrokerUnusable

    def announce(family, config) -> None:  # once --out is ready, as the parties start
        if dashboard_port is not None:
            err.print(f"dashboard: http://127.0.0.1:{dashboard_port}/ (live while the session runs)", highlight=False)

    try:
        res = api.run(experiment, overrides, transport="mqtt", out=out, overwrite=overwrite, on_start=announce,
                      broker=broker,
                      shards=shards, restart_on_crash=restart_on_crash, timeout=timeout,
                      insecure_broker=insecure_broker, run_id=run_id, dashboard_port=dashboard_port,
                      secagg_step_deadline=secagg_step_s, **(access or {}))
    except TimeoutError as exc:
        _error(f"--timeout: {exc}")
        raise typer.Exit(1)
    except (BrokerInsecure, BrokerUnusable, api.SessionFailed) as exc:
        _error(exc)
        raise typer.Exit(1)
    except ValueError as exc:  # --out, a TLS file, a missing role's password, a run id
        _error(exc)
        raise typer.Exit(2)
    except RuntimeError as exc:  # a party that could not go on: the end of its log
        _error(f"the distributed run stopped: {exc}")
        raise typer.Exit(1)
    _print_summary(res.summary, out)
    if getattr(res.config, "traffic_adversaries", None):
        _print_traffic_attacks(res.config.traffic_adversaries, res.summary, out)
    if dashboard_port is not None:
        _serve_results(out, dashboard_port)


def _serve_results(out: Path, port: int, after_session: bool = True) -> None:
    """After the session (the observer, and its live page, have stopped): its results directory on
    the same port, read-only, until Ctrl-C."""
    from privbandit.services.dashboard import DashboardError, serve_results

    def announce(url: str) -> None:
        what = "the session is over; serving" if after_session else "serving"
        err.print(f"dashboard: {what} {out} at {url} until Ctrl-C", highlight=False)

    try:
        serve_results(out, port, announce=announce)
    except DashboardError as exc:
        _error(exc)
        raise typer.Exit(1)
    err.print("dashboard stopped")


@app.command()
def dashboard(
    results: Annotated[Path, typer.Argument(help="a results directory (summary.json, curves.csv, …; an audit in "
                                                 "its audit/ folder is shown too)")],
    port: DashboardPortOption = 8050,
):
    """Serve a finished results directory's page on 127.0.0.1 (the live page's results view) until Ctrl-C."""
    if not (results / "summary.json").is_file():
        _error(f"RESULTS {results}: no summary.json there (a results directory of "
                  f"`privbandit run` or `demo`)")
        raise typer.Exit(2)
    _serve_results(results, port, after_session=False)


@app.command()
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


def _print_traffic_attacks(kinds: list[str], summary: dict, out: Path) -> None:
    """What the experiment's hostile processes did (their reports) and what the parties refused."""
    import json

    console = Console(width=None if sys.stdout.isatty() else 120)
    for kind in kinds:
        path = out / "adversaries" / f"{kind}.json"
        if not path.exists():
            console.print(f"traffic adversary {kind}: no report (see {out / 'logs' / f'hostile-{kind}.log'})")
            continue
        r = json.loads(path.read_text())
        did = (f"{r['forbidden_received']} forbidden messages received, {r['forged_releases_sent']} forged releases sent"
               if kind == "curious-analyzer" else f"{r['messages_sent']:,} messages sent against {r['plans_seen']:,} plans")
        console.print(f"traffic adversary {kind}: {did}")
    refused = ", ".join(f"{k} {v:,}" for k, v in sorted(summary.get("rejected", {}).items()))
    console.print(f"refused by the parties: {refused or 'nothing'}; reports in {out / 'adversaries'}/")


from privbandit.runner.results import privacy_cell  # noqa: E402  (its tables and the API's repr)


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
        spent = privacy_cell(p)
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
    broker = summary.get("broker") or {}
    if broker.get("acl") == "insecure":
        console.print("[bold red]insecure broker:[/] its ACL was not enforced (--insecure-broker): whoever could "
                      "reach it may have read this session's plans, reports and releases (summary.json: broker)",
                      highlight=False)
    elif broker.get("acl") == "unchecked":
        console.print("broker: its ACL was not checked (the parties were started by hand)", highlight=False)
    # Only what this run wrote: --overwrite keeps a user's own files in --out, and they are not results.
    from privbandit.runner.results import RESULT_FILES

    files = [name for name in RESULT_FILES if (out / name).is_file()]
    if wire and (out / "logs").is_dir():
        files.append("logs/")
    console.print(f"results in {out}/ ({', '.join(files)})")


def adversary_catalogue() -> dict[str, tuple[str, str]]:
    """Every adversary: kind → (where it runs, one line). In-process adversaries come from each
    registered family; traffic adversaries act on the wire against a running session."""
    from privbandit import registry
    from privbandit.services.hostile import TRAFFIC_ADVERSARIES

    out = {}
    for name in registry.family_names():
        for kind, cls in getattr(registry.family(name), "adversaries", {}).items():
            where, text = out.get(kind, ("", cls.summary))
            out[kind] = (f"{where}, {name}" if where else name, text)  # every family that takes it
    return out | {kind: ("over MQTT", text) for kind, text in TRAFFIC_ADVERSARIES.items()}


_ATTACK_SUMMARY = "Run an adversary and measure the damage (docs/attacks.md)."


def _attack_help() -> str:
    lines = [f"{kind}: {text} [{where}]" for kind, (where, text) in adversary_catalogue().items()]
    return (_ATTACK_SUMMARY + "\n\n"
            "In-process, against an experiment file: privbandit attack KIND FILE [--fraction F] "
            "prints honest vs attacked regret, estimate error and ε side by side. Over MQTT, against "
            "a running session: privbandit attack KIND --broker URL --run RUN_ID.\n\n"
            "Adversaries:\n\n" + "\n\n".join(lines))


class _AttackCommand(typer.core.TyperCommand):
    """The adversary list in ``attack --help`` imports every family: it is built when the help is
    shown, not when the CLI is imported, which every party process does at start-up."""

    def format_help(self, ctx, formatter) -> None:
        self.help = _attack_help()
        super().format_help(ctx, formatter)


@app.command(cls=_AttackCommand, help=_ATTACK_SUMMARY)
def attack(
    kind: Annotated[str, typer.Argument(help="the adversary (listed above)")],
    experiment: Annotated[Optional[Path], typer.Argument(help="experiment file, for the in-process adversaries")] = None,
    fraction: Annotated[float, typer.Option(help="share of every cohort that attacks, in [0, 1/3)")] = 0.05,
    magnitude: Annotated[float, typer.Option(help="out-of-range: how far beyond [0, 1], in rewards")] = 1.0,
    range_check: Annotated[bool, typer.Option("--range-check", help="turn on the clear-text defences "
                                              "wherever someone sees the reports")] = False,
    set_: SetOption = None,
    runs: Annotated[Optional[int], typer.Option(help="number of runs (overrides the file)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="results [default: results/attack-<kind>]")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="worker processes [default: all cores]")] = None,
    broker: Annotated[Optional[str], typer.Option(help="mqtt://host:port of a running session")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run", help="the running session's run id")] = None,
    username: Annotated[Optional[str], typer.Option(help="broker account [default: $PRIVBANDIT_USERNAME]")] = None,
    password: Annotated[Optional[str], typer.Option(help="[default: $PRIVBANDIT_PASSWORD]")] = None,
    duration: Annotated[float, typer.Option(help="over MQTT: seconds to attack, or until the session shuts down")] = 60.0,
    report: Annotated[Optional[Path], typer.Option(help="over MQTT: also write the attack's report (JSON) here")] = None,
    ready_file: Annotated[Optional[Path], typer.Option(help="over MQTT: created once the attack is subscribed "
                                                            "(the launcher waits for it)")] = None,
):
    known = adversary_catalogue()
    if kind not in known:
        _error(f"adversary {kind!r} is not one of {', '.join(known)} "
                  f"(see privbandit attack --help)")
        raise typer.Exit(2)
    if known[kind][0] == "over MQTT":
        # forge: what an attacker with the experiment file could sign before session secrets (#32)
        seed = _world(experiment, set_)[1].seed if kind == "forge" and experiment is not None else None
        if kind == "forge" and seed is None:
            _error("forge attacks with the experiment file's keys: give it (privbandit attack forge FILE --broker …)")
            raise typer.Exit(2)
        return _attack_over_mqtt(kind, broker, run_id, username, password, duration, report, ready_file, seed)
    if experiment is None:
        _error(f"{kind} runs in-process: give an experiment file "
                  f"(privbandit attack {kind} experiments/attacks.toml)")
        raise typer.Exit(2)
    from privbandit.families.distributed_dp_mab.attack import run_attack

    overrides = list(set_ or []) + ([f"runs={runs}"] if runs is not None else [])
    out = out or Path("results") / f"attack-{kind}"
    try:
        if not 0 <= fraction < 1 / 3:
            raise ConfigError(f"--fraction {fraction}: must lie in [0, 1/3) (the release threshold)")
        if jobs is not None and jobs < 1:
            raise ConfigError(f"--jobs {jobs}: must be ≥ 1")
        report = run_attack(experiment, overrides, kind, fraction, magnitude, range_check, out, jobs)
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    _print_attack(report, out)


def _print_attack(report: dict, out: Path) -> None:
    adv = report["adversary"]
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"{adv['kind']} ({adv['fraction']:.0%} of users"
                        f"{', range check' if adv['range_check'] else ''}) on {report['experiment']}: "
                        f"T = {report['horizon']:,}, {report['runs']} runs")
    for col in ("algorithm", "regret honest", "regret attacked", "est. error honest", "est. error attacked",
                "ε honest", "ε attacked", "ε vs coalition", "attackers"):
        table.add_column(col, justify="right", no_wrap=True)
    fmt = lambda e: "∞" if e is None else (e if isinstance(e, str) else f"{e:.3g}")  # noqa: E731
    for label, a in report["algorithms"].items():
        table.add_row(label, f"{a['regret_honest']:,.0f} ± {a['regret_honest_stderr']:,.0f}",
                      f"{a['regret_attacked']:,.0f} ± {a['regret_attacked_stderr']:,.0f}",
                      *("—" if a[k] is None else f"{a[k]:.4f}" for k in ("estimate_error_honest",
                                                                         "estimate_error_attacked")),
                      fmt(a["epsilon_honest"]), fmt(a["epsilon_attacked"]),
                      "-" if a["epsilon_vs_coalition"] is None else fmt(a["epsilon_vs_coalition"]),
                      "—" if a["attackers"] is None else f"{a['attackers']:,}")
    console.print(table)
    rejected = ", ".join(f"{k}: {v:,}" for k, v in report["rejected"].items()) or "none"
    console.print(f"rejected (attacked run): {rejected}")
    console.print(f"results in {out}/ (attack.json, honest/, attacked/)")


def _attack_over_mqtt(kind: str, broker: str | None, run_id: str | None, username: str | None,
                      password: str | None, duration: float, report_file: Path | None = None,
                      ready_file: Path | None = None, experiment_seed: int | None = None) -> None:
    import asyncio
    import json

    from privbandit.services.hostile import attack_session

    if not duration > 0:
        _error(f"--duration {duration}: must be > 0 seconds")
        raise typer.Exit(2)
    settings = _settings(broker, run_id)
    given = {k: v for k, v in (("username", username), ("password", password)) if v is not None}
    settings = settings.model_copy(update=given)
    try:
        report = asyncio.run(attack_session(kind, settings, duration, ready_file, experiment_seed))
    except ConnectionError as exc:
        _error(exc)
        raise typer.Exit(1)
    text = json.dumps(report, indent=2)
    if report_file is not None:
        report_file.parent.mkdir(parents=True, exist_ok=True)
        report_file.write_text(text + "\n")
    print(text)


@app.command("letor-arms")
def letor_arms(
    letor_file: Annotated[Path, typer.Argument(help="LETOR-format file, e.g. MSLR-WEB10K/Fold1/train.txt")],
    arms: Annotated[int, typer.Option(help="number of K-means clusters (arms)")] = 50,
    seed: Annotated[int, typer.Option(help="K-means seed")] = 0,
    out: Annotated[Path, typer.Option(help="arm-means JSON to write")] = Path("arm_means.json"),
    max_rows: Annotated[Optional[int], typer.Option(help="read at most this many rows")] = None,
    source: Annotated[Optional[str], typer.Option(help="text for the JSON's 'source' field [default: describe the input]")] = None,
):
    """Cluster a LETOR data set into arms and write the arm-means file experiments point to."""
    from privbandit.datasets import letor

    if arms < 1:
        _error(f"--arms {arms}: must be ≥ 1")
        raise typer.Exit(2)
    try:
        lines = letor.write_arm_file(letor_file, out, arms, seed, max_rows, source)
    except (ValueError, OSError) as exc:  # LetorFormatError names the file and line
        _error(exc)
        raise typer.Exit(2)
    for line in lines:
        print(line)


# --- the parties, each its own process ---------------------------------------------------------

BrokerOption = Annotated[Optional[str], typer.Option(
    "--broker", help="mqtt://host:port or mqtts://host:port [default: $PRIVBANDIT_BROKER_URL]")]
RunIdOption = Annotated[Optional[str], typer.Option("--run-id", help="[default: $PRIVBANDIT_RUN_ID]")]
StateDirOption = Annotated[Optional[Path], typer.Option(
    "--state-dir", help="checkpoint here at every round boundary and resume from it after a restart "
                        "(one directory per party)")]


def _settings(broker: str | None, run_id: str | None):
    """Broker URL, run id and credentials: PRIVBANDIT_* environment variables, CLI options first."""
    from pydantic import ValidationError

    from privbandit.services.bus import BusSettings

    given = {k: v for k, v in (("broker_url", broker), ("run_id", run_id)) if v is not None}
    try:
        settings = BusSettings(**given)
        settings.endpoint()
        settings.tls_context()  # PRIVBANDIT_CA_FILE, _CERT_FILE, _KEY_FILE: named here, not in a traceback
        return settings
    except (ValidationError, ValueError) as exc:
        _error(exc)
        raise typer.Exit(2)


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


def _world(experiment: Path, set_: list[str] | None):
    """(family, config) of an experiment file, for the parties that may hold the world."""
    from privbandit.runner import config as experiment_files

    try:
        return experiment_files.load(experiment, list(set_ or []))
    except ConfigError as exc:
        _error(exc)
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


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
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


@app.command("broker-config")
def broker_config(
    out: Annotated[Path, typer.Option(help="directory for mosquitto.conf, passwd, acl, credentials.env")],
    run_id: Annotated[str, typer.Option(help="the run id: topics live under pb/<run-id>/")] = "demo",
    port: Annotated[int, typer.Option(help="the listener port")] = 1883,
    host: Annotated[str, typer.Option(help="the listener address (0.0.0.0 in a container)")] = "127.0.0.1",
    backend: Annotated[str, typer.Option(help="acl_file (portable) or dynsec (refuses SUBSCRIBEs too)")] = "acl_file",
    tls_cert: Annotated[Optional[Path], typer.Option(help="the broker's certificate (PEM): the listener speaks TLS "
                                                          "only (parties connect to mqtts://)")] = None,
    tls_key: Annotated[Optional[Path], typer.Option(help="with --tls-cert: its private key (PEM)")] = None,
    client_ca: Annotated[Optional[Path], typer.Option(help="with --tls-cert: require a client certificate "
                                                           "signed by this CA")] = None,
    rotate: Annotated[bool, typer.Option("--rotate", help="draw new passwords even where OUT already holds a "
                                                          "credentials.env (by default its passwords are kept)")] = False,
    role_dir: Annotated[Optional[list[str]], typer.Option(
        metavar="ROLE=DIR", help="also write DIR/credentials.env with ROLE's password alone (repeatable), "
                                 "for that role's parties to mount")] = None,
    instance: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="an intermediary instance account, e.g. shuffler-2 (repeatable): the "
                             "concurrent-shuffle family's shuffler-1 … shuffler-k, each its own password and ACL")] = None,
    dynsec_plugin: Annotated[Optional[Path], typer.Option(
        help="with --backend dynsec: Mosquitto's plugin where the broker runs, written as given (e.g. "
             "/usr/lib/mosquitto_dynamic_security.so in the eclipse-mosquitto image) [default: found here]")] = None,
):
    """Write a Mosquitto configuration with one account per role and the run's ACLs. The passwords
    of a credentials.env already in OUT are kept, so a broker running the earlier config still
    accepts the parties; --rotate draws new ones (restart the broker with the new files)."""
    from privbandit.services.broker_cli import broker_config_main

    raise typer.Exit(broker_config_main(out, run_id, port, host=host, backend=backend, tls_cert=tls_cert,
                                        tls_key=tls_key, client_ca=client_ca, rotate=rotate, role_dirs=role_dir,
                                        instances=instance, dynsec_plugin=dynsec_plugin))


@app.command("tls-files")
def tls_files(
    out: Annotated[Path, typer.Option(help="directory for the broker's broker.pem and broker.key")],
    ca_dir: Annotated[Path, typer.Option(help="directory for ca.pem, which every party verifies the broker with")],
    host: Annotated[list[str], typer.Option(help="a name or address the parties reach the broker by (repeatable)")],
    days: Annotated[int, typer.Option(help="validity in days (1..3650)")] = 365,
    rotate: Annotated[bool, typer.Option("--rotate", help="make new files even where valid ones are")] = False,
):
    """Make a CA and a broker certificate it signed (ECDSA P-256), for broker-config --tls-cert/--tls-key.
    The CA's private key is never written. Files still valid for the hosts and for 30 more days are kept."""
    from privbandit.services.broker_cli import tls_files_main

    raise typer.Exit(tls_files_main(out, ca_dir, host, days=days, rotate=rotate))


@app.command("reset-state")
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


@app.command()
def cluster(
    out: Annotated[Optional[Path], typer.Option(help="directory for the node files, logs and credentials.env "
                                                     "[default: a new temporary directory]")] = None,
    run_id: Annotated[str, typer.Option(help="the run id: topics live under pb/<run-id>/")] = "demo",
    nodes: Annotated[int, typer.Option(help="how many NATS nodes (1..9)")] = 3,
    instance: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="an intermediary instance account, e.g. shuffler-2 (repeatable)")] = None,
    config_only: Annotated[bool, typer.Option(
        "--config-only", help="write the node files into --out for the --host nodes and exit, starting nothing "
                              "(docker-compose.yml's cluster profile)")] = False,
    host: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="with --config-only: a node, named and reached by this host name (repeatable)")] = None,
    credentials: Annotated[Optional[Path], typer.Option(
        help="with --config-only: the credentials.env whose passwords the accounts get (broker-config's)")] = None,
    client_port: Annotated[int, typer.Option(help="with --config-only: node i's NATS port is this + i")] = 4222,
    mqtt_port: Annotated[int, typer.Option(help="with --config-only: node i's MQTT port is this + i")] = 1883,
    cluster_port: Annotated[int, typer.Option(help="with --config-only: node i's route port is this + i")] = 6222,
):
    """Start a NATS broker cluster (MQTT on every node) with one account per role and the run's
    ACLs, print the node URLs, and run until Ctrl-C (docs/cluster.md). With --config-only, only
    write the node files for the named hosts (docs/compose.md, "The clustered broker profile")."""
    from privbandit.services.cluster import cluster_main, compose_nodes, write_config_only

    if not config_only and (host or credentials):
        _error("--host and --credentials go with --config-only")
        raise typer.Exit(2)
    try:
        if config_only:
            if out is None or credentials is None or not host:
                _error("--config-only needs --out, --credentials and at least one --host")
                raise typer.Exit(2)
            files = write_config_only(out, run_id, compose_nodes(host, client_port, mqtt_port, cluster_port),
                                      credentials)
            for node, conf in zip(files.nodes, files.confs):
                err.print(f"{node.name}: {conf} (MQTT {node.url})", highlight=False)
            raise typer.Exit(0)
        code = cluster_main(out, run_id, nodes, instance or ())
    except ValueError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    raise typer.Exit(code)


@app.command()
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


@app.command()
def demo(
    broker: Annotated[Optional[str], typer.Option(
        help="mqtt://host:port or mqtts://host:port (TLS) [default: an embedded broker]")] = None,
    out: Annotated[Path, typer.Option(help="results directory")] = Path("results/demo"),
    shards: Annotated[int, typer.Option(help="user fleets")] = 2,
    set_: Annotated[Optional[list[str]], typer.Option("--set", metavar="KEY=VALUE", help=(
        "override a field of the demo experiment (privbandit/runner/demo.toml, the repository's "
        "experiments/demo.toml): dotted.name=value; repeatable"))] = None,
    restart_on_crash: Annotated[int, typer.Option(help="restart a crashed party, up to N times in all")] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite/--keep", help="replace an earlier demo's results in --out "
                                                                    "(--keep refuses an occupied --out)")] = True,
    run_id: DemoRunId = None,
    credentials: CredentialsOption = None,
    ca_file: CaFileOption = None,
    cert_file: CertFileOption = None,
    key_file: KeyFileOption = None,
    insecure_broker: InsecureBrokerOption = False,
    dashboard: DemoDashboard = False,
    dashboard_port: PageOnlyPortOption = None,
):
    """Dist-DP-SE end to end: broker, analyzer, aggregator, user fleets and observer as separate
    processes; prints regret, ε spent and bits per user measured on the wire."""
    from privbandit.runner.config import demo_experiment

    try:
        demo_file = demo_experiment()
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    with demo_file as experiment:  # package data: no checkout or working directory needed
        run(experiment, set_=set_, runs=None, out=out, jobs=None, transport="mqtt", broker=broker, shards=shards,
            restart_on_crash=restart_on_crash, overwrite=overwrite, run_id=run_id, credentials=credentials,
            ca_file=ca_file, cert_file=cert_file, key_file=key_file, insecure_broker=insecure_broker,
            dashboard=dashboard, dashboard_port=dashboard_port)


@app.command()
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


def _print_version(value: bool) -> None:
    if value:
        from privbandit import __version__

        print(f"privbandit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="print the version and exit")] = False) -> None:
    """A distributed protocol simulator for private bandit learning."""


@app.command()
def audit(
    experiment: Annotated[Optional[Path], typer.Argument(help="experiment file (TOML); or --family and --algorithm")] = None,
    family: Annotated[Optional[str], typer.Option(help="audit this family's ALGORITHM with its defaults (no file)")] = None,
    algorithm: Annotated[Optional[list[str]], typer.Option(
        help="without FILE: the algorithm to audit; with FILE: audit only this label (repeatable)")] = None,
    set_: SetOption = None,
    samples: Annotated[int, typer.Option(help="releases per neighbouring input, in [100, 10^9]")] = 1_000_000,
    delta: Annotated[Optional[float], typer.Option(help="δ of the ε lower bound, in (0, 1) [default: the run's own δ]")] = None,
    confidence: Annotated[float, typer.Option(
        help="1 − β: each release's bounds hold together with this probability, in (0, 1)")] = 0.95,
    cohort: Annotated[Optional[int], typer.Option(
        help="users per audited round where the family lets it vary (the MAB rounds), in [1, 10^6] "
             "[default: the family's]")] = None,
    seed: Annotated[int, typer.Option(help="the audit's own seed (≥ 0)")] = 0,
    jobs: Annotated[int, typer.Option(help="worker processes, one release each at a time (results do not "
                                           "depend on it), in [1, 64]")] = 1,
    out: Annotated[Path, typer.Option(help="directory for audit.json and the plots (replaced)")] = Path("results/audit"),
    transport: Annotated[str, typer.Option(help="inproc: the releases sampled in-process from the project's "
                                                "own mechanisms; mqtt: read from the broker with the analyzer's "
                                                "account, released by the real intermediary process")] = "inproc",
    canary: Annotated[bool, typer.Option(help="also run each algorithm once with canaries and bound the whole "
                                              "run's ε (one-run audit), where the family supports it")] = False,
    search: Annotated[bool, typer.Option(help="also search the family's candidate neighbouring pairs of each "
                                              "release: pilot each on max(1000, samples/20), audit the strongest "
                                              "on a fresh sample")] = False,
    broker: Annotated[Optional[str], typer.Option(
        help="with --transport mqtt: mqtt://host:port or mqtts://host:port [default: an embedded broker]")] = None,
    run_id: RunIdForBroker = None,
    credentials: CredentialsOption = None,
    ca_file: CaFileOption = None,
    cert_file: CertFileOption = None,
    key_file: KeyFileOption = None,
    insecure_broker: InsecureBrokerOption = False,
):
    """Measure the privacy each release really gives: two neighbouring inputs, many releases of what
    the analyzer receives under each, and an ε lower bound at δ with the stated confidence, set
    against the ledger's claim (docs/audit.md). Exits 1 if any bound exceeds its claim."""
    from privbandit import api

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    bar, ids = Progress(*columns, console=err, transient=not err.is_terminal), []

    def progress(done: int, total: int, name: str | None) -> None:
        if not ids:  # once the releases to audit are known, as the first starts
            bar.start()
            ids.append(bar.add_task("audit", total=total))
        bar.update(ids[0], completed=done, **({"description": name} if name else {}))

    try:
        if transport == "inproc":  # silently ignoring them would mislead: nothing here uses a broker
            given = [flag for flag, value in (("--broker", broker), ("--run-id", run_id), ("--credentials", credentials),
                                              ("--ca-file", ca_file), ("--cert-file", cert_file),
                                              ("--key-file", key_file), ("--insecure-broker", insecure_broker or None))
                     if value is not None]
            if given:
                raise ConfigError(f"{', '.join(given)}: only with --transport mqtt (this audit is in-process)")
        access = _broker_access(broker, run_id, credentials, ca_file, cert_file, key_file)
        if broker is not None:
            _broker_reachable(broker)
        try:
            report = api.audit(experiment, family=family, algorithm=algorithm, overrides=set_, samples=samples,
                               delta=delta, confidence=confidence, cohort=cohort, seed=seed, jobs=jobs, out=out,
                               transport=transport, canary=canary, search=search, broker=broker, run_id=run_id,
                               insecure_broker=insecure_broker, progress=progress,
                               **(access if transport == "mqtt" else {}))
        finally:
            bar.stop()
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    except (RuntimeError, ConnectionError) as exc:  # over MQTT: the broker, or the audit's session
        if transport != "mqtt":
            raise
        from privbandit.services.broker_probe import BrokerInsecure, BrokerUnusable

        if isinstance(exc, (BrokerInsecure, BrokerUnusable)):
            _error(f"--transport mqtt: {exc}")
        elif isinstance(exc, RuntimeError):
            _error(f"--transport mqtt: the audit's session stopped: {exc}")
        else:
            raise
        raise typer.Exit(1)
    results, runs, searches = report["targets"], report["canary_runs"], report["searches"]
    session, skipped, no_canary = report.get("mqtt"), report["not_audited"], report["no_canary_run"]
    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"audit: {samples:,} releases per neighbour, confidence {confidence:g}")
    mqtt = transport == "mqtt"
    for col in ("mechanism", *(["transport", "law p (0, 1)", "releases/s"] if mqtt else ["release"]),
                "claimed ε", "audited ε ≥", "δ", "verdict", "seconds"):
        table.add_column(col, justify="right" if col in ("claimed ε", "audited ε ≥", "δ", "seconds", "releases/s")
                         else "left")
    for r in results:
        a, claimed = r["audit"], _claimed(r["claim"])
        extra = []
        if mqtt:
            law = r["mqtt"].get("law_check")
            p = "—" if law is None else ", ".join(
                f"{min(law[k]['p_chi2'], law[k]['p_ks']):.2g}" for k in ("input_0", "input_1"))
            extra = [r["transport"], p, f"{r['releases_per_second']:,.0f}"]
        audited = "—" if r["verdict"] == "refused" else f"{a['epsilon']:.4g}"  # no bound from forged releases
        table.add_row(f"{r['name']} ({r['algorithm']})", *(extra or [r["release"]]), claimed, audited,
                      f"{a['delta']:.2g}", r["verdict"], f"{r['seconds']['total']:.1f}")
    console.print(table)
    for r in results:
        if mqtt and r["transport"] != "mqtt":
            console.print(f"in-process, not over MQTT: {r['name']}: {r['mqtt']['why_not']}")
    refused = [r for r in results if r["verdict"] == "refused"]
    for r in refused:
        console.print(f"over MQTT, {r['name']}: no verdict: {r['refused']} (logs in {out}/mqtt/logs)")
    if session:
        console.print(f"over MQTT: the {', '.join(session['intermediaries'])} process(es) on the "
                      f"{session['broker']} broker (ACL {session['acl']}, run {session['run_id']}); law p: the smaller "
                      f"of the χ² and KS two-sample p-values against the in-process sampler, per input")
    for r in runs:
        claimed = _claimed(r["claim"])
        console.print(f"one run of {r['name']} ({r['horizon']:,} users, {r['canaries']} canaries): ε ≥ "
                      f"{r['epsilon']:.4g} at δ = {r['delta']:.2g} ({r['correct']}/{r['guesses']} guesses right), "
                      f"claimed {claimed}: {r['verdict']} ({r['seconds']:.1f} s)")
    for r in searches:
        claimed, pick = _claimed(r["claim"]), r["search"]["chosen"]
        pilots = ", ".join(f"{row['pilot_epsilon']:.3g}" for row in r["search"]["candidates"])
        console.print(f"search {r['name']}: pilots ε ≥ {pilots} ({r['search']['pilot_samples']:,} samples each); "
                      f"chosen #{pick} ({r['neighbours']}): ε ≥ {r['audit']['epsilon']:.4g}, claimed {claimed}: "
                      f"{r['verdict']}")
    for row in no_canary:
        console.print(f"no one-run audit of {report['family']}/{row['label']}: {row['why']}", highlight=False)
    if skipped:
        console.print(f"not audited (no audit targets yet): {', '.join(skipped)}")
    console.print(f"audit.json and one plot per mechanism in {out}/")
    if any(r["verdict"] == "violation" for r in results + runs + searches) or refused:
        raise typer.Exit(1)


def _claimed(claim: dict) -> str:
    """The ledger's ε at the audit's δ as the audit prints it, or its guarantee where it states none."""
    return f"{claim['epsilon_at_delta']:.4g}" if claim["epsilon_at_delta"] is not None else claim["guarantee"]


@app.command("list")
def list_() -> None:
    """Every registered family with its algorithms and presets, and every adversary, one line each."""
    from privbandit import registry
    from privbandit.runner.config import field_choices

    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title="families (family = \"…\" in an experiment file)")
    for col in ("family", "paper", "algorithms", "presets"):
        table.add_column(col)
    for name in registry.family_names():
        fam = registry.family(name)
        model = fam.experiment_model
        table.add_row(name, fam.title, ", ".join(field_choices(model, ("algorithms", "algorithm"))) or "-",
                      ", ".join(field_choices(model, ("preset",))) or "-")
    console.print(table)
    algorithms = Table(title=escape("algorithms (algorithm = \"…\" in an [algorithms.<label>] table)"))
    for col in ("family", "algorithm", "what"):
        algorithms.add_column(col)
    for name in registry.family_names():
        fam = registry.family(name)
        for algorithm in field_choices(fam.experiment_model, ("algorithms", "algorithm")):
            algorithms.add_row(name, algorithm, fam.algorithm_lines.get(algorithm, "(a plug-in, or undescribed)"))
    console.print(algorithms)
    adversaries = Table(title="adversaries (privbandit attack KIND …)")
    for col in ("kind", "where", "what"):
        adversaries.add_column(col)
    for kind, (where, text) in adversary_catalogue().items():
        adversaries.add_row(kind, where, text)
    console.print(adversaries)
    from privbandit.runner.provenance import plugins

    found = plugins()
    if found:  # a plug-in learner shows nowhere else
        table = Table(title="plug-ins from installed packages")
        for col in ("entry point", "package"):
            table.add_column(col)
        for name, package in found.items():
            table.add_row(name, package)
        console.print(table)


def main() -> None:  # pragma: no cover
    sys.exit(app())
