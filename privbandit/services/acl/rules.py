"""Who may read and write what: the trust model as topic patterns per role, and MQTT filter
matching.

Wildcard subscriptions — what "read" means for a topic *filter*
---------------------------------------------------------------
:func:`allowed` answers ``read`` for a filter with *coverage*: the filter is allowed when every
topic it can match is readable, i.e. one read pattern covers it level by level (a literal level is
covered by the same literal, ``+`` or ``#``; a ``+`` level only by ``+`` or ``#``; a ``#`` level
only by ``#``). So ``pb/<run>/#`` or ``pb/+/report/aggregator`` are refused to every role that may
not read everything they match. For a concrete topic this is plain MQTT matching. This is exactly
what Mosquitto's dynamic-security plugin does with ``subscribePattern`` ACLs and what the embedded
broker does at SUBSCRIBE time (both verified against the brokers in ``tests/services``).

Mosquitto's classic ``acl_file`` is different, and weaker at SUBSCRIBE time: Mosquitto 2.0 never
checks an ``acl_file`` at SUBSCRIBE (``security_default.c``: "FIXME - implement ACL subscription
strings"); it grants every subscription (SUBACK success, even for ``#``) and instead checks
``topic read`` against the concrete topic of each message it would deliver, silently dropping the
ones the role may not read. The confidentiality guarantee is the same — the analyzer never
*receives* a report — but a misconfigured party is not told at SUBSCRIBE. Choose
``backend="dynsec"`` to have Mosquitto refuse the SUBSCRIBE itself (SUBACK 0x87 / 0x80).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from privbandit.services.acl.topics import INTERMEDIARIES, Role, account_role, is_instance, validate_instances, validate_run_id

MAX_TOPIC_BYTES = 65535


@dataclass(frozen=True)
class RoleTopics:
    """A role's topic patterns (MQTT wildcards allowed) for one run.

    ``deny`` patterns take precedence over ``read`` and ``write`` (Mosquitto's ``topic deny``).
    """

    read: tuple[str, ...]
    write: tuple[str, ...]
    deny: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# the rules


def role_topics(role: Role | str, run_id: str, instances: Iterable[str] = ()) -> RoleTopics:
    """The (read, write) topic patterns of account ``role`` in run ``run_id``: the whole trust model.

    ``instances``: the run's intermediary instance accounts (``shuffler-1`` … ``shuffler-k``, see
    :data:`~.topics.INSTANCE_RE`). One has its role's rules under its own name; the users may report
    to each, and may forge none's metrics. ``role`` may be one of them."""
    own = role if is_instance(role) else None
    role = account_role(role, field="role")
    instances = validate_instances(instances)
    if own is not None and own not in instances:
        instances = validate_instances((*instances, own))
    name = own or role.value
    run = f"pb/{validate_run_id(run_id)}"
    plan, control = f"{run}/plan", f"{run}/control"
    own_metrics = f"{run}/metrics/{name}/#"  # '#' also matches metrics/<name> itself
    intermediaries = [i.value for i in INTERMEDIARIES] + list(instances)
    if role is Role.ANALYZER:
        return RoleTopics(read=(f"{run}/release/#", control), write=(plan, own_metrics))
    if role in INTERMEDIARIES:
        return RoleTopics(
            read=(plan, control, f"{run}/report/{name}/#"),
            write=(f"{run}/release/{name}/#", f"{run}/relay/{name}/#", own_metrics),
        )
    if role is Role.USERS:
        reports = tuple(f"{run}/report/{i}/#" for i in intermediaries)
        relays = tuple(f"{run}/relay/{i}/#" for i in intermediaries)
        others = [r.value for r in Role if r is not Role.USERS] + list(instances)
        return RoleTopics(
            read=(plan, control, *relays),
            write=(*reports, f"{run}/metrics/+", own_metrics),
            deny=tuple(p for other in others for p in (f"{run}/metrics/{other}", f"{run}/metrics/{other}/#")),
        )
    if role is Role.OBSERVER:
        return RoleTopics(read=(f"{run}/metrics/#", control), write=(control, own_metrics))
    if role is Role.LAUNCHER:
        return RoleTopics(read=(control,), write=(control, own_metrics))
    raise AssertionError(role)  # pragma: no cover


def acl_rules(run_id: str, instances: Iterable[str] = ()) -> dict[Role | str, RoleTopics]:
    """Every account's rules: the roles, then the intermediary instances (by name)."""
    instances = validate_instances(instances)
    return {account: role_topics(account, run_id, instances) for account in (*Role, *instances)}


def is_valid_topic_filter(topic: object) -> bool:
    """MQTT topic-filter syntax: non-empty, no NUL, '+' and '#' only as whole levels, '#' last."""
    if not isinstance(topic, str) or not topic or "\0" in topic:
        return False
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES:
        return False
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return True


def topic_matches(pattern: str, topic: str) -> bool:
    """Does the MQTT filter ``pattern`` match the concrete topic name ``topic``?"""
    if not is_valid_topic_filter(pattern) or not is_valid_topic_filter(topic):
        return False
    if "+" in topic.split("/") or topic.endswith("#"):
        return False
    return filter_covered_by(topic, pattern)


def filter_covered_by(topic_filter: str, pattern: str) -> bool:
    """Is every topic that ``topic_filter`` matches also matched by ``pattern``?

    For a concrete topic this is ordinary MQTT matching. Topics starting with '$' are never matched
    by a wildcard in the first level (MQTT 4.7.2).
    """
    if not is_valid_topic_filter(topic_filter) or not is_valid_topic_filter(pattern):
        return False
    f, p = topic_filter.split("/"), pattern.split("/")
    if f[0].startswith("$") and p[0] in ("+", "#"):
        return False
    for i, p_level in enumerate(p):
        if p_level == "#":
            return True  # covers the rest, including the parent level itself
        if i >= len(f):
            return False
        f_level = f[i]
        if f_level == "#":
            return False  # '#' in the filter reaches deeper than any non-'#' pattern level
        if p_level == "+":
            continue  # covers a literal level or a '+'
        if f_level != p_level:
            return False  # includes a '+' in the filter against a literal in the pattern
    return len(f) == len(p)


def filters_intersect(a: str, b: str) -> bool:
    """Is there a topic that both filters match?"""
    if not is_valid_topic_filter(a) or not is_valid_topic_filter(b):
        return False
    x, y = a.split("/"), b.split("/")
    for i in range(max(len(x), len(y))):
        xi = x[i] if i < len(x) else None
        yi = y[i] if i < len(y) else None
        if xi == "#" or yi == "#":
            return not (i == 0 and ((xi or "").startswith("$") or (yi or "").startswith("$")))
        if xi is None or yi is None:
            return False
        if xi == "+" or yi == "+":
            if i == 0 and (xi.startswith("$") or yi.startswith("$")):
                return False
            continue
        if xi != yi:
            return False
    return True


def allowed(role: Role | str, action: Literal["read", "write"], topic: str, run_id: str,
            instances: Iterable[str] = ()) -> bool:
    """May ``role`` read (subscribe to / receive) or write (publish) ``topic`` in run ``run_id``?

    ``read`` accepts topic filters and uses coverage (see the module docstring); ``write`` needs a
    concrete topic name (MQTT forbids publishing to a filter). ``deny`` patterns win over both; a
    filter that could match a denied topic is refused. Malformed topics are refused.
    ``instances``: the run's intermediary instance accounts (:func:`role_topics`).
    Raises ValueError for an unknown role or action or an invalid run id.
    """
    account_role(role, field="role")
    if action not in ("read", "write"):
        raise ValueError(f"action must be 'read' or 'write', got {action!r}")
    validate_run_id(run_id)
    if not is_valid_topic_filter(topic):
        return False
    rules = role_topics(role, run_id, instances)
    if any(filters_intersect(topic, pattern) for pattern in rules.deny):
        return False  # a concrete topic: it is denied; a filter: it could match a denied topic
    if action == "write":
        return any(topic_matches(pattern, topic) for pattern in rules.write)
    return any(filter_covered_by(topic, pattern) for pattern in rules.read)


def client_id_allowed(role: Role | str, client_id: str, run_id: str) -> bool:
    """May ``role``'s account connect with ``client_id``?

    A party's client id is ``<run>-<name>`` (fixed across restarts, so the broker keeps its session)
    and ``<name>`` begins with its role (``analyzer``, ``users-3``). An id of that form must name the
    account's own role: otherwise one account could take over another role's party, cutting its
    connection and inheriting its session (issue #20 item 8). Ids outside the run's form name no
    party. Fleets share the ``users`` account, so one fleet's id is not protected from another's.
    An intermediary instance's party (``shuffler-2``, or ``shuffler-2-…``) belongs to that instance's
    account alone: the ``shuffler`` account cannot take it over, nor ``shuffler-1``.
    """
    own = role if is_instance(role) else None
    role = account_role(role, field="role")
    prefix = f"{validate_run_id(run_id)}-"
    if not isinstance(client_id, str) or not client_id.startswith(prefix):
        return True
    name = client_id[len(prefix):]
    head = name.split("-")
    owner = "-".join(head[:2]) if len(head) >= 2 and is_instance("-".join(head[:2])) else None
    if own is not None or owner is not None:
        return own == owner
    return name == role.value or name.startswith(role.value + "-")
