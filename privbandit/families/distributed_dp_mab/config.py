"""The distributed-DP MAB family's experiment files: their tables, presets and validation.

Algorithms are tables under ``[algorithms.<label>]``; a label that is itself an algorithm name
(``dist-dp-se``, …) needs no ``algorithm`` field. A preset fills what a table leaves unset
(:func:`resolve_algorithm`). ``delta`` defaults to 1/(10·T): each run protects T users.

Plug-ins (:mod:`privbandit.registry`): a package may register a mechanism,
``distributed-dp-mab.mechanism.<name> = "module:factory"`` (``factory(algorithm_config)`` returns a
:class:`~privbandit.families.distributed_dp_mab.base.Mechanism`), named by ``algorithm = "<name>"``,
and a learner, ``distributed-dp-mab.learner.<name> = "module:factory"`` (``factory(algorithm_config,
n_arms)`` returns a :class:`~privbandit.families.distributed_dp_mab.learners.SuccessiveElimination`),
named by ``learner = "<name>"``. A plug-in's own parameters go in the table's ``options``. The
choices are read from the installed entry points when this module is imported, so they appear in
``privbandit list`` and in the errors like the built-in ones (``examples/mab-plugins``).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from privbandit import registry
from privbandit.datasets.real import BINARY
from privbandit.protocol.primitives.secagg.parameters import ThreatModel, graph_for
from privbandit.runner.config import ConfigError, ExperimentFile, StrictModel

FAMILY_NAME = "distributed-dp-mab"
ELIMINATION = ("dist-dp-se", "dist-rdp-se", "dist-cdp-se", "cdp-se", "ldp-se", "dp-se", "se")
# The standard baselines that decide one user at a time (sequential.py): each user is a release.
SEQUENTIAL = ("ucb1", "thompson", "mt-ucb", "dp-ucb-bound", "dp-ucb", "ldp-ucb")
# Tenenbaum et al.'s shuffle-model arm elimination (shuffle_elimination.py): its own rounds and noise.
SHUFFLE_BASELINES = ("vb-sdp-ae",)
BASELINES = SEQUENTIAL + SHUFFLE_BASELINES
ALGORITHMS = ELIMINATION + BASELINES
MECHANISM_PLUGINS = tuple(sorted(registry.plugins(FAMILY_NAME, "mechanism")))
LEARNER_PLUGINS = tuple(sorted(registry.plugins(FAMILY_NAME, "learner")))
if clash := sorted(set(MECHANISM_PLUGINS) & set(ALGORITHMS)) + [n for n in LEARNER_PLUGINS if n == "auto"]:
    raise registry.RegistryError(f"{FAMILY_NAME} plug-ins may not take a built-in name: {', '.join(clash)}; "
                                 f"rename their entry points")
ALGORITHM_CHOICES = ALGORITHMS + MECHANISM_PLUGINS
LEARNER_CHOICES = ("auto", *LEARNER_PLUGINS)  # auto: successive elimination as the algorithm states it
PRESETS = ("paper", "paper-code")


Probability = Annotated[float, Field(gt=0, le=1)]


class EnvironmentConfig(StrictModel):
    kind: Literal["uniform", "means", "means-file", "bundled"] = "uniform"  # bundled: docs/real-data.md
    arms: Annotated[int, Field(ge=2, le=100_000)] = 10
    low: Annotated[float, Field(ge=0, le=1)] = 0.25
    high: Annotated[float, Field(ge=0, le=1)] = 0.75
    means: list[Annotated[float, Field(ge=0, le=1)]] | None = None
    path: str | None = None
    dataset: Literal[BINARY] = "breast_cancer"  # type: ignore[valid-type]  # kind = "bundled": k-means arms (datasets/real.py)
    reward: Literal["gaussian", "bernoulli", "categorical"] = "gaussian"
    sd: Annotated[float, Field(ge=0, le=10)] = 0.1

    @model_validator(mode="after")
    def _consistent(self):
        if self.kind == "uniform" and not self.low < self.high:
            raise ValueError(f"low={self.low} must be < high={self.high}")
        if self.kind == "means" and (self.means is None or len(self.means) < 2):
            raise ValueError("kind = 'means' needs `means`, a list of at least 2 values in [0, 1]")
        if self.kind == "means-file" and not self.path:
            raise ValueError("kind = 'means-file' needs `path` to a privbandit-arm-means JSON file")
        if self.reward == "categorical" and self.kind not in ("means-file", "bundled"):
            raise ValueError("reward = 'categorical' needs kind = 'means-file' (it carries the levels)")
        return self


ADVERSARY_KINDS = ("max-shift", "out-of-range", "window-edge", "colluders")  # protocol/adversaries
TRAFFIC_ADVERSARY_KINDS = ("replay", "impersonate", "sybil", "flood", "bombs", "volley",
                           "forge", "curious-analyzer")  # services/hostile.py


class AdversaryConfig(StrictModel):
    """Some users of every cohort attack (privbandit/protocol/adversaries, docs/attacks.md)."""

    kind: Literal[ADVERSARY_KINDS]  # type: ignore[valid-type]
    # Exactly ⌊fraction·size⌋ users of every 65,536-user block. Below 1/3 with any dropouts, so a
    # round whose attackers are all rejected still meets the ⌊2n/3⌋ + 1 release threshold.
    fraction: Annotated[float, Field(ge=0, lt=1 / 3)] = 0.05
    # out-of-range: how far beyond [0, 1] the attackers' encoded reward lies, in rewards.
    magnitude: Annotated[float, Field(gt=0, le=1e6)] = 1.0


class SecureAggregationOptions(StrictModel):
    """The threat model ``intermediary = "secagg"`` picks its graph for (docs/secure-aggregation.md;
    protocol/primitives/secagg/parameters.py): at most ``corrupt_fraction`` of a cohort colludes with
    the aggregator (0.05: the setting of Bell et al. 2020's headline result, and the default
    fraction of the simulated colluders), the given dropout rate of it drops out, and the graph's
    degree and threshold keep P[an input leaks] ≤ 2^−secagg_security_bits, P[an honest round
    aborts] ≤ 2^−secagg_failure_bits (fcp's 2⁻⁴⁰ and 2⁻²⁰). Shared by every family whose
    aggregator can run real secure aggregation."""

    secagg_graph: Literal["complete", "sparse"] = "sparse"  # with intermediary = "secagg"
    corrupt_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.05
    secagg_security_bits: Annotated[float, Field(ge=1, le=128)] = 40.0
    secagg_failure_bits: Annotated[float, Field(ge=1, le=128)] = 20.0

    def secagg_threat(self, dropout_rate: float) -> ThreatModel:
        return ThreatModel(self.corrupt_fraction, dropout_rate, self.secagg_security_bits, self.secagg_failure_bits)

    def check_secure_round(self, label: str, rnd) -> None:
        """Raise ValueError unless a secure round (``rnd.secagg`` set) has the graph this table's
        threat model gives (the analyzer chooses it; the users check it). A subclass has
        ``intermediary`` and ``threat_model()``."""
        if rnd.secagg is None:
            return
        if self.intermediary != "secagg" or rnd.secagg != self.secagg_graph:
            raise ValueError(f"round {rnd.id} is a {rnd.secagg} secure round, but {label} here runs "
                             f"intermediary = {self.intermediary!r}, secagg_graph = {self.secagg_graph!r}")
        want = graph_for(self.secagg_graph, rnd.expected, self.threat_model())  # derive() is cached per (n, threat)
        if (rnd.secagg_degree, rnd.secagg_threshold) != (want.k, want.t):
            raise ValueError(f"round {rnd.id}: graph (k, t) = ({rnd.secagg_degree}, {rnd.secagg_threshold}) for "
                             f"n = {rnd.expected}, but this experiment's threat model gives ({want.k}, {want.t})")


class AlgorithmConfig(SecureAggregationOptions):
    algorithm: Literal[ALGORITHM_CHOICES]  # type: ignore[valid-type]
    learner: Literal[LEARNER_CHOICES] = "auto"  # type: ignore[valid-type]
    # A plug-in mechanism's or learner's own parameters (what it reads is its documentation's).
    options: dict[str, float | int | str | bool] = {}
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    batch_growth: Annotated[float, Field(gt=1, le=64)] | None = None
    p: Probability | None = None
    width_multiplier: Annotated[float, Field(gt=0)] = 1.0
    s: Annotated[float, Field(ge=1, le=1e6)] = 10.0
    tau_rule: Literal["sqrt-log", "log"] | None = None
    ldp_c: Annotated[float, Field(gt=0)] = 2.0
    # auto: the mechanism's own (aggregator); shuffler: split-and-mix shares through the shuffler
    # (Theorem 3's route, dist-* only); shuffler-residues: every residue through the shuffler (no proof).
    intermediary: Literal["auto", "shuffler", "shuffler-residues", "secagg"] = "auto"
    # Dist-DP-SE through the split-and-mix shuffler: the noise at Theorem 3's ε′ = ε/2 (the theorem
    # spends the other half on a relaxed secure aggregation's slack), or at the whole ε ("whole":
    # the closeness then costs only δ). ε stays the algorithm's budget either way.
    noise_budget: Literal["theorem-3", "whole"] = "theorem-3"
    # Simulated dropouts: this fraction of every collected cohort never reports. Below 1/3, so the
    # ⌊2n/3⌋ + 1 release threshold always holds for the ideal intermediary.
    dropout_rate: Annotated[float, Field(ge=0, lt=1 / 3)] = 0.0
    # ρ: distributed noise shares calibrated for ⌈(1−ρ)n⌉ survivors (dist-* algorithms only).
    dropout_tolerance: Annotated[float, Field(ge=0, le=0.9)] = 0.0
    # secagg_graph, corrupt_fraction, secagg_security_bits, secagg_failure_bits: the threat model
    # of intermediary = "secagg" (SecureAggregationOptions), with dropout_rate as its dropouts.
    adversary: AdversaryConfig | None = None
    # The clear-text defences (adversaries/defences.py): reject reports outside [−B, g + B] and
    # sum visible reports as bounded integers. Only where someone sees the reports.
    range_check: bool = False
    # With returning users (the experiment's ``returning`` = B > 1), how a user's B releases compose:
    # "rdp" (their Rényi curves, converted once) or "advanced" (each release (ε_i, δ_i)-DP as App. I
    # splits it, advanced composition). returning.py.
    composition: Literal["rdp", "advanced"] = "rdp"

    @model_validator(mode="after")
    def _baselines_run_plain(self):
        if self.algorithm not in BASELINES:
            return self
        fields = {"intermediary": self.intermediary != "auto", "adversary": self.adversary is not None,
                  "dropout_rate": self.dropout_rate > 0, "range_check": self.range_check,
                  "learner": self.learner != "auto"}
        if bad := [name for name, set_ in fields.items() if set_]:
            raise ValueError(f"{', '.join(bad)}: {self.algorithm} is a baseline with its own protocol "
                             f"(docs/baselines.md) and takes none of these; they belong to Algorithm 1's variants")
        return self

    @model_validator(mode="after")
    def _options_only_for_plugins(self):
        if self.options and self.algorithm in ALGORITHMS and self.learner == "auto":
            raise ValueError(f"options: only a plug-in mechanism or learner reads options; {self.algorithm} with "
                             f"learner = 'auto' has none (its parameters are fields of the table)")
        return self

    @model_validator(mode="after")
    def _attackers_and_dropouts_leave_a_release(self):
        if self.adversary is not None and self.dropout_rate + self.adversary.fraction >= 1 / 3:
            raise ValueError(f"dropout_rate + adversary.fraction = {self.dropout_rate + self.adversary.fraction:g} "
                             f"must stay below 1/3 (the ⌊2n/3⌋ + 1 release threshold)")
        return self

    @model_validator(mode="after")
    def _threat_model_covers_the_colluders(self):
        colluders = self.adversary is not None and self.adversary.kind == "colluders"
        if self.intermediary == "secagg" and colluders and self.adversary.fraction > self.corrupt_fraction:
            raise ValueError(f"corrupt_fraction = {self.corrupt_fraction:g} must be at least adversary.fraction = "
                             f"{self.adversary.fraction:g}: the secure-aggregation graph is chosen for at most "
                             f"corrupt_fraction colluding users, and this run simulates more")
        return self

    def threat_model(self) -> ThreatModel:
        """What the secure-aggregation graph withstands (intermediary = "secagg")."""
        return self.secagg_threat(self.dropout_rate)

    @model_validator(mode="after")
    def _range_check_needs_visible_reports(self):
        hidden = self.algorithm.startswith("dist-") and self.intermediary != "shuffler-residues"
        if self.range_check and hidden:
            raise ValueError(f"range_check: under secure aggregation or split-and-mix ({self.algorithm}, intermediary "
                             f"= {self.intermediary!r}) nobody sees a residue to check; it applies to cdp-se, "
                             f"ldp-se, dp-se, se, or intermediary = 'shuffler-residues'")
        return self

    @model_validator(mode="after")
    def _noise_budget_is_theorem_3s(self):
        if self.noise_budget != "theorem-3" and not (self.algorithm == "dist-dp-se" and self.intermediary == "shuffler"):
            raise ValueError(f"noise_budget: only Dist-DP-SE through the split-and-mix shuffler (intermediary = "
                             f"'shuffler') splits its ε as Theorem 3 does; {self.algorithm} with intermediary = "
                             f"{self.intermediary!r} uses its whole ε")
        return self

    @model_validator(mode="after")
    def _split_and_mix_needs_shares(self):
        if self.intermediary == "shuffler" and not self.algorithm.startswith("dist-"):
            raise ValueError(f"intermediary = 'shuffler' splits each user's distributed noise share and residue into "
                             f"split-and-mix shares (dist-dp-se, dist-rdp-se, dist-cdp-se); {self.algorithm} has none: "
                             f"use intermediary = 'shuffler-residues' to shuffle its reports as they are")
        return self

    @model_validator(mode="after")
    def _tolerance_needs_distributed_noise(self):
        if self.dropout_tolerance and not self.algorithm.startswith("dist-"):
            raise ValueError(f"dropout_tolerance applies to distributed noise (dist-dp-se, dist-rdp-se, "
                             f"dist-cdp-se); {self.algorithm} adds none in the users' shares")
        return self


class ExperimentConfig(ExperimentFile):
    family: Literal["distributed-dp-mab"] = "distributed-dp-mab"  # the default family (runner/config.py)
    name: str = "experiment"
    horizon: Annotated[int, Field(ge=2, le=10**10)]
    preset: Literal[PRESETS] = "paper"  # type: ignore[valid-type]
    # None: 1/(10·T), small against 1/N for the N = T users a run protects (privacy.default_delta).
    delta: Annotated[float, Field(gt=0, lt=1)] | None = None
    environment: EnvironmentConfig = EnvironmentConfig()
    algorithms: dict[str, AlgorithmConfig]
    # Equal guarantees: solve every algorithm's own ε (its noise parameter) so that each user's
    # guarantee is (epsilon, delta)-DP exactly, instead of giving every algorithm the nominal
    # epsilon (the paper's comparison, where Dist-RDP-SE at ε = 0.5 is (2.42, 10⁻⁶)-DP).
    # An algorithm table that sets its own epsilon is left as it is.
    calibrate: bool = False
    # Hostile client processes a run over MQTT starts next to the parties, one per kind, to attack
    # the session's traffic (services/hostile.py, docs/attacks.md). In-process runs refuse them.
    traffic_adversaries: list[Literal[TRAFFIC_ADVERSARY_KINDS]] = []  # type: ignore[valid-type]
    # Returning users (App. I, Assumption 2): each user takes part in up to this many batches, once
    # per batch; the ledger charges the composition of B releases (returning.py), and calibrate = true
    # solves each round's noise for it. 1: every user is new (the paper's main setting).
    returning: Annotated[int, Field(ge=1, le=10_000)] = 1

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label.lower() if label.lower() in ALGORITHM_CHOICES else None

    @model_validator(mode="after")
    def _returning_users_where_built(self):
        if self.returning == 1:
            return self
        for label, a in self.algorithms.items():
            name = a.algorithm
            if name in SEQUENTIAL or name in MECHANISM_PLUGINS or a.learner != "auto":
                raise ValueError(f"algorithms.{label}: returning users (returning = {self.returning}) are built for "
                                 f"Algorithm 1's variants and vb-sdp-ae; {name} makes one release per user")
            if a.intermediary in ("shuffler", "shuffler-residues"):
                raise ValueError(f"algorithms.{label}: returning users are built for the aggregator's releases; "
                                 f"intermediary = {a.intermediary!r} is not")
            if name in SHUFFLE_BASELINES and a.composition != "advanced":
                raise ValueError(f"algorithms.{label}: vb-sdp-ae's counts have an (ε, δ) statement and no Rényi curve; "
                                 f"with returning users set composition = 'advanced' (App. I's route for it)")
        return self

    @model_validator(mode="after")
    def _each_traffic_adversary_once(self):
        each_traffic_adversary_once(self.traffic_adversaries)
        return self


def each_traffic_adversary_once(kinds: list[str]) -> None:
    """One hostile process per kind: a kind listed twice is refused (every family's file)."""
    twice = sorted({k for k in kinds if kinds.count(k) > 1})
    if twice:
        raise ValueError(f"traffic_adversaries: {', '.join(twice)} listed more than once (one process per kind)")


# --- presets ---------------------------------------------------------------------------------


def theorem3_noise(a: AlgorithmConfig) -> bool:
    """Does ``a`` put its noise at Theorem 3's ε′ = ε/2 (Dist-DP-SE through the split-and-mix shuffler)?"""
    return a.algorithm == "dist-dp-se" and a.intermediary == "shuffler" and a.noise_budget == "theorem-3"


def resolve_algorithm(config: ExperimentConfig, label: str) -> AlgorithmConfig:
    """Fill an algorithm's unset fields from the experiment's preset.

    - ``paper``: the theorems as stated: l(b) = 2^b, p = 1/T, Skellam τ with sqrt(log(2/p)).
    - ``paper-code``: the constants of the authors' experiments (spec §5.6): l(b) = 4^b for
      Algorithm 1's variants, p = 0.1, Skellam τ with log(2/p). Their sampler defects are *not*
      reproduced: the Pólya scale is β/(1−β), and DP-SE draws one Laplace per arm.

    Dist-DP-SE through the split-and-mix shuffler under ``paper`` with ``noise_budget =
    "theorem-3"`` (the default): τ at Theorem 3's p′ = 1/(2T); the mechanism puts its noise at
    ε′ = ε/2 (:func:`~.family.build_mechanism`; the other ε/2 is Theorem 3's 2ε̃ for a relaxed secure
    aggregation; split-and-mix is not one, so the ledger states what it does prove: (ε/2, δ), see
    docs/shuffle-summation.md). A ``p`` the table sets is used as it is.
    """
    algo = config.algorithms[label]
    code = config.preset == "paper-code"
    theorem3 = not code and theorem3_noise(algo)
    fill = {
        "epsilon": config.epsilon,
        "batch_growth": 4.0 if code else 2.0,
        "p": 0.1 if code else 1.0 / ((2 if theorem3 else 1) * config.horizon),
        "tau_rule": "log" if code else "sqrt-log",
    }
    update = {k: v for k, v in fill.items() if getattr(algo, k) is None}
    resolved = algo.model_copy(update=update)
    if not math.isfinite(resolved.epsilon):
        raise ConfigError(f"algorithms.{label}.epsilon must be finite")
    return resolved
