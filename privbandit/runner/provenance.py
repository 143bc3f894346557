"""Where a result came from (``summary.json`` → ``provenance``): the package and its git commit,
the command, Python and the libraries the numbers depend on, and when the work ran.

The command is the one the user typed: a party started by ``privbandit run --transport mqtt``
inherits it through ``PRIVBANDIT_COMMAND`` (the observer writes the summary there).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

LIBRARIES = ("numpy", "scipy", "pydantic", "dp-accounting", "cryptography", "msgpack", "aiomqtt", "amqtt")
COMMAND_ENV = "PRIVBANDIT_COMMAND"
# The launcher's probe of the broker (services/broker_probe.py) hands its verdict to the observer,
# which writes the summary, through this variable: "enforced" or "insecure".
BROKER_ACL_ENV = "PRIVBANDIT_BROKER_ACL"


def command_line() -> str:
    name = Path(sys.argv[0]).name
    if name == "__main__.py" and Path(sys.argv[0]).parent.name == "privbandit":
        name = "privbandit"  # python -m privbandit
    return os.environ.get(COMMAND_ENV) or shlex.join([name, *sys.argv[1:]])


def broker_record() -> dict:
    """``summary.json`` → ``broker`` of an MQTT session, written by its observer: ``acl`` is the
    launcher's probe verdict ("enforced": nothing the ACL denies was readable; "insecure": run with
    --insecure-broker although it was, or could not be verified; "unchecked": no probe ran, a
    party started by hand), ``tls`` whether the parties reach the broker over mqtts://."""
    from urllib.parse import urlsplit

    acl = os.environ.get(BROKER_ACL_ENV)
    return {"acl": acl if acl in ("enforced", "insecure") else "unchecked",
            "tls": urlsplit(os.environ.get("PRIVBANDIT_BROKER_URL", "")).scheme == "mqtts"}


def git_commit(package: Path | None = None) -> dict | None:
    """The checkout the package runs from: its commit and whether files differ from it; None when
    the package is not tracked by a git checkout or git is missing. Tracked, not merely inside one:
    a wheel installed in a virtualenv kept inside some other repository must not claim that
    repository's commit."""
    here = package or Path(__file__).resolve().parent.parent
    try:
        subprocess.run(["git", "-C", str(here), "ls-files", "--error-unmatch", "__init__.py"], capture_output=True,
                       timeout=5, check=True)
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head, "modified": bool(dirty)}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def plugin_entry_points():
    """(group, entry point) of every installed plug-in from outside privbandit: its families and
    its mechanisms, learners and adversaries."""
    from importlib.metadata import entry_points

    from privbandit.registry import FAMILIES_GROUP, PLUGINS_GROUP

    for group in (FAMILIES_GROUP, PLUGINS_GROUP):
        for ep in entry_points(group=group):
            if ep.dist is None or ep.dist.name != "privbandit":
                yield group, ep


def plugins() -> dict[str, str]:
    """Every installed plug-in from outside privbandit (its numbers depend on their code): entry
    point → "distribution version"."""
    out = {f"{group}:{ep.name}": f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else ep.value
           for group, ep in plugin_entry_points()}
    return dict(sorted(out.items()))


def provenance(started: float, ended: float) -> dict:
    """``started``/``ended``: POSIX times of the work the summary describes."""
    from privbandit import __version__

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")

    return {
        "privbandit": __version__,
        "git": git_commit(),
        "command": command_line(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "plugins": plugins(),
        "started": iso(started),
        "ended": iso(ended),
    }
