"""Running experiments in-process: experiment files (:mod:`.config`), tasks over a process pool
(:mod:`.tasks`) and the one results writer (:mod:`.results`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run`: ``store`` is the :class:`~.store.TaskStore` holding the tasks
    finished so far (None before it was opened), so the caller can say how to resume."""

    def __init__(self, store=None):
        super().__init__()
        self.store = store


@dataclass
class Results:
    """What one experiment produced, over either transport: its family and config,
    ``summary.json``'s content, the results directory (``out``; None if none was written) and every
    algorithm's regret run by run (``curves``: the checkpoints and, per label, a
    :class:`~.paired.RunCurves`). In-process, ``results`` holds every task's
    :class:`~privbandit.protocol.spine.observer.RunResult` by label (``curves`` is taken from them)
    and ``store`` the tasks kept in ``out``; over MQTT the observer process held those, so
    ``results`` is empty and ``curves`` is read back from ``runs.csv``."""

    family: object
    config: object
    summary: dict
    results: dict
    out: Path | None = None
    store: object = field(default=None, repr=False)
    curves: tuple | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.curves is None:
            from privbandit.runner.paired import RunCurves
            from privbandit.runner.results import per_run

            if not self.results:
                raise ValueError("Results: give the tasks' results or the run curves (runs.csv read back)")
            t = next(iter(self.results.values()))[0].checkpoints
            self.curves = (t, {label: RunCurves([r for task in tasks for r in task.runs], *per_run(tasks))
                               for label, tasks in self.results.items()})

    def table(self):
        """Every run's regret at every checkpoint, long format (the rows of ``runs.csv``): a pandas
        DataFrame when pandas is installed, else a list of dicts with the same columns."""
        t, curves = self.curves
        rows = [{"algorithm": label, "run": run, "t": int(tt), "pseudo": float(p), "realized": float(r)}
                for label, c in curves.items() for i, run in enumerate(c.runs)
                for tt, p, r in zip(t, c.pseudo[i], c.realized[i])]
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows, columns=["algorithm", "run", "t", "pseudo", "realized"])

    def compare(self, at: int | None = None, baseline: str | None = None) -> list:
        """Paired comparisons of the algorithms' pseudo-regret at checkpoint ``at`` (default: the
        horizon), run r against run r (:mod:`.paired`): ``(a, b, Paired)`` for every pair, or for
        every algorithm against ``baseline``. Needs ≥ 2 runs; what ``privbandit compare`` prints."""
        from privbandit.runner.paired import compare_at

        t, curves = self.curves
        return compare_at(t, {label: c.pseudo for label, c in curves.items()}, at, baseline)

    def accountant(self, label: str, run: int | None = None):
        """The ledger of ``label`` as an accountant (``spent()``, ``epsilon(delta)``;
        :class:`~privbandit.protocol.privacy.accountant.Accountant`): run ``run``'s, held in-process,
        or (None) the worst over runs that ``summary.json`` keeps, which is all an MQTT run's hold."""
        from privbandit.protocol.privacy.accountant import Accountant

        if label not in self.summary["privacy"]:
            raise KeyError(f"label {label!r}: not one of {', '.join(self.summary['privacy'])}")
        a = self.family.algorithm(self.config, label)
        name = getattr(a, "algorithm", label)
        line = f"{name}: {self.family.algorithm_lines.get(name, '')}"
        if run is None:
            return Accountant(self.summary["privacy"][label], line, label)
        for task in self.results.get(label, []):
            if run in task.runs:
                return Accountant(task.privacy, line, label)
        held = sorted(r for t in self.results.get(label, []) for r in t.runs)
        raise KeyError(f"run={run}: not held (these results hold runs {held}; an MQTT run's hold only the worst over "
                       f"runs: run=None)")

    def plot(self, path: str | Path | None = None):
        """The regret curves as ``regret.png`` draws them (mean ± stderr over runs,
        :func:`~.results.plot_regret`): written to ``path`` as a PNG (returns the path), or, without
        one, returned as a matplotlib Figure (a notebook shows it)."""
        from privbandit.runner.results import regret_columns, regret_figure

        t, curves = self.curves
        columns = regret_columns(t, {label: (c.pseudo, c.realized) for label, c in curves.items()})
        fig = regret_figure(self.config, columns, list(curves), **self.family.plot_options(self.config))
        if path is None:
            return fig
        fig.savefig(path, dpi=110)
        return Path(path)

    def _rows(self) -> list[tuple[str, str, str]]:
        from privbandit.runner.results import privacy_cell

        return [(label, f"{a['regret_final_mean']:,.1f} ± {a['regret_final_stderr']:,.1f}",
                 privacy_cell(self.summary["privacy"][label])) for label, a in self.summary["algorithms"].items()]

    def _title(self) -> str:
        s = self.summary
        return (f"{s['experiment']} ({s['family']}): T = {s['horizon']:,}, {s['runs']} run{'s' * (s['runs'] != 1)}, "
                f"{s['transport']}")

    def __repr__(self) -> str:
        # The numbers a reader looks for, not the config (``.config`` holds it, ``.summary`` the rest).
        lines = [f"  {label}: regret {regret}, ε spent {spent}" for label, regret, spent in self._rows()]
        return "\n".join([f"<Results {self._title()}", *lines]) + ">"

    def _repr_html_(self) -> str:
        from html import escape

        cells = "".join(f"<tr><td>{escape(a)}</td><td style='text-align:right'>{escape(r)}</td>"
                        f"<td style='text-align:right'>{escape(e)}</td></tr>" for a, r, e in self._rows())
        return (f"<table><caption>{escape(self._title())}</caption><thead><tr><th>algorithm</th>"
                f"<th>final regret (mean ± se)</th><th>ε spent</th></tr></thead><tbody>{cells}</tbody></table>")


def run(experiment, overrides: list[str] = (), out: str | Path | None = None, jobs: int | None = 1,
        overwrite: bool = False, progress=None, resume: bool = False) -> Results:
    """Run an experiment in-process and return its :class:`Results`; with ``out``, also write the
    results directory (checked before any work; an earlier run's results only with ``overwrite``),
    keeping each task there as it finishes (``resume``: reuse those of an earlier, interrupted run
    of the same config, :mod:`.store`).

    ``experiment`` is an experiment file's path, its data as a dict (relative paths are relative to
    the working directory), or a family's validated config; ``overrides`` are ``--set`` assignments.
    """
    family, config = load_experiment(experiment, overrides)
    return run_config(family, config, out, jobs, overwrite, progress, resume)


def load_experiment(experiment, overrides: list[str] = ()):
    """(family, config) of an experiment file's path, its data as a dict or a family's validated
    config, with the ``--set`` assignments ``overrides`` applied; every failure a ConfigError."""
    from privbandit import registry
    from privbandit.runner import config as experiment_files

    if isinstance(experiment, (str, Path)):
        return experiment_files.load(experiment, list(overrides))
    if not isinstance(experiment, dict):
        models = {registry.family(n).experiment_model: n for n in registry.family_names()}
        if type(experiment) not in models:
            raise TypeError(f"experiment must be a path, a dict or a family's config "
                            f"({', '.join(m.__name__ for m in models)}), not {type(experiment).__name__}")
        experiment = {"family": models[type(experiment)], **experiment.model_dump(mode="json", exclude_none=True)}
    data = copy.deepcopy(experiment)
    for assignment in overrides:
        experiment_files.apply_override(data, assignment)
    return experiment_files.load_data(data)


def run_config(family, config, out: str | Path | None = None, jobs: int | None = 1, overwrite: bool = False,
               progress=None, resume: bool = False, on_start=None) -> Results:
    """:func:`run` of a loaded (family, config): the one in-process pipeline, from ``out``'s check
    through the tasks (kept in ``out`` as they finish) to the results directory. ``on_start(family,
    config)`` is called once ``out`` is ready, before the first task. Ctrl-C raises
    :class:`Interrupted` holding the tasks kept so far."""
    from privbandit.runner import results, tasks
    from privbandit.runner.config import ConfigError
    from privbandit.runner.store import TaskStore

    if getattr(config, "traffic_adversaries", None):
        raise ConfigError(
            f"traffic_adversaries = {config.traffic_adversaries}: they attack a broker's traffic, so they run "
            f"only over MQTT (privbandit run FILE --transport mqtt); in-process, remove the field or "
            f"--set traffic_adversaries=[]")
    out = None if out is None else Path(out)
    kept = None
    try:
        if out is not None:
            results.prepare_out(out, overwrite, resume)  # before any work: nothing computed is lost to a bad out
            kept = TaskStore(out, config)
        if on_start is not None:
            on_start(family, config)
        found, compute, elapsed = tasks.run_experiment(family, config, jobs=jobs, progress=progress, store=kept)
    except KeyboardInterrupt:
        raise Interrupted(kept) from None
    summary = results.summarize(family, config, found, compute, elapsed, store=kept)
    if out is not None:
        results.write_results(out, family, config, summary, found)
        kept.prune()
    return Results(family, config, summary, found, out, kept)


def run_file(path: str | Path, overrides: list[str] = (), out: Path | None = None, jobs: int | None = 1,
             progress=None) -> Results:
    """Load, run and (with ``out``) write an experiment file, in-process (``out`` may hold an
    earlier run's results: scripts rewrite their own, reusing the tasks of the same config)."""
    return run(path, overrides, out, jobs, overwrite=True, progress=progress, resume=True)
