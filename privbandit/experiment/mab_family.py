"""The distributed-DP multi-armed bandit family (Chowdhury & Zhou 2023) behind ``privbandit run``."""

from __future__ import annotations

from pathlib import Path

from privbandit.experiment.config import ExperimentConfig, load_experiment
from privbandit.experiment.results import summarize, write_results
from privbandit.experiment.runner import run_experiment


def load(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    config, _ = load_experiment(path, overrides)
    return config


def run(config: ExperimentConfig, jobs: int | None = None, progress=None):
    return run_experiment(config, jobs=jobs, progress=progress)


def write(out: Path, config: ExperimentConfig, outcome) -> dict:
    results, algos, compute, elapsed = outcome
    summary = summarize(config, results, algos, compute, elapsed)
    write_results(out, config, summary, results, algos)
    return summary
