"""The dashboard's options and checks (run, demo, observer) and `privbandit dashboard`, which serves
a finished results directory (docs/dashboard.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from privbandit.cli.common import _error, err
from privbandit.runner.config import ConfigError


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


def _dashboard_port_free(port: int) -> None:
    """Before any work: the dashboard's port can be listened on (the observer listens on it)."""
    from privbandit.services.dashboard import DEFAULT_HOST, DashboardError, bind

    try:
        bind(DEFAULT_HOST, port).close()
    except DashboardError as exc:
        raise ConfigError(str(exc)) from None


def _serve_results(out: Path | list[Path], port: int, after_session: bool = True) -> None:
    """After the session (the observer, and its live page, have stopped): its results directory on
    the same port, read-only, until Ctrl-C; or several results directories, compared."""
    from privbandit.services.dashboard import DashboardError, serve_results

    def announce(url: str) -> None:
        what = "the session is over; serving" if after_session else "serving"
        shown = " ".join(map(str, out)) if isinstance(out, list) else out
        err.print(f"dashboard: {what} {shown} at {url} until Ctrl-C", highlight=False)

    try:
        serve_results(out, port, announce=announce)
    except DashboardError as exc:
        _error(exc)
        raise typer.Exit(1)
    err.print("dashboard stopped")


def dashboard(
    results: Annotated[list[Path], typer.Argument(
        help="results directories (summary.json, curves.csv, …; an audit in its audit/ folder is shown too) or "
             "sweep directories (sweep.csv: each point), compared on one page")],
    port: DashboardPortOption = 8050,
):
    """Serve finished results directories' page on 127.0.0.1 until Ctrl-C: one run's results, or several runs
    and a sweep's points compared (regret overlaid, runs selectable)."""
    from privbandit.services.dashboard import DirectoryError, results_dirs

    try:
        results_dirs(results)
    except DirectoryError as exc:
        _error(f"RESULTS {exc} (a results directory of `privbandit run`, `demo` or a point of `sweep`, or a "
               f"sweep's --out)")
        raise typer.Exit(2)
    _serve_results(results[0] if len(results) == 1 and (results[0] / "summary.json").is_file() else results,
                   port, after_session=False)
