"""The private-online-learning family's experiment files (Hu, Huang & Mehta).

An experiment file says ``family = "private-online-learning"``, one ε (sweeps: ``--set epsilon=…``,
see ``experiments/reproduce_online.py``), the arm means, and ``[algorithms.<label>]`` tables:

- ``algorithm``: ``anytime-lazy-ucb`` (Alg. 1), ``hybrid-ucb`` (Alg. 4), ``dp-se`` (Sajed & Sheffet,
  run by the distributed-DP family's engine), ``ftnl`` (Alg. 2–3, full information);
- ``trust``: ``central`` (the paper) or ``distributed`` (one Pólya secure sum per block);
  Hybrid-UCB is central only;
- ``tree_depth`` (Hybrid: ``r`` as printed, or ``r+1``), ``rnm_multiplier`` and ``argmax_at`` (FTNL),
  ``beta`` (DP-SE; default 1/T as in §6), ``p`` (distributed decode failure; default 1/T);
- ``intermediary = "secagg"`` (distributed Anytime-Lazy-UCB, DP-SE, and FTNL with ``argmax_at =
  "analyzer"``): real secure aggregation instead of the ideal sum, with ``secagg_graph`` and the
  threat model's ``corrupt_fraction``, ``secagg_security_bits``, ``secagg_failure_bits`` (as in
  the distributed-DP MAB family);
- ``adversary = {kind, fraction, magnitude}`` (:mod:`.adversaries`; not Hybrid-UCB, and no
  ``colluders`` on Anytime-Lazy-UCB), and the session's ``traffic_adversaries``, as in the
  distributed-DP MAB family (docs/attacks.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from privbandit.families.distributed_dp_mab.config import (
    TRAFFIC_ADVERSARY_KINDS,
    AdversaryConfig,
    SecureAggregationOptions,
    each_traffic_adversary_once,
)
from privbandit.protocol.primitives.secagg.parameters import ThreatModel
from privbandit.runner.config import ExperimentFile, StrictModel

FAMILY = "private-online-learning"
SECURE_HORIZON_MAX = 2**20  # codec.MAX_ARRAY_ELEMENTS: the users a plan's join can name
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


class OnlineAlgorithm(SecureAggregationOptions):
    algorithm: Literal["anytime-lazy-ucb", "hybrid-ucb", "dp-se", "ftnl", "naive-ftnl", "ftl", "hedge"]
    trust: Literal["central", "distributed"] = "central"
    # The distributed twins' aggregator: "auto", the ideal modular sum in the aggregator's process;
    # "secagg", real secure aggregation (Bonawitz et al.; SecAgg+ with secagg_graph = "sparse")
    # among each release's users, its graph from the threat model (SecureAggregationOptions).
    intermediary: Literal["auto", "secagg"] = "auto"
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    tree_depth: Literal["r", "r+1"] = "r"
    rnm_multiplier: Annotated[float, Field(gt=0, le=100)] = 1.0
    argmax_at: Literal["intermediary", "analyzer"] = "intermediary"
    beta: Annotated[float, Field(gt=0, le=1)] | None = None
    p: Annotated[float, Field(gt=0, le=1)] | None = None
    adversary: AdversaryConfig | None = None  # some users of every cohort attack (adversaries.py)

    @model_validator(mode="after")
    def _adversaries_it_takes(self):
        if self.adversary is None:
            return self
        if self.algorithm == "hybrid-ucb":
            raise ValueError("adversary: hybrid-ucb takes none (its in-process analyzer looks ahead at the users' "
                             "true rewards, so a poisoned report breaks the look-ahead, not the learner)")
        kind = self.adversary.kind
        if kind == "colluders" and self.algorithm == "anytime-lazy-ucb":
            raise ValueError("adversary: colluders on anytime-lazy-ucb are not built (an array fills over many plans, "
                             "and no party counts the colluders of one array for the ledger against the coalition); "
                             "they are on dp-se and ftnl")
        if (kind == "colluders" and self.intermediary == "secagg"
                and self.adversary.fraction > self.corrupt_fraction):
            raise ValueError(f"corrupt_fraction = {self.corrupt_fraction:g} must be at least adversary.fraction = "
                             f"{self.adversary.fraction:g}: the secure-aggregation graph is chosen for at most "
                             f"corrupt_fraction colluding users, and this run simulates more")
        return self

    @model_validator(mode="after")
    def _experts_baselines(self):
        if self.algorithm in ("ftl", "hedge"):
            set_fields = (("trust", self.trust != "central"), ("intermediary", self.intermediary != "auto"),
                          ("adversary", self.adversary is not None))
            bad = [name for name, set_ in set_fields if set_]
            if bad:
                raise ValueError(f"{', '.join(bad)}: {self.algorithm} is a non-private baseline (every user's reward "
                                 f"vector to the analyzer) and takes none of these")
        if self.algorithm == "naive-ftnl" and (self.adversary is not None or self.argmax_at != "intermediary"
                                               or self.rnm_multiplier != 1.0):
            raise ValueError("naive-ftnl releases every action's noisy sum at ε/K by design: it takes no adversary, "
                             "argmax_at or rnm_multiplier (those are ftnl's)")
        return self

    @model_validator(mode="after")
    def _supported(self):
        if self.algorithm == "hybrid-ucb" and self.trust != "central":
            raise ValueError("hybrid-ucb runs in the central model only (trust = 'central')")
        if self.intermediary == "secagg" and self.trust != "distributed":
            raise ValueError("intermediary = 'secagg' needs trust = 'distributed' (the central model's analyzer "
                             "reads the raw rewards)")
        if self.intermediary == "secagg" and self.algorithm == "ftnl" and self.argmax_at != "analyzer":
            raise ValueError("intermediary = 'secagg' with ftnl needs argmax_at = 'analyzer': secure aggregation "
                             "releases the epoch's K sums, and taking their argmax inside the aggregator would need "
                             "a secure computation beyond it")
        return self

    def threat_model(self) -> ThreatModel:
        """What the secure-aggregation graph withstands: this family simulates no dropouts."""
        return self.secagg_threat(0.0)


class OnlineExperiment(ExperimentFile):
    family: Literal["private-online-learning"] = FAMILY
    name: str = "online"
    horizon: Annotated[int, Field(ge=2, le=10**9)]
    # None: 1/(10·T), small against 1/N for the N = T users a run protects (privacy.default_delta).
    delta: Annotated[float, Field(gt=0, lt=1)] | None = None
    environment: OnlineEnvironment
    algorithms: dict[str, OnlineAlgorithm]
    # Equal guarantees: solve each algorithm's own ε so that every user is exactly ``epsilon``-DP as
    # the ledger reads it (Hybrid-UCB as printed spends 1.5ε, FTNL's report noisy max 2ε/c, its
    # analyzer-side argmax Kε/c). A table that sets its own epsilon is left as it is.
    calibrate: bool = False
    preset: str = "paper"  # read by the CLI's table; this family has no code preset
    # Hostile client processes a run over MQTT starts next to the parties (services/hostile.py).
    traffic_adversaries: list[Literal[TRAFFIC_ADVERSARY_KINDS]] = []  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _each_traffic_adversary_once(self):
        each_traffic_adversary_once(self.traffic_adversaries)
        return self

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

    @model_validator(mode="after")
    def _secure_arrays_fit_a_plan(self):
        # A secure array's joins name its users, and a plan (its ids an array on the wire) carries
        # at most 2^20 of them: an array of 2^r users may need that many in one plan.
        for label, a in self.algorithms.items():
            if a.intermediary == "secagg" and a.algorithm == "anytime-lazy-ucb" and self.horizon > SECURE_HORIZON_MAX:
                raise ValueError(f"algorithms.{label}: intermediary = 'secagg' runs Anytime-Lazy-UCB up to horizon "
                                 f"{SECURE_HORIZON_MAX:,} (a plan names at most that many users of a secure array); "
                                 f"got {self.horizon:,}")
        return self

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label.split("@")[0]  # "anytime-lazy-ucb@distributed" is an anytime-lazy-ucb
