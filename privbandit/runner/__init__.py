"""Running experiments in-process: experiment files (:mod:`.config`), tasks over a process pool
(:mod:`.tasks`) and the one results writer (:mod:`.results`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Outcome:
    """What one experiment produced: its family and config, ``summary.json``'s content, and the
    results of every task by algorithm label."""

    family: object
    config: object
    summary: dict
    results: dict


def run_file(path: str | Path, overrides: list[str] = (), out: Path | None = None, jobs: int | None = 1,
             progress=None) -> Outcome:
    """Load, run and (with ``out``) write an experiment file, in-process."""
    from privbandit.runner import config as experiment_files, results, tasks

    family, config = experiment_files.load(path, list(overrides))
    found, compute, elapsed = tasks.run_experiment(family, config, jobs=jobs, progress=progress)
    summary = results.summarize(family, config, found, compute, elapsed)
    if out is not None:
        results.write_results(Path(out), family, config, summary, found)
    return Outcome(family, config, summary, found)
