"""``privbandit sweep``: one experiment file over a grid of overrides (issue #18).

Every grid point is an experiment of its own (its config validated before any work), and every
task of every point, one run or an algorithm's stacked runs, is hermetic: it carries its whole
config and is keyed by a hash of it (:mod:`.store`), so a sweep run again computes only what is
missing and a changed config never reuses a stale result. Tasks go to an executor: a local process
pool (default) or a Ray cluster (``--executor ray --address HOST:PORT``; ``pip install
'privbandit[ray]'``); the numbers do not depend on which, nor on the order tasks finish in.

Over MQTT (``--transport mqtt``) the unit of work is a grid point: one whole distributed session,
every party its own process, with its own embedded broker on its own port, in a scratch directory
on whichever host runs it; its results directory comes back as files. A point whose results are
in ``<out>`` from the same config is reused with ``--resume``; a session that fails is reported by
name with its logs kept, and the other points go on.

Writes ``<out>/<point>/`` (the results directory of each point, as ``privbandit run`` writes it)
and ``<out>/sweep.csv``: one row per point and algorithm with the grid's values, the final regret
and the privacy the ledger states.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import itertools
import json
import logging
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from privbandit.runner import config as experiment_files, results, tasks
from privbandit.runner.config import ConfigError, parse_value
from privbandit.runner.store import TaskStore, experiment_key

EXECUTORS = ("local", "ray")
TRANSPORTS = ("inproc", "mqtt")


@dataclass
class Point:
    name: str  # its results directory: key=value,… of the grid
    values: dict  # grid key → value
    family: object
    config: object


def split_values(text: str) -> list[str]:
    """``0.1,0.5,[1, 2],"a,b"`` → the top-level comma-separated TOML values."""
    out, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return out


def parse_grid(grids: list[str]) -> list[tuple[str, list[str]]]:
    axes = []
    for g in grids:
        key, values = experiment_files.key_and_value(g)  # a quoted label may hold "="
        items = split_values(values) if values is not None else []
        if not key or not items or not all(items):
            raise ConfigError(f"--grid {g!r}: expected key=v1,v2,…, e.g. --grid epsilon=0.1,0.5,1")
        if key in dict(axes):
            raise ConfigError(f"--grid {key}: given twice")
        axes.append((key, items))
    if not axes:
        raise ConfigError("sweep: give at least one --grid key=v1,v2,…")
    return axes


def points(path: str | Path, grids: list[str], overrides: list[str] = ()) -> list[Point]:
    """Every grid point's validated experiment, in grid order (the last --grid varies fastest)."""
    axes = parse_grid(grids)
    out = []
    for combo in itertools.product(*(values for _, values in axes)):
        assignment = [f"{key}={value}" for (key, _), value in zip(axes, combo)]
        family, config = experiment_files.load(path, [*overrides, *assignment])
        name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(assignment))
        out.append(Point(name, {key: parse_value(v) for (key, _), v in zip(axes, combo)}, family, config))
    return out


def execute_indexed(i: int, task: tasks.Task):
    """Task ``i`` of the sweep: (i, label, runs, result, seconds); module-level, so a process pool or
    a Ray worker can import it."""
    return (i, *tasks.execute(task))


def _exit_on_term(signum, frame):
    raise SystemExit(128 + signum)


def session_indexed(i: int, text: str, name: str, shards: int, timeout_s: float | None):
    """Grid point ``i`` as a distributed session on this host: the point's whole experiment as
    ``text`` (every default and override filled in, paths absolute: :func:`results.experiment_toml`)
    written to a scratch directory, its own embedded broker, every party a process. Returns (i,
    observer exit code or None if the session could not finish, error text, the results
    directory's files without checkpoints, seconds); module-level, for a Ray worker."""
    from privbandit.services.launcher import launch

    start = time.perf_counter()
    if threading.current_thread() is threading.main_thread():
        # A pool worker stopped by Ctrl-C gets SIGTERM: leave through the launcher's clean-up,
        # which stops the session's parties and broker, instead of dying with them orphaned.
        signal.signal(signal.SIGTERM, _exit_on_term)
    with tempfile.TemporaryDirectory(prefix="privbandit-sweep-") as tmp:
        path = Path(tmp) / name
        path.write_text(text)
        out = Path(tmp) / "out"
        family, config = experiment_files.load(path)
        try:
            code, error = launch(family, config, path, [], out, timeout_s=timeout_s, shards=shards), ""
        except (RuntimeError, TimeoutError, OSError) as exc:
            code, error = None, str(exc)
        files = {f.relative_to(out).as_posix(): f.read_bytes() for f in sorted(out.rglob("*"))
                 if f.is_file() and f.relative_to(out).parts[0] != "state"}
    return i, code, error, files, time.perf_counter() - start


def unreachable(host: str, port: int, timeout_s: float = 5.0) -> str | None:
    """Why nothing accepts a TCP connection at ``host:port`` (None: something does)."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None


def check_executor(executor: str, address: str | None, jobs: int | None) -> None:
    """Before any work and before ``--out`` is touched: the executor can run here. A Ray address
    nothing listens at would otherwise leave Ray retrying for minutes after the sweep has begun."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r}: choose {' or '.join(EXECUTORS)}")
    if executor == "local":
        if address is not None:
            raise ConfigError("--address: only with --executor ray")
        return
    if importlib.util.find_spec("ray") is None:
        raise ConfigError("--executor ray needs Ray: pip install 'privbandit[ray]'")
    if jobs is not None:
        raise ConfigError("--jobs: the Ray cluster's CPUs decide how many tasks run at once; omit --jobs")
    if address in (None, "auto"):  # a one-machine Ray started here, or the one this host runs
        return
    client = address.startswith("ray://")  # Ray Client's port, else the head's GCS port
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--address {address!r}: expected HOST:PORT (the head's GCS port, 6379 by default) or "
                          f"ray://HOST:PORT")
    problem = unreachable(host.strip("[]"), int(port))
    if problem is not None:
        what = "Ray Client server" if client else "Ray head"
        raise ConfigError(f"--address {address}: no {what} answers there ({problem}); is `ray start --head` "
                          f"running, and this its address?")


def _local(todo: list[tuple], jobs: int | None, address: str | None, work=execute_indexed):
    """``work(i, *args)`` for each argument tuple of ``todo``, in a local process pool."""
    yield from tasks.completed(work, [(i, *args) for i, args in enumerate(todo)], max(1, min(jobs or 1, len(todo) or 1)))


@contextlib.contextmanager
def quiet_ray():
    """Ray's own log records below ERROR kept out of the sweep's output while it runs. With
    ``configure_logging=False`` Ray's loggers have no handler, so Python's last-resort handler wrote
    their warnings to stderr: the banner of a local cluster ("Token authentication is enabled for
    this Ray cluster …", a default we keep, not an error), "Started a local Ray instance"."""
    logger = logging.getLogger("ray")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _ray(todo: list[tuple], jobs: int | None, address: str | None, work=execute_indexed):
    import ray  # check_executor found it

    with quiet_ray():
        try:
            # The workers' output stays on the workers (log_to_driver=False): a task prints nothing.
            ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False,
                     logging_level=logging.ERROR)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"--address {address}: cannot reach a Ray cluster ({exc})") from None
        try:
            remote = ray.remote(work)
            pending = [remote.remote(i, *args) for i, args in enumerate(todo)]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield ray.get(ready[0])
        finally:
            ray.shutdown()


def run_sweep(path: str | Path, grids: list[str], out: Path, overrides: list[str] = (), executor: str = "local",
              address: str | None = None, jobs: int | None = None, overwrite: bool = False, resume: bool = False,
              progress=None, transport: str = "inproc", shards: int = 2, timeout_s: float | None = None) -> dict:
    """Run every point's missing tasks on the executor; write each point's results and sweep.csv.
    Returns the points' summaries by name, and how many tasks were computed and reused (over MQTT:
    sessions, one per point, and the points whose session failed, by name → error)."""
    check_executor(executor, address, jobs)
    if transport not in TRANSPORTS:
        raise ConfigError(f"--transport {transport!r}: choose {' or '.join(TRANSPORTS)}")
    grid = points(path, grids, overrides)
    if transport == "mqtt":
        if shards < 1:
            raise ConfigError(f"--shards {shards}: must be ≥ 1")
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(f"--timeout {timeout_s}: must be > 0 seconds")
    results.prepare_out(out, overwrite, resume)
    if overwrite and not resume:
        _remove_earlier_points(out)
    if transport == "mqtt":
        return _run_sessions(Path(path), grid, out, executor, address, jobs, progress, shards, timeout_s)
    stores = [TaskStore(out, p.config) for p in grid]
    found = [{label: [] for label in p.family.labels(p.config)} for p in grid]
    compute = [dict.fromkeys(f, 0.0) for f in found]
    todo, point_of, reused = [], [], 0
    for i, p in enumerate(grid):
        for t in tasks.tasks_of(p.family, p.config):
            kept = stores[i].load(t.label, t.runs)
            if kept is None:
                todo.append(t)
                point_of.append(i)
            else:
                found[i][t.label].append(kept[0])
                compute[i][t.label] += kept[1]
                reused += 1
    start = time.perf_counter()
    missing = [point_of.count(i) for i in range(len(grid))]
    summaries = {}

    def write_point(i: int) -> None:
        p, f = grid[i], found[i]
        for label in f:
            f[label].sort(key=lambda r: r.runs[0])
        summary = results.summarize(p.family, p.config, f, compute[i], time.perf_counter() - start,
                                    store=stores[i])
        summary["sweep"] = {"point": p.values, "executor": executor}
        results.write_results(out / p.name, p.family, p.config, summary, f)
        summaries[p.name] = summary

    # A point whose every task is in is written at once, not after the whole sweep: an interrupted
    # sweep leaves its finished points readable. One writer thread, so the loop keeps collecting
    # tasks while a point's plot is drawn (the plot costs more than a task: docs/performance.md).
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-writer")
    writes = [writer.submit(write_point, i) for i, n in enumerate(missing) if n == 0]
    interrupted = True
    try:
        run = _ray if executor == "ray" else _local
        for done, (k, label, runs, res, secs) in enumerate(run([(t,) for t in todo], jobs, address), 1):
            i = point_of[k]
            stores[i].save(label, runs, res, secs)  # kept as it finishes: an interrupted sweep resumes
            found[i][label].append(res)
            compute[i][label] += secs
            missing[i] -= 1
            if missing[i] == 0:
                writes.append(writer.submit(write_point, i))
            if progress is not None:
                progress(done, len(todo))
        elapsed = time.perf_counter() - start
        interrupted = False
    finally:
        # Interrupted: the point being written is finished (at most one plot's wait), the points
        # still queued for writing are not (their tasks are kept: --resume writes them), and
        # sweep.csv lists the written ones.
        writer.shutdown(wait=True, cancel_futures=interrupted)
        if summaries:
            _write_table(out / "sweep.csv", [p for p in grid if p.name in summaries], summaries)
    for w in writes:
        w.result()  # a point that could not be written is an error, not a silently missing directory
    summaries = {p.name: summaries[p.name] for p in grid}
    return {"points": summaries, "computed": len(todo), "reused": reused, "elapsed_s": elapsed,
            "writing_s": time.perf_counter() - start - elapsed, "failed": {}}


def _run_sessions(path: Path, grid: list[Point], out: Path, executor: str, address: str | None, jobs: int | None,
                  progress, shards: int, timeout_s: float | None) -> dict:
    """Over MQTT: one distributed session per point not already in ``out`` with the same config."""
    summaries, failed, todo, point_of = {}, {}, [], []
    keys = [experiment_key(p.config) for p in grid]
    for i, p in enumerate(grid):
        kept = _kept_session(out / p.name, keys[i])
        if kept is not None:
            summaries[p.name] = kept
        else:
            # The point's resolved config, not the file and its overrides: a path the file gives
            # relative to itself (a means file) must not depend on where the session runs.
            todo.append((results.experiment_toml(p.config), path.name, shards, timeout_s))
            point_of.append(i)
    reused = len(summaries)
    start = time.perf_counter()
    run = _ray if executor == "ray" else _local
    for done, (k, code, error, files, secs) in enumerate(run(todo, jobs, address, session_indexed), 1):
        p = grid[point_of[k]]
        dest = out / p.name
        for rel, data in files.items():  # every file of the session, its logs too, as it finishes
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(data)
        if code == 0 and "summary.json" in files:
            summaries[p.name] = json.loads(files["summary.json"])
            summaries[p.name]["sweep"] = {"point": p.values, "executor": executor, "transport": "mqtt",
                                          "session_s": round(secs, 3), "key": keys[point_of[k]]}
            (dest / "summary.json").write_text(json.dumps(summaries[p.name], indent=2) + "\n")
        else:
            failed[p.name] = error or f"the session failed (observer exit {code}); logs in {dest / 'logs'}"
        if progress is not None:
            progress(done, len(todo))
    elapsed = time.perf_counter() - start
    done_grid = [p for p in grid if p.name in summaries]
    if done_grid:
        _write_table(out / "sweep.csv", done_grid, summaries)
    return {"points": {p.name: summaries[p.name] for p in done_grid}, "computed": len(todo), "reused": reused,
            "elapsed_s": elapsed, "failed": failed}


def _remove_earlier_points(out: Path) -> None:
    """--overwrite: an earlier sweep's sweep.csv and point directories (a results directory, or a
    failed session's logs) go, so none of its points is read as one of this sweep's."""
    (out / "sweep.csv").unlink(missing_ok=True)
    for child in out.iterdir():
        if child.is_dir() and any((child / name).exists() for name in ("summary.json", "config.toml", "logs")):
            shutil.rmtree(child)


def _kept_session(point: Path, key: str) -> dict | None:
    """The summary of a point's finished session in ``point``, if it ran this very experiment
    (:func:`~privbandit.runner.store.experiment_key`: its config and the bytes of its data files)."""
    try:
        summary = json.loads((point / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if summary.get("sweep", {}).get("key") == key else None


def _write_table(path: Path, grid: list[Point], summaries: dict) -> None:
    keys = list(grid[0].values)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["point", *keys, "algorithm", "runs", "regret_final_mean", "regret_final_stderr", "guarantee",
                    "epsilon_pure", "epsilon_at_delta", "delta"])
        for p in grid:
            s = summaries[p.name]
            for label, a in s["algorithms"].items():
                priv = s["privacy"][label]
                w.writerow([p.name, *(p.values[k] for k in keys), label, a["runs"], a["regret_final_mean"],
                            a["regret_final_stderr"], priv["guarantee"], priv["epsilon_pure"],
                            priv["epsilon_at_delta"], priv["delta"]])
