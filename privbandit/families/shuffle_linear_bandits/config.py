"""The shuffle-model linear contextual bandit family (Chowdhury & Zhou, ICML 2022) behind ``privbandit run``.

An experiment file says ``family = "shuffle-linear-bandits"``; see experiments/fig1a_linear_eps0.2.toml
and docs/shuffle-linear-bandits.md. One task per algorithm label steps all runs at once (stacked
linear algebra), so results do not depend on ``--jobs``: run r of every algorithm faces the instance
drawn from ``(seed, "linear-instance", r)`` and the same users ``(seed, "linear-users", r)``; an
algorithm's noise comes from ``(seed, <party>, label)``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from privbandit.experiment.config import ConfigError, ExperimentFile, StrictModel, validate_experiment
from privbandit.experiment.results import _mean_stderr, plot_regret
from privbandit.experiment.runner import completed
from privbandit.protocol import linear_engine, linear_streams
from privbandit.protocol.learners.batched_linucb import BatchedLinUCB
from privbandit.protocol.linear_environments import GENERATORS, LinearInstances, bounds, generate, stack
from privbandit.protocol.mechanisms import shuffle_linear_bandits as slb
from privbandit.protocol.mechanisms import shuffle_linear_params as lp
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.primitives.seeding import stream

FAMILY = "shuffle-linear-bandits"


class LinearEnvironment(StrictModel):
    arms: Annotated[int, Field(ge=2, le=100_000)] = 100
    dim: Annotated[int, Field(ge=2, le=64)] = 5
    generator: Literal[GENERATORS] | None = None  # type: ignore[valid-type]  # default: the preset's


class LinearAlgorithm(StrictModel):
    algorithm: Literal[lp.ALGORITHMS]  # type: ignore[valid-type]
    batch: Annotated[int, Field(ge=1, le=10**7)] | None = None  # default: 20 for SDP, 1 otherwise
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    alpha: Annotated[float, Field(gt=0, lt=1)] | None = None  # confidence level; default 1/T
    vec_scale: Annotated[float, Field(gt=0, le=1e12)] | None = None  # P_Vec's constant C in b
    vec_span: Literal["2delta", "delta"] = "2delta"  # spec §11 item 8; "delta" = Alg. 5 as printed
    independent_permutations: bool = True  # P_Amp: S1 and S2 draw their own permutations


class LinearExperiment(ExperimentFile):
    family: Literal["shuffle-linear-bandits"]
    name: str = "linear"
    description: str = ""
    horizon: Annotated[int, Field(ge=2, le=10**8)]
    seed: Annotated[int, Field(ge=0)] = 0
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    delta: Annotated[float, Field(gt=0, lt=1)] = 0.1
    runs: Annotated[int, Field(ge=1, le=10_000)] = 1
    preset: Literal[lp.PRESETS] = "paper-code"  # type: ignore[valid-type]
    returning_users: bool = False  # Assumption 4.1: a user may join every batch (once per batch)
    max_participations: Annotated[int, Field(ge=1)] | None = None  # default with returning users: T/B
    checkpoints: Annotated[int, Field(ge=4, le=100_000)] = 240
    environment: LinearEnvironment = LinearEnvironment()
    algorithms: dict[str, LinearAlgorithm]

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label.lower() if label.lower() in lp.ALGORITHMS else None

    @property
    def generator(self) -> str:
        return self.environment.generator or ("paper" if self.preset == "theory" else "paper-code")


def load(path: str | Path, overrides: list[str] = ()) -> LinearExperiment:
    config, _ = validate_experiment(LinearExperiment, path, overrides)
    for label, algo in config.algorithms.items():
        b = batch_of(algo)
        if b > config.horizon:
            raise ConfigError(f"algorithms.{label}.batch = {b} must be ≤ horizon = {config.horizon}")
    return config


def batch_of(algo: LinearAlgorithm) -> int:
    if algo.batch is not None:
        return algo.batch
    return 20 if algo.algorithm.startswith("linucb-sdp") else 1


# --- building one algorithm ----------------------------------------------------------------------

def build(config: LinearExperiment, label: str):
    """(protocol, learner factory, ledger, communication) for one algorithm label."""
    algo = config.algorithms[label]
    kind, preset, T, d = algo.algorithm, config.preset, config.horizon, config.environment.dim
    B = batch_of(algo)
    eps = algo.epsilon if algo.epsilon is not None else config.epsilon
    norm, entry = bounds(config.generator)
    participations = 1
    if config.returning_users and kind != "linucb":
        participations = config.max_participations or max(1, T // B)
    budget = lp.batch_budget(eps, config.delta, participations)
    sigma, vec = None, None
    dim_entries = slb.n_entries(d)
    comm = {"bits_per_user_protocol": 64 * dim_entries, "bytes_per_user_wire": 8 * dim_entries}
    if kind == "linucb":
        protocol = linear_engine.Protocol(kind)
    elif kind == "linucb-sdp-amp":
        sigma = lp.amp_sigma(preset, budget, B, norm)
        protocol = linear_engine.Protocol(kind, slb.GaussianRandomizer(sigma),
                                          slb.PermutationShuffler(d, algo.independent_permutations), slb.SumAnalyzer())
    elif kind == "linucb-ldp":
        sigma = lp.ldp_sigma(preset, budget, norm)
        protocol = linear_engine.Protocol(kind, slb.GaussianRandomizer(sigma), slb.PassThrough(), slb.SumAnalyzer())
    elif kind == "linucb-jdp":
        sigma = lp.jdp_sigma(preset, budget, math.ceil(T / B), norm)
        protocol = linear_engine.Protocol(kind, tree=None)
    else:
        vec = lp.vec_params(preset, budget, B, d, entry, norm, algo.vec_scale, algo.vec_span)
        protocol = linear_engine.Protocol(kind, slb.BitSumRandomizer(vec), slb.LabelCountShuffler(),
                                          slb.BitSumAnalyzer(vec))
        bits = lp.vec_bits(vec, d)
        comm = {"bits_per_user_protocol": bits["bits_per_user_theory"], **bits}
    sigma_total = lp.noise_scale_total(kind, sigma or 0.0, T, B, vec)
    conf = lp.confidence(preset, kind, sigma_total, T, B, d, norm,
                         lp.paper_code_noise(kind, budget.epsilon, budget.delta, B, T, d), algo.alpha)
    ledger = lp.ledger(kind, preset, eps, config.delta, budget, B, norm, sigma, vec, algo.vec_scale, T)
    ledger["lambda"] = conf.lam
    ledger["eigenvalue_floor"] = conf.floor
    comm["reports_per_run"] = (T // B) * B  # a trailing partial batch is served, never reported
    return protocol, conf, ledger, comm, B, sigma


def world(config: LinearExperiment, runs: range | list[int] | None = None) -> LinearInstances:
    """The instances (arms, θ*) of the given runs (default: all), stacked. Ground truth."""
    runs = range(config.runs) if runs is None else runs
    d, k = config.environment.dim, config.environment.arms
    return stack([generate(config.generator, k, d, stream(config.seed, "linear-instance", r)) for r in runs],
                 config.generator)


def instances(config: LinearExperiment, runs: range | list[int] | None = None):
    """The simulated world of the given runs (default: all): instances stacked, and every user's U_t."""
    runs = range(config.runs) if runs is None else runs
    users = np.stack([linear_streams.user_uniforms(config.seed, r, 0, config.horizon) for r in runs])
    return world(config, runs), users


# --- distributed runs (privbandit/services/linear.py) --------------------------------------------

def check_distributed(config: LinearExperiment) -> None:
    """``--transport mqtt`` runs the batched shuffle protocols only: the per-round baselines draw one
    stream for all runs stacked (protocol/linear_streams.py), which one run per task cannot reproduce."""
    for label, algo in config.algorithms.items():
        if algo.algorithm not in linear_streams.BATCHED:
            raise ConfigError(f"algorithms.{label}: --transport mqtt runs {' and '.join(linear_streams.BATCHED)} "
                              f"only; {algo.algorithm} runs in-process (drop it or use --transport inproc)")


def public_task(config: LinearExperiment, label: str) -> dict:
    """What the analyzer and the shuffler may know of the experiment: everything but the seed (from
    which the world, θ*, the users' contexts and rewards follow), for one algorithm."""
    public = config.model_dump(exclude={"seed"})
    public["algorithms"] = {label: public["algorithms"][label]}
    return public


def from_public(public: dict) -> LinearExperiment:
    """The experiment a public task describes (seed 0: nothing built from it uses the seed)."""
    return LinearExperiment.model_validate(public)


def diagnostic_batches(horizon: int, checkpoints: np.ndarray, batch: int) -> np.ndarray:
    """The batches rounds.csv records (those ending nearest the checkpoints); public, so the
    distributed analyzer and fleets report exactly these."""
    n_batches = horizon // batch
    return np.unique(np.clip(np.round(checkpoints / batch).astype(np.int64) - 1, 0, max(0, n_batches - 1)))


def execute(config: LinearExperiment, label: str, runs: list[int] | None = None) -> tuple[str, dict, float]:
    """All runs of one algorithm stepped at once (or only ``runs``: each run's numbers do not depend
    on which runs are stacked with it, which is what lets one distributed task be one run)."""
    t0 = time.perf_counter()
    runs = list(range(config.runs)) if runs is None else list(runs)
    protocol, conf, ledger, comm, B, sigma = build(config, label)
    inst, users = instances(config, runs)
    d = config.environment.dim
    if protocol.name == "linucb-jdp":
        protocol.tree = slb.TreeAggregator(sigma, (len(runs), slb.n_entries(d)))
    learner = BatchedLinUCB(len(runs), d, conf.lam, conf.floor, lambda t: conf.beta(t, d))
    cps = checkpoint_grid(config.horizon, config.checkpoints)
    rngs = linear_streams.engine_streams(config.seed, label, protocol.name, runs, B, protocol, slb.n_entries(d))
    res = linear_engine.run(protocol, learner, inst, users, B, cps, rngs, diagnostic_batches(config.horizon, cps, B))
    ledger["batches_clipped"] = int(res.clipped.sum())
    ledger["batches_not_pd"] = int(res.not_pd.sum())
    out = {"checkpoints": cps, "pseudo": res.pseudo, "realized": res.realized, "diagnostics": res.diagnostics,
           "ledger": ledger, "communication": comm, "batch": B, "clipped": res.clipped, "not_pd": res.not_pd}
    return label, out, time.perf_counter() - t0


def run(config: LinearExperiment, jobs: int | None = None, progress=None):
    t0 = time.perf_counter()
    labels = list(config.algorithms)
    jobs = min(len(labels), jobs or os.cpu_count() or 1)
    results, compute = {}, {}

    def done(label, out, secs):
        results[label], compute[label] = out, secs
        for r in range(config.runs):
            if progress:
                progress(label, r)

    for out in completed(execute, [(config, label) for label in labels], jobs):
        done(*out)
    return {label: results[label] for label in labels}, compute, time.perf_counter() - t0


# Per-round algorithms cost most; starting them first balances the pool.
_COST = {"linucb-ldp": 0, "linucb-jdp": 1, "linucb": 2, "linucb-sdp-vec": 3, "linucb-sdp-amp": 4}


def run_suite(configs: list[LinearExperiment], jobs: int | None = None, progress=None) -> list:
    """Several experiment files in one process pool (one task per file × label), for scripts that run a
    whole figure. Each task's results are those ``run`` gives for the same file: tasks are independent."""
    t0 = time.perf_counter()
    tasks = sorted(((i, label) for i, c in enumerate(configs) for label in c.algorithms),
                   key=lambda t: _COST[configs[t[0]].algorithms[t[1]].algorithm])
    results = [dict() for _ in configs]
    compute = [dict() for _ in configs]
    with ProcessPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        futures = {pool.submit(execute, configs[i], label): i for i, label in tasks}
        for fut in as_completed(futures):
            i = futures[fut]
            label, out, secs = fut.result()
            results[i][label], compute[i][label] = out, secs
            if progress:
                progress(i, label)
    elapsed = time.perf_counter() - t0
    return [({l: results[i][l] for l in c.algorithms}, compute[i], elapsed) for i, c in enumerate(configs)]


# --- the results directory -----------------------------------------------------------------------

def summarize(config: LinearExperiment, outcome, transport: str = "inproc") -> dict:
    results, compute, elapsed = outcome
    summary = {"experiment": config.name, "family": FAMILY, "horizon": config.horizon, "runs": config.runs,
               "seed": config.seed, "epsilon": config.epsilon, "delta": config.delta, "preset": config.preset,
               "generator": config.generator, "dim": config.environment.dim, "arms": config.environment.arms,
               "returning_users": config.returning_users, "transport": transport,
               "elapsed_s": round(elapsed, 3), "algorithms": {}, "privacy": {}, "communication": {}}
    for label, r in results.items():
        pm, ps = _mean_stderr(r["pseudo"][:, -1:])
        rm, rs = _mean_stderr(r["realized"][:, -1:])
        summary["algorithms"][label] = {
            "algorithm": config.algorithms[label].algorithm, "batch": r["batch"],
            "regret_final_mean": float(pm[0]), "regret_final_stderr": float(ps[0]),
            "realized_regret_final_mean": float(rm[0]), "realized_regret_final_stderr": float(rs[0]),
            "batches_clipped": int(r["clipped"].sum()), "batches_not_pd": int(r["not_pd"].sum()),
            "users_per_s": config.horizon * config.runs / compute[label] if compute[label] else None,
            "parameters": config.algorithms[label].model_dump()}
        summary["privacy"][label] = r["ledger"]
        summary["communication"][label] = r["communication"]
    return summary


def write(out: Path, config: LinearExperiment, outcome, summary: dict | None = None) -> dict:
    """The results directory; ``summary`` if given (the distributed observer adds wire accounting)."""
    results = outcome[0]
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(config, outcome) if summary is None else summary
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(config.model_dump(), indent=2) + "\n")
    first = next(iter(results.values()))
    columns = {"t": first["checkpoints"]}
    for label, r in results.items():
        for kind in ("pseudo", "realized"):
            mean, se = _mean_stderr(r[kind])
            columns[f"{label}.{kind}_mean"], columns[f"{label}.{kind}_stderr"] = mean, se
    with open(out / "curves.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(zip(*columns.values()))
    fields = ["algorithm", "batch", "t", "lambda_min_mean", "lambda_min_min", "clipped_frac", "theta_error",
              "u_error_mean", "u_error_var", "V_error_mean", "V_error_var"]
    with open(out / "rounds.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for label, r in results.items():
            diag = r["diagnostics"]
            for i in range(len(diag["batch"])):
                w.writerow([label] + [diag[k][i] for k in fields[1:]])
    plot(out / "regret.png", config, columns, list(results))
    return summary


def plot(path: Path, config: LinearExperiment, columns: dict, labels: list[str]) -> None:
    plot_regret(path, config, columns, labels, cumulative=True, realized="realized regret (authors' metric)",
                title=f"{config.name}: ε = {config.epsilon}, δ = {config.delta}, d = {config.environment.dim}, "
                      f"preset {config.preset}, {config.runs} runs, mean ± stderr")
