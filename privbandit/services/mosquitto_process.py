"""A private Mosquitto: one ``mosquitto -c <conf>`` child process listening on a port of 127.0.0.1.

For ``privbandit up``, the tests and the benchmarks, which each need a broker of their own rather
than the system one: :class:`MosquittoProcess` starts it and waits until it listens (or raises
with the tail of its log), SIGKILLs it and starts it again on the same port, and waits for it to
save its database. :func:`start_on_free_port` picks the port; :func:`write_open_conf` (anonymous, persistent or not)
and :func:`start_with_broker_config` (the run's accounts and ACL) write the configurations they use;
:func:`build_budget_plugin` compiles the per-account publish budget the latter loads (issue #32).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from privbandit.services import acl
from privbandit.services.embedded_broker import HOST, free_port, wait_listening
from privbandit.services.launcher import stop_process

START_TIMEOUT_S = 10.0
START_ATTEMPTS = 3  # free_port() races with other processes; a lost race gets another port
SAVE_TIMEOUT_S = 10.0
SAVED_LINE = "Saving in-memory database"  # Mosquitto logs it on each autosave
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/opt/homebrew/sbin")  # often missing from a user's PATH
_TAIL_LINES = 20


def mosquitto_binary(name: str = "mosquitto") -> str | None:
    """Where ``name`` (``mosquitto``, ``mosquitto_passwd``) is installed: on PATH, or in an sbin
    directory (Debian puts ``mosquitto`` in /usr/sbin); None if nowhere."""
    found = shutil.which(name)
    if found:
        return found
    candidates = (os.path.join(directory, name) for directory in _SBIN)
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


class MosquittoError(RuntimeError):
    """Mosquitto could not run, exited, or did not listen in time. ``log_text`` is what it logged
    since this start; the message ends with its last lines."""

    def __init__(self, message: str, log_text: str = ""):
        super().__init__(message)
        self.log_text = log_text


class PortInUse(MosquittoError):
    """Mosquitto found its port taken (another process bound it after it was picked): start
    again on another port."""


class MosquittoProcess:
    """One Mosquitto for ``conf``, which must make it listen on 127.0.0.1:``port``.

    Its stdout and stderr are appended to ``log`` (default: ``mosquitto.log`` beside ``conf``).
    Not started by the constructor: call :meth:`start`, or use it as a context manager (started
    on entry unless it already runs, stopped on exit). After :meth:`kill`, :meth:`start` brings it
    back on the same port with the same conf (and, with persistence, what it had saved)."""

    def __init__(self, conf: Path, port: int, *, log: Path | None = None, binary: str | None = None):
        self.conf = Path(conf)
        self.port = port
        self.log = Path(log) if log is not None else self.conf.with_name("mosquitto.log")
        self.binary = binary or mosquitto_binary()
        if self.binary is None:
            raise MosquittoError(f"mosquitto is not installed (not on PATH nor in {', '.join(_SBIN)}): "
                                 "install it, e.g. `apt install mosquitto`")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start it and return once the port accepts connections. Raises :class:`PortInUse` if
        the port was taken, :class:`MosquittoError` if it exited or did not listen in ``timeout`` s
        (the process is stopped first)."""
        if self.running:
            raise MosquittoError(f"mosquitto -c {self.conf} is already running (pid {self.proc.pid})")
        if _accepts(self.port):  # else the wait below would take that listener for this Mosquitto
            raise PortInUse(f"mosquitto: {HOST}:{self.port} is in use: another process listens there")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log.stat().st_size if self.log.exists() else 0  # the log is appended to
        with open(self.log, "ab") as out:
            try:
                self.proc = subprocess.Popen([self.binary, "-c", str(self.conf)], stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=subprocess.STDOUT)
            except OSError as exc:
                raise MosquittoError(f"cannot run {self.binary}: {exc}") from None
        if wait_listening(self.proc, self.port, time.monotonic() + timeout):
            return
        exited = self.proc.poll()
        stop_process(self.proc)
        with open(self.log, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        tail = "\n".join(text.splitlines()[-_TAIL_LINES:]) or "(empty)"
        if "in use" in text:  # "Error: Address already in use"
            raise PortInUse(f"mosquitto: {HOST}:{self.port} is in use; its log ({self.log}):\n{tail}", text)
        reason = f"exited with code {exited}" if exited is not None else f"did not listen within {timeout:g} s"
        raise MosquittoError(f"mosquitto -c {self.conf} on {HOST}:{self.port} {reason}; "
                             f"last lines of {self.log}:\n{tail}", text)

    def kill(self) -> None:
        """SIGKILL: no goodbye to its clients, nothing more saved to disk."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within a few seconds."""
        stop_process(self.proc)

    def saved(self, timeout: float = SAVE_TIMEOUT_S) -> None:
        """Wait for its next save to disk (persistence on): what it holds now survives a SIGKILL.

        Mosquitto logs a save *before* it writes ``<db>.new`` and renames it over ``<db>``: the
        line alone does not mean the file is there. So, once a save started after this call is
        logged, wait for ``<db>`` to be replaced (if that save was already done when we looked,
        the next one replaces it: later, still correct)."""
        before, _ = self._saves()
        end = time.monotonic() + timeout
        while (found := self._saves())[0] == before:
            if time.monotonic() > end:
                raise MosquittoError(f"mosquitto did not save its database within {timeout:g} s ({self.log})")
            time.sleep(0.05)
        db = Path(found[1])
        seen = _identity(db)
        while _identity(db) in (seen, None):
            if time.monotonic() > end:
                raise MosquittoError(f"mosquitto did not finish saving {db} within {timeout:g} s ({self.log})")
            time.sleep(0.01)

    def _saves(self) -> tuple[int, str]:
        """How many saves it has logged, and the file the last one writes."""
        lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if SAVED_LINE in ln]
        return len(lines), lines[-1].split(f"{SAVED_LINE} to ", 1)[-1].strip().rstrip(".") if lines else ""

    def __enter__(self) -> MosquittoProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _identity(path: Path) -> tuple[int, int] | None:
    """(inode, mtime) of a file, None if it is not there: a rename over it changes the inode."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _accepts(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def start_on_free_port(write_conf: Callable[[int], Path], *, log: Path | None = None, binary: str | None = None,
                       attempts: int = START_ATTEMPTS, timeout: float = START_TIMEOUT_S) -> MosquittoProcess:
    """A started Mosquitto with the conf ``write_conf(port)`` writes for a free port (and returns
    the path of). If another process takes that port first, a new port and a new conf, up to
    ``attempts`` times; then the last :class:`PortInUse` is raised."""
    for attempt in range(attempts):
        port = free_port()
        mosquitto = MosquittoProcess(write_conf(port), port, log=log, binary=binary)
        try:
            mosquitto.start(timeout)
            return mosquitto
        except PortInUse:
            if attempt == attempts - 1:
                raise
    raise ValueError(f"attempts must be at least 1, got {attempts!r}")


def start_with_broker_config(directory: Path, run_id: str, *, backend: str = "acl_file",
                             binary: str | None = None, instances=(), budgets: bool = True,
                             publish_budgets=acl.PUBLISH_BUDGETS, **tls) -> tuple[MosquittoProcess, acl.BrokerFiles]:
    """A started Mosquitto with :func:`acl.write_broker_config`'s files in ``directory`` (one
    account per role and per intermediary instance of ``instances``, e.g. ``shuffler-1``; the run's
    ACLs; ``tls``: its ``tls_cert``, ``tls_key``, ``client_ca``) on a free port, and those files
    (passwords included). ``budgets``: load the per-account publish budgets
    (:func:`build_budget_plugin`, which raises :class:`BudgetPluginError` if it cannot be built);
    False: none, as Mosquitto alone. ``publish_budgets``: the budgets, by account (the tests' smaller
    ones; by default the embedded broker's, :data:`acl.PUBLISH_BUDGETS`)."""
    written: list[acl.BrokerFiles] = []
    plugin = build_budget_plugin() if budgets else None

    def write(port: int) -> Path:
        written.append(acl.write_broker_config(directory, run_id, port, backend=backend, instances=instances,
                                               budget_plugin=plugin, publish_budgets=publish_budgets,
                                               **tls))  # type: ignore[arg-type]
        return written[-1].conf

    return start_on_free_port(write, binary=binary), written[-1]


def write_open_conf(directory: Path, port: int, *, persistent: bool = False) -> Path:
    """Write ``directory/mosquitto.conf``: an anonymous Mosquitto on 127.0.0.1:``port`` with the
    generated config's limits and ``set_tcp_nodelay true`` (without it each message the broker
    sends waits up to 40 ms on Nagle's algorithm). ``persistent``: it persists its sessions and
    queues to ``directory`` (``autosave_interval 1``; Mosquitto 2.0 in fact saves every 2 s), so that
    it can be SIGKILLed and started again from what it saved."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "mosquitto.conf"
    saved = (["persistence true", f"persistence_location {directory.resolve()}/", "autosave_interval 1"]
             if persistent else ["persistence false"])
    conf.write_text("\n".join([
        f"listener {port} {HOST}", "allow_anonymous true", *saved,
        f"max_queued_messages {acl.MAX_QUEUED_MESSAGES}", f"max_packet_size {acl.MAX_PACKET_BYTES}", "log_dest stderr",
        "set_tcp_nodelay true",
        f"user {getpass.getuser()}",  # started as root, Mosquitto would drop to an account that cannot write here
        ""]))
    return conf


def write_persistent_conf(directory: Path, port: int) -> Path:
    """:func:`write_open_conf` with persistence: a broker the fault tests kill and start again."""
    return write_open_conf(directory, port, persistent=True)


# --- the per-account publish budget: privbandit/services/acl/budget_plugin.c ---------------------

BUDGET_PLUGIN_SOURCE = Path(acl.__file__).resolve().with_name("budget_plugin.c")
# Where Mosquitto's plugin headers are looked for, in this order (Debian's mosquitto-dev and
# libmosquitto-dev put them in /usr/include; Homebrew in its prefix).
_INCLUDE_DIRS = ("/usr/include", "/usr/local/include", "/opt/homebrew/include")
_HEADERS = ("mosquitto_broker.h", "mosquitto_plugin.h", "mosquitto.h")


class BudgetPluginError(MosquittoError):
    """The budget plugin cannot be built here: the message names what is missing."""


def budget_plugin_cache() -> Path:
    """Where built plugins are kept: ``$PRIVBANDIT_CACHE_DIR`` or ``$XDG_CACHE_HOME/privbandit``
    (``~/.cache/privbandit``)."""
    if os.environ.get("PRIVBANDIT_CACHE_DIR"):
        return Path(os.environ["PRIVBANDIT_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "privbandit"


def build_budget_plugin(cache: Path | None = None, *, compiler: str | None = None) -> Path:
    """The budget plugin compiled for this machine's Mosquitto: built with ``cc`` on first use into
    ``cache`` (default :func:`budget_plugin_cache`), named by a hash of the source and of the
    headers it was built against, so that a new Mosquitto or source builds it again. Concurrent
    callers each build to a temporary file and rename it in place. Raises
    :class:`BudgetPluginError` naming what is missing: a C compiler, or Mosquitto's headers
    (Debian: ``apt install mosquitto-dev libmosquitto-dev``, what ``.ci/run`` installs)."""
    cc = compiler or next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None or not shutil.which(cc):
        raise BudgetPluginError(f"cannot build the Mosquitto budget plugin: no C compiler ({compiler or 'cc, gcc or clang'}) "
                                "on PATH; install one (Debian: apt install gcc)")
    include = next((d for d in _INCLUDE_DIRS if all(os.path.isfile(os.path.join(d, h)) for h in _HEADERS)), None)
    if include is None:
        missing = [h for h in _HEADERS if not any(os.path.isfile(os.path.join(d, h)) for d in _INCLUDE_DIRS)]
        raise BudgetPluginError(f"cannot build the Mosquitto budget plugin: {', '.join(missing or _HEADERS)} not found "
                                f"in {', '.join(_INCLUDE_DIRS)}; install Mosquitto's plugin headers (Debian: apt install "
                                "mosquitto-dev libmosquitto-dev), or start Mosquitto with budgets=False")
    digest = hashlib.sha256(BUDGET_PLUGIN_SOURCE.read_bytes())
    for header in _HEADERS:
        digest.update(Path(include, header).read_bytes())
    cache = Path(cache) if cache is not None else budget_plugin_cache()
    target = cache / f"privbandit_budget-{digest.hexdigest()[:16]}.so"
    if target.is_file():
        return target.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.name, suffix=".partial", dir=cache)
    os.close(fd)
    try:
        done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", f"-I{include}", "-o", partial,
                               str(BUDGET_PLUGIN_SOURCE)], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BudgetPluginError(f"cannot build the Mosquitto budget plugin: {cc} exited {done.returncode}:\n"
                                    f"{done.stderr.strip()[-2000:]}")
        os.chmod(partial, 0o755)  # Mosquitto may run as another user (the conf's `user`)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target.resolve()
