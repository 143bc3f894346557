"""Every family's experiment, in-process: tasks, run in parallel processes, with progress.

A task is one algorithm's run, or several of its runs stacked when the family's plans line up
across runs (:meth:`~privbandit.protocol.spine.family.Family.stackable`). Run r of every algorithm
faces the same world (the family draws it from ``(seed, …, r)``); each algorithm's randomness is
keyed by ``(r, label)``. Results therefore depend neither on the number of worker processes, nor on
the order runs finish in, nor on how runs are stacked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from privbandit import registry
from privbandit.protocol.primitives.seeding import analyzer_master_key, derive_key, shuffler_master_key
from privbandit.protocol.spine import engine
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.observer import Observer, RunResult, checkpoint_grid
from privbandit.protocol.spine.parties import Analyzer, Users


def analyzer_keys(seed: int, label: str, runs: list[int]) -> list[int]:
    """The analyzer's key for each run of a task (the analyzer never holds the run seed)."""
    master = analyzer_master_key(seed)
    return [derive_key(master, r, label) for r in runs]


def shuffle_keys(seed: int, label: str, runs: list[int], name: str = "shuffler") -> list[int]:
    """Intermediary ``name``'s permutation key per run: simulations shuffle reproducibly (only that
    intermediary holds its master)."""
    master = shuffler_master_key(seed, name)
    return [derive_key(master, r, label) for r in runs]


@dataclass(frozen=True)
class Task:
    family: str
    config: object
    label: str
    runs: tuple[int, ...]


def parties(fam, config, label: str, runs: list[int], oracle: bool = True, user_logic=None):
    """The in-process parties of one task: analyzer, users, intermediaries, observer.
    ``user_logic``: the users' logic in place of the family's simulated ones (a Policy's caller world)."""
    public = fam.public_task(config, label, runs)
    if user_logic is None:
        user_logic = fam.users(config, label, runs)
    logic = fam.analyzer(public, analyzer_keys(config.seed, label, runs),
                         oracle=getattr(user_logic, "oracle", None) if oracle else None)
    analyzer = Analyzer(logic, fam.ledger(public), runs=len(runs))
    single = len(runs) == 1
    users = Users(user_logic, config.seed, (runs[0], label) if single else (),
                  fam.dropout_rate(config, label), fam.adversary(config, label, runs[0]) if single else None)
    boxes = {name: Intermediary(name, len(runs), shuffle_keys(config.seed, label, runs, name))
             for name in fam.intermediaries(config)}
    return public, analyzer, users, boxes, Observer(checkpoint_grid(config.horizon, config.checkpoints), len(runs))


def execute(task: Task) -> tuple[str, tuple[int, ...], RunResult, float]:
    # The engine serves one block at a time, and every block's temporaries (0.5–1 MiB arrays) would
    # otherwise be faulted in afresh: at T = 10⁸, 3·10⁵ page faults, a fifth of a Dist-DP-SE run's CPU
    # (docs/performance.md). The parties' helper, which imports nothing of the services.
    from privbandit.services.allocator import keep_freed_memory

    keep_freed_memory()
    start = time.perf_counter()
    fam = registry.family(task.family)
    runs = list(task.runs)
    public, analyzer, users, boxes, observer = parties(fam, task.config, task.label, runs)
    rejected = engine.run(analyzer, users, boxes, observer)
    result = observer.result(runs, analyzer.ledger.summary(), analyzer.logic.summary(),
                             fam.row_maker(task.config, task.label), rejected)
    fam.finish(task.config, task.label, result)
    return task.label, task.runs, result, time.perf_counter() - start


def tasks_of(fam, config) -> list[Task]:
    """One task per (run, label), or per label with its runs stacked where the family allows."""
    out = []
    labels = fam.labels(config)
    stacked = [label for label in labels if fam.stackable(config, label)]
    for label in stacked:
        out.append(Task(fam.name, config, label, tuple(range(config.runs))))
    out += [Task(fam.name, config, label, (r,)) for r in range(config.runs) for label in labels if label not in stacked]
    return out


def run_experiment(fam, config, jobs: int | None = None, progress: Callable[[str, int], None] | None = None,
                   store=None):
    """All runs of all algorithms. Returns ``{label: [RunResult per task, in run order]}``, total
    compute seconds per label, and the wall time. With a :class:`~privbandit.runner.store.TaskStore`,
    tasks it holds are loaded, not computed, and each computed task is saved as it finishes (so an
    interrupted run keeps them)."""
    tasks = tasks_of(fam, config)
    results: dict[str, list] = {label: [] for label in fam.labels(config)}
    compute = dict.fromkeys(results, 0.0)
    start = time.perf_counter()

    def done(label, runs, res, secs):
        results[label].append(res)
        compute[label] += secs
        if progress is not None:
            for r in runs:
                progress(label, r)

    todo = []
    for t in tasks:
        kept = store.load(t.label, t.runs) if store is not None else None
        if kept is None:
            todo.append(t)
        else:
            done(t.label, t.runs, *kept)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    for label, runs, res, secs in completed(execute, [(t,) for t in todo], jobs):
        if store is not None:
            store.save(label, runs, res, secs)
        done(label, runs, res, secs)
    for label in results:
        results[label].sort(key=lambda r: r.runs[0])
    return results, compute, time.perf_counter() - start


def completed(fn, tasks: list[tuple], jobs: int):
    """``fn(*task)`` for every task, one after another when ``jobs`` ≤ 1, else in a pool of that many
    processes; yields the results as they complete. Interrupted (Ctrl-C), it cancels the queued
    tasks and stops the running ones at once rather than waiting for them."""
    if jobs <= 1:
        for task in tasks:
            yield fn(*task)
        return
    pool = ProcessPoolExecutor(max_workers=jobs)
    try:
        for fut in as_completed([pool.submit(fn, *task) for task in tasks]):
            yield fut.result()
    except BaseException:
        workers = list((pool._processes or {}).values())  # noqa: SLF001 - no public way to stop them
        for proc in workers:
            proc.terminate()
        # Then wait for the pool's management thread, which ends once it sees its workers gone: a
        # shutdown without waiting left it running, and at exit concurrent.futures' hook wrote to
        # the wake-up pipe it had closed meanwhile ("OSError: [Errno 9] Bad file descriptor" after
        # the resume line, under load).
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
