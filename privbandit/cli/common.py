"""What the CLI's command groups share: one error style (``error: …`` on stderr), the click group
that gives every command ``-h`` and plain metavars, and the options and loaders several groups take."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
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


def _world(experiment: Path, set_: list[str] | None):
    """(family, config) of an experiment file, for the parties that may hold the world."""
    from privbandit.runner import config as experiment_files

    try:
        return experiment_files.load(experiment, list(set_ or []))
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
