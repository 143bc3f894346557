"""Experiments in-process or over MQTT: run, sweep, compare, demo, list, and letor-arms, which
makes the arm-means file experiments point to. Each parses its options and calls privbandit.api
(or the runner), then prints what came back."""

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

from privbandit.cli.attack import adversary_catalogue
from privbandit.cli.broker import (CaFileOption, CertFileOption, CredentialsOption, DemoRunId, InsecureBrokerOption,
                                   KeyFileOption, RunIdForBroker, _broker_access, _broker_reachable)
from privbandit.cli.common import SetOption, _error, err
from privbandit.cli.dashboard import (DashboardOption, DemoDashboard, PageOnlyPortOption, _dashboard_port_free,
                                      _page_port, _serve_results)
from privbandit.runner.config import ConfigError
from privbandit.runner.results import privacy_cell  # its tables and the API's repr


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


def compare(
    results_dir: Annotated[Path, typer.Argument(help="a results directory (with runs.csv)")],
    at: Annotated[Optional[int], typer.Option(help="compare at this checkpoint t [default: the horizon]")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="compare every algorithm with this one [default: every pair]")] = None,
):
    """Paired comparisons of the algorithms of one results directory: run r of every algorithm shares
    its instance, so the difference is taken run by run (mean, standard error, t, runs won)."""
    from privbandit.runner.paired import compare_at, read_runs

    try:
        if not (results_dir / "runs.csv").is_file():
            raise ConfigError(f"{results_dir}/runs.csv not found: give a results directory written by privbandit run")
        t, curves = read_runs(results_dir)
        rows = compare_at(t, curves, at, baseline, names=("--at ", "--baseline "))
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    except ValueError as exc:  # a bad --at or --baseline, or one algorithm only
        _error(f"{results_dir}: {exc}")
        raise typer.Exit(2)
    at = int(t[-1]) if at is None else at
    table = Table(title=f"{results_dir}: paired pseudo-regret at t = {at:,} (a − b)")
    for col in ("a", "b", "runs", "mean a − b", "stderr", "t", "a won", "b won", "verdict"):
        table.add_column(col, justify="right", no_wrap=True)
    for a, b, p in rows:
        table.add_row(a, b, str(p.runs), f"{p.mean_difference:,.2f}", f"{p.stderr:,.2f}", f"{p.t:.2f}",
                      str(p.a_won), str(p.b_won), p.verdict())
    Console(width=None if sys.stdout.isatty() else 160).print(table)


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




def table_legend(wire: bool) -> str:
    """What the summary table's columns are (issue #35: the demo's table had none)."""
    lines = [
        "regret: pseudo-regret Reg(T) = Σ_t (μ* − μ(a_t)) at the horizon, mean ± standard error over the runs",
        "Reg/T: the same, per user (time-average regret; regret.png plots Reg(t)/t)",
        "ε spent: per user, what the ledger proves for what the analyzer received: \"(pure)\" ε-DP with δ = 0; "
        "\"(δ=…)\" (ε, δ)-DP; \"none proven\" / \"non-private\" where no proof covers it",
        "bits/user: protocol bits of a user's report (its encoding: ⌈log₂ m⌉ a residue mod m, 64 a raw float), "
        "averaged over reporting users",
    ]
    if wire:
        lines.append("wire B/user: bytes a reporting user's reports took on the wire (msgpack, MAC and MQTT framing "
                     "included): the price of the transport beside bits/user")
    lines.append("users/s: users served per second of the tasks' time (T × runs / their summed seconds)")
    return "\n".join(lines)


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
    console.print(table_legend(wire), highlight=False)
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
