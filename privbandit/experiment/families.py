"""Paper families: which code runs an experiment file.

An experiment file names its family in a top-level ``family`` field; files without one belong to
the distributed-DP multi-armed bandit family (Chowdhury & Zhou 2023), the first one built. Each
family is a module exposing three functions:

- ``load(path, overrides) -> config``: read and validate the file (``ConfigError`` on bad input,
  naming the field and the allowed range). The config has ``name``, ``runs`` and ``algorithms``
  (a mapping whose keys are the result labels).
- ``run(config, jobs, progress) -> outcome``: all runs; ``progress(label, run)`` after each one.
- ``write(out, config, outcome) -> summary``: the results directory, returning ``summary.json``'s
  content. The summary carries at least the keys the CLI's table reads: ``experiment``,
  ``horizon``, ``runs``, ``elapsed_s``, ``transport``, and per label ``algorithms.<l>.regret_final_mean``,
  ``regret_final_stderr``, ``users_per_s``; ``privacy.<l>.epsilon_pure``, ``epsilon_at_delta``,
  ``delta``; ``communication.<l>.bits_per_user_protocol``.

Modules are imported on demand, so one family's dependencies never slow another's start.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from privbandit.experiment.config import ConfigError, read_experiment_data

DEFAULT_FAMILY = "distributed-dp-mab"

FAMILIES: dict[str, str] = {
    DEFAULT_FAMILY: "privbandit.experiment.mab_family",
    "private-online-learning": "privbandit.experiment.online_family",
    "shuffle-linear-bandits": "privbandit.experiment.linear_family",
}


def family_of(path: str | Path, overrides: list[str] = ()) -> str:
    """The family an experiment file (after ``--set family=...``, if given) belongs to."""
    family = read_experiment_data(path, overrides).get("family", DEFAULT_FAMILY)
    if family not in FAMILIES:
        raise ConfigError(f"{path}: family = {family!r} is not one of {', '.join(sorted(FAMILIES))}")
    return family


def family_module(name: str) -> ModuleType:
    return importlib.import_module(FAMILIES[name])
