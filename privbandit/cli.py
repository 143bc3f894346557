"""The ``privbandit`` command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from privbandit.experiment.config import ConfigError, load_experiment

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
err = Console(stderr=True)


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="experiment file (TOML)")],
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="override a field: dotted.name=value")] = None,
    runs: Annotated[Optional[int], typer.Option(help="number of runs (overrides the file)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="results directory [default: results/<name>]")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="worker processes [default: all cores]")] = None,
    transport: Annotated[str, typer.Option(help="inproc (the only transport in this release)")] = "inproc",
):
    """Run an experiment file: many runs of each algorithm, then a results directory."""
    from privbandit.experiment.results import summarize, write_results
    from privbandit.experiment.runner import run_experiment

    overrides = list(set_ or []) + ([f"runs={runs}"] if runs is not None else [])
    try:
        if transport != "inproc":
            raise ConfigError(f"--transport {transport!r}: only 'inproc' is available")
        if jobs is not None and jobs < 1:
            raise ConfigError(f"--jobs {jobs}: must be ≥ 1")
        config, _ = load_experiment(experiment, overrides)
        out = out or Path("results") / config.name
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=not err.is_terminal) as bar:
            ids = {label: bar.add_task(label, total=config.runs) for label in config.algorithms}
            results, algos, compute, elapsed = run_experiment(
                config, jobs=jobs, progress=lambda label, run: bar.advance(ids[label])
            )
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2)
    summary = summarize(config, results, algos, compute, elapsed)
    write_results(out, config, summary, results, algos)
    _print_summary(summary, out)


def _print_summary(summary: dict, out: Path) -> None:
    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"{summary['experiment']}: T = {summary['horizon']:,}, {summary['runs']} runs, "
                        f"{summary['elapsed_s']:.1f} s")
    for col in ("algorithm", "regret (mean ± se)", "Reg/T", "ε spent", "bits/user", "users/s"):
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
            f"{ups:,.0f}" if ups else "-",
        )
    console.print(table)
    console.print(f"results in {out}/ (summary.json, curves.csv, rounds.csv, regret.png)")


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


def main() -> None:  # pragma: no cover
    sys.exit(app())
