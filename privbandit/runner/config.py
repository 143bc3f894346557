"""Experiment files, for every family: TOML, validated by the family's pydantic model,
overridable with ``--set dotted.name=value``.

Every experiment file names its ``family`` (files without one belong to the distributed-DP MAB
family, the first one built) and shares the top-level fields ``horizon``, ``seed``, ``epsilon``, so
``--set horizon=1000000`` works on all of them. Algorithms are tables under
``[algorithms.<label>]``; the label is the name used in results, and ``algorithm`` (inferred from a
label that is itself an algorithm name) says which one it is.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_FAMILY = "distributed-dp-mab"
# An algorithm label names results (curves.csv columns, rounds.csv rows, plots, the dashboard's
# legend) and travels in every task's control message: letters or digits (any script) first, then
# those, spaces and _ . , @ = + % - (the files' own labels: "dp rho=0.2, 20% drop", "hybrid@r+1"),
# at most 64. Nothing a browser or a shell would read as markup or syntax (issue #32 item 6: a
# label "<img src=x onerror=…>" ran as script in the dashboard's legend).
LABEL_PATTERN = r"[^\W_][\w .,@=+%-]{0,63}"
LABEL_RE = re.compile(LABEL_PATTERN)
LABEL_RULE = "letters or digits first, then letters, digits, spaces and _ . , @ = + % -, at most 64 characters"


class ConfigError(ValueError):
    """A bad experiment file or override; the message names the field and the allowed values."""


class StrictModel(BaseModel):
    """Every experiment file's tables, in every family: unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ExperimentFile(StrictModel):
    """What every family's experiment file shares: the fields below (a family declares its own
    ``family``, ``name``, ``horizon`` with its bounds, ``delta`` and world), and its
    ``[algorithms.<label>]`` tables, at least one, where a table without ``algorithm`` takes the
    kind its label names (:meth:`label_kind`)."""

    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    epsilon: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    runs: Annotated[int, Field(ge=1, le=10_000)] = 1
    checkpoints: Annotated[int, Field(ge=4, le=100_000)] = 240

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

    @field_validator("algorithms", mode="before", check_fields=False)
    @classmethod
    def _labels(cls, algos: Any):
        for label in algos if isinstance(algos, dict) else ():
            if not isinstance(label, str) or LABEL_RE.fullmatch(label) is None:
                raise ValueError(f"the label {label!r} is not allowed: an algorithm label must match "
                                 f"{LABEL_PATTERN} ({LABEL_RULE})")
        return algos

    @model_validator(mode="after")
    def _nonempty(self):
        if not self.algorithms:
            raise ValueError("algorithms: at least one [algorithms.<label>] table is required")
        return self


# --- loading and overriding ------------------------------------------------------------------


DEMO_FILE = "demo.toml"  # package data beside this module (pyproject.toml), the same TOML as experiments/demo.toml


def demo_experiment():
    """The demo's experiment file as package data (:mod:`importlib.resources`), so ``privbandit
    demo`` runs from an installed wheel, in any directory: a context manager giving its path, on
    disk for as long as the demo runs (a file extracted from a zipped install is removed after).
    Raises :class:`ConfigError` when the package was installed without it."""
    from contextlib import contextmanager
    from importlib.resources import as_file, files

    resource = files("privbandit.runner") / DEMO_FILE
    if not resource.is_file():
        raise ConfigError(f"the demo experiment {DEMO_FILE} is not installed with privbandit (package data of "
                          f"privbandit.runner): reinstall privbandit, or run an experiment file with privbandit run")

    @contextmanager
    def path():
        with as_file(resource) as found:
            yield Path(found)

    return path()


def parse_value(text: str) -> Any:
    """A ``--set`` value: any TOML value (``10``, ``0.5``, ``true``, ``[0.1, 0.2]``, ``"x"``);
    anything that is not valid TOML is taken as a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def key_and_value(assignment: str) -> tuple[str, str | None]:
    """``KEY=VALUE`` → (KEY, VALUE), split at the first ``=`` outside a quoted part of the key
    (a label may hold ``=``: ``algorithms."dp rho=0.2".epsilon=1``); VALUE is None without one."""
    quote, i = None, 0
    while i < len(assignment):
        ch = assignment[i]
        if quote is None and ch == "=":
            return assignment[:i].strip(), assignment[i + 1:]
        if quote == '"' and ch == "\\":
            i += 1  # TOML: a backslash escapes the next character within "…", never within '…'
        elif quote is None and ch in "\"'":
            quote = ch
        elif ch == quote:
            quote = None
        i += 1
    return assignment.strip(), None


def split_assignment(assignment: str, option: str = "--set") -> tuple[list[str], str]:
    """``KEY=VALUE`` → (the key's parts, the value's text). The key is split as TOML splits a dotted
    key, so a part written quoted, as the experiment files write a label holding characters other
    than ``A-Za-z0-9_-``, is one part whatever it holds (``algorithms."anytime-lazy-ucb@secagg".
    intermediary=secagg``, ``algorithms."v1.2".epsilon=1``); an unquoted key is split at its dots
    (``algorithms.dp@r+1.epsilon=1`` too, which TOML itself would refuse). Raises
    :class:`ConfigError` naming the option and the assignment."""
    key, text = key_and_value(assignment)
    if text is None or not key:
        raise ConfigError(f"{option} {assignment!r}: expected key=value, e.g. {option} horizon=1000000")
    if '"' not in key and "'" not in key:
        return [part.strip() for part in key.split(".")], text
    try:
        node = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{option} {key}: not a valid dotted key ({exc}); quote a part as TOML does, e.g. "
                          f"{option} 'algorithms.\"my label\".epsilon=1'") from None
    parts = []
    while isinstance(node, dict):  # one key at every level: the path the dotted key names
        (part, node), = node.items()
        parts.append(part)
    return parts, text


def apply_override(data: dict, assignment: str) -> None:
    """Apply one ``--set KEY=VALUE`` to an experiment's data (:func:`split_assignment`,
    :func:`parse_value`)."""
    parts, text = split_assignment(assignment)
    *parents, leaf = parts
    key = ".".join(parts)
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


def _unwrap(annotation) -> Any:
    """Through Optional and Annotated to the type itself."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            annotation = next((a for a in typing.get_args(annotation) if a is not type(None)), annotation)
        elif origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        else:
            return annotation


def _model_at(model, loc: tuple) -> Any:
    """The pydantic model at ``loc`` inside ``model``: fields by name, a dict's key (an algorithm
    label) skipped; None where the path leaves the models."""
    parts = list(loc)
    while parts:
        fields = getattr(model, "model_fields", None)
        if fields is None or parts[0] not in fields:
            return None
        model = _unwrap(fields[parts.pop(0)].annotation)
        if typing.get_origin(model) is dict:
            model = _unwrap(typing.get_args(model)[1])
            if parts:
                parts.pop(0)
    return model


def field_choices(model, loc: tuple) -> list[str]:
    """The Literal values the field at ``loc`` of an experiment model allows (a dict's key, such as
    an algorithm label, is skipped: ``("algorithms", "algorithm")``); [] if it is not a Literal."""
    field = getattr(_model_at(model, loc[:-1]), "model_fields", {}).get(loc[-1])
    annotation = None if field is None else _unwrap(field.annotation)
    return [str(v) for v in typing.get_args(annotation)] if typing.get_origin(annotation) is typing.Literal else []


def _closest(word: str, choices: list[str]) -> str | None:
    """The choice a misspelling most likely meant (case aside: 'DP-SE' means 'dp-se'), or None."""
    lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.6)
    return lower[close[0]] if close else None


def _hint(e: dict, model) -> str:
    """Did-you-mean for a misspelt field or choice (an algorithm, a preset, a kind); the choices
    for an algorithm a label does not imply."""
    loc = tuple(p for p in e["loc"] if not str(p).startswith("function-"))
    if model is None or not loc:
        return ""
    if e["type"] == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        names = list(getattr(owner, "model_fields", {}))
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
        return f"; did you mean {close[0]!r}?" if close else (f"; known: {', '.join(names)}" if names else "")
    if e["type"] == "literal_error" and isinstance(e.get("input"), str):
        close = _closest(e["input"], field_choices(model, loc))
        return f"; did you mean {close!r}?" if close else ""
    if e["type"] == "missing" and loc[-1] == "algorithm" and len(loc) == 3 and loc[0] == "algorithms":
        choices = field_choices(model, loc)
        if choices:
            close = _closest(str(loc[1]), choices)
            near = f" (did you mean {close!r}?)" if close else ""
            return (f"; the label {loc[1]!r} names no algorithm{near}, so set algorithm = one of "
                    f"{', '.join(choices)} (or name the table after one)")
    return ""


def _describe(err: ValidationError, model=None) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-"))
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  {loc or '<top level>'}: {e['msg']}{shown}{_hint(e, model)}")
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
        beside = path.with_suffix(".toml")
        hint = (f" (a results directory's config.json is for reading; run {beside}, which it holds beside it)"
                if path.suffix == ".json" and beside.is_file() else "")
        raise ConfigError(f"{path}: not valid TOML: {exc}{hint}") from None
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
        raise ConfigError(f"{path}: invalid experiment\n{_describe(exc, model)}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def family_of(data: dict, path: str | Path = "<experiment>") -> str:
    """The family an experiment file's data belongs to (default: the distributed-DP MAB family)."""
    from privbandit import registry

    name = data.get("family", DEFAULT_FAMILY)
    if not isinstance(name, str) or name not in registry.family_names():
        raise ConfigError(f"{path}: family = {name!r} is not one of {', '.join(registry.family_names())}")
    return name


def load(path: str | Path, overrides: list[str] = ()):
    """An experiment file, read, overridden and validated by its family: (family, config)."""
    return load_data(read_experiment_data(path, overrides), path)


def load_data(data: dict, path: str | Path = "<experiment>"):
    """An experiment's data (a parsed file, overrides applied), validated by its family; relative
    paths in it are relative to ``path``'s directory."""
    from privbandit import registry

    fam = registry.family(family_of(data, path))
    try:
        return fam, fam.load(data, str(path))
    except ValidationError as exc:
        raise ConfigError(f"{path}: invalid experiment\n{_describe(exc, fam.experiment_model)}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
