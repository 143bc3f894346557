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

# The i-th of several intermediaries of one role, each its own party with its own broker account
# (``shuffler-2``: the concurrent-shuffle family's level-2 shuffler). Its rules are its role's, with
# its own name where the role's stands, so ``shuffler-1`` can neither read ``shuffler-2``'s reports
# nor publish its releases. The index starts at 1 and has at most three digits.
MAX_INSTANCE = 999
INSTANCE_RE = re.compile(r"(aggregator|shuffler)-([1-9][0-9]{0,2})")


def is_instance(name: object) -> bool:
    return isinstance(name, str) and INSTANCE_RE.fullmatch(name) is not None


def account_role(name: object, *, field: str = "account") -> Role:
    """The role an account name has: a role's own name, or an intermediary instance's role."""
    if is_instance(name):
        return Role(INSTANCE_RE.fullmatch(name).group(1))
    try:
        return _role(name, name=field)
    except ValueError:
        raise ValueError(f"{field} must be one of {[r.value for r in Role]} or <aggregator|shuffler>-<1..{MAX_INSTANCE}>, "
                         f"got {name!r}") from None


def validate_instances(instances: object) -> tuple[str, ...]:
    """A run's intermediary instance accounts (``shuffler-1``, …), checked, deduplicated, sorted."""
    if isinstance(instances, str) or not all(is_instance(i) for i in instances):
        raise ValueError(f"instances must be names <aggregator|shuffler>-<1..{MAX_INSTANCE}>, got {instances!r}")
    return tuple(sorted(set(instances)))


def password_env(account: Role | str) -> str:
    """The environment variable holding an account's password: ``PRIVBANDIT_SHUFFLER_2_PASSWORD``."""
    name = account.value if isinstance(account, Role) else account
    account_role(name)
    return f"PRIVBANDIT_{name.upper().replace('-', '_')}_PASSWORD"

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
    role = account_role(name_, field="intermediary") if is_instance(name_) else _role(name_, name="intermediary")
    if role not in INTERMEDIARIES:
        raise ValueError(f"intermediary must be one of {[r.value for r in INTERMEDIARIES]}, got {name_!r}")
    return role


def _owner(name_: object) -> str:
    """An intermediary's topic level: its role's name, or its instance name (``shuffler-2``)."""
    role = _intermediary(name_)
    return name_ if is_instance(name_) else role.value

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
    return f"pb/{validate_run_id(run_id)}/report/{_owner(intermediary)}{_suffix(sub)}"

def release_topic(run_id: str, intermediary: Role | str, *sub: str) -> str:
    return f"pb/{validate_run_id(run_id)}/release/{_owner(intermediary)}{_suffix(sub)}"

def relay_topic(run_id: str, intermediary: Role | str, *sub: str) -> str:
    return f"pb/{validate_run_id(run_id)}/relay/{_owner(intermediary)}{_suffix(sub)}"

def metrics_topic(run_id: str, role: Role | str, *sub: str) -> str:
    owner = role if is_instance(role) else _role(role).value
    return f"pb/{validate_run_id(run_id)}/metrics/{owner}{_suffix(sub)}"
