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
