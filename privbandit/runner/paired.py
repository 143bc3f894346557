"""Paired comparisons of two algorithms run on the same instances.

Run r of every algorithm of an experiment shares its instance (and, within a family, its world
seed), so a difference between two algorithms is measured run by run: the mean of the per-run
differences, its standard error, t = mean / se, and how many runs each one won. Unpaired standard
errors of the two means would add the instance-to-instance variance twice and hide real gaps.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Paired:
    """``a − b`` over paired runs (positive: ``a`` has more regret)."""

    runs: int
    mean_difference: float
    stderr: float
    t: float  # mean / stderr (±inf when every difference is equal and nonzero; nan for all-zero)
    a_won: int  # runs where a had strictly less regret
    b_won: int
    ties: int

    def as_dict(self) -> dict:
        return asdict(self)

    def verdict(self, threshold: float = 2.0) -> str:
        if not np.isfinite(self.t) and self.mean_difference == 0:
            return "equal in every run"
        if abs(self.t) < threshold:
            return f"no significant difference (|t| < {threshold:g})"
        return "a worse" if self.t > 0 else "b worse"


def paired(a: np.ndarray, b: np.ndarray) -> Paired:
    """The paired comparison of two per-run samples (same runs, same order)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"paired samples need the same ≥ 2 runs (got shapes {a.shape} and {b.shape})")
    d = a - b
    mean = float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(d.size))
    t = mean / se if se > 0 else (np.inf * np.sign(mean) if mean else np.nan)
    return Paired(int(d.size), mean, se, float(t), int((d < 0).sum()), int((d > 0).sum()), int((d == 0).sum()))


def read_runs(results: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``runs.csv`` of a results directory: the checkpoints t and, per label, the (runs, C) pseudo-regret."""
    t, curves = read_run_curves(results)
    return t, {label: c.pseudo for label, c in curves.items()}


@dataclass(frozen=True)
class RunCurves:
    """One algorithm's regret, run by run: ``runs`` (the run indices, in row order) and the
    (runs, C) pseudo- and realized regret at the checkpoints."""

    runs: list[int]
    pseudo: np.ndarray
    realized: np.ndarray


def read_run_curves(results: Path) -> tuple[np.ndarray, dict[str, RunCurves]]:
    """``runs.csv`` of a results directory: the checkpoints t and, per label, its :class:`RunCurves`."""
    with open(Path(results) / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{results}/runs.csv has no rows")
    labels = list(dict.fromkeys(r["algorithm"] for r in rows))
    t = np.array(sorted({int(r["t"]) for r in rows}))
    col = {v: i for i, v in enumerate(t)}
    out = {}
    for label in labels:
        mine = [r for r in rows if r["algorithm"] == label]
        runs = sorted({int(r["run"]) for r in mine})
        where = {v: i for i, v in enumerate(runs)}
        grids = {kind: np.full((len(runs), t.size), np.nan) for kind in ("pseudo", "realized")}
        for r in mine:
            for kind, grid in grids.items():
                grid[where[int(r["run"])], col[int(r["t"])]] = float(r[kind])
        out[label] = RunCurves(runs, grids["pseudo"], grids["realized"])
    return t, out


def compare_at(t: np.ndarray, curves: dict[str, np.ndarray], at: int | None = None,
               baseline: str | None = None, names: tuple[str, str] = ("at=", "baseline=")
               ) -> list[tuple[str, str, Paired]]:
    """Paired comparisons of per-label (runs, C) regret at checkpoint ``at`` (default: the last):
    every label against ``baseline``, or every pair. Raises ValueError naming a bad ``at`` or
    ``baseline`` (as ``names`` spell them: the CLI's ``--at ``, ``--baseline ``), or a single label."""
    from itertools import combinations

    at = int(t[-1]) if at is None else at
    if at not in set(np.asarray(t).tolist()):
        nearest = ", ".join(map(str, np.asarray(t)[np.argsort(np.abs(np.asarray(t) - at))[:3]]))
        raise ValueError(f"{names[0]}{at}: not a checkpoint; the nearest are {nearest}")
    if baseline is not None and baseline not in curves:
        raise ValueError(f"{names[1]}{baseline!r}: not an algorithm of these results; algorithms: {', '.join(curves)}")
    column = int(np.searchsorted(t, at))
    pairs = [(baseline, b) for b in curves if b != baseline] if baseline else list(combinations(curves, 2))
    if not pairs:
        raise ValueError(f"one algorithm ({', '.join(curves)}): nothing to compare")
    return [(a, b, paired(curves[a][:, column], curves[b][:, column])) for a, b in pairs]
