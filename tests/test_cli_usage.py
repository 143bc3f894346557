"""The command line as a user meets it: help on every command, with ``-h`` as with ``--help``;
help that names only options the command has; and one error style (issue #35)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from privbandit.cli import app

COMMANDS = sorted(typer.main.get_command(app).commands)


def _help(argv):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, (argv, result.output, result.exception)
    return result.stdout


@pytest.mark.parametrize("command", [[]] + [[c] for c in COMMANDS], ids=lambda c: c[0] if c else "privbandit")
def test_minus_h_is_help_wherever_help_is(command):
    assert _help([*command, "-h"]) == _help([*command, "--help"])


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_only_options_the_command_has_and_describes_each(command):
    text = _help([command, "--help"])
    options = set(re.findall(r"^\s+(?:-h, )?(--[a-z][a-z-]*)", text, re.M)) | set(re.findall(r" / (--[a-z-]+)", text))
    # "with --transport mqtt: …" in a command without --transport (demo's help said it, #35)
    conditions = set(re.findall(r"with (--[a-z][a-z-]*)", " ".join(text.split())))
    assert conditions <= options, f"{command} --help names {conditions - options}, which it does not take"
    cmd = typer.main.get_command(app).commands[command]
    undescribed = [p.name for p in cmd.params if not (p.help or "").strip()]
    assert not undescribed, f"{command}: no help for {undescribed}"
    # click's names for a value, not Python's ("<list[str]>", "<int>", "<Path>")
    assert not re.search(r"<(list\[|str>|int>|float>|path>|Path>|bool>)", text), text


@pytest.mark.parametrize("argv, words", [
    (["run", "experiments/quickstart.toml", "--bogus"], "No such option: --bogus"),
    (["run"], "Missing argument 'EXPERIMENT'"),
    (["run", "experiments/quickstart.toml", "--runs", "many"], "Invalid value for '--runs'"),
    (["dashboard", "results/x", "--port", "0"], "'0': must be an integer in 1..65535"),
    (["compare"], "Missing argument 'RESULTS_DIR'"),
    (["no-such-command"], "No such command 'no-such-command'"),
    (["--bogus"], "No such option: --bogus"),
    (["run", "experiments/quickstart.toml", "--jobs", "0"], "--jobs 0: must be ≥ 1"),  # the CLI's own check
])
def test_a_usage_error_is_one_error_line_and_exit_2(argv, words):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr  # no click usage box
    assert words in lines[0], lines[0]
    assert "Usage:" not in result.output and "Try '" not in result.output


def test_the_installed_entry_point_takes_minus_h_and_reports_usage_errors_in_one_line():
    # The console script runs typer's standalone mode (sys.exit), which CliRunner only imitates.
    script = Path(sys.executable).with_name("privbandit")
    if not script.is_file():
        pytest.skip(f"no console script beside {sys.executable} (privbandit is not pip-installed here)")
    help_ = subprocess.run([script, "run", "-h"], capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and "Usage: " in help_.stdout, help_.stderr
    bad = subprocess.run([script, "run", "--bogus"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: No such option: --bogus (Possible options: --jobs, --out, --runs) (see privbandit run -h)"]
