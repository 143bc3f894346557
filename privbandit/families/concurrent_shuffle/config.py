"""The concurrent-shuffle counter's experiment files (Tenenbaum, Kaplan, Mansour & Stemmer, ICML 2023).

An experiment file says ``family = "concurrent-shuffle"`` (see experiments/cs_demo.toml and
docs/concurrent-shuffle.md): the horizon n, (ε, δ), the users' bits (``input``: iid Ber(p), all
ones, or the lower bound's hard stream Δ_{n,k}) and ``[algorithms.<label>]`` tables, one counter
each (spec §7): its ``algorithm`` (the mode; a label that is a mode name implies it), k, the
summation protocol inside each shuffler, and optionally d_low and D_tree.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from privbandit.datasets.real import DATASETS, check_instance
from privbandit.families.concurrent_shuffle.mechanisms import PROTOCOLS
from privbandit.families.concurrent_shuffle.tree import MODES, tree_for
from privbandit.families.concurrent_shuffle.world import INPUTS
from privbandit.runner.config import ExperimentFile, StrictModel

FAMILY = "concurrent-shuffle"
# Algorithm 4 on the counter (P_Vec per node), the same batches with exact sums (non-private), and
# uniformly random arms on the same batches (no learning, nothing released).
BANDITS = ("cs-linucb", "cs-linucb-exact", "cs-random")
GENERATORS = ("paper", "paper-code", *DATASETS)  # real data: docs/real-data.md
# Algorithm 4's P_Vec: Thm C.1's constants (theory), or calibrated by the exact count accountant (exact).
PRESETS = ("theory", "exact")


class BanditEnvironment(StrictModel):
    """Algorithm 4's world: the linear family's fixed arms (``paper``: ‖φ‖ = ‖θ*‖ = 1, Assumption C.1)."""

    arms: Annotated[int, Field(ge=2, le=10_000)] = 100
    dim: Annotated[int, Field(ge=2, le=16)] = 5
    generator: Literal[GENERATORS] = "paper"  # type: ignore[valid-type]
    # "fixed-arms": K arms every user shares. "classes" (a real generator): the supervised-to-bandit
    # conversion, each user her own arm set (the linear family's world.ClassContexts), reward 1{a = y_t}.
    conversion: Literal["fixed-arms", "classes"] = "fixed-arms"


class CounterAlgorithm(StrictModel):
    algorithm: Literal[MODES + BANDITS]  # type: ignore[valid-type]
    k: Annotated[int, Field(ge=1, le=64)] | None = None  # shufflers (csta_k, lowest/highest_k_binary)
    protocol: Literal[PROTOCOLS] = "split-mix"  # type: ignore[valid-type]  # M^sum inside one shuffler
    d_low: Annotated[int, Field(ge=1, le=10**6)] | None = None  # default ⌈n^{1/(2k+1)}⌉
    D_tree: Annotated[int, Field(ge=2, le=10**7)] | None = None  # default d_low²
    vec_scale: Annotated[float, Field(gt=0, le=1e12)] | None = None  # P_Vec's b constant (theory 24·10⁴)
    epsilon: Annotated[float, Field(gt=0, le=50, allow_inf_nan=False)] | None = None
    lambda_rule: Literal["sqrt-d", "d"] = "sqrt-d"  # Alg. 4: λ = 2σ̃√d or 2σ̃d (spec §8 item 4)


class CounterExperiment(ExperimentFile):
    family: Literal["concurrent-shuffle"]
    name: str = "concurrent-shuffle"
    horizon: Annotated[int, Field(ge=4, le=10**8)]
    delta: Annotated[float, Field(gt=0, lt=0.5)] | None = None  # default 1/(10 n)
    input: Literal[INPUTS] = "iid"  # type: ignore[valid-type]
    p: Annotated[float, Field(ge=0, le=1)] = 0.5  # Ber(p) for input = "iid"
    environment: BanditEnvironment = BanditEnvironment()  # Algorithm 4's arms
    # Algorithm 4's P_Vec noise: "theory" (Thm C.1's b with 24·10⁴) or "exact" (the fewest fair noise
    # bits the exact accountant of the label counts allows: privbandit.protocol.privacy.counts).
    preset: Literal[PRESETS] = "theory"  # type: ignore[valid-type]
    algorithms: dict[str, CounterAlgorithm]

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label if label in MODES else None

    @model_validator(mode="after")
    def _real_sizes(self):
        env = self.environment  # checked here, not when the run draws its instance or users
        check_instance("generator", env.generator, env.arms, env.dim, env.conversion)
        return self

    @model_validator(mode="after")
    def _trees(self):
        """Every counter's tree must exist for this horizon: the error names the algorithm."""
        for label, a in self.algorithms.items():
            if self.preset == "exact" and a.vec_scale is not None:
                raise ValueError(f"algorithms.{label}.vec_scale: P_Vec's proof constant has no place under preset = "
                                 f"'exact' (its b comes from the exact accountant)")
            if a.algorithm in ("csta_k", "lowest_k_binary", "highest_k_binary") + BANDITS and a.k is None:
                raise ValueError(f"algorithms.{label}.k: mode {a.algorithm} needs k (the number of shufflers)")
            try:
                tree_for("csta_k" if a.algorithm in BANDITS else a.algorithm, self.horizon, a.k, a.d_low, a.D_tree)
            except ValueError as exc:
                raise ValueError(f"algorithms.{label}: {exc}") from None
        return self
