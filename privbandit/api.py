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

__all__ = ["run", "sweep", "audit", "default_out", "settings_overrides", "Interrupted", "Results", "SessionFailed", "TRANSPORTS"]

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


def audit(experiment: str | Path | None = None, *, family: str | None = None, algorithm: str | list[str] | None = None,
          overrides: list[str] | None = None, samples: int = 1_000_000, delta: float | None = None,
          confidence: float = 0.95, cohort: int | None = None, seed: int = 0, jobs: int = 1,
          out: str | Path = "results/audit", transport: str = "inprocess", canary: bool = False, search: bool = False,
          broker: str | None = None, run_id: str | None = None, passwords: Mapping[str, str] | None = None,
          tls_files: Mapping[str, str] | None = None, insecure_broker: bool = False,
          progress: Callable[[int, int, str | None], None] | None = None, **settings) -> dict:
    """Measure the privacy each release really gives (docs/audit.md; :mod:`privbandit.audit`); what
    ``privbandit audit`` runs. Two neighbouring inputs, ``samples`` releases of what the analyzer
    receives under each, an ε lower bound at ``delta`` (default: the run's own) holding with
    probability ``confidence``, set against the ledger's claim.

    What to audit: an experiment file (``algorithm``: only these labels), or ``family`` and one
    ``algorithm`` with its defaults; ``overrides`` and ``**settings`` as in :func:`run`. ``cohort``:
    users per audited round where the family lets it vary; ``seed``: the audit's own; ``jobs``
    worker processes (in-process only; results do not depend on it). ``canary``: also a one-run
    audit of each algorithm; ``search``: also search the family's candidate neighbouring pairs.
    ``transport="mqtt"``: the releases are read from a broker with the analyzer's account, released
    by the real intermediary process (``broker``, ``run_id``, ``passwords``, ``tls_files``,
    ``insecure_broker`` as in :func:`run`; ``samples`` ≤ 10⁶: a few hundred releases per second
    cross the broker). ``progress(done, total, name)`` as each release's audit starts, and
    ``(total, total, None)`` at the end.

    Writes ``audit.json`` and one plot per release to ``out`` (replaced) and returns the report:
    ``targets`` (each with its ``verdict``: "consistent", "violation" or, over MQTT, "refused"),
    ``canary_runs``, ``searches``, ``not_audited``, ``no_canary_run``. Every bad value is a
    :class:`ConfigError` naming it; a broker that cannot be used raises its own error, a session
    that stops a RuntimeError."""
    import copy

    from privbandit import registry
    from privbandit.audit import run_audit, write_audit
    from privbandit.audit.mqtt import MAX_MQTT_SAMPLES
    from privbandit.audit.run import run_audit_parallel
    from privbandit.runner import config as experiment_files
    from privbandit.runner.provenance import command_line

    transport = "inproc" if transport == "inprocess" else transport
    if transport not in ("inproc", "mqtt"):
        raise ConfigError(f"--transport {transport!r}: choose inproc or mqtt")
    if isinstance(algorithm, str):
        algorithm = [algorithm]
    if isinstance(overrides, str):
        raise ConfigError(f"overrides={overrides!r}: a list of KEY=VALUE strings, not one string")
    overrides = [*(overrides or ()), *settings_overrides(settings)]
    if transport == "mqtt":
        if jobs != 1:
            raise ConfigError(f"--jobs {jobs}: only with --transport inproc (an MQTT audit is one session)")
        if canary:
            raise ConfigError("--canary: only with --transport inproc (the one-run audit runs in-process)")
        if search:
            raise ConfigError("--search: only with --transport inproc (its pilots need in-process samples)")
        if not 100 <= samples <= MAX_MQTT_SAMPLES:
            raise ConfigError(f"--samples {samples}: with --transport mqtt, must lie in [100, 10^6] (a few "
                              f"hundred releases per second cross the broker; docs/audit.md)")
    elif broker or run_id or passwords or tls_files or insecure_broker:
        raise ConfigError("broker, run_id, passwords, tls_files, insecure_broker: only with transport='mqtt' "
                          "(this audit is in-process)")
    if not 100 <= samples <= 10**9:
        raise ConfigError(f"--samples {samples}: must lie in [100, 10^9]")
    if delta is not None and not 0 < delta < 1:
        raise ConfigError(f"--delta {delta}: must lie in (0, 1) (the ledger states its ε at a δ > 0; a pure ε "
                          f"is the same at every δ)")
    if not 0 < confidence < 1:
        raise ConfigError(f"--confidence {confidence}: must lie in (0, 1)")
    if cohort is not None and not 1 <= cohort <= 10**6:
        raise ConfigError(f"--cohort {cohort}: must lie in [1, 10^6]")
    if seed < 0:
        raise ConfigError(f"--seed {seed}: must be ≥ 0")
    if not 1 <= jobs <= 64:
        raise ConfigError(f"--jobs {jobs}: must lie in [1, 64]")
    if (experiment is None) == (family is None):
        raise ConfigError("give an experiment FILE, or --family F --algorithm A (not both)")
    if experiment is not None:
        data, where = experiment_files.read_experiment_data(experiment, overrides), experiment
        fam, config = experiment_files.load_data(copy.deepcopy(data), where)
    else:
        if family not in registry.family_names():
            raise ConfigError(f"--family {family!r}: not one of {', '.join(registry.family_names())}")
        if not algorithm or len(algorithm) != 1:
            raise ConfigError("--family needs exactly one --algorithm (privbandit list shows them)")
        data = {"family": family, "name": f"audit-{algorithm[0]}", "horizon": 1_000_000,
                "algorithms": {algorithm[0]: {"algorithm": algorithm[0]}}}
        for assignment in overrides:
            experiment_files.apply_override(data, assignment)
        where = f"--family {family} --algorithm {algorithm[0]}"
        try:
            fam, config = experiment_files.load_data(copy.deepcopy(data), where)
        except ConfigError as exc:
            raise ConfigError(f"{exc}\n(a family whose experiments need more than an algorithm: give an "
                              f"experiment FILE, or the fields with --set)") from None
    labels = fam.labels(config)
    if experiment is not None and algorithm:
        unknown = [a for a in algorithm if a not in labels]
        if unknown:
            raise ConfigError(f"--algorithm {', '.join(unknown)}: not a label of {experiment}; labels: "
                              f"{', '.join(labels)}")
        labels = [label for label in labels if label in algorithm]
    targets, specs, skipped, pairs = [], [], [], []
    for label in labels:
        try:
            found = fam.audit_targets(config, label, cohort)
        except ValueError as exc:  # e.g. a cohort whose modulus the encoding cannot hold
            raise ConfigError(f"algorithms.{label}: cannot audit with --cohort {cohort}: {exc}") from None
        targets += found
        pairs += [(label, t) for t in found]
        specs += [(data, str(where), label, cohort, i, t.name) for i, t in enumerate(found)]
        if not found:
            skipped.append(f"{fam.name}/{label}")
    if not targets:
        raise ConfigError(f"family {fam.name}: no release of {', '.join(labels)} can be audited yet "
                          f"(it defines no audit targets; docs/audit.md)")
    started: list[str] = []

    def step(name: str) -> None:
        if progress is not None:
            progress(len(started), len(targets), name)
        started.append(name)

    out = Path(out)
    session = None
    if transport == "mqtt":
        results, session = _audit_session(fam, config, pairs, samples, delta, confidence, seed, out, step,
                                          broker=broker, passwords=passwords, tls_files=tls_files, run_id=run_id,
                                          insecure=insecure_broker)
    elif jobs == 1:
        results = run_audit(targets, samples, delta, confidence, seed, step)
    else:
        results = run_audit_parallel(specs, jobs, samples, delta, confidence, seed, step)
    if progress is not None:
        progress(len(targets), len(targets), None)
    runs = []
    no_canary = []  # whole file: the algorithms that have no one-run audit, each with why
    if canary:
        for label in labels:
            try:
                runs.append(fam.canary_audit(config, label, seed, confidence))
            except NotImplementedError as exc:
                if algorithm:  # asked for by name: refused, as any option it cannot honour
                    raise ConfigError(f"--canary: {exc}") from None
                no_canary.append({"label": label, "why": str(exc)})
            except ValueError as exc:
                raise ConfigError(f"--canary: {exc}") from None
    searches = []
    if search:  # privbandit/audit/search.py; docs/audit.md
        from privbandit.audit.search import search as search_releases

        try:
            groups = [g for label in labels for g in fam.audit_candidates(config, label, cohort)]
        except ValueError as exc:
            raise ConfigError(f"--search: {exc}") from None
        if not groups:
            raise ConfigError(f"--search: family {fam.name} offers no candidate pairs for {', '.join(labels)} "
                              f"(docs/audit.md)")
        searches = search_releases(groups, samples, delta, confidence, seed)
    report = {"command": command_line(), "family": fam.name, "samples": samples, "confidence": confidence,
              "seed": seed, "cohort": cohort, "transport": transport, "targets": results, "not_audited": skipped,
              "no_canary_run": no_canary, "canary_runs": runs, "searches": searches,
              **({"mqtt": session} if session else {}), "seconds": sum(r["seconds"]["total"] for r in results)}
    write_audit(out, report)
    return report


def _audit_session(fam, config, pairs, samples, delta, confidence, seed, out, progress, *, broker, passwords,
                   tls_files, run_id, insecure):
    """An audit's MQTT session (:func:`privbandit.audit.mqtt.audit_over_mqtt`); what it cannot
    carry and a bad file or password are ConfigErrors, the broker's and the session's own failures
    pass through."""
    from privbandit.audit.mqtt import Broker, NoWirePath, audit_over_mqtt

    where = Broker(broker, passwords, tls_files, run_id, insecure)
    try:
        return audit_over_mqtt(fam, config, pairs, samples, delta, confidence, seed, where, out, progress)
    except NoWirePath as exc:
        raise ConfigError(f"--transport mqtt: {exc}; audit these releases with --transport inproc") from None
    except ValueError as exc:  # a TLS file, a missing role's password
        raise ConfigError(str(exc)) from None
