"""``privbandit attack KIND EXPERIMENT``: the same experiment honest and attacked, side by side.

Every algorithm of the file runs twice under the same seed: once as written without an adversary,
once with ``adversary = {kind, fraction, magnitude}`` (and, with ``range_check``, the clear-text
defences wherever the trust model lets someone see the reports). Honest users draw the same
numbers in both runs, so every difference is the attack's doing. Any family whose ``adversaries``
name the kind takes it: this one and the private-online-learning family (its own adversaries).

Per algorithm the comparison reports the regret, the estimate error (mean over released rounds of
``|R_a(b) − Σ x| / n``, reward units per user, where the rounds carry the true sum), the ε the
ledger reports (and, against colluders, the ε left against the coalition) and what the
intermediaries rejected.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from privbandit.runner import config as experiment_files, results, tasks
from privbandit.runner.config import ConfigError


def _hidden(algo) -> bool:
    """True where nobody sees a report (secure aggregation): no range check is possible."""
    return algo.algorithm.startswith("dist-") and algo.intermediary != "shuffler"


def attacked_overrides(config, kind: str, fraction: float, magnitude: float, range_check: bool) -> list[str]:
    sets = []
    for label, algo in config.algorithms.items():
        sets.append(f'algorithms.{label}.adversary={{kind = "{kind}", fraction = {fraction!r}, '
                    f'magnitude = {magnitude!r}}}')
        if range_check and "range_check" in type(algo).model_fields and not _hidden(algo):
            sets.append(f"algorithms.{label}.range_check=true")
    return sets


def load(path: Path, overrides: list[str], kind: str):
    """(family, config) of an experiment whose family takes the adversary ``kind``."""
    family, config = experiment_files.load(path, overrides)
    if kind not in getattr(family, "adversaries", {}):
        raise ConfigError(f"{path}: family {family.name} takes no {kind!r} adversary (privbandit attack --help)")
    return family, config


def load_pair(path: Path, overrides: list[str], kind: str, fraction: float, magnitude: float,
              range_check: bool):
    """(family, honest config, attacked config)."""
    family, honest = load(path, overrides, kind)
    for label, algo in honest.algorithms.items():
        if getattr(algo, "adversary", None) is not None:
            raise ConfigError(f"algorithms.{label}.adversary: the file already names an adversary; "
                              f"privbandit attack adds its own (remove it, or use privbandit run)")
    _, attacked = load(path, overrides + attacked_overrides(honest, kind, fraction, magnitude, range_check), kind)
    return family, honest, attacked


def estimate_error(runs) -> float | None:
    """Mean over released rounds of |estimate − true sum| / n: reward units per user (None where
    the rounds do not carry the true sum)."""
    errs = [abs(r["estimate_sum"] - r["true_sum"]) / r["n"] for task in runs for r in task.rounds if "true_sum" in r]
    return float(np.mean(errs)) if errs else None


def compare(honest_summary: dict, attacked_summary: dict, honest_results: dict, attacked_results: dict) -> dict:
    out = {}
    for label in honest_summary["algorithms"]:
        h, a = honest_summary["algorithms"][label], attacked_summary["algorithms"][label]
        hp, ap = honest_summary["privacy"][label], attacked_summary["privacy"][label]
        def eps(p):  # the guarantee that holds: a number, or "none proven" / "non-private"
            if p.get("guarantee", "proven") != "proven":
                return p["guarantee"]
            return p["epsilon_pure"] if p["epsilon_pure"] is not None else p["epsilon_at_delta"]

        out[label] = {
            "regret_honest": h["regret_final_mean"], "regret_honest_stderr": h["regret_final_stderr"],
            "regret_attacked": a["regret_final_mean"], "regret_attacked_stderr": a["regret_final_stderr"],
            "estimate_error_honest": estimate_error(honest_results[label]),
            "estimate_error_attacked": estimate_error(attacked_results[label]),
            "best_arm_eliminated_runs": [h.get("best_arm_eliminated_runs"), a.get("best_arm_eliminated_runs")],
            "attackers": a.get("attackers"),
            "epsilon_honest": eps(hp), "epsilon_attacked": eps(ap),
            "epsilon_vs_coalition": eps(ap["coalition"]) if "coalition" in ap else None,
            "range_check": attacked_summary["algorithms"][label]["parameters"].get("range_check", False),
        }
    return out


def run_attack(path: Path, overrides: list[str], kind: str, fraction: float, magnitude: float,
               range_check: bool, out: Path, jobs: int | None = None) -> dict:
    """Both runs, both results directories (``out/honest``, ``out/attacked``) and ``out/attack.json``."""
    family, honest, attacked = load_pair(path, overrides, kind, fraction, magnitude, range_check)
    summaries, found = {}, {}
    for name, config in (("honest", honest), ("attacked", attacked)):
        outcome = tasks.run_experiment(family, config, jobs=jobs)
        found[name] = outcome[0]
        summaries[name] = results.summarize(family, config, *outcome)
        results.write_results(out / name, family, config, summaries[name], outcome[0])
    report = {
        "adversary": {"kind": kind, "fraction": fraction, "magnitude": magnitude, "range_check": range_check},
        "family": family.name, "experiment": honest.name, "horizon": honest.horizon, "runs": honest.runs,
        "rejected": summaries["attacked"]["rejected"],
        "algorithms": compare(summaries["honest"], summaries["attacked"], found["honest"], found["attacked"]),
    }
    (out / "attack.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
