"""The trust model as broker rules: one broker user per role, per-run topic ACLs.

Pure: no I/O except :func:`write_broker_config`, which writes files. The same rules drive three
enforcers, so they cannot drift apart:

- Mosquitto with ``password_file`` + ``acl_file`` (``backend="acl_file"``, the default);
- Mosquitto with its dynamic-security plugin (``backend="dynsec"``);
- the embedded amqtt broker (:mod:`privbandit.services.embedded_broker`), whose plugins call
  :func:`allowed` and :func:`verify_password` directly.

Topics (``<run>`` matches ``[A-Za-z0-9_-]{1,64}``)::

    pb/<run>/plan                       analyzer → users (intermediaries read it too)
    pb/<run>/report/<intermediary>[/…]  users → that intermediary
    pb/<run>/release/<intermediary>[/…] intermediary → analyzer
    pb/<run>/relay/<intermediary>[/…]   intermediary → users (secure aggregation's key directory,
                                        routed share ciphertexts and survivor set)
    pb/<run>/metrics/<party>[/…]        any party → observer only
    pb/<run>/control                    launcher/observer → everyone

An intermediary owns the sub-tree below its own topic (``report/shuffler/3`` for the third of k
concurrent shufflers hosted by the ``shuffler`` role). A party publishes metrics under its role's
name (``metrics/<role>`` and below). User fleets, many processes sharing the ``users`` account,
may also use any other single-level party name (``metrics/users-3``) except another role's name:
``metrics/<other role>[/…]`` is explicitly denied to them, so a fleet can never forge the
analyzer's, an intermediary's, the observer's or the launcher's metrics. (Fleets share one broker
account, so the broker cannot tell one fleet from another.)

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

import base64
import enum
import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

__all__ = [
    "Role",
    "INTERMEDIARIES",
    "RoleTopics",
    "BrokerFiles",
    "role_topics",
    "acl_rules",
    "allowed",
    "topic_matches",
    "filter_covered_by",
    "filters_intersect",
    "is_valid_topic_filter",
    "validate_run_id",
    "plan_topic",
    "control_topic",
    "report_topic",
    "release_topic",
    "relay_topic",
    "metrics_topic",
    "hash_password",
    "verify_password",
    "read_password_file",
    "render_acl_file",
    "render_password_file",
    "render_dynsec_config",
    "find_dynsec_plugin",
    "write_broker_config",
]

RUN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Passwords end up unquoted in credentials.env (read by shells and docker's env_file alike), so
# they are restricted to characters that need no quoting anywhere. token_urlsafe() fits.
PASSWORD_RE = re.compile(r"[A-Za-z0-9_.~+/=@%:,-]{1,1024}")
# Mosquitto's PBKDF2-SHA512 ("$7$") format: mosquitto_passwd 2.0 uses 101 iterations, a 12-byte
# salt and a 64-byte digest. Mosquitto reads the iteration count from the hash, so more is fine.
PBKDF2_ITERATIONS = 1000
SALT_BYTES = 12
DIGEST_BYTES = 64
MAX_TOPIC_BYTES = 65535
# Mosquitto's default (1000) silently drops QoS 1 messages queued for a slow or reconnecting
# persistent session beyond that count; a round of reports must not be lost that way.
MAX_QUEUED_MESSAGES = 100_000


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


@dataclass(frozen=True)
class RoleTopics:
    """A role's topic patterns (MQTT wildcards allowed) for one run.

    ``deny`` patterns take precedence over ``read`` and ``write`` (Mosquitto's ``topic deny``).
    """

    read: tuple[str, ...]
    write: tuple[str, ...]
    deny: tuple[str, ...] = ()


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


# ---------------------------------------------------------------------------------------------
# the rules


def role_topics(role: Role | str, run_id: str) -> RoleTopics:
    """The (read, write) topic patterns of ``role`` in run ``run_id``: the whole trust model."""
    role = _role(role)
    run = f"pb/{validate_run_id(run_id)}"
    plan, control = f"{run}/plan", f"{run}/control"
    own_metrics = f"{run}/metrics/{role.value}/#"  # '#' also matches metrics/<role> itself
    if role is Role.ANALYZER:
        return RoleTopics(read=(f"{run}/release/#", control), write=(plan, own_metrics))
    if role in INTERMEDIARIES:
        return RoleTopics(
            read=(plan, control, f"{run}/report/{role.value}/#"),
            write=(f"{run}/release/{role.value}/#", f"{run}/relay/{role.value}/#", own_metrics),
        )
    if role is Role.USERS:
        reports = tuple(f"{run}/report/{i.value}/#" for i in INTERMEDIARIES)
        relays = tuple(f"{run}/relay/{i.value}/#" for i in INTERMEDIARIES)
        others = [r.value for r in Role if r is not Role.USERS]
        return RoleTopics(
            read=(plan, control, *relays),
            write=(*reports, f"{run}/metrics/+", own_metrics),
            deny=tuple(p for name in others for p in (f"{run}/metrics/{name}", f"{run}/metrics/{name}/#")),
        )
    if role is Role.OBSERVER:
        return RoleTopics(read=(f"{run}/metrics/#", control), write=(control, own_metrics))
    if role is Role.LAUNCHER:
        return RoleTopics(read=(control,), write=(control, own_metrics))
    raise AssertionError(role)  # pragma: no cover


def acl_rules(run_id: str) -> dict[Role, RoleTopics]:
    return {role: role_topics(role, run_id) for role in Role}


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


def allowed(role: Role | str, action: Literal["read", "write"], topic: str, run_id: str) -> bool:
    """May ``role`` read (subscribe to / receive) or write (publish) ``topic`` in run ``run_id``?

    ``read`` accepts topic filters and uses coverage (see the module docstring); ``write`` needs a
    concrete topic name (MQTT forbids publishing to a filter). ``deny`` patterns win over both; a
    filter that could match a denied topic is refused. Malformed topics are refused.
    Raises ValueError for an unknown role or action or an invalid run id.
    """
    role = _role(role)
    if action not in ("read", "write"):
        raise ValueError(f"action must be 'read' or 'write', got {action!r}")
    validate_run_id(run_id)
    if not is_valid_topic_filter(topic):
        return False
    rules = role_topics(role, run_id)
    if any(filters_intersect(topic, pattern) for pattern in rules.deny):
        return False  # a concrete topic: it is denied; a filter: it could match a denied topic
    if action == "write":
        return any(topic_matches(pattern, topic) for pattern in rules.write)
    return any(filter_covered_by(topic, pattern) for pattern in rules.read)


# ---------------------------------------------------------------------------------------------
# passwords (mosquitto's $7$ PBKDF2-SHA512 format)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """``$7$<iterations>$<b64 salt>$<b64 PBKDF2-HMAC-SHA512>``, as written by mosquitto_passwd 2.x."""
    if not isinstance(password, str) or not password:
        raise ValueError("password must be a non-empty string")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, DIGEST_BYTES)
    return f"$7${iterations}${_b64(salt)}${_b64(digest)}"


def _parse_hash(password_hash: str) -> tuple[int, bytes, bytes]:
    parts = password_hash.split("$")
    if len(parts) != 5 or parts[0] or parts[1] != "7":
        raise ValueError("not a $7$ (PBKDF2-SHA512) password hash")
    iterations = int(parts[2])
    if not 1 <= iterations <= 10_000_000:
        raise ValueError("iteration count out of range")
    return iterations, base64.b64decode(parts[3], validate=True), base64.b64decode(parts[4], validate=True)


def verify_password(password: str | None, password_hash: str) -> bool:
    """Constant-time check of ``password`` against a ``$7$`` hash; False for anything malformed."""
    if not isinstance(password, str) or not password:
        return False
    try:
        iterations, salt, expected = _parse_hash(password_hash)
    except (ValueError, TypeError):
        return False
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, len(expected) or 1)
    return hmac.compare_digest(digest, expected)


def read_password_file(path: Path | str) -> dict[str, str]:
    """``username -> hash`` from a mosquitto password file."""
    users: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        username, sep, password_hash = line.partition(":")
        if not sep or not username:
            raise ValueError(f"{path}: malformed line (expected username:hash)")
        users[username] = password_hash
    return users


# ---------------------------------------------------------------------------------------------
# rendering and writing the broker files


def render_acl_file(run_id: str) -> str:
    lines = [
        f"# privbandit ACL for run {run_id} (generated; Mosquitto acl_file syntax).",
        "# Default deny: a user may do only what its lines grant. Mosquitto 2.0 checks 'read' when it",
        "# delivers each message (not at SUBSCRIBE) and 'write' when it accepts a PUBLISH; 'deny'",
        "# lines win over both.",
    ]
    for role, rules in acl_rules(run_id).items():
        lines += ["", f"user {role.value}"]
        lines += [f"topic deny {p}" for p in rules.deny]
        lines += [f"topic read {p}" for p in rules.read if p not in rules.write]
        lines += [f"topic write {p}" for p in rules.write if p not in rules.read]
        lines += [f"topic readwrite {p}" for p in rules.read if p in rules.write]
    return "\n".join(lines) + "\n"


def render_password_file(hashes: Mapping[Role, str]) -> str:
    return "".join(f"{role.value}:{h}\n" for role, h in hashes.items())


def render_dynsec_config(run_id: str, hashes: Mapping[Role, str]) -> dict:
    """The same users and rules for Mosquitto's dynamic-security plugin (JSON document)."""
    roles, clients = [], []
    for role, rules in acl_rules(run_id).items():
        acls = []
        for pattern in rules.deny:  # higher priority is checked first
            for acltype in ("publishClientSend", "publishClientReceive", "subscribePattern"):
                acls.append({"acltype": acltype, "topic": pattern, "priority": 10, "allow": False})
        for pattern in rules.read:
            acls.append({"acltype": "subscribePattern", "topic": pattern, "priority": 0, "allow": True})
            acls.append({"acltype": "publishClientReceive", "topic": pattern, "priority": 0, "allow": True})
        for pattern in rules.write:
            acls.append({"acltype": "publishClientSend", "topic": pattern, "priority": 0, "allow": True})
        roles.append({"rolename": role.value, "acls": acls})
        iterations, salt, digest = _parse_hash(hashes[role])
        clients.append({
            "username": role.value,
            "textname": f"privbandit {role.value}",
            "password": _b64(digest),
            "salt": _b64(salt),
            "iterations": iterations,
            "roles": [{"rolename": role.value}],
        })
    return {
        "defaultACLAccess": {
            "publishClientSend": False,
            "publishClientReceive": False,
            "subscribe": False,
            "unsubscribe": True,
        },
        "clients": clients,
        "groups": [],
        "roles": roles,
    }


_DYNSEC_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so",
    "/usr/lib/aarch64-linux-gnu/mosquitto_dynamic_security.so",
    "/usr/lib/mosquitto_dynamic_security.so",  # eclipse-mosquitto docker image, Alpine
    "/usr/local/lib/mosquitto_dynamic_security.so",
    "/opt/homebrew/lib/mosquitto_dynamic_security.so",
)


def find_dynsec_plugin() -> Path | None:
    """Where Mosquitto's dynamic-security plugin lives on this host, if anywhere known."""
    for candidate in _DYNSEC_CANDIDATES:
        if Path(candidate).is_file():
            return Path(candidate)
    return None


@dataclass(frozen=True)
class BrokerFiles:
    """What :func:`write_broker_config` wrote (all paths absolute)."""

    directory: Path
    conf: Path
    passwd: Path
    acl: Path
    credentials: Path
    dynsec: Path | None
    run_id: str
    port: int
    host: str
    backend: str
    passwords: dict[Role, str] = field(repr=False)

    def password(self, role: Role | str) -> str:
        return self.passwords[_role(role)]


def _check_passwords(passwords: object) -> dict[Role, str]:
    if passwords is None:
        passwords = {}
    if not isinstance(passwords, Mapping):
        raise ValueError(f"passwords must be a mapping role -> password or None, got {type(passwords).__name__}")
    out: dict[Role, str] = {}
    for key, value in passwords.items():
        role = _role(key, name="passwords key")
        if not isinstance(value, str) or not PASSWORD_RE.fullmatch(value):
            raise ValueError(
                f"passwords[{role.value!r}] must be 1-1024 characters from [A-Za-z0-9_.~+/=@%:,-] "
                "(it is written unquoted to credentials.env)"
            )
        out[role] = value
    # roles without a given password get a random one
    return {role: out.get(role) or secrets.token_urlsafe(24) for role in Role}


def _owner_name() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def _write(path: Path, text: str, mode: int) -> None:
    # create with the final mode, so secrets are never world-readable even briefly
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # an existing file keeps its old mode through O_CREAT: fix it before writing
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_broker_config(
    directory: Path | str,
    run_id: str,
    port: int,
    passwords: Mapping[Role | str, str] | None = None,
    *,
    host: str = "127.0.0.1",
    log_file: Path | str | None = None,
    backend: Literal["acl_file", "dynsec"] = "acl_file",
    dynsec_plugin: Path | str | None = None,
) -> BrokerFiles:
    """Write a Mosquitto configuration enforcing the trust model for run ``run_id``.

    Files in ``directory`` (created if missing): ``mosquitto.conf``, ``passwd`` (``$7$`` hashes,
    mode 0600), ``acl`` (Mosquitto ``acl_file`` syntax), ``credentials.env``
    (``PRIVBANDIT_<ROLE>_PASSWORD=…``, mode 0600) and, for ``backend="dynsec"``,
    ``dynamic-security.json`` (0600). Roles missing from ``passwords`` get a random password.

    ``backend="acl_file"`` (default) uses ``password_file`` + ``acl_file``: portable, but Mosquitto
    grants every SUBSCRIBE and filters at delivery. ``backend="dynsec"`` loads Mosquitto's
    dynamic-security plugin (``dynsec_plugin`` or auto-detected) so forbidden SUBSCRIBEs are
    refused too; ``passwd`` and ``acl`` are still written (the embedded broker reads ``passwd``).

    Mosquitto started as root drops to the user named by ``user``; the conf names the owner of the
    files, so the 0600 files stay readable to the broker.
    """
    if not isinstance(directory, (str, Path)) or str(directory) == "":
        raise ValueError(f"directory must be a path, got {directory!r}")
    directory = Path(directory).expanduser().resolve()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"directory {str(directory)!r} exists and is not a directory")
    validate_run_id(run_id)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
    if not isinstance(host, str) or not host or any(c.isspace() for c in host):
        raise ValueError(f"host must be a non-empty address without spaces, got {host!r}")
    if backend not in ("acl_file", "dynsec"):
        raise ValueError(f"backend must be 'acl_file' or 'dynsec', got {backend!r}")
    plugin: Path | None = None
    if backend == "dynsec":
        plugin = Path(dynsec_plugin) if dynsec_plugin is not None else find_dynsec_plugin()
        if plugin is None or not plugin.is_file():
            raise ValueError(
                f"dynsec_plugin: Mosquitto's mosquitto_dynamic_security.so not found "
                f"({dynsec_plugin or 'searched ' + ', '.join(_DYNSEC_CANDIDATES)})"
            )
        plugin = plugin.resolve()
    elif dynsec_plugin is not None:
        raise ValueError("dynsec_plugin is only meaningful with backend='dynsec'")
    if log_file is not None:
        if not isinstance(log_file, (str, Path)) or str(log_file) == "" or any(c in str(log_file) for c in "\n\r"):
            raise ValueError(f"log_file must be a path, got {log_file!r}")
        log_file = Path(log_file).expanduser().resolve()
    for path_ in (directory, log_file, plugin):
        if path_ is not None and any(c in str(path_) for c in "\n\r"):
            raise ValueError(f"path {str(path_)!r} contains a line break")
    secrets_by_role = _check_passwords(passwords)

    directory.mkdir(parents=True, exist_ok=True)
    conf, passwd, acl = directory / "mosquitto.conf", directory / "passwd", directory / "acl"
    credentials = directory / "credentials.env"
    dynsec = directory / "dynamic-security.json" if backend == "dynsec" else None

    hashes = {role: hash_password(pw) for role, pw in secrets_by_role.items()}
    _write(passwd, render_password_file(hashes), 0o600)
    _write(acl, render_acl_file(run_id), 0o644)
    _write(
        credentials,
        f"# privbandit broker credentials for run {run_id}: keep secret\n"
        + "".join(f"PRIVBANDIT_{role.name}_PASSWORD={pw}\n" for role, pw in secrets_by_role.items()),
        0o600,
    )
    if dynsec is not None:
        _write(dynsec, json.dumps(render_dynsec_config(run_id, hashes), indent=2) + "\n", 0o600)

    lines = [
        f"# privbandit broker for run {run_id} (generated). Start with: mosquitto -c {conf}",
        "per_listener_settings false",
        f"listener {port} {host}",
        "allow_anonymous false",
    ]
    if backend == "acl_file":
        lines += [f"password_file {passwd}", f"acl_file {acl}"]
    else:
        lines += [f"plugin {plugin}", f"plugin_opt_config_file {dynsec}"]
    lines += [
        "persistence false",
        f"max_queued_messages {MAX_QUEUED_MESSAGES}",
        "# without it, Nagle + delayed ACKs add ~40 ms to every small PUBACK/PUBLISH exchange",
        "set_tcp_nodelay true",
    ]
    if log_file is None:
        lines.append("log_dest stderr")
    else:
        lines.append(f"log_dest file {log_file}")
    lines += [f"log_type {kind}" for kind in ("error", "warning", "notice", "information")]
    owner = _owner_name()
    if owner:
        lines += ["# only used when started as root: keep the 0600 files readable", f"user {owner}"]
    _write(conf, "\n".join(lines) + "\n", 0o644)

    return BrokerFiles(
        directory=directory,
        conf=conf,
        passwd=passwd,
        acl=acl,
        credentials=credentials,
        dynsec=dynsec,
        run_id=run_id,
        port=port,
        host=host,
        backend=backend,
        passwords=secrets_by_role,
    )
