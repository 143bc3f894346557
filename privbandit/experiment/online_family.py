"""The private-online-learning family (Hu, Huang & Mehta) behind ``privbandit run``.

An experiment file says ``family = "private-online-learning"``, one ε (sweeps: ``--set epsilon=…``,
see ``experiments/reproduce_online.py``), the arm means, and ``[algorithms.<label>]`` tables:

- ``algorithm``: ``anytime-lazy-ucb`` (Alg. 1), ``hybrid-ucb`` (Alg. 4), ``dp-se`` (Sajed & Sheffet,
  run by the distributed-DP family's engine), ``ftnl`` (Alg. 2–3, full information);
- ``trust``: ``central`` (the paper) or ``distributed`` (one Pólya secure sum per block);
  Hybrid-UCB is central only;
- ``tree_depth`` (Hybrid: ``r`` as printed, or ``r+1``), ``rnm_multiplier`` and ``argmax_at`` (FTNL),
  ``beta`` (DP-SE; default 1/T as in §6), ``p`` (distributed decode failure; default 1/T).
"""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from privbandit.experiment.config import ExperimentFile, StrictModel, validate_experiment
from privbandit.experiment.runner import completed
from privbandit.experiment.results import _mean_stderr, _worst_privacy, plot_regret
from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.online_engine import ALGORITHMS, OnlineResult, OnlineRun
from privbandit.protocol.privacy import PrivacyLedger

FAMILY = "private-online-learning"
# Sajed & Sheffet's mean settings, reused by Hu et al. §6 and Appendix I.3 (K = 5).
SETTINGS = {
    1: [0.75, 0.70, 0.70, 0.70, 0.70],
    2: [0.75, 0.625, 0.5, 0.375, 0.25],
    3: [0.75, 0.15, 0.15, 0.15, 0.15],
}


class OnlineEnvironment(StrictModel):
    means: Annotated[list[Annotated[float, Field(ge=0, le=1)]], Field(min_length=2, max_length=1000)]
    reward: Literal["bernoulli", "gaussian"] = "bernoulli"  # the paper does not say; spec §4.1
    sd: Annotated[float, Field(ge=0, le=10)] = 0.1


class OnlineAlgorithm(StrictModel):
    algorithm: Literal["anytime-lazy-ucb", "hybrid-ucb", "dp-se", "ftnl"]
    trust: Literal["central", "distributed"] = "central"
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tree_depth: Literal["r", "r+1"] = "r"
    rnm_multiplier: Annotated[float, Field(gt=0, le=100)] = 1.0
    argmax_at: Literal["intermediary", "analyzer"] = "intermediary"
    beta: Annotated[float, Field(gt=0, le=1)] | None = None
    p: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _supported(self):
        if self.algorithm == "hybrid-ucb" and self.trust != "central":
            raise ValueError("hybrid-ucb runs in the central model only (trust = 'central')")
        return self


class OnlineExperiment(ExperimentFile):
    family: Literal["private-online-learning"] = FAMILY
    name: str = "online"
    description: str = ""
    horizon: Annotated[int, Field(ge=2, le=10**9)]
    seed: Annotated[int, Field(ge=0)] = 0
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    runs: Annotated[int, Field(ge=1, le=10_000)] = 1
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-6
    checkpoints: Annotated[int, Field(ge=4, le=100_000)] = 240
    environment: OnlineEnvironment
    algorithms: dict[str, OnlineAlgorithm]
    preset: str = "paper"  # read by the CLI's table; this family has no code preset

    @model_validator(mode="before")
    @classmethod
    def _infer(cls, data: Any):
        if isinstance(data, dict):
            env = data.get("environment")
            if isinstance(env, dict) and "setting" in env:  # setting = 1|2|3: the paper's means
                env = dict(env)
                s = env.pop("setting")
                if s not in SETTINGS:
                    raise ValueError(f"environment.setting must be one of 1, 2, 3 (got {s!r})")
                env.setdefault("means", SETTINGS[s])
                data["environment"] = env
        return data

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label.split("@")[0]  # "anytime-lazy-ucb@distributed" is an anytime-lazy-ucb


def load(path: str | Path, overrides: list[str] = ()) -> OnlineExperiment:
    return validate_experiment(OnlineExperiment, path, overrides)[0]


def instance_of(config: OnlineExperiment) -> BanditInstance:
    env = config.environment
    return BanditInstance(np.array(env.means), env.reward, env.sd)


def execute(config: OnlineExperiment, label: str, run: int) -> tuple[str, int, OnlineResult, float]:
    start = time.perf_counter()
    a = config.algorithms[label]
    eps = a.epsilon if a.epsilon is not None else config.epsilon
    spec = OnlineRun(
        instance=instance_of(config), epsilon=eps, horizon=config.horizon, seed=config.seed,
        prefix=(run, label), checkpoints=checkpoint_grid(config.horizon, config.checkpoints),
        ledger=PrivacyLedger(trust_model=a.trust, epsilon_target=eps, delta=config.delta), trust=a.trust,
    )
    kw: dict[str, Any] = {}
    if a.algorithm == "hybrid-ucb":
        kw["depth"] = a.tree_depth
    if a.algorithm in ("anytime-lazy-ucb", "ftnl"):
        kw["p"] = a.p
    if a.algorithm == "ftnl":
        kw.update(multiplier=a.rnm_multiplier, argmax_at=a.argmax_at)
    if a.algorithm == "dp-se":
        kw["beta"] = a.beta
    result = ALGORITHMS[a.algorithm](spec, **kw)
    return label, run, result, time.perf_counter() - start


def run(config: OnlineExperiment, jobs: int | None = None, progress=None):
    """All runs of all algorithms; results keyed by label, independent of ``jobs``."""
    tasks = [(label, r) for r in range(config.runs) for label in config.algorithms]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    results: dict[str, list] = {label: [None] * config.runs for label in config.algorithms}
    compute = dict.fromkeys(config.algorithms, 0.0)
    start = time.perf_counter()

    def collect(label, r, res, secs):
        results[label][r] = res
        compute[label] += secs
        if progress is not None:
            progress(label, r)

    for out in completed(execute, [(config, label, r) for label, r in tasks], jobs):
        collect(*out)
    return results, compute, time.perf_counter() - start


def summarize(config: OnlineExperiment, results: dict[str, list[OnlineResult]], compute: dict, elapsed: float) -> dict:
    summary: dict[str, Any] = {
        "experiment": config.name, "family": FAMILY, "horizon": config.horizon, "runs": config.runs,
        "seed": config.seed, "epsilon": config.epsilon, "means": config.environment.means,
        "reward": config.environment.reward, "transport": "inproc", "elapsed_s": round(elapsed, 3),
        "algorithms": {}, "privacy": {}, "communication": {},
    }
    for label, runs in results.items():
        a = config.algorithms[label]
        pm, ps = _mean_stderr(np.array([[r.pseudo_regret[-1]] for r in runs]))
        rm, rs = _mean_stderr(np.array([[r.realized_regret[-1]] for r in runs]))
        summary["algorithms"][label] = {
            "algorithm": a.algorithm, "trust": a.trust, "runs": len(runs),
            "regret_final_mean": float(pm[0]), "regret_final_stderr": float(ps[0]),
            "realized_regret_final_mean": float(rm[0]), "realized_regret_final_stderr": float(rs[0]),
            "pulls_mean": np.mean([r.pulls for r in runs], axis=0).tolist(),
            "releases_per_run": float(np.mean([len(r.releases) for r in runs])),
            "wrap_arounds": sum(bool(x.get("wrapped")) for r in runs for x in r.releases),
            "users_per_s": config.horizon * len(runs) / compute[label] if compute[label] else None,
            "seconds_per_run": compute[label] / len(runs),
            "parameters": a.model_dump(),
        }
        summary["privacy"][label] = _worst_privacy([r.privacy for r in runs])
        reports = sum(r.reports for r in runs)
        summary["communication"][label] = {
            "bits_per_user_protocol": sum(r.protocol_bits for r in runs) / reports if reports else 0.0,
            "bits_per_user_protocol_max": max(r.max_report_bits for r in runs),
        }
    return summary


def write(out: Path, config: OnlineExperiment, outcome) -> dict:
    results, compute, elapsed = outcome
    summary = summarize(config, results, compute, elapsed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(config.model_dump(), indent=2) + "\n")
    t = next(iter(results.values()))[0].checkpoints
    columns = {"t": t}
    for label, runs in results.items():
        for kind in ("pseudo", "realized"):
            mean, se = _mean_stderr(np.array([getattr(r, f"{kind}_regret") for r in runs]))
            columns[f"{label}.{kind}_mean"], columns[f"{label}.{kind}_stderr"] = mean, se
    with open(out / "curves.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(zip(*columns.values()))
    fields = ["algorithm", "run", "round", "arm", "array", "epoch", "batch", "n", "played", "next",
              "estimate_sum", "wrapped", "g", "tau", "m", "sums_released"]
    with open(out / "releases.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for label, runs in results.items():
            for i, r in enumerate(runs):
                for row in r.releases:
                    w.writerow({"algorithm": label, "run": i, **row})
    plot_regret(out / "regret.png", config, columns, list(results))
    return summary
