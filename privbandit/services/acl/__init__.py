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

An intermediary owns the sub-tree below its own topic. Several intermediaries of one role are
separate accounts named ``<role>-<i>`` (``shuffler-1`` … ``shuffler-k``: the concurrent-shuffle
family's k shufflers), each owning ``report/shuffler-i``, ``release/shuffler-i``,
``relay/shuffler-i`` and ``metrics/shuffler-i``; the rules take the run's instances as an argument,
and the brokers learn them from the accounts they hold (the password file). A party publishes metrics under its role's
name (``metrics/<role>`` and below). User fleets, many processes sharing the ``users`` account,
may also use any other single-level party name (``metrics/users-3``) except another role's name:
``metrics/<other role>[/…]`` is explicitly denied to them, so a fleet can never forge the
analyzer's, an intermediary's, the observer's or the launcher's metrics. (Fleets share one broker
account, so the broker cannot tell one fleet from another.)

The package: :mod:`.topics` (roles and topic names), :mod:`.rules` (who may read and write
what, and MQTT filter matching), :mod:`.passwords` (Mosquitto's ``$7$`` hashes) and
:mod:`.broker_files` (the acl, password and dynamic-security files). Everything public is
re-exported here.
"""

from privbandit.services.acl.broker_files import (
    MAX_CONNECTIONS,
    MAX_PACKET_BYTES,
    MAX_QUEUED_BYTES,
    MAX_QUEUED_MESSAGES,
    PUBLISH_BUDGETS,
    PublishBudget,
    BrokerFiles,
    find_dynsec_plugin,
    render_acl_file,
    render_dynsec_config,
    render_password_file,
    write_broker_config,
    write_role_credentials,
)
from privbandit.services.acl.passwords import PBKDF2_ITERATIONS, hash_password, read_password_file, verify_password
from privbandit.services.acl.rules import (
    MAX_TOPIC_BYTES,
    RoleTopics,
    acl_rules,
    allowed,
    client_id_allowed,
    filter_covered_by,
    filters_intersect,
    is_valid_topic_filter,
    role_topics,
    topic_matches,
)
from privbandit.services.acl.topics import (
    INSTANCE_RE,
    INTERMEDIARIES,
    RUN_ID_RE,
    Role,
    account_role,
    control_topic,
    is_instance,
    metrics_topic,
    password_env,
    plan_topic,
    relay_topic,
    release_topic,
    report_topic,
    validate_instances,
    validate_run_id,
)

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_PACKET_BYTES",
    "MAX_QUEUED_BYTES",
    "MAX_QUEUED_MESSAGES",
    "PUBLISH_BUDGETS",
    "PublishBudget",
    "MAX_TOPIC_BYTES",
    "PBKDF2_ITERATIONS",
    "RUN_ID_RE",
    "Role",
    "INTERMEDIARIES",
    "INSTANCE_RE",
    "account_role",
    "is_instance",
    "password_env",
    "validate_instances",
    "RoleTopics",
    "BrokerFiles",
    "role_topics",
    "acl_rules",
    "allowed",
    "client_id_allowed",
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
    "write_role_credentials",
]
