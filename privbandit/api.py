"""The front door: :func:`run` an experiment over either transport and get one result object.

``privbandit.run("experiments/quickstart.toml", horizon=20_000, runs=4)`` runs it in-process;
``transport="mqtt"`` runs the same experiment as a distributed session, every party its own OS
process over an MQTT broker (an embedded one unless ``broker`` is given), through the same launcher
``privbandit run --transport mqtt`` uses. Both return a :class:`~privbandit.runner.Results`, and
the same seed gives the same numbers over either (DESIGN.md, "Determinism").

This is the only layer that imports both the runner and the services; the CLI is a client of it.
The services are imported only for an MQTT run: an in-process run loads no broker module.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from privbandit.runner import Interrupted, Results
from privbandit.runner.config import ConfigError

__all__ = ["run", "sweep", "default_out", "settings_overrides", "Interrupted", "Results", "SessionFailed", "TRANSPORTS"]

# "inproc" is the CLI's and summary.json's name; "inprocess" reads better in a script. Same path.
TRANSPORTS = ("inprocess", "inproc", "mqtt")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # TOML's bare keys; any other part is written quoted


class SessionFailed(RuntimeError):
    """A distributed session whose observer did not write the results (its exit code, and where
    the parties' logs are)."""


def _toml_value(value, where: str) -> str:
    """One override's value as one line of TOML (what ``--set`` parses back, config.parse_value):
    arrays and tables inline, as a user would type them."""
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_key_part(k, f'{where}.{k!r}')} = {_toml_value(v, f'{where}.{k}')}" for k, v in value.items())
        return "{" + (f" {inner} " if inner else "") + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    import tomli_w

    try:
        return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")
    except TypeError as exc:
        raise ConfigError(f"{where}={value!r}: not a TOML value ({exc}); give a bool, int, float, str, "
                          f"list or dict") from None


def _key_part(part: str, where: str) -> str:
    if not isinstance(part, str) or not part:
        raise ConfigError(f"{where}: a key must be a non-empty string, not {part!r}")
    if _BARE_KEY.fullmatch(part):
        return part
    import json

    return json.dumps(part, ensure_ascii=False)  # a TOML basic string: "my label", "v1.2"


def settings_overrides(settings: Mapping) -> list[str]:
    """Keyword settings as ``--set`` assignments: ``horizon=20000`` → ``"horizon=20000"``; a dict
    stands for its dotted keys, one assignment per leaf (``algorithms={"DP-SE": {"epsilon": 2}}`` →
    ``'algorithms.DP-SE.epsilon=2'``), so it changes those fields and keeps the table's others,
    as the same ``--set``s would; an empty dict sets an empty table. A key that is not a bare TOML
    key is quoted (``"dp rho=0.2"``). Raises :class:`ConfigError` naming a value TOML cannot hold."""
    out: list[str] = []

    def walk(prefix: list[str], value) -> None:
        where = ".".join(prefix)
        if isinstance(value, Mapping) and value:
            for key, inner in value.items():
                walk([*prefix, _key_part(key, f"{where}.{key!r}")], inner)
        else:
            out.append(f"{where}={_toml_value(value, where)}")

    for key, value in settings.items():
        walk([_key_part(key, repr(key))], value)
    return out


def _check(name: str, value, ok: bool, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r}: {rule}")


def run(experiment, overrides: list[str] | None = None, *, transport: str = "inprocess",
        out: str | Path | None = None, jobs: int | None = 1, overwrite: bool = False, resume: bool = False,
        progress: Callable[[str, int], None] | None = None, on_start: Callable | None = None,
        broker: str | None = None, shards: int = 2, timeout: float | None = None, restart_on_crash: int = 0,
        secagg_step_deadline: float | None = None, run_id: str | None = None,
        passwords: Mapping[str, str] | None = None, tls_files: Mapping[str, str] | None = None,
        insecure_broker: bool = False, dashboard_port: int | None = None, **settings) -> Results:
    """Run an experiment and return its :class:`~privbandit.runner.Results` (``repr`` the final
    regret and ε per algorithm; ``.table()``, ``.plot()``, ``.compare()``, ``.summary``).

    ``experiment``: an experiment file's path, its data as a dict, or a family's validated config.
    ``overrides``: ``--set`` assignments (``["horizon=20000"]``); ``**settings`` the same as
    keywords (``horizon=20000, runs=4``, nested via dicts: :func:`settings_overrides`), applied
    after ``overrides``. A field named like one of this function's own arguments can only be set
    through ``overrides``.

    ``transport``: ``"inprocess"`` (or ``"inproc"``): vectorized, in this process and ``jobs``
    worker processes; ``progress(label, run)`` after each run. With ``out``, the results directory is written there (checked before any
    work; an earlier run's results are replaced only with ``overwrite``) and each task kept as it
    finishes (``resume`` reuses those of an interrupted run). Ctrl-C raises :class:`Interrupted`.

    ``"mqtt"``: one distributed session (analyzer, intermediaries, ``shards`` user fleets and an
    observer, each its own process), about five processes and a few seconds of start-up on top of
    the run; ``out`` defaults to a temporary directory removed afterwards (``Results.out`` is then None). ``broker``: an external
    broker's URL (default: an embedded one) with ``passwords`` (role → password) and ``tls_files``
    (``ca_file``, ``cert_file``, ``key_file``); ``run_id`` the one its ACL was written for;
    ``insecure_broker`` runs on one that does not enforce the ACL. ``timeout`` (s) stops the session
    (TimeoutError); ``restart_on_crash`` restarts that many crashed parties in all;
    ``secagg_step_deadline`` (s) is how long a secure-aggregation step waits for every fleet;
    ``dashboard_port`` serves the live page on 127.0.0.1. A party that cannot go on raises
    RuntimeError with the end of its log; an observer that exits non-zero, :class:`SessionFailed`.

    Either transport calls ``on_start(family, config)`` once ``out`` is ready, before the first task
    or party starts.
    """
    _check("transport", transport, transport in TRANSPORTS, f"choose one of {', '.join(TRANSPORTS)}")
    _check("jobs", jobs, jobs is None or (isinstance(jobs, int) and jobs >= 1), "must be an integer ≥ 1 (or None: all cores)")
    if isinstance(overrides, str):
        raise ConfigError(f"overrides={overrides!r}: a list of KEY=VALUE strings, not one string")
    overrides = [*(overrides or ()), *settings_overrides(settings)]
    if transport != "mqtt":
        given = [name for name, value, default in (
            ("broker", broker, None), ("shards", shards, 2), ("timeout", timeout, None),
            ("restart_on_crash", restart_on_crash, 0), ("secagg_step_deadline", secagg_step_deadline, None),
            ("run_id", run_id, None), ("passwords", passwords, None), ("tls_files", tls_files, None),
            ("insecure_broker", insecure_broker, False), ("dashboard_port", dashboard_port, None)) if value != default]
        if given:
            raise ConfigError(f"{', '.join(given)}: only with transport='mqtt' (this run is in-process)")
        from privbandit.runner import load_experiment, run_config

        family, config = load_experiment(experiment, overrides)
        return run_config(family, config, out, jobs, overwrite, progress, resume, on_start)
    if resume:
        raise ConfigError("resume: only in-process (an MQTT session resumes from its checkpoints)")
    _check("shards", shards, isinstance(shards, int) and shards >= 1, "must be an integer ≥ 1")
    _check("restart_on_crash", restart_on_crash, isinstance(restart_on_crash, int) and restart_on_crash >= 0,
           "must be an integer ≥ 0")
    _check("timeout", timeout, timeout is None or timeout > 0, "must be > 0 seconds")
    _check("secagg_step_deadline", secagg_step_deadline, secagg_step_deadline is None or secagg_step_deadline > 0,
           "must be > 0 seconds")
    return _run_mqtt(experiment, overrides, out, overwrite, on_start, broker=broker, shards=shards, timeout=timeout,
                     restart_on_crash=restart_on_crash, secagg_step_deadline=secagg_step_deadline, run_id=run_id,
                     passwords=passwords, tls_files=tls_files, insecure_broker=insecure_broker,
                     dashboard_port=dashboard_port)


def _run_mqtt(experiment, overrides: list[str], out, overwrite: bool, on_start, **session) -> Results:
    """One distributed session through the launcher (the parties are given the experiment as a
    file and the overrides as ``--set``s, as ``privbandit run --transport mqtt`` gives them), then
    the result object read back from the results directory the observer wrote."""
    from privbandit.runner import load_experiment
    from privbandit.runner.results import experiment_toml, prepare_out

    family, config = load_experiment(experiment, overrides)
    with tempfile.TemporaryDirectory(prefix="privbandit-") as scratch:
        if isinstance(experiment, (str, Path)):
            path = Path(experiment)
        else:  # the parties read a file: the loaded experiment as one, every field as resolved
            path, overrides = Path(scratch) / "experiment.toml", []
            path.write_text(experiment_toml(config))
        where = Path(scratch) / "results" if out is None else Path(out)
        prepare_out(where, overwrite)  # before any work: nothing computed is lost to a bad out
        if on_start is not None:
            on_start(family, config)
        return _session(family, config, path, overrides, where, keep=out is not None, **session)


def _session(family, config, path: Path, overrides: list[str], out: Path, keep: bool, *, broker, shards, timeout,
             restart_on_crash, secagg_step_deadline, run_id, passwords, tls_files, insecure_broker,
             dashboard_port) -> Results:
    import json

    from privbandit.runner.paired import read_run_curves
    from privbandit.services.launcher import launch

    code = launch(family, config, path, overrides, out, broker_url=broker, shards=shards,
                  restart_on_crash=restart_on_crash, timeout_s=timeout, insecure_broker=insecure_broker,
                  run_id=run_id, dashboard_port=dashboard_port, secagg_step_s=secagg_step_deadline,
                  passwords=passwords, tls_files=tls_files)
    if code != 0:
        raise SessionFailed(f"the distributed run failed (observer exit {code}); logs in {out / 'logs'}")
    summary = json.loads((out / "summary.json").read_text())
    # Read now: without an out of the caller's, the directory goes with the session's scratch.
    return Results(family, config, summary, {}, out if keep else None, curves=read_run_curves(out))


def default_out(experiment, overrides: list[str] = (), sweep: bool = False) -> Path:
    """Where ``privbandit run`` (``results/<name>``) and ``privbandit sweep``
    (``results/<name>-sweep``) write when not told."""
    from privbandit.runner import load_experiment

    name = load_experiment(experiment, overrides)[1].name
    return Path("results") / (f"{name}-sweep" if sweep else name)


def _grid_strings(grid) -> list[str]:
    """``{"epsilon": [0.5, 1], "algorithms.DP-SE.s": [5, 10]}`` → ``["epsilon=0.5,1", …]`` (the
    ``--grid`` form; a list of those is taken as it is)."""
    if isinstance(grid, str):
        raise ConfigError(f"grid={grid!r}: a dict of key → values, or a list of KEY=V1,V2 strings, not one string")
    if not isinstance(grid, Mapping):
        return list(grid)
    out = []
    for key, values in grid.items():
        if isinstance(values, (str, Mapping)) or not hasattr(values, "__iter__"):
            raise ConfigError(f"grid[{key!r}]={values!r}: a list of values")
        out.append(f"{key}=" + ",".join(_toml_value(v, f"grid[{key!r}]") for v in values))
    return out


def sweep(experiment: str | Path, grid, overrides: list[str] | None = None, *, out: str | Path | None = None,
          executor: str = "local", address: str | None = None, jobs: int | None = None, overwrite: bool = False,
          resume: bool = False, progress: Callable[[int, int], None] | None = None, transport: str = "inprocess",
          shards: int = 2, timeout: float | None = None, **settings) -> dict:
    """Run an experiment file over a grid of overrides (:mod:`privbandit.runner.sweep`); what
    ``privbandit sweep`` runs. ``grid``: key → values (``{"epsilon": [0.1, 0.5, 1]}``; the last key
    varies fastest) or ``--grid`` strings; ``overrides`` and ``**settings`` apply at every point, as
    in :func:`run`. ``out`` (default ``results/<name>-sweep``) receives a results directory per
    point and ``sweep.csv``; each task is kept there as it finishes (``resume`` reuses them).
    ``executor``: ``"local"`` (a pool of ``jobs`` processes, default all cores) or ``"ray"``
    (``address``; the cluster's CPUs decide). ``transport="mqtt"``: each point one distributed
    session with its own embedded broker (``shards``, ``timeout`` as in :func:`run`; ``jobs``
    sessions at once, default 1). ``progress(done, total)`` after each task.

    Returns ``points`` (name → summary), ``computed`` and ``reused`` (tasks, over MQTT sessions),
    ``elapsed_s``, ``failed`` (point → error; over MQTT a failed session does not stop the others)
    and ``out``."""
    import os

    from privbandit.runner.sweep import run_sweep

    _check("jobs", jobs, jobs is None or (isinstance(jobs, int) and jobs >= 1), "must be an integer ≥ 1 (or None)")
    if isinstance(overrides, str):
        raise ConfigError(f"overrides={overrides!r}: a list of KEY=VALUE strings, not one string")
    overrides = [*(overrides or ()), *settings_overrides(settings)]
    transport = "inproc" if transport == "inprocess" else transport  # any other, run_sweep names and refuses
    if transport != "mqtt" and (shards != 2 or timeout is not None):
        given = [f for f, v in (("--shards", shards != 2 or None), ("--timeout", timeout)) if v is not None]
        raise ConfigError(f"{', '.join(given)}: only with --transport mqtt")
    out = default_out(experiment, overrides, sweep=True) if out is None else Path(out)
    if executor != "ray" and jobs is None:  # over MQTT a session is about five processes: one at a time
        jobs = 1 if transport == "mqtt" else os.cpu_count()
    report = run_sweep(experiment, _grid_strings(grid), out, overrides, executor, address, jobs, overwrite, resume,
                       progress, transport=transport, shards=shards, timeout_s=timeout)
    return {**report, "out": out}
