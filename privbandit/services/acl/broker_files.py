"""The broker files of a run: Mosquitto's acl and password files, its dynamic-security config, and
the credentials each role reads; the only I/O of the package."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from privbandit.services.acl.passwords import PASSWORD_RE, _b64, _parse_hash, hash_password
from privbandit.services.acl.rules import acl_rules
from privbandit.services.acl.topics import Role, account_role, is_instance, password_env, validate_instances, validate_run_id

# Mosquitto's default (1000) silently drops QoS 1 messages queued for a slow or reconnecting
# persistent session beyond that count; a round of reports must not be lost that way.
MAX_QUEUED_MESSAGES = 100_000
# The largest MQTT packet a broker of the project accepts: the codec refuses a payload over 8 MiB
# (codec.MAX_MESSAGE_BYTES) anyway, so anything larger is junk that would only cost the broker
# memory (issue #20 item 10: 100 MB payloads were accepted); 128 KiB more leaves room for the topic
# (at most 64 KiB) and the headers. Mosquitto disconnects a client that sends a larger packet.
MAX_PACKET_BYTES = 8 * 2**20 + 2**17
# What a subscriber may have queued, in bytes, besides the count above (Mosquitto's
# ``max_queued_bytes``; the embedded broker's MAX_QUEUED_BYTES is the same figure).
MAX_QUEUED_BYTES = 256 * 2**20
# Connections a broker of the project accepts in all (Mosquitto's and NATS's ``max_connections``):
# a session needs a few dozen; past this a flood of connections is refused, not served.
MAX_CONNECTIONS = 1024


@dataclass(frozen=True)
class PublishBudget:
    """What each connection of an account may publish (issue #32 item 3): token buckets of
    ``bytes_per_s`` (holding at most ``burst_bytes``) and ``messages_per_s`` (``burst_messages``).
    A connection past either waits before its next PUBLISH is read (TCP back-pressure): nothing is
    dropped, the sender is slowed, and every other connection is served as before. ``connections``:
    how many connections the account may hold at once, so that opening more does not buy more."""

    bytes_per_s: float
    burst_bytes: int
    messages_per_s: float
    burst_messages: int
    connections: int

    def __post_init__(self):
        if not (self.bytes_per_s > 0 and self.messages_per_s > 0 and self.burst_bytes >= MAX_PACKET_BYTES
                and self.burst_messages >= 1 and self.connections >= 1):
            raise ValueError(f"{self}: rates must be > 0, the byte burst at least one packet "
                             f"({MAX_PACKET_BYTES} bytes), the message burst and connections at least 1")


# The users' account is the one every fleet holds, so the one an attacker is likeliest to hold.
# Each of its connections may publish 16 MiB/s (64 MiB at once) and 1,000 messages a second (10,000
# at once): an honest fleet at T = 10⁸ sends about 12 MB/s in messages of under 1 MB
# (docs/performance.md), so it never waits. 64 connections: a fleet per connection, with room.
# Every other account is one party (or one of k shufflers), trusted with its own topics: no budget.
PUBLISH_BUDGETS: dict[str, PublishBudget] = {
    Role.USERS.value: PublishBudget(16 * 2**20, 64 * 2**20, 1_000, 10_000, 64),
}


# ---------------------------------------------------------------------------------------------
# rendering and writing the broker files


def render_budget_lines(budget_plugin: Path | None, budgets: Mapping[str, PublishBudget] = PUBLISH_BUDGETS) -> list[str]:
    """The mosquitto.conf lines loading ``budget_plugin.c`` (compiled) with ``budgets``, or, for
    None, a comment saying that this Mosquitto budgets no account."""
    if budget_plugin is None:
        return ["# no per-account publish budget: no budget plugin given (issue #32 item 3; docs/attacks.md)"]
    from privbandit.services import codec  # the parties' unpacker bounds (codec imports no acl)

    lines = ["# each connection of these accounts: a publish budget; past it, a PUBLISH is dropped (issue #32);",
             "# so is one the parties' unpacker would refuse as over-limit (codec.unpack's bounds)",
             f"plugin {budget_plugin}"]
    for account, b in budgets.items():
        lines.append(f"plugin_opt_budget_{account} bytes_per_s={float(b.bytes_per_s)!r},burst_bytes={b.burst_bytes},"
                     f"messages_per_s={float(b.messages_per_s)!r},burst_messages={b.burst_messages},"
                     f"connections={b.connections}")
        lines.append(f"plugin_opt_limits_{account} container_items={codec.MAX_CONTAINER_ITEMS},items={codec.MAX_ITEMS},"
                     f"containers={codec.MAX_CONTAINERS},str_bytes={codec.MAX_STR_BYTES}")
    return lines


def render_acl_file(run_id: str, instances=()) -> str:
    lines = [
        f"# privbandit ACL for run {run_id} (generated; Mosquitto acl_file syntax).",
        "# Default deny: a user may do only what its lines grant. Mosquitto 2.0 checks 'read' when it",
        "# delivers each message (not at SUBSCRIBE) and 'write' when it accepts a PUBLISH; 'deny'",
        "# lines win over both.",
    ]
    for role, rules in acl_rules(run_id, instances).items():
        lines += ["", f"user {role}"]
        lines += [f"topic deny {p}" for p in rules.deny]
        lines += [f"topic read {p}" for p in rules.read if p not in rules.write]
        lines += [f"topic write {p}" for p in rules.write if p not in rules.read]
        lines += [f"topic readwrite {p}" for p in rules.read if p in rules.write]
    return "\n".join(lines) + "\n"


def render_password_file(hashes: Mapping[Role | str, str]) -> str:
    return "".join(f"{role}:{h}\n" for role, h in hashes.items())


def render_dynsec_config(run_id: str, hashes: Mapping[Role | str, str]) -> dict:
    """The same users and rules for Mosquitto's dynamic-security plugin (JSON document); the
    accounts are those of ``hashes`` (the roles, and any intermediary instances)."""
    roles, clients = [], []
    by_name = {str(a): h for a, h in hashes.items()}
    instances = [a for a in by_name if is_instance(a)]
    for role, rules in acl_rules(run_id, instances).items():
        role = str(role)
        acls = []
        for pattern in rules.deny:  # higher priority is checked first
            for acltype in ("publishClientSend", "publishClientReceive", "subscribePattern"):
                acls.append({"acltype": acltype, "topic": pattern, "priority": 10, "allow": False})
        for pattern in rules.read:
            acls.append({"acltype": "subscribePattern", "topic": pattern, "priority": 0, "allow": True})
            acls.append({"acltype": "publishClientReceive", "topic": pattern, "priority": 0, "allow": True})
        for pattern in rules.write:
            acls.append({"acltype": "publishClientSend", "topic": pattern, "priority": 0, "allow": True})
        roles.append({"rolename": role, "acls": acls})
        iterations, salt, digest = _parse_hash(by_name[role])
        clients.append({
            "username": role,
            "textname": f"privbandit {role}",
            "password": _b64(digest),
            "salt": _b64(salt),
            "iterations": iterations,
            "roles": [{"rolename": role}],
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
    passwords: dict[Role | str, str] = field(repr=False)  # Role keys, and an instance's name (``shuffler-2``)

    def password(self, role: Role | str) -> str:
        return self.passwords[_account(role)]

    @property
    def instances(self) -> tuple[str, ...]:
        """The intermediary instance accounts of the run (``shuffler-1`` …), besides the roles."""
        return tuple(a for a in self.passwords if is_instance(a))


def _account(name: object, field: str = "account") -> Role | str:
    """A role as its :class:`Role`, an intermediary instance as its name."""
    return name if is_instance(name) else account_role(name, field=field)


def check_passwords(passwords: object, instances=()) -> dict[Role | str, str]:
    """Every account's password: the roles', the instances' (``instances``, and any instance
    ``passwords`` names); an account without a given password gets a random one."""
    if passwords is None:
        passwords = {}
    if not isinstance(passwords, Mapping):
        raise ValueError(f"passwords must be a mapping role -> password or None, got {type(passwords).__name__}")
    out: dict[Role | str, str] = {}
    for key, value in passwords.items():
        role = _account(key, field="passwords key")
        if not isinstance(value, str) or not PASSWORD_RE.fullmatch(value):
            raise ValueError(
                f"passwords[{str(role)!r}] must be 1-1024 characters from [A-Za-z0-9_.~+/=@%:,-] "
                "(it is written unquoted to credentials.env)"
            )
        out[role] = value
    accounts = (*Role, *validate_instances((*instances, *(a for a in out if is_instance(a)))))
    return {a: out.get(a) or secrets.token_urlsafe(24) for a in accounts}


def write_role_credentials(files: BrokerFiles, role: Role | str, directory: Path | str) -> Path:
    """``directory/credentials.env`` holding ``role``'s password alone (mode 0600): what a party of
    that role mounts, so that one compromised party learns no other role's password (the full
    ``credentials.env`` stays with the broker's files)."""
    role = _account(role, field="role")
    directory = Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "credentials.env"
    write_with_mode(path, f"# privbandit broker credentials of role {role} for run {files.run_id}: keep secret\n"
                 f"{password_env(role)}={files.password(role)}\n", 0o600)
    return path


def _owner_name() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def write_with_mode(path: Path, text: str, mode: int) -> None:
    """Write ``text`` to ``path`` with permissions ``mode`` (0o600 for anything secret), new or
    replaced."""
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
    plugin_here: bool = True,
    budget_plugin: Path | str | None = None,
    publish_budgets: Mapping[str, PublishBudget] = PUBLISH_BUDGETS,
    tls_cert: Path | str | None = None,
    tls_key: Path | str | None = None,
    client_ca: Path | str | None = None,
    instances=(),
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
    ``plugin_here=False``: ``dynsec_plugin`` is an absolute path where the broker runs (another
    image: docker-compose.yml's config step), written as given, not looked for here.

    ``instances`` (and any ``passwords`` key naming one): intermediary instance accounts beside the
    roles, ``shuffler-1`` … ``shuffler-k`` (:func:`~.rules.role_topics`), each with its own password
    (``PRIVBANDIT_SHUFFLER_1_PASSWORD``) and its own rules.

    ``budget_plugin``: the compiled ``budget_plugin.c``
    (:func:`~privbandit.services.mosquitto_process.build_budget_plugin`), loaded with one
    ``plugin_opt_budget_<account>`` line per ``publish_budgets`` entry (default
    :data:`PUBLISH_BUDGETS`, the embedded broker's), so that Mosquitto
    enforces the embedded broker's per-connection publish budgets (refusing, not holding back, what
    exceeds them). None: no per-account budget (the conf says so). With ``plugin_here=False`` it is
    an absolute path where the broker runs, written as given.

    Mosquitto started as root drops to the user named by ``user``; the conf names the owner of the
    files, so the 0600 files stay readable to the broker.

    ``tls_cert`` and ``tls_key`` (PEM) make the listener TLS-only (clients use ``mqtts://``);
    ``client_ca`` also requires every client to present a certificate that CA signed. The broker's
    accounts and ACL are unchanged: the certificate authenticates the connection, not the role.
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
        # (elsewhere, the broker refuses to start without it)
        if plugin_here or plugin is None or not plugin.is_absolute():
            if plugin is None or not plugin.is_file():
                raise ValueError(
                    f"dynsec_plugin: Mosquitto's mosquitto_dynamic_security.so not found "
                    f"({dynsec_plugin or 'searched ' + ', '.join(_DYNSEC_CANDIDATES)})"
                )
            plugin = plugin.resolve()
    elif dynsec_plugin is not None:
        raise ValueError("dynsec_plugin is only meaningful with backend='dynsec'")
    if budget_plugin is not None:
        if not isinstance(budget_plugin, (str, Path)) or not Path(budget_plugin).is_absolute():
            raise ValueError(f"budget_plugin must be an absolute path, got {budget_plugin!r}")
        budget_plugin = Path(budget_plugin)
        if plugin_here and not budget_plugin.is_file():
            raise ValueError(f"budget_plugin {str(budget_plugin)!r} is not a file (build it with "
                             "mosquitto_process.build_budget_plugin)")
    if not isinstance(publish_budgets, Mapping) or not all(
            isinstance(b, PublishBudget) and _account(a, field="publish_budgets key") for a, b in publish_budgets.items()):
        raise ValueError(f"publish_budgets must map accounts to PublishBudget, got {publish_budgets!r}")
    if log_file is not None:
        if not isinstance(log_file, (str, Path)) or str(log_file) == "" or any(c in str(log_file) for c in "\n\r"):
            raise ValueError(f"log_file must be a path, got {log_file!r}")
        log_file = Path(log_file).expanduser().resolve()
    tls: dict[str, Path] = {}
    for name, value in (("tls_cert", tls_cert), ("tls_key", tls_key), ("client_ca", client_ca)):
        if value is not None:
            if not isinstance(value, (str, Path)) or not Path(value).expanduser().is_file():
                raise ValueError(f"{name} must be a readable PEM file, got {value!r}")
            tls[name] = Path(value).expanduser().resolve()
    if tls and not ("tls_cert" in tls and "tls_key" in tls):
        raise ValueError("tls_cert and tls_key go together (client_ca needs both)")
    for path_ in (directory, log_file, plugin, budget_plugin, *tls.values()):
        if path_ is not None and any(c in str(path_) for c in "\n\r"):
            raise ValueError(f"path {str(path_)!r} contains a line break")
    secrets_by_role = check_passwords(passwords, validate_instances(instances))

    directory.mkdir(parents=True, exist_ok=True)
    conf, passwd, acl = directory / "mosquitto.conf", directory / "passwd", directory / "acl"
    credentials = directory / "credentials.env"
    dynsec = directory / "dynamic-security.json" if backend == "dynsec" else None

    hashes = {role: hash_password(pw) for role, pw in secrets_by_role.items()}
    write_with_mode(passwd, render_password_file(hashes), 0o600)
    write_with_mode(acl, render_acl_file(run_id, [a for a in secrets_by_role if is_instance(a)]), 0o644)
    write_with_mode(
        credentials,
        f"# privbandit broker credentials for run {run_id}: keep secret\n"
        + "".join(f"{password_env(role)}={pw}\n" for role, pw in secrets_by_role.items()),
        0o600,
    )
    if dynsec is not None:
        write_with_mode(dynsec, json.dumps(render_dynsec_config(run_id, hashes), indent=2) + "\n", 0o600)

    lines = [
        f"# privbandit broker for run {run_id} (generated). Start with: mosquitto -c {conf}",
        "per_listener_settings false",
        f"listener {port} {host}",
    ]
    if tls:
        lines += [f"certfile {tls['tls_cert']}", f"keyfile {tls['tls_key']}"]
        if "client_ca" in tls:
            lines += [f"cafile {tls['client_ca']}", "require_certificate true"]
    lines += ["allow_anonymous false"]
    if backend == "acl_file":
        lines += [f"password_file {passwd}", f"acl_file {acl}"]
    else:
        lines += [f"plugin {plugin}", f"plugin_opt_config_file {dynsec}"]
    lines += render_budget_lines(budget_plugin, publish_budgets)
    lines += [
        "persistence false",
        f"max_queued_messages {MAX_QUEUED_MESSAGES}",
        f"max_queued_bytes {MAX_QUEUED_BYTES}",
        f"max_packet_size {MAX_PACKET_BYTES}",
        "# connections, all accounts together (each account's: the budget plugin above, if loaded)",
        f"max_connections {MAX_CONNECTIONS}",
        "# no party retains a message; a retained one would reach every later subscriber (#20)",
        "retain_available false",
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
    write_with_mode(conf, "\n".join(lines) + "\n", 0o644)

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
