"""Experiment files: TOML, validated by pydantic, overridable with ``--set dotted.name=value``.

Every experiment file shares the top-level fields ``horizon``, ``seed``, ``epsilon``, so
``--set horizon=1000000`` works on all of them. Algorithms are tables under ``[algorithms.<label>]``;
the label is the name used in results, and ``algorithm`` (inferred from a label that is itself an
algorithm name) says which one it is.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ALGORITHMS = ("dist-dp-se", "dist-rdp-se", "dist-cdp-se", "cdp-se", "ldp-se", "dp-se", "se")
PRESETS = ("paper", "paper-code")


class ConfigError(ValueError):
    """A bad experiment file or override; the message names the field and the allowed values."""


class StrictModel(BaseModel):
    """Every experiment file's tables, in every family: unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ExperimentFile(StrictModel):
    """What every family's experiment file shares: its ``[algorithms.<label>]`` tables, at least
    one, where a table without ``algorithm`` takes the kind its label names (:meth:`label_kind`)."""

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        """The algorithm a label names on its own, or None."""
        return None

    @model_validator(mode="before")
    @classmethod
    def _name_algorithms(cls, data: Any):
        algos = data.get("algorithms") if isinstance(data, dict) else None
        if isinstance(algos, dict):
            for label, table in algos.items():
                if isinstance(table, dict) and "algorithm" not in table and cls.label_kind(label) is not None:
                    table["algorithm"] = cls.label_kind(label)
        return data

    @model_validator(mode="after")
    def _nonempty(self):
        if not self.algorithms:
            raise ValueError("algorithms: at least one [algorithms.<label>] table is required")
        return self


Probability = Annotated[float, Field(gt=0, le=1)]


class EnvironmentConfig(StrictModel):
    kind: Literal["uniform", "means", "means-file"] = "uniform"
    arms: Annotated[int, Field(ge=2, le=100_000)] = 10
    low: Annotated[float, Field(ge=0, le=1)] = 0.25
    high: Annotated[float, Field(ge=0, le=1)] = 0.75
    means: list[Annotated[float, Field(ge=0, le=1)]] | None = None
    path: str | None = None
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
        if self.reward == "categorical" and self.kind != "means-file":
            raise ValueError("reward = 'categorical' needs kind = 'means-file' (it carries the levels)")
        return self


ADVERSARY_KINDS = ("max-shift", "out-of-range", "window-edge", "colluders")  # protocol/adversaries
TRAFFIC_ADVERSARY_KINDS = ("replay", "impersonate", "sybil", "flood", "curious-analyzer")  # services/hostile.py


class AdversaryConfig(StrictModel):
    """Some users of every cohort attack (privbandit/protocol/adversaries, docs/attacks.md)."""

    kind: Literal[ADVERSARY_KINDS]  # type: ignore[valid-type]
    # Exactly ⌊fraction·size⌋ users of every 65,536-user block. Below 1/3 with any dropouts, so a
    # round whose attackers are all rejected still meets the ⌊2n/3⌋ + 1 release threshold.
    fraction: Annotated[float, Field(ge=0, lt=1 / 3)] = 0.05
    # out-of-range: how far beyond [0, 1] the attackers' encoded reward lies, in rewards.
    magnitude: Annotated[float, Field(gt=0, le=1e6)] = 1.0


class AlgorithmConfig(StrictModel):
    algorithm: Literal[ALGORITHMS]  # type: ignore[valid-type]
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    batch_growth: Annotated[float, Field(gt=1, le=64)] | None = None
    p: Probability | None = None
    width_multiplier: Annotated[float, Field(gt=0)] = 1.0
    s: Annotated[float, Field(ge=1, le=1e6)] = 10.0
    tau_rule: Literal["sqrt-log", "log"] | None = None
    ldp_c: Annotated[float, Field(gt=0)] = 2.0
    intermediary: Literal["auto", "shuffler", "secagg"] = "auto"  # auto: the mechanism's own (aggregator)
    secagg_graph: Literal["complete", "sparse"] = "sparse"  # with intermediary = "secagg"
    # Simulated dropouts: this fraction of every collected cohort never reports. Below 1/3, so the
    # ⌊2n/3⌋ + 1 release threshold always holds for the ideal intermediary.
    dropout_rate: Annotated[float, Field(ge=0, lt=1 / 3)] = 0.0
    # ρ: distributed noise shares calibrated for ⌈(1−ρ)n⌉ survivors (dist-* algorithms only).
    dropout_tolerance: Annotated[float, Field(ge=0, le=0.9)] = 0.0
    adversary: AdversaryConfig | None = None
    # The clear-text defences (adversaries/defences.py): reject reports outside [−B, g + B] and
    # sum visible reports as bounded integers. Only where someone sees the reports.
    range_check: bool = False

    @model_validator(mode="after")
    def _attackers_and_dropouts_leave_a_release(self):
        if self.adversary is not None and self.dropout_rate + self.adversary.fraction >= 1 / 3:
            raise ValueError(f"dropout_rate + adversary.fraction = {self.dropout_rate + self.adversary.fraction:g} "
                             f"must stay below 1/3 (the ⌊2n/3⌋ + 1 release threshold)")
        return self

    @model_validator(mode="after")
    def _range_check_needs_visible_reports(self):
        hidden = self.algorithm.startswith("dist-") and self.intermediary != "shuffler"
        if self.range_check and hidden:
            raise ValueError(f"range_check: under secure aggregation ({self.algorithm}, intermediary = "
                             f"{self.intermediary!r}) nobody sees a report to check; it applies to cdp-se, "
                             f"ldp-se, dp-se, se, or intermediary = 'shuffler'")
        return self

    @model_validator(mode="after")
    def _tolerance_needs_distributed_noise(self):
        if self.dropout_tolerance and not self.algorithm.startswith("dist-"):
            raise ValueError(f"dropout_tolerance applies to distributed noise (dist-dp-se, dist-rdp-se, "
                             f"dist-cdp-se); {self.algorithm} adds none in the users' shares")
        return self


class ExperimentConfig(ExperimentFile):
    family: Literal["distributed-dp-mab"] = "distributed-dp-mab"  # see experiment/families.py
    name: str = "experiment"
    description: str = ""
    horizon: Annotated[int, Field(ge=2, le=10**10)]
    seed: Annotated[int, Field(ge=0)] = 0
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    runs: Annotated[int, Field(ge=1, le=10_000)] = 1
    preset: Literal[PRESETS] = "paper"  # type: ignore[valid-type]
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-6
    checkpoints: Annotated[int, Field(ge=4, le=100_000)] = 240
    environment: EnvironmentConfig = EnvironmentConfig()
    algorithms: dict[str, AlgorithmConfig]
    # Hostile client processes a run over MQTT starts next to the parties, one per kind, to attack
    # the session's traffic (services/hostile.py, docs/attacks.md). In-process runs refuse them.
    traffic_adversaries: list[Literal[TRAFFIC_ADVERSARY_KINDS]] = []  # type: ignore[valid-type]

    @classmethod
    def label_kind(cls, label: str) -> str | None:
        return label.lower() if label.lower() in ALGORITHMS else None

    @model_validator(mode="after")
    def _each_traffic_adversary_once(self):
        twice = sorted({k for k in self.traffic_adversaries if self.traffic_adversaries.count(k) > 1})
        if twice:
            raise ValueError(f"traffic_adversaries: {', '.join(twice)} listed more than once (one process per kind)")
        return self


# --- loading and overriding ------------------------------------------------------------------


def parse_value(text: str) -> Any:
    """A ``--set`` value: any TOML value (``10``, ``0.5``, ``true``, ``[0.1, 0.2]``, ``"x"``);
    anything that is not valid TOML is taken as a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(data: dict, assignment: str) -> None:
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. --set horizon=1000000")
    *parents, leaf = key.split(".")
    node = data
    for depth, part in enumerate(parents):
        # A missing table is created (validation then names it if it is not a known field);
        # a value that is not a table cannot hold a key.
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parents[: depth + 1])
            raise ConfigError(f"--set {key}: {where!r} is a value, not a table")
        node = child
    node[leaf] = parse_value(text.strip())


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-"))
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  {loc or '<top level>'}: {e['msg']}{shown}")
    return "\n".join(lines)


def read_experiment_data(path: str | Path, overrides: list[str] = ()) -> dict:
    """An experiment file's TOML with the ``--set`` overrides applied, before any validation."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such experiment file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for assignment in overrides:
        apply_override(data, assignment)
    return data


def validate_experiment(model: type[BaseModel], path: str | Path, overrides: list[str] = ()):
    """Read, override and validate an experiment file against ``model`` (any family's config).
    Returns the config and its raw data; every failure is a :class:`ConfigError` naming the field."""
    data = read_experiment_data(path, overrides)
    try:
        return model.model_validate(data), data
    except ValidationError as exc:
        raise ConfigError(f"{path}: invalid experiment\n{_describe(exc)}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def load_experiment(path: str | Path, overrides: list[str] = ()) -> tuple[ExperimentConfig, dict]:
    """Read, override and validate an experiment file. Returns the config and its raw data."""
    path = Path(path)
    config, data = validate_experiment(ExperimentConfig, path, overrides)
    if config.environment.path and not Path(config.environment.path).is_absolute():
        env = config.environment.model_copy(update={"path": str(path.parent / config.environment.path)})
        config = config.model_copy(update={"environment": env})
    return config, data


# --- presets ---------------------------------------------------------------------------------


def resolve_algorithm(config: ExperimentConfig, label: str) -> AlgorithmConfig:
    """Fill an algorithm's unset fields from the experiment's preset.

    - ``paper``: the theorems as stated: l(b) = 2^b, p = 1/T, Skellam τ with sqrt(log(2/p)).
    - ``paper-code``: the constants of the authors' experiments (spec §5.6): l(b) = 4^b for
      Algorithm 1's variants, p = 0.1, Skellam τ with log(2/p). Their sampler defects are *not*
      reproduced: the Pólya scale is β/(1−β), and DP-SE draws one Laplace per arm.
    """
    algo = config.algorithms[label]
    code = config.preset == "paper-code"
    fill = {
        "epsilon": config.epsilon,
        "batch_growth": 4.0 if code else 2.0,
        "p": 0.1 if code else 1.0 / config.horizon,
        "tau_rule": "log" if code else "sqrt-log",
    }
    update = {k: v for k, v in fill.items() if getattr(algo, k) is None}
    resolved = algo.model_copy(update=update)
    if not math.isfinite(resolved.epsilon):
        raise ConfigError(f"algorithms.{label}.epsilon must be finite")
    return resolved
