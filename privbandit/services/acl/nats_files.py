"""The run's accounts and ACLs as a NATS cluster's configuration (``nats-server`` with its MQTT
listener and JetStream): the broker of ``privbandit cluster`` (docs/cluster.md).

The rules are :func:`~.rules.acl_rules`'s, translated, never restated: every MQTT pattern of a
role becomes the NATS subjects the server matches for it (NATS maps the MQTT topic ``a/b`` to the
subject ``a.b``, ``+`` to ``*``, ``#`` to ``>``; an MQTT ``x/#`` also matches ``x`` itself, so it
becomes both ``x`` and ``x.>``). ``read`` patterns are the user's ``subscribe`` allow list,
``write`` its ``publish`` allow list, ``deny`` both deny lists (deny wins, as in Mosquitto).

How NATS enforces them (measured against nats-server 2.9, ``tests/services/test_cluster.py``):

- a SUBSCRIBE the allow list does not cover is refused (SUBACK 0x80), like Mosquitto's
  dynamic-security plugin; a wildcard SUBSCRIBE that could match a denied subject is granted but
  the denied messages are dropped at delivery;
- a PUBLISH the user may not send is dropped (its PUBACK is still sent: the publisher learns
  nothing), like Mosquitto;
- QoS 1 subscriptions are JetStream consumers whose deliveries travel on the internal subjects
  ``$MQTT.sub.<id>``: every account may subscribe there. That is safe only because the accounts
  may log in over MQTT alone (``allowed_connection_types``): NATS refuses an MQTT SUBSCRIBE to a
  ``$MQTT/…`` topic, and a NATS-protocol client with a role's password is refused at CONNECT.

Passwords are written in plain text into the node files (mode 0600, like ``credentials.env``):
NATS accepts only bcrypt hashes, and the project has no bcrypt dependency.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from privbandit.services.acl.broker_files import MAX_CONNECTIONS, MAX_PACKET_BYTES, check_passwords, write_with_mode
from privbandit.services.acl.rules import acl_rules, is_valid_topic_filter
from privbandit.services.acl.topics import Role, is_instance, password_env, validate_instances, validate_run_id

# What QoS 1 needs besides the run's topics (the module docstring): JetStream delivers to the
# session's consumer on these subjects.
QOS1_DELIVERY = "$MQTT.sub.>"
CLUSTER_NAME = "privbandit"
# nats-server 2.9's MQTT settings a cluster may be given besides ``listen`` and ``stream_replicas``
# (the benchmark varies them: docs/cluster.md, "What it costs"); any other key is refused here
# rather than by the server at start-up, where it would be one line in a node's log.
MQTT_OPTIONS = frozenset({"consumer_replicas", "consumer_memory_storage", "max_ack_pending", "ack_wait"})


def nats_subjects(pattern: str) -> tuple[str, ...]:
    """The NATS subjects matching what the MQTT filter ``pattern`` matches: ``pb/r/report/aggregator/#``
    → ``pb.r.report.aggregator`` and ``pb.r.report.aggregator.>``. Levels must be NATS tokens
    (no '.', no whitespace, not empty): the project's topics are."""
    if not is_valid_topic_filter(pattern):
        raise ValueError(f"pattern must be an MQTT topic filter, got {pattern!r}")
    levels = pattern.split("/")
    for level in levels:
        if not level or "." in level or any(c.isspace() for c in level) or level.startswith("$"):
            raise ValueError(f"pattern {pattern!r}: level {level!r} has no NATS subject form")
    mapped = ["*" if lv == "+" else ">" if lv == "#" else lv for lv in levels]
    if mapped[-1] == ">":
        parent = mapped[:-1]
        return (".".join(parent), ".".join(mapped)) if parent else (">",)
    return (".".join(mapped),)


def _subjects(patterns: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(s for p in patterns for s in nats_subjects(p)))


def nats_permissions(run_id: str, instances: Iterable[str] = ()) -> dict[str, dict]:
    """Every account's NATS ``permissions`` map, from :func:`~.rules.acl_rules`."""
    out = {}
    for account, rules in acl_rules(run_id, instances).items():
        deny = _subjects(rules.deny)
        publish: dict = {"allow": _subjects(rules.write)}
        subscribe: dict = {"allow": [*_subjects(rules.read), QOS1_DELIVERY]}
        if deny:
            publish["deny"] = subscribe["deny"] = deny
        out[str(account)] = {"publish": publish, "subscribe": subscribe}
    return out


@dataclass(frozen=True)
class NatsNode:
    """One node's addresses: NATS clients (``client_port``, refused to every account), MQTT
    (``mqtt_port``) and the cluster's routes (``cluster_port``), all on ``host``."""

    name: str
    host: str
    client_port: int
    mqtt_port: int
    cluster_port: int

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.mqtt_port}"

    @property
    def route(self) -> str:
        return f"nats-route://{self.host}:{self.cluster_port}"


@dataclass(frozen=True)
class ClusterFiles:
    """What :func:`write_nats_cluster_config` wrote (paths absolute)."""

    directory: Path
    confs: tuple[Path, ...]
    credentials: Path
    run_id: str
    nodes: tuple[NatsNode, ...]
    passwords: dict[Role | str, str] = field(repr=False)

    def password(self, account: Role | str) -> str:
        return self.passwords[account if is_instance(account) else Role(str(account))]


def jetstream_dir(directory: Path, node: NatsNode) -> Path:
    """Where ``node`` keeps its JetStream store (sessions, queued QoS 1 messages)."""
    return Path(directory) / f"{node.name}.jetstream"


def render_nats_conf(node: NatsNode, nodes: Sequence[NatsNode], run_id: str, passwords: Mapping[Role | str, str],
                     store_dir: Path, *, stream_replicas: int | None = None,
                     mqtt_options: Mapping | None = None) -> str:
    """One node's ``nats-server`` configuration (JSON is valid NATS config syntax). ``mqtt_options``:
    more settings of its ``mqtt`` block, keys from :data:`MQTT_OPTIONS`."""
    unknown = set(mqtt_options or ()) - MQTT_OPTIONS
    if unknown:
        raise ValueError(f"mqtt_options: unknown {sorted(unknown)}; known: {sorted(MQTT_OPTIONS)}")
    instances = [str(a) for a in passwords if is_instance(a)]
    permissions = nats_permissions(run_id, instances)
    users = [{"user": str(a), "password": pw, "permissions": permissions[str(a)],
              "allowed_connection_types": ["MQTT"]} for a, pw in passwords.items()]
    mqtt: dict = {"listen": f"{node.host}:{node.mqtt_port}"}
    if stream_replicas is not None:
        mqtt["stream_replicas"] = stream_replicas
    mqtt.update(mqtt_options or {})
    conf = {
        "server_name": node.name,
        "listen": f"{node.host}:{node.client_port}",
        # the largest message a party of the project sends, as Mosquitto's max_packet_size
        "max_payload": MAX_PACKET_BYTES,
        # NATS has no per-account publish rate either (issue #32 item 3; accounts' ``limits`` bound
        # only connections and payloads, and every role shares one account here): the number of
        # connections, all accounts together, as Mosquitto's
        "max_connections": MAX_CONNECTIONS,
        "jetstream": {"store_dir": str(store_dir)},
        "mqtt": mqtt,
        "authorization": {"users": users},
    }
    if len(nodes) > 1:
        conf["cluster"] = {"name": CLUSTER_NAME, "listen": f"{node.host}:{node.cluster_port}",
                           "routes": [n.route for n in nodes if n is not node]}
    return f"# privbandit NATS node {node.name} for run {run_id} (generated; holds passwords)\n" + \
        json.dumps(conf, indent=2) + "\n"


def write_nats_cluster_config(directory: Path | str, run_id: str, nodes: Sequence[NatsNode],
                              passwords: Mapping[Role | str, str] | None = None, *, instances=(),
                              stream_replicas: int | None = None, mqtt_options: Mapping | None = None,
                              store: Path | str | None = None) -> ClusterFiles:
    """Write ``<node>.conf`` (mode 0600) per node and ``credentials.env`` (0600, as
    :func:`~.broker_files.write_broker_config` writes it) into ``directory``; each node's JetStream
    store is :func:`jetstream_dir` of ``store`` (default ``directory``). Accounts missing from
    ``passwords`` get a random password. ``mqtt_options``: as for :func:`render_nats_conf`."""
    directory = Path(directory).expanduser().resolve()
    validate_run_id(run_id)
    if not nodes:
        raise ValueError("nodes: at least one node")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"nodes: names must be distinct, got {names}")
    secrets_by_account = check_passwords(passwords, validate_instances(instances))
    directory.mkdir(parents=True, exist_ok=True)
    store = directory if store is None else Path(store).expanduser().resolve()
    confs = []
    for node in nodes:
        conf = directory / f"{node.name}.conf"
        write_with_mode(conf, render_nats_conf(node, nodes, run_id, secrets_by_account, jetstream_dir(store, node),
                                               stream_replicas=stream_replicas, mqtt_options=mqtt_options), 0o600)
        confs.append(conf)
    credentials = directory / "credentials.env"
    write_with_mode(credentials, f"# privbandit broker credentials for run {run_id}: keep secret\n"
           + "".join(f"{password_env(a)}={pw}\n" for a, pw in secrets_by_account.items()), 0o600)
    return ClusterFiles(directory, tuple(confs), credentials, run_id, tuple(nodes), secrets_by_account)
