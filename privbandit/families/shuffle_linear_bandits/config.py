"""The shuffle-model linear bandits' experiment files (Chowdhury & Zhou, ICML 2022).

An experiment file says ``family = "shuffle-linear-bandits"`` (see experiments/linear_fig1a_eps0.2.toml
and docs/shuffle-linear-bandits.md): the horizon T, (ε, δ), the preset of constants (``paper-code``,
``theory`` or ``exact``), the environment (K arms in R^d, the instance generator) and ``[algorithms.<label>]``
tables, whose ``algorithm`` a label that is itself an algorithm name implies (``LinUCB-SDP-Amp``).
``delta`` defaults to 1/(10·T), as in every family: a run protects its T users
(:func:`~privbandit.protocol.privacy.default_delta`). The paper's figures use δ = 0.1, which their
experiment files set themselves.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from privbandit.families.shuffle_linear_bandits.params import ALGORITHMS, PRESETS
from privbandit.datasets.real import check_instance
from privbandit.families.shuffle_linear_bandits.world import GENERATORS
from privbandit.protocol.privacy import default_delta
from privbandit.runner.config import ExperimentFile, StrictModel

FAMILY = "shuffle-linear-bandits"


class LinearEnvironment(StrictModel):
    arms: Annotated[int, Field(ge=2, le=100_000)] = 100
    dim: Annotated[int, Field(ge=2, le=64)] = 5
    generator: Literal[GENERATORS] | None = None  # type: ignore[valid-type]  # default: the preset's
    # "fixed-arms": K arms shared by every user (the paper's §5 experiments). "classes": a real
    # generator's supervised-to-bandit conversion, every user her own context (world.ClassContexts):
    # arms = the set's C classes, dim = C·(p + 1), reward 1{a = y_t}; regret counts the mistakes.
    conversion: Literal["fixed-arms", "classes"] = "fixed-arms"


class LinearAlgorithm(StrictModel):
    algorithm: Literal[ALGORITHMS]  # type: ignore[valid-type]
    batch: Annotated[int, Field(ge=1, le=10**7)] | None = None  # default: 20 for SDP, 1 otherwise
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    alpha: Annotated[float, Field(gt=0, lt=1)] | None = None  # confidence level; default 1/T
    vec_scale: Annotated[float, Field(gt=0, le=1e12)] | None = None  # P_Vec's constant C in b
    # P_Vec's encoding range (spec §11 item 8). None: the preset's. "delta" is Alg. 5 as printed and
    # the authors' code (paper-code): a shifted entry spans [0, 2Δ] but is encoded as if it spanned
    # [0, Δ], so a count can reach 2g + b and no proof covers the release (the ledger says so).
    # "2delta" (theory) encodes [0, 2Δ]: the proof holds, the rounding and noise error double.
    vec_span: Literal["2delta", "delta"] | None = None
    independent_permutations: bool = True  # P_Amp: S1 and S2 draw their own permutations
    # LinUCB-JDP's noise. "fresh": one draw per node of the binary tree (Shariff & Sheffet). "authors-reused":
    # the authors' code, ⌊ln(1 + c)⌋ + 1 draws made once and reused: consecutive releases cancel their
    # noise, so the ledger says none proven (docs/shuffle-linear-bandits.md, Presets).
    tree_noise: Literal["fresh", "authors-reused"] = "fresh"
    # P_Vec's g and b (paper-code). "integer": g = ⌈max(2√B, d, 4)⌉ and b = ⌈b⌉, all b bits drawn and
    # subtracted. "authors-float": the authors' code, g and b left as floats; their randomizer draws
    # ⌊b⌋ bits (numpy truncates) while the analyzer subtracts p·b·B, so every estimated entry drifts by
    # −(span/g)·p·(b − ⌊b⌋)·B per batch (docs/shuffle-linear-bandits.md, Beside the authors' code).
    vec_bits: Literal["integer", "authors-float"] = "integer"


class LinearExperiment(ExperimentFile):
    family: Literal["shuffle-linear-bandits"]
    name: str = "linear"
    horizon: Annotated[int, Field(ge=2, le=10**8)]
    # None: 1/(10·T), filled in from the horizon by validation (_default_delta), so every reader
    # sees a number; the paper's δ = 0.1 is far above 1/T and must be asked for.
    delta: float | None = None  # in (0, 1): _delta_range names the whole range when it is not
    preset: Literal[PRESETS] = "paper-code"  # type: ignore[valid-type]
    # Solve each algorithm's nominal ε so that its ledger reads exactly (epsilon, delta) (#13 item 4);
    # a table that sets its own epsilon keeps it.
    calibrate: bool = False
    returning_users: bool = False  # Assumption 4.1: a user may join every batch (once per batch)
    max_participations: Annotated[int, Field(ge=1)] | None = None  # default with returning users: T/B
    environment: LinearEnvironment = LinearEnvironment()
    algorithms: dict[str, LinearAlgorithm]

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label.lower() if label.lower() in ALGORITHMS else None

    @field_validator("delta")
    @classmethod
    def _delta_range(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < 1:  # also refuses NaN
            raise ValueError("delta must lie in (0, 1); omit it for the default 1/(10·horizon)")
        return value

    @model_validator(mode="after")
    def _default_delta(self):
        if self.delta is None:  # frozen: set once here, during validation, so every reader sees a number
            object.__setattr__(self, "delta", default_delta(self.horizon))
        return self

    @property
    def generator(self) -> str:
        return self.environment.generator or ("paper-code" if self.preset == "paper-code" else "paper")

    @model_validator(mode="after")
    def _real_sizes(self):
        env = self.environment  # checked here, not when the run draws its instance or users
        check_instance("generator", self.generator, env.arms, env.dim, env.conversion)
        return self

    @model_validator(mode="after")
    def _batches_fit(self):
        for label, algo in self.algorithms.items():
            b = batch_of(algo)
            if b > self.horizon:
                raise ValueError(f"algorithms.{label}.batch = {b} must be ≤ horizon = {self.horizon}")
            if self.preset == "exact" and algo.vec_scale is not None:
                raise ValueError(f"algorithms.{label}.vec_scale: P_Vec's proof constant has no place under "
                                 "preset = 'exact' (its b comes from the exact accountant); remove it")
            if algo.tree_noise != "fresh" and algo.algorithm != "linucb-jdp":
                raise ValueError(f"algorithms.{label}.tree_noise = {algo.tree_noise!r} applies to linucb-jdp only "
                                 f"(this is {algo.algorithm}); remove it")
            if algo.vec_bits != "integer" and (algo.algorithm != "linucb-sdp-vec" or self.preset != "paper-code"):
                raise ValueError(f"algorithms.{label}.vec_bits = {algo.vec_bits!r} is the authors' code's P_Vec: "
                                 f"linucb-sdp-vec under preset 'paper-code' only (this is {algo.algorithm}, "
                                 f"preset {self.preset!r}); remove it")
            if self.preset == "exact" and algo.vec_span == "delta":
                raise ValueError(f"algorithms.{label}.vec_span = 'delta': the exact accountant covers the span "
                                 "2Δ only (a count moved by at most g); use '2delta' or leave it unset")
        return self


def batch_of(algo: LinearAlgorithm) -> int:
    if algo.batch is not None:
        return algo.batch
    return 20 if algo.algorithm.startswith("linucb-sdp") else 1


def participations(config: LinearExperiment, algo: LinearAlgorithm) -> int:
    """How many batches one user may join: 1 for unique users; M (default T/B) for returning users."""
    if not config.returning_users or algo.algorithm == "linucb":
        return 1
    return config.max_participations or max(1, config.horizon // batch_of(algo))


def diagnostic_batches(horizon: int, checkpoints: np.ndarray, batch: int) -> np.ndarray:
    """The batches rounds.csv records (those ending nearest the checkpoints): public, so the analyzer
    and the users report exactly these."""
    n_batches = horizon // batch
    return np.unique(np.clip(np.round(checkpoints / batch).astype(np.int64) - 1, 0, max(0, n_batches - 1)))
