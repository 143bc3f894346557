"""Is the trust model in force on this broker? A probe run before any party starts.

The trust model is only as real as the broker's permissions (issue #21): a Mosquitto with
``allow_anonymous true`` and no ACL hands every report, user ids included, to anyone who subscribes
to ``#``. So before a session on a broker the project did not configure itself, :func:`probe` asks
the broker what it actually does:

1. It connects an anonymous client and, with each role's credentials it was given, one client per
   role (clean sessions, client ids outside the run's ``<run>-<party>`` form).
2. Every client subscribes to one *canary* topic per topic class of the run (``plan``,
   ``control``, ``report/<intermediary>/probe``, ``release/…``, ``relay/…``, ``metrics/<role>/probe``;
   the list is :func:`canary_topics`), and to the run's whole tree ``pb/<run>/#``. A refused
   subscription (SUBACK ≥ 0x80: Mosquitto's dynamic-security plugin, the embedded broker) means
   that client cannot read the topic.
3. For each canary topic, an account that may write it (:func:`privbandit.services.acl.allowed`;
   the anonymous client when no such account was given) publishes a canary at QoS 0 and not
   retained, so that no offline persistent session queues it and no later subscriber gets it.
4. It waits until every canary has reached every client whose role may read it (the routing works),
   then :data:`GRACE_S` more for deliveries to the others; Mosquitto's ``acl_file`` grants every
   SUBSCRIBE and drops forbidden messages at delivery, so only a delivery proves a leak.

A canary delivered to a client whose role may not read it (and anything delivered to the anonymous
client) is a leak: :class:`ProbeResult` lists them by who read what. A canary that reached nobody
proves nothing (its writer may be refused): it is listed as unverified. :func:`check_broker` turns
the result into the session's ``broker.acl`` record ("enforced" or "insecure") or refuses the
broker with :class:`BrokerInsecure`. Where the probe falls short: docs/distributed.md, "External
brokers".
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiomqtt

from privbandit.services import acl
from privbandit.services.acl import Role
from privbandit.services.bus import BusSettings, tls_failure

ANONYMOUS = "anonymous"
CONNECT_TIMEOUT_S = 5.0
# Canaries must reach someone within this; a canary that reached nobody is unverified.
PROBE_WAIT_S = 5.0
# After every canary reached the clients that may read it: the broker delivers one PUBLISH to all
# its subscribers in one pass, so a forbidden delivery arrives within milliseconds of the allowed ones.
GRACE_S = 0.25
PAYLOAD = b"privbandit broker probe "  # + a nonce; a party that ever got one counts it as not-msgpack


class BrokerUnusable(ConnectionError):
    """The probe could not talk to the broker: unreachable, TLS refused, credentials refused."""


class BrokerInsecure(RuntimeError):
    """The broker lets someone read what the trust model denies them (or could not be verified)."""

    def __init__(self, message: str, result: ProbeResult):
        super().__init__(message)
        self.result = result


@dataclass
class ProbeResult:
    url: str
    run_id: str
    accounts: list[str]  # who connected: "anonymous" and the roles
    refused: list[str]  # who the broker refused at CONNECT (the anonymous client, on a broker with accounts)
    readable: dict[str, list[str]] = field(default_factory=dict)  # who → canary topics it read and may not
    unverified: list[str] = field(default_factory=list)  # canaries that reached nobody
    skipped: list[str] = field(default_factory=list)  # canaries nobody here may publish (no account given)
    elapsed_s: float = 0.0

    @property
    def anonymous(self) -> bool:
        """Did the broker accept a client without username and password?"""
        return ANONYMOUS in self.accounts

    @property
    def enforced(self) -> bool:
        return not self.readable and not self.unverified

    def describe(self) -> str:
        """What was readable by whom, one clause per account: ``anonymous read plans, reports
        (aggregator, shuffler), …``; topics are under ``pb/<run>/``."""
        parts = [f"{who} read {_classes(topics)}" for who, topics in self.readable.items()]
        if self.unverified:
            parts.append(f"unverified, a canary that reached no client at all: {_classes(self.unverified)}")
        return "; ".join(parts) or "nothing readable that the ACL denies"


_PLURAL = {"plan": "plans", "report": "reports", "release": "releases", "relay": "relays"}


def _classes(topics: list[str]) -> str:
    """``pb/r/report/aggregator/probe``, ``pb/r/report/shuffler/probe`` → ``reports (aggregator, shuffler)``."""
    groups: dict[str, list[str]] = {}
    for t in topics:
        levels = t.split("/")[2:]  # pb/<run>/<class>[/<owner>/probe]
        kind = _PLURAL.get(levels[0], levels[0])
        groups.setdefault(kind, []).extend(levels[1:2])
    return ", ".join(f"{k} ({', '.join(v)})" if v else k for k, v in groups.items())


def canary_topics(run_id: str, instances=()) -> list[str]:
    """One topic per topic class of the run (package docstring of :mod:`privbandit.services.acl`),
    per intermediary (the roles' and the run's ``instances``: ``shuffler-1`` …)."""
    topics = [acl.plan_topic(run_id), acl.control_topic(run_id)]
    for i in (*acl.INTERMEDIARIES, *instances):
        topics += [acl.report_topic(run_id, i, "probe"), acl.release_topic(run_id, i, "probe"),
                   acl.relay_topic(run_id, i, "probe")]
    return topics + [acl.metrics_topic(run_id, role, "probe") for role in (*Role, *instances)]


def may_read(who: str, topic: str, run_id: str, instances=()) -> bool:
    return who != ANONYMOUS and acl.allowed(who, "read", topic, run_id, instances)


async def _connect(settings: BusSettings, who: str, password: str | None, nonce: str) -> aiomqtt.Client | None:
    """A connected client for ``who`` (None: the broker refused the anonymous client)."""
    account = settings.model_copy(update={"username": None if who == ANONYMOUS else who, "password": password})
    client = account.client(f"pbprobe-{nonce}-{who}", True, timeout=CONNECT_TIMEOUT_S)
    try:
        await asyncio.wait_for(client.__aenter__(), CONNECT_TIMEOUT_S)
        return client
    except aiomqtt.MqttCodeError as exc:  # a CONNACK refusal: bad credentials, or no anonymous clients
        if who == ANONYMOUS:
            return None
        raise BrokerUnusable(f"the broker at {settings.broker_url} refused the {who} account's credentials "
                             f"({exc})") from None
    except (aiomqtt.MqttError, asyncio.TimeoutError) as exc:
        if (tls := tls_failure(exc)) is not None:
            where = f"CA file {settings.ca_file}" if settings.ca_file else "the system's CAs"
            raise BrokerUnusable(f"TLS with the broker at {settings.broker_url} failed ({where}): {tls}") from None
        raise BrokerUnusable(f"cannot reach the broker at {settings.broker_url}: "
                             f"{exc or 'no CONNACK within %g s' % CONNECT_TIMEOUT_S}") from None


async def probe(settings: BusSettings, run_id: str, passwords: Mapping[str, str] | None = None) -> ProbeResult:
    """Probe the broker of ``settings`` (URL and TLS files; its username is ignored) for run
    ``run_id`` with an anonymous client and one client per account in ``passwords`` (the roles, and
    intermediary instances such as ``shuffler-2``, whose topics are probed too)."""
    acl.validate_run_id(run_id)
    start = time.monotonic()
    nonce = secrets.token_hex(4)
    accounts = {(r if acl.is_instance(r) else str(acl.account_role(r))): pw for r, pw in (passwords or {}).items()}
    instances = acl.validate_instances([a for a in accounts if acl.is_instance(a)])
    topics = canary_topics(run_id, instances)
    wanted = {ANONYMOUS: None} | accounts
    clients: dict[str, aiomqtt.Client] = {}
    refused: list[str] = []
    received: dict[str, set[str]] = {t: set() for t in topics}
    listeners: list[asyncio.Task] = []
    try:
        for who, password in wanted.items():
            client = await _connect(settings, who, password, nonce)
            if client is None:
                refused.append(who)
            else:
                clients[who] = client
        readers: dict[str, set[str]] = {t: set() for t in topics}  # who holds a granted subscription
        for who, client in clients.items():
            # The run's whole tree too: a broker that checks only the filter at SUBSCRIBE might
            # refuse each topic and grant the wildcard (what arrives through it is judged per topic).
            codes = await client.subscribe([(t, 0) for t in topics] + [(f"pb/{run_id}/#", 0)],
                                           timeout=CONNECT_TIMEOUT_S)
            for t, code in zip(topics, codes):
                if getattr(code, "value", code) < 0x80:
                    readers[t].add(who)

            async def listen(who=who, client=client):
                with contextlib.suppress(aiomqtt.MqttError):  # a dropped client reads nothing more
                    async for message in client.messages:
                        if isinstance(message.payload, bytes) and message.payload.endswith(nonce.encode()):
                            received.setdefault(message.topic.value, set()).add(who)

            listeners.append(asyncio.create_task(listen()))
        published, skipped = [], []
        for t in topics:
            writer = next((w for w in clients if w != ANONYMOUS and acl.allowed(w, "write", t, run_id, instances)),
                          ANONYMOUS if ANONYMOUS in clients else None)
            if writer is None:
                skipped.append(t)
                continue
            await clients[writer].publish(t, PAYLOAD + nonce.encode(), qos=0, retain=False)
            published.append(t)
        allowed_readers = {t: {w for w in readers[t] if may_read(w, t, run_id, instances)} for t in published}
        deadline = time.monotonic() + PROBE_WAIT_S
        while time.monotonic() < deadline and not all(
                received[t] >= allowed_readers[t] and received[t] for t in published):
            await asyncio.sleep(0.01)
        await asyncio.sleep(GRACE_S)
    finally:
        for task in listeners:
            task.cancel()
        for client in clients.values():
            with contextlib.suppress(Exception):
                await client.__aexit__(None, None, None)
    readable: dict[str, list[str]] = {}
    for t in topics:
        for who in sorted(received.get(t, ()), key=list(wanted).index):
            if not may_read(who, t, run_id, instances):
                readable.setdefault(who, []).append(t)
    return ProbeResult(settings.broker_url, run_id, list(clients), refused,
                       {w: readable[w] for w in wanted if w in readable},
                       [t for t in published if not received[t]], skipped, time.monotonic() - start)


def probe_broker(settings: BusSettings, run_id: str, passwords: Mapping[str, str] | None = None) -> ProbeResult:
    """:func:`probe`, from synchronous code (the launcher, ``privbandit up``)."""
    return asyncio.run(probe(settings, run_id, passwords))


def check_broker(settings: BusSettings, run_id: str, passwords: Mapping[str, str] | None,
                 insecure: bool = False) -> tuple[str, ProbeResult]:
    """Probe, then ``("enforced", result)`` if nothing the ACL denies was readable and every
    canary was delivered; else raise :class:`BrokerInsecure` saying what was readable by whom,
    unless ``insecure`` (``--insecure-broker``): then ``("insecure", result)``. Raises
    :class:`BrokerUnusable` when the broker cannot be probed at all (that no flag overrides)."""
    result = probe_broker(settings, run_id, passwords)
    if not result.accounts:
        raise BrokerUnusable(f"the broker at {settings.broker_url} refuses anonymous clients and no credentials "
                             f"were given: give each role's password (--credentials FILE or "
                             f"PRIVBANDIT_<ROLE>_PASSWORD)")
    if result.enforced:
        return "enforced", result
    if insecure:
        return "insecure", result
    raise BrokerInsecure(
        f"the broker at {settings.broker_url} does not enforce the trust model for run {run_id}: "
        f"{result.describe()} (topics under pb/{run_id}/). Refusing to start any party: give the broker the "
        f"project's accounts and ACL (privbandit broker-config) and the parties their credentials "
        f"(--credentials), or pass --insecure-broker to run anyway (summary.json then records broker.acl = \"insecure\")", result)
