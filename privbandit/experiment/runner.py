"""Many runs of many algorithms, in parallel processes, with progress.

Run r of every algorithm faces the same bandit instance, drawn from ``(seed, "instance", r)``; each
algorithm's randomness is keyed by ``(r, label)``. Results therefore do not depend on the number of
worker processes or on the order in which runs finish.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from privbandit.experiment.build import build_adversary, build_instance, build_learner, build_ledger, build_mechanism
from privbandit.experiment.config import AlgorithmConfig, ConfigError, ExperimentConfig, resolve_algorithm
from privbandit.protocol.engine import run_once
from privbandit.protocol.observer import RunResult, checkpoint_grid
from privbandit.protocol.seeding import derive_key, shuffler_master_key, stream


def shuffle_key(seed: int, run: int, label: str) -> int:
    """The shuffler's permutation key for one task; simulations shuffle reproducibly."""
    return derive_key(shuffler_master_key(seed), run, label)


@dataclass(frozen=True)
class Task:
    config: ExperimentConfig
    label: str
    algo: AlgorithmConfig
    run: int


def instance_for(config: ExperimentConfig, run: int):
    return build_instance(config.environment, stream(config.seed, "instance", run))


def execute(task: Task) -> tuple[str, int, RunResult, float]:
    start = time.perf_counter()
    cfg, a = task.config, task.algo
    instance = instance_for(cfg, task.run)
    mechanism = build_mechanism(a)
    result = run_once(
        instance=instance,
        mechanism=mechanism,
        learner=build_learner(a, instance.n_arms),
        horizon=cfg.horizon,
        seed=cfg.seed,
        stream_prefix=(task.run, task.label),
        checkpoints=checkpoint_grid(cfg.horizon, cfg.checkpoints),
        p=a.p,
        shuffle_seed=shuffle_key(cfg.seed, task.run, task.label) if a.intermediary == "shuffler" else None,
        secagg_graph=a.secagg_graph if a.intermediary == "secagg" else None,
        dropout_rate=a.dropout_rate,
        adversary=build_adversary(a, mechanism, cfg.seed, (task.run, task.label), instance),
        range_check=a.range_check,
        ledger=build_ledger(a, mechanism, cfg.delta),
    )
    return task.label, task.run, result, time.perf_counter() - start


def resolved_algorithms(config: ExperimentConfig) -> dict[str, AlgorithmConfig]:
    algos = {label: resolve_algorithm(config, label) for label in config.algorithms}
    for label, a in algos.items():
        try:  # fail before any work starts: bad parameters, missing means file, ...
            mechanism = build_mechanism(a)
            mechanism.params(2)
            if a.intermediary == "secagg" and mechanism.intermediary != "modular-sum":
                raise ValueError(f"intermediary = 'secagg' needs a modular-sum mechanism; {a.algorithm} "
                                 f"uses {mechanism.intermediary}")
            instance_for(config, 0)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"algorithms.{label}: {exc}") from None
    return algos


def run_experiment(config: ExperimentConfig, jobs: int | None = None, progress=None):
    """All runs of all algorithms. Returns ``{label: [RunResult per run]}``, the resolved
    algorithms, total compute seconds per label, and the wall time."""
    if config.traffic_adversaries:
        raise ConfigError(
            f"traffic_adversaries = {config.traffic_adversaries}: they attack a broker's traffic, so they run "
            f"only over MQTT (privbandit run FILE --transport mqtt); in-process, remove the field or "
            f"--set traffic_adversaries=[]")
    algos = resolved_algorithms(config)
    tasks = [Task(config, label, a, r) for r in range(config.runs) for label, a in algos.items()]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    results = {label: [None] * config.runs for label in algos}
    compute = dict.fromkeys(algos, 0.0)
    start = time.perf_counter()

    def collect(label, run, res, secs):
        results[label][run] = res
        compute[label] += secs
        if progress is not None:
            progress(label, run)

    for out in completed(execute, [(t,) for t in tasks], jobs):
        collect(*out)
    return results, algos, compute, time.perf_counter() - start


def completed(fn, tasks: list[tuple], jobs: int):
    """``fn(*task)`` for every task, one after another when ``jobs`` ≤ 1, else in a pool of that many
    processes; yields the results as they complete (every family's experiments run this way)."""
    if jobs <= 1:
        for task in tasks:
            yield fn(*task)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for fut in as_completed([pool.submit(fn, *task) for task in tasks]):
            yield fut.result()
