"""Roles (one broker user each) and the run's topic names (see the package docstring's tree)."""

from __future__ import annotations

import enum
import re

RUN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

class Role(str, enum.Enum):
    """One broker user per role; the value is the broker username."""

    ANALYZER = "analyzer"
    AGGREGATOR = "aggregator"
    SHUFFLER = "shuffler"
    USERS = "users"
    OBSERVER = "observer"
    LAUNCHER = "launcher"

    def __str__(self) -> str:
        return self.value

INTERMEDIARIES: tuple[Role, ...] = (Role.AGGREGATOR, Role.SHUFFLER)

# ---------------------------------------------------------------------------------------------
# validation and topic names

def validate_run_id(run_id: object, *, name: str = "run_id") -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise ValueError(f"{name} must be 1-64 characters from [A-Za-z0-9_-], got {run_id!r}")
    return run_id

def _role(role: object, *, name: str = "role") -> Role:
    if isinstance(role, Role):
        return role
    try:
        return Role(role)
    except ValueError:
        raise ValueError(f"{name} must be one of {[r.value for r in Role]}, got {role!r}") from None

def _intermediary(name_: object) -> Role:
    role = _role(name_, name="intermediary")
    if role not in INTERMEDIARIES:
        raise ValueError(f"intermediary must be one of {[r.value for r in INTERMEDIARIES]}, got {name_!r}")
    return role

def _suffix(parts: tuple[str, ...]) -> str:
    for part in parts:
        if not isinstance(part, str) or not part or "/" in part or "+" in part or "#" in part or "\0" in part:
            raise ValueError(f"topic level must be a non-empty string without '/', '+', '#', got {part!r}")
    return "".join("/" + p for p in parts)

def plan_topic(run_id: str) -> str:
    return f"pb/{validate_run_id(run_id)}/plan"

def control_topic(run_id: str) -> str:
    return f"pb/{validate_run_id(run_id)}/control"

def report_topic(run_id: str, intermediary: Role | str, *sub: str) -> str:
    return f"pb/{validate_run_id(run_id)}/report/{_intermediary(intermediary).value}{_suffix(sub)}"

def release_topic(run_id: str, intermediary: Role | str, *sub: str) -> str:
    return f"pb/{validate_run_id(run_id)}/release/{_intermediary(intermediary).value}{_suffix(sub)}"

def relay_topic(run_id: str, intermediary: Role | str, *sub: str) -> str:
    return f"pb/{validate_run_id(run_id)}/relay/{_intermediary(intermediary).value}{_suffix(sub)}"

def metrics_topic(run_id: str, role: Role | str, *sub: str) -> str:
    return f"pb/{validate_run_id(run_id)}/metrics/{_role(role).value}{_suffix(sub)}"
