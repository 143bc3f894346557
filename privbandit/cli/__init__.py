"""privbandit: a distributed protocol simulator for private bandit learning. `privbandit list` shows what
it runs; `privbandit COMMAND --help` the options of a command."""

# The CLI is a thin layer over privbandit.api, one module per command group (run, attack, dashboard,
# parties, broker, audit; common holds what they share). This module is its table of contents: the
# commands are registered here, in the order `privbandit -h` lists them. Every module's heavy
# imports stay inside its commands: each party process imports the whole CLI at start-up.

from __future__ import annotations

import os
import sys

# Every privbandit process computes on one thread by design: runs spread over processes (`--jobs`,
# one process per party). A BLAS thread pool in each would cost CPU (its start at numpy's import, its
# threads spinning after a call: a fresh MAB task spent 0.88–1.18 CPU-s with it, 0.75–0.80 without)
# and let a float result depend on how many cores the machine has. Set before any module of the CLI
# imports numpy; a value the user set wins.
for _threads in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

from typing import Annotated

import typer

from privbandit.cli import attack, audit, broker, dashboard, parties, run
from privbandit.cli.attack import adversary_catalogue
from privbandit.cli.broker import _broker_access
from privbandit.cli.common import _Group
from privbandit.cli.parties import _serve, parse_key

__all__ = ["app", "main", "adversary_catalogue", "parse_key", "_broker_access", "_serve"]

app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, help=__doc__, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})

app.command()(run.run)
app.command()(run.sweep)
app.command()(run.compare)
app.command()(dashboard.dashboard)
app.command()(parties.health)
app.command(cls=attack._AttackCommand, help=attack._ATTACK_SUMMARY)(attack.attack)
app.command("letor-arms")(run.letor_arms)
app.command()(parties.analyzer)
app.command()(parties.aggregator)
app.command()(parties.shuffler)
app.command()(parties.users)
app.command()(parties.observer)
app.command("broker-config")(broker.broker_config)
app.command("tls-files")(broker.tls_files)
app.command("reset-state")(parties.reset_state)
app.command()(broker.cluster)
app.command()(parties.keys)
app.command()(run.demo)
app.command()(parties.up)
app.command()(audit.audit)
app.command("list")(run.list_)


def _print_version(value: bool) -> None:
    if value:
        from privbandit import __version__

        print(f"privbandit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                   help="print the version and exit")] = False) -> None:
    """A distributed protocol simulator for private bandit learning."""


def main() -> None:  # pragma: no cover
    sys.exit(app())
