"""Running experiments in-process: experiment files (:mod:`.config`), tasks over a process pool
(:mod:`.tasks`) and the one results writer (:mod:`.results`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Results:
    """What one experiment produced: its family and config, ``summary.json``'s content, and the
    results of every task by algorithm label (:class:`~privbandit.protocol.spine.observer.RunResult`,
    each holding one or more runs)."""

    family: object
    config: object
    summary: dict
    results: dict

    def table(self):
        """Every run's regret at every checkpoint, long format (the rows of ``runs.csv``): a pandas
        DataFrame when pandas is installed, else a list of dicts with the same columns."""
        rows = [{"algorithm": label, "run": run, "t": int(t), "pseudo": float(p), "realized": float(r)}
                for label, tasks in self.results.items() for task in tasks
                for i, run in enumerate(task.runs)
                for t, p, r in zip(task.checkpoints, task.pseudo[i], task.realized[i])]
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows, columns=["algorithm", "run", "t", "pseudo", "realized"])


def run(experiment, overrides: list[str] = (), out: str | Path | None = None, jobs: int | None = 1,
        overwrite: bool = False, progress=None, resume: bool = False) -> Results:
    """Run an experiment in-process and return its :class:`Results`; with ``out``, also write the
    results directory (checked before any work; an earlier run's results only with ``overwrite``),
    keeping each task there as it finishes (``resume``: reuse those of an earlier, interrupted run
    of the same config, :mod:`.store`).

    ``experiment`` is an experiment file's path, its data as a dict (relative paths are relative to
    the working directory), or a family's validated config; ``overrides`` are ``--set`` assignments.
    """
    from privbandit import registry
    from privbandit.runner import config as experiment_files, results, tasks
    from privbandit.runner.store import TaskStore

    if isinstance(experiment, (str, Path)):
        family, config = experiment_files.load(experiment, list(overrides))
    else:
        if not isinstance(experiment, dict):
            models = {registry.family(n).experiment_model: n for n in registry.family_names()}
            if type(experiment) not in models:
                raise TypeError(f"experiment must be a path, a dict or a family's config "
                                f"({', '.join(m.__name__ for m in models)}), not {type(experiment).__name__}")
            experiment = {"family": models[type(experiment)], **experiment.model_dump(mode="json", exclude_none=True)}
        data = copy.deepcopy(experiment)
        for assignment in overrides:
            experiment_files.apply_override(data, assignment)
        family, config = experiment_files.load_data(data)
    kept = None
    if out is not None:
        results.prepare_out(Path(out), overwrite, resume)
        kept = TaskStore(Path(out), config)
    found, compute, elapsed = tasks.run_experiment(family, config, jobs=jobs, progress=progress, store=kept)
    summary = results.summarize(family, config, found, compute, elapsed, store=kept)
    if out is not None:
        results.write_results(Path(out), family, config, summary, found)
        kept.prune()
    return Results(family, config, summary, found)


def run_file(path: str | Path, overrides: list[str] = (), out: Path | None = None, jobs: int | None = 1,
             progress=None) -> Results:
    """Load, run and (with ``out``) write an experiment file, in-process (``out`` may hold an
    earlier run's results: scripts rewrite their own, reusing the tasks of the same config)."""
    return run(path, overrides, out, jobs, overwrite=True, progress=progress, resume=True)
