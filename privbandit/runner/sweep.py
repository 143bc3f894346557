"""``privbandit sweep``: one experiment file over a grid of overrides (issue #18).

Every grid point is an experiment of its own (its config validated before any work), and every
task of every point, one run or an algorithm's stacked runs, is hermetic: it carries its whole
config and is keyed by a hash of it (:mod:`.store`), so a sweep run again computes only what is
missing and a changed config never reuses a stale result. Tasks go to an executor: a local process
pool (default) or a Ray cluster (``--executor ray --address HOST:PORT``; ``pip install
'privbandit[ray]'``); the numbers do not depend on which, nor on the order tasks finish in.

Writes ``<out>/<point>/`` (the results directory of each point, as ``privbandit run`` writes it)
and ``<out>/sweep.csv``: one row per point and algorithm with the grid's values, the final regret
and the privacy the ledger states.
"""

from __future__ import annotations

import csv
import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path

from privbandit.runner import config as experiment_files, results, tasks
from privbandit.runner.config import ConfigError, parse_value
from privbandit.runner.store import TaskStore

EXECUTORS = ("local", "ray")


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
        key, sep, values = g.partition("=")
        key = key.strip()
        items = split_values(values) if sep else []
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


def _local(todo: list[tasks.Task], jobs: int | None, address: str | None):
    if address is not None:
        raise ConfigError("--address: only with --executor ray")
    yield from tasks.completed(execute_indexed, list(enumerate(todo)), max(1, min(jobs or 1, len(todo) or 1)))


def _ray(todo: list[tasks.Task], jobs: int | None, address: str | None):
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'privbandit[ray]'") from None
    if jobs is not None:
        raise ConfigError("--jobs: the Ray cluster's CPUs decide how many tasks run at once; omit --jobs")
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"--address {address}: cannot reach a Ray cluster ({exc})") from None
    try:
        remote = ray.remote(execute_indexed)
        pending = [remote.remote(i, t) for i, t in enumerate(todo)]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        ray.shutdown()


def run_sweep(path: str | Path, grids: list[str], out: Path, overrides: list[str] = (), executor: str = "local",
              address: str | None = None, jobs: int | None = None, overwrite: bool = False, resume: bool = False,
              progress=None) -> dict:
    """Run every point's missing tasks on the executor; write each point's results and sweep.csv.
    Returns the points' summaries by name, and how many tasks were computed and reused."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r}: choose {' or '.join(EXECUTORS)}")
    grid = points(path, grids, overrides)
    results.prepare_out(out, overwrite, resume)
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
    run = _ray if executor == "ray" else _local
    for done, (k, label, runs, res, secs) in enumerate(run(todo, jobs, address), 1):
        i = point_of[k]
        stores[i].save(label, runs, res, secs)  # kept as it finishes: an interrupted sweep resumes
        found[i][label].append(res)
        compute[i][label] += secs
        if progress is not None:
            progress(done, len(todo))
    elapsed = time.perf_counter() - start
    summaries = {}
    for p, f, c in zip(grid, found, compute):
        for label in f:
            f[label].sort(key=lambda r: r.runs[0])
        summary = results.summarize(p.family, p.config, f, c, elapsed)
        summary["sweep"] = {"point": p.values, "executor": executor}
        results.write_results(out / p.name, p.family, p.config, summary, f)
        summaries[p.name] = summary
    _write_table(out / "sweep.csv", grid, summaries)
    return {"points": summaries, "computed": len(todo), "reused": reused, "elapsed_s": elapsed}


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
