"""The message bus: aiomqtt, one connection per party, QoS 1, reconnect with backoff.

As small as aiomqtt itself: :func:`connect` yields a :class:`Bus` whose ``publish`` takes a wire
message and whose ``messages()`` yields decoded messages. Undecodable payloads are counted by
reason in ``Bus.rejected`` and skipped; nothing a peer sends can crash a party.

Losing the broker never interrupts a party halfway through a message. ``publish`` puts the
message in the party's :class:`Outbox`, which outlives connections, and sends it; if the broker
does not acknowledge it, the message stays queued, the bus is marked ``lost`` and the handler
runs on to the end, its later messages queued behind the first. The next connection sends the
outbox in order before anything else. Messages paho had already acknowledged to the broker when
the connection dropped are still delivered, since the broker will not send them again. What the
broker itself loses (a SIGKILL before it saved them) the protocol's retries recover:
docs/distributed.md, "Faults and restarts".

Byte accounting: each party counts, per topic class, the payload bytes it sends and receives and
the MQTT wire bytes: the PUBLISH packet (fixed header, remaining-length varint, topic, packet id,
payload; MQTT 3.1.1 framing, which paho uses by default) plus, at QoS 1, the 4-byte PUBACK.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import aiomqtt
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from privbandit.services import codec
from privbandit.services.acl import PublishBudget, is_instance
from privbandit.services.budget import PublishBucket

log = logging.getLogger("privbandit.bus")

QOS = 1  # every topic: a lost plan, report or release would stall or skew a round
PUBACK_BYTES = 4
# paho's client queues are unbounded by default; a flooding peer must not exhaust memory.
MAX_QUEUED_INCOMING = 10_000
# A QoS 1 publish waits this long for its PUBACK while the connection looks alive (a hung broker
# never sends it); a dropped connection fails it at once. The message then waits in the outbox
# for the next connection. A local broker acks an 8 MiB message in ms.
PUBLISH_TIMEOUT_S = 5.0
# A publish that does not wait for its PUBACK (``Bus.publish(wait=False)``) only while fewer than
# this many are in flight and it is small: a fleet sending a large plan's blocks still waits for
# each, so a slow broker holds it back instead of its messages piling up in memory.
PIPELINE_MAX = 32
PIPELINE_MAX_BYTES = 64 * 2**10
PIPELINED = frozenset({"plan", "reports", "truth", "release", "record"})  # a round's chain, by message kind


# A refused message is counted always, and logged at most once per reason in this many seconds
# (with the count so far): a flood must not turn into gigabytes of log.
REJECT_LOG_S = 10.0


class RateLimitedLog:
    """One warning per reason per :data:`REJECT_LOG_S`, carrying the count so far."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger
        self.last: dict[str, float] = {}

    def __call__(self, what: str, reason: str, detail: str, count: int) -> None:
        now = time.monotonic()
        if now - self.last.get(reason, -REJECT_LOG_S) >= REJECT_LOG_S:
            self.last[reason] = now
            self.logger.warning("%s refused a message: %s %s (%d so far)", what, reason, detail[:200], count)


# TCP_NODELAY on every client's socket (paho leaves Nagle's algorithm on): a plan → report →
# release chain of small QoS 1 messages otherwise waits on Nagle against delayed ACKs, ~40 ms a hop
# (benchmarks/bench_latency.py). The broker's end needs the same: the generated Mosquitto config
# says `set_tcp_nodelay true`; asyncio (the embedded broker) sets it by default.
NO_DELAY = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


class BusSettings(BaseSettings):
    """Broker URL, credentials and TLS files, from PRIVBANDIT_* environment variables or the CLI.

    ``mqtts://host[:port]`` (default port 8883) connects over TLS, verifying the broker's
    certificate and host name against ``ca_file`` (default: the system's CAs); ``cert_file`` and
    ``key_file`` are the client certificate and its key, for a broker that requires one. Secrets
    come from the environment or files only: a value on the command line shows in the process list.
    """

    model_config = SettingsConfigDict(env_prefix="PRIVBANDIT_")
    broker_url: str = "mqtt://127.0.0.1:1883"
    username: str | None = None
    password: str | None = None
    run_id: Annotated[str, Field(pattern=codec.RUN_ID_PATTERN)] = "default"
    connect_timeout_s: float = 30.0
    # A credentials.env written by `privbandit broker-config`: the password is looked up there as
    # PRIVBANDIT_<USERNAME>_PASSWORD when PRIVBANDIT_PASSWORD is not set (docker compose uses this).
    credentials_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    # Touched by the party every tick while it is connected: `privbandit health FILE` is its
    # container's healthcheck (docker-compose.yml). A hung party or a lost broker leaves it stale.
    health_file: str | None = None

    def model_post_init(self, _context) -> None:
        if self.password is None and self.credentials_file and self.username:
            key = f"PRIVBANDIT_{self.username.upper()}_PASSWORD"
            found = read_credentials(self.credentials_file).get(self.username.lower())
            if found is None:
                raise ValueError(f"credentials_file {self.credentials_file!r} has no {key}")
            self.password = found

    @property
    def tls(self) -> bool:
        return urlsplit(self.broker_url).scheme == "mqtts"

    def endpoint(self) -> tuple[str, int]:
        parts = urlsplit(self.broker_url)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise ValueError(f"broker_url {self.broker_url!r}: expected mqtt://host:port or mqtts://host:port")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"broker_url {self.broker_url!r}: the port must be in 0..65535") from None
        return parts.hostname, port or (8883 if parts.scheme == "mqtts" else 1883)

    def tls_context(self) -> ssl.SSLContext | None:
        """The client's TLS context for an ``mqtts://`` URL, None for ``mqtt://``. Raises
        ValueError naming the field of a TLS file that cannot be used, or given without mqtts."""
        given = [f for f in ("ca_file", "cert_file", "key_file") if getattr(self, f)]
        if not self.tls:
            if given:
                raise ValueError(f"{', '.join(given)}: only with an mqtts:// broker_url, got {self.broker_url!r}")
            return None
        if self.key_file and not self.cert_file:
            raise ValueError("key_file: given without cert_file (the client certificate it belongs to)")
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"ca_file {self.ca_file!r}: cannot load CA certificates ({exc})") from None
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"cert_file {self.cert_file!r} / key_file {self.key_file!r}: cannot load the "
                                 f"client certificate and key ({exc})") from None
        return context

    def client(self, client_id: str, clean_session: bool, **kwargs) -> aiomqtt.Client:
        """An (unconnected) aiomqtt client for this broker, its account and its TLS settings."""
        host, port = self.endpoint()
        return aiomqtt.Client(host, port, identifier=client_id, clean_session=clean_session,
                              username=self.username, password=self.password, tls_context=self.tls_context(),
                              **{"socket_options": NO_DELAY, **kwargs})


def read_credentials(path: str | Path) -> dict[str, str]:
    """``role -> password`` from a credentials.env (``PRIVBANDIT_<ROLE>_PASSWORD=…`` lines, as
    ``privbandit broker-config`` writes it; ``PRIVBANDIT_SHUFFLER_2_PASSWORD`` is the intermediary
    instance ``shuffler-2``'s). Raises ValueError naming the file."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"credentials_file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"credentials_file {str(path)!r}: not UTF-8 text") from None
    found: dict[str, str] = {}
    for line in lines:
        m = _CREDENTIAL_LINE.fullmatch(line.strip())
        if m:
            name = m[1].lower()
            found.setdefault(name.replace("_", "-") if is_instance(name.replace("_", "-")) else name, m[2].strip())
    return found


_CREDENTIAL_LINE = re.compile(r"PRIVBANDIT_([A-Z0-9_]+)_PASSWORD=(.*)")


def tls_failure(exc: BaseException) -> str | None:
    """What a connection error says about TLS, if it is a TLS failure (a wrong CA, a broker
    that does not speak TLS, a refused client certificate): retrying cannot help."""
    text = str(exc)
    return text if "[SSL" in text or "SSL:" in text or isinstance(exc, ssl.SSLError) else None


def topic(run_id: str, *parts: str) -> str:
    return "/".join(("pb", run_id, *parts))


def topic_class(name: str) -> str:
    """``pb/<run>/report/aggregator`` → ``report``."""
    parts = name.split("/")
    return parts[2] if len(parts) > 2 else "other"


def topic_party(name: str) -> str:
    """``pb/<run>/metrics/users-0`` → ``users-0``, ``pb/<run>/relay/shuffler`` → ``shuffler``: the
    party a topic names (the broker lets only that party's account publish there), or ""."""
    parts = name.split("/")
    return parts[3] if len(parts) > 3 else ""


def _varint_len(n: int) -> int:
    size = 1
    while n >= 128:
        n //= 128
        size += 1
    return size


def publish_wire_bytes(topic_name: str, payload_len: int, qos: int = QOS) -> int:
    """Bytes of one MQTT 3.1.1 PUBLISH carrying the payload, plus its PUBACK at QoS 1."""
    remaining = 2 + len(topic_name.encode()) + (2 if qos else 0) + payload_len
    return 1 + _varint_len(remaining) + remaining + (PUBACK_BYTES if qos else 0)


# Topic classes that name an intermediary (the one a message goes to or comes from): their traffic
# is also counted per intermediary party, so a fleet's cost is known per shuffler of k.
PER_INTERMEDIARY = ("report", "release", "relay")


@dataclass
class Traffic:
    """Bytes and messages one party sent and received, per (direction, topic class); for the
    classes of :data:`PER_INTERMEDIARY` also per intermediary, in ``by_party`` under
    ``<payload|wire|messages>.<direction>.<class>.<intermediary>`` (not in the three totals twice)."""

    payload: Counter = field(default_factory=Counter)
    wire: Counter = field(default_factory=Counter)
    messages: Counter = field(default_factory=Counter)
    by_party: Counter = field(default_factory=Counter)

    def add(self, direction: str, topic_name: str, payload_len: int) -> None:
        kind = topic_class(topic_name)
        key = f"{direction}.{kind}"
        wire = publish_wire_bytes(topic_name, payload_len)
        self.payload[key] += payload_len
        self.wire[key] += wire
        self.messages[key] += 1
        if kind in PER_INTERMEDIARY and (party := topic_party(topic_name)):
            for counter, n in (("payload", payload_len), ("wire", wire), ("messages", 1)):
                self.by_party[f"{counter}.{key}.{party}"] += n

    def as_dict(self) -> dict:
        return {"payload": dict(self.payload), "wire": dict(self.wire), "messages": dict(self.messages),
                "by_party": dict(self.by_party)}

    @classmethod
    def from_dict(cls, d: dict) -> Traffic:
        """The inverse of :meth:`as_dict` (a checkpoint written before ``by_party`` has none)."""
        return cls(*(Counter(d[k]) for k in ("payload", "wire", "messages")), Counter(d.get("by_party", {})))


@dataclass
class Outbox:
    """What a party published and the broker has not acknowledged yet, oldest first, each with the
    Traffic it is counted in once sent. One per party, shared by its successive connections; the
    lock keeps the handler's and the timer's sends in one order."""

    pending: deque = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __len__(self) -> int:
        return len(self.pending)


class MqttCancelled(aiomqtt.MqttError):
    """A publish in flight was cancelled (its party is stopping): it stays in the outbox."""


class Bus:
    def __init__(self, client: aiomqtt.Client, traffic: Traffic, rejected: Counter, outbox: Outbox | None = None,
                 log_rejection=None, pacer: PublishBucket | None = None):
        """``pacer``: this connection's share of its account's publish budget (:mod:`.budget`); each
        publish waits for it before it is queued, so the broker never has to hold back or drop one."""
        self.client = client
        self.pacer = pacer
        self.traffic = traffic
        self.rejected = rejected
        self.outbox = outbox if outbox is not None else Outbox()
        self.log_rejection = log_rejection or RateLimitedLog(log)
        self.lost: aiomqtt.MqttError | None = None  # set when a send failed: this connection is done
        self.inflight: dict[int, asyncio.Future] = {}  # id(outbox entry) → its publish awaiting the PUBACK
        self.paced: set[int] = set()  # id(outbox entry) of those this connection's pacer has counted

    async def publish(self, topic_name: str, msg, wait: bool | None = None) -> None:
        """Queue ``msg`` and send the queue. Never raises for a lost broker: the message waits
        in the outbox for the next connection (the caller's state change is not cut short).

        ``wait``: return once the broker has acknowledged it; by default, for every kind but those
        of a round's chain (:data:`PIPELINED`). Without, return once it is handed to the connection
        (in order after every message sent before it); it stays in the outbox until its PUBACK
        comes, in the background, and a failure marks the bus ``lost`` as a waited one does. A
        sequential learner's chain (plan → truth, report → release → record, plan) then pays the
        broker's hops, not besides a PUBACK round trip for each message every party sends on the
        way (issue #33: five per Hybrid-UCB user). A party still checkpoints only what is at the
        broker or in its outbox, as before; a message in flight when the party dies is what its
        restart recovers anyway (re-announced plans, resends, resyncs), as one published just
        before its death always was."""
        if wait is None:
            wait = msg.kind not in PIPELINED
        entry = (topic_name, codec.encode(msg), self.traffic)
        if self.pacer is not None:
            await self.pacer.spend(publish_wire_bytes(topic_name, len(entry[1])))
            self.paced.add(id(entry))
        self.outbox.pending.append(entry)
        if self.lost is not None:
            return
        if (not wait and not self.outbox.lock.locked() and len(self.inflight) < PIPELINE_MAX
                and len(entry[1]) <= PIPELINE_MAX_BYTES):
            self._start(entry)
            return
        try:
            await self.flush()
        except aiomqtt.MqttError as exc:
            self.mark_lost(exc)

    def _start(self, entry: tuple) -> None:
        """Send ``entry`` on this connection; its PUBACK lands in :meth:`_landed`."""
        # The PUBLISH is handed to the connection now, in the order of the calls: a task that only
        # later started it let a waited publish made after it overtake it on the wire.
        sent = asyncio.ensure_future(self._acknowledged(self._send(entry[0], entry[1])))
        self.inflight[id(entry)] = sent
        sent.add_done_callback(lambda fut, entry=entry: self._landed(entry, fut))

    def _landed(self, entry: tuple, fut: asyncio.Future) -> None:
        self.inflight.pop(id(entry), None)
        exc = MqttCancelled() if fut.cancelled() else fut.exception()
        if exc is None:
            self._done(entry)
        else:  # it stays in the outbox, for the next connection
            self.mark_lost(exc if isinstance(exc, aiomqtt.MqttError) else aiomqtt.MqttError(repr(exc)))

    def _done(self, entry: tuple) -> None:
        topic_name, payload, traffic = entry
        self.paced.discard(id(entry))
        for i, e in enumerate(self.outbox.pending):  # nearly always the first: acks come in order
            if e is entry:
                del self.outbox.pending[i]
                traffic.add("sent", topic_name, len(payload))
                return

    async def flush(self) -> None:
        """Send the outbox in order, each message acknowledged before the next (those this
        connection has in flight already excepted); raises MqttError at the first failure, which
        stays queued. What an earlier connection left in the outbox (a reconnecting party's backlog)
        is paced here, as :meth:`publish` paces what it queues: the broker counts every connection's
        budget afresh, and a backlog over its burst would be held back or dropped."""
        async with self.outbox.lock:
            while entry := next((e for e in self.outbox.pending if id(e) not in self.inflight), None):
                topic_name, payload, _ = entry
                if self.pacer is not None and id(entry) not in self.paced:
                    await self.pacer.spend(publish_wire_bytes(topic_name, len(payload)))
                    self.paced.add(id(entry))
                await self._acknowledged(self._send(topic_name, payload))
                self._done(entry)

    def _send(self, topic_name: str, payload: bytes) -> asyncio.Future:
        """The publish at QoS 1, scheduled now: tasks start in the order they were made, so the
        PUBLISH packets leave in the order of these calls."""
        return asyncio.ensure_future(self.client.publish(topic_name, payload, qos=QOS, timeout=PUBLISH_TIMEOUT_S))

    async def _acknowledged(self, sent: asyncio.Future) -> None:
        """Wait for ``sent``'s PUBACK, or fail as soon as the connection drops: aiomqtt leaves a
        pending publish waiting out its timeout after a disconnect."""
        dropped = AiomqttInternals.disconnected(self.client)
        await asyncio.wait({sent, dropped}, return_when=asyncio.FIRST_COMPLETED)
        if not sent.done():
            sent.cancel()
            raise aiomqtt.MqttError("the connection dropped before the broker acknowledged a publish")
        sent.result()

    def mark_lost(self, exc: aiomqtt.MqttError) -> None:
        if self.lost is not None:
            return
        self.lost = exc
        log.warning("a publish failed (%s): %d message(s) wait for the next connection", exc, len(self.outbox))
        # A PUBACK can time out while paho still believes the socket is up (a hung broker): drop
        # the connection so that message iteration ends and the party reconnects now.
        if not AiomqttInternals.disconnected(self.client).done():
            with contextlib.suppress(Exception):
                AiomqttInternals.paho(self.client).disconnect()

    def _decoded(self, message):
        name = message.topic.value
        payload = message.payload if isinstance(message.payload, bytes) else b""
        self.traffic.add("received", name, len(payload))
        try:
            return name, codec.decode(payload, codec.TOPIC_KINDS.get(topic_class(name), frozenset()))
        except codec.DecodeError as exc:
            self.rejected[exc.reason] += 1
            self.log_rejection(name, exc.reason, exc.detail, self.rejected[exc.reason])
            return None

    async def messages(self) -> AsyncIterator[tuple[str, object]]:
        """Decoded messages until the connection is lost (MqttError). What the client had received,
        and so acknowledged, before the loss is handed over first: the broker will not send it
        again. aiomqtt does so when the connection drops (tests/services/test_bus.py); when a send
        of ours failed first, the rest of its queue is drained here."""
        async for message in self.client.messages:
            if (decoded := self._decoded(message)) is not None:
                yield decoded
            if self.lost is not None:
                break
        for message in AiomqttInternals.drain(self.client):
            if (decoded := self._decoded(message)) is not None:
                yield decoded
        raise self.lost


class AiomqttInternals:
    """The four things the bus needs that aiomqtt (2.x) has no public API for, in one place:

    - ``disconnected(client)``: the future aiomqtt resolves when the connection drops (its own
      message iterator waits on it), so that a publish awaiting its PUBACK fails at once instead
      of waiting out its timeout;
    - ``paho(client)``: the underlying paho client, to drop a connection whose PUBACK timed out
      while paho still believes the socket is up (a hung broker), and to set TCP_NODELAY;
    - ``drain(client)``: the messages aiomqtt received, and so acknowledged, but had not yet
      handed over when a send of ours failed first: the broker will not send them again.

    :meth:`check` runs on every new client and raises if an aiomqtt release moved any of them, so
    a change fails at connect, loudly, not by losing messages; ``pyproject.toml`` bounds aiomqtt to
    the releases this was checked against, and ``tests/services/test_bus.py`` exercises each
    against a real broker."""

    @staticmethod
    def check(client: aiomqtt.Client) -> None:
        missing = [name for name, kind in (("_disconnected", asyncio.Future), ("_client", object),
                                           ("_queue", asyncio.Queue)) if not isinstance(getattr(client, name, None), kind)]
        if missing:
            raise RuntimeError(f"aiomqtt {getattr(aiomqtt, '__version__', '?')} lacks {', '.join(missing)}: "
                               f"privbandit's bus needs them (services/bus.py, AiomqttInternals)")

    @staticmethod
    def disconnected(client: aiomqtt.Client) -> asyncio.Future:
        return client._disconnected  # noqa: SLF001

    @staticmethod
    def paho(client: aiomqtt.Client):
        return client._client  # noqa: SLF001

    @staticmethod
    def drain(client: aiomqtt.Client) -> list:
        queue, out = client._queue, []  # noqa: SLF001
        while not queue.empty():
            out.append(queue.get_nowait())
        return out


class SubscriptionDenied(RuntimeError):
    pass


@contextlib.asynccontextmanager
async def connect(
    settings: BusSettings, client_id: str, subscriptions: list[str],
    traffic: Traffic | None = None, rejected: Counter | None = None, outbox: Outbox | None = None,
    log_rejection: RateLimitedLog | None = None, budget: PublishBudget | None = None,
) -> AsyncIterator[Bus]:
    """Connect (retrying with backoff until ``connect_timeout_s``), subscribe, yield a Bus.
    ``budget``: the publish budget of the party's account (``acl.PUBLISH_BUDGETS``), which the bus
    keeps to, a little under it, on this connection (:meth:`PublishBucket.pacing`).

    The session is persistent (clean_session=False under a fixed client id), so a party that
    reconnects gets the QoS 1 messages the broker queued for it meanwhile.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.connect_timeout_s
    delay = 0.05
    while True:
        client = settings.client(client_id, False, max_queued_incoming_messages=MAX_QUEUED_INCOMING)
        AiomqttInternals.check(client)
        # aiomqtt warns past 10 unacknowledged publishes; the bus pipelines up to PIPELINE_MAX by
        # design (plus one waited): a warning each time would only bury the log's real news.
        client.pending_calls_threshold = PIPELINE_MAX + 1
        try:
            await client.__aenter__()
            break
        except aiomqtt.MqttError as exc:
            if (tls := tls_failure(exc)) is not None:
                raise ConnectionError(f"TLS with the broker at {settings.broker_url} failed: {tls}") from None
            if loop.time() + delay > deadline:
                raise ConnectionError(f"cannot reach the broker at {settings.broker_url}: {exc}") from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
    try:
        for name in subscriptions:
            result = await client.subscribe(name, qos=QOS)
            codes = result if isinstance(result, (list, tuple)) else [result]
            if any(getattr(c, "value", c) >= 0x80 for c in codes):
                raise SubscriptionDenied(f"{client_id}: the broker refused the subscription to {name}")
        bus = Bus(client, traffic if traffic is not None else Traffic(),
                  rejected if rejected is not None else Counter(), outbox, log_rejection,
                  None if budget is None else PublishBucket.pacing(budget, client_id))
        await bus.flush()  # what the last connection could not send goes first
        yield bus
    finally:
        with contextlib.suppress(Exception):
            await client.__aexit__(None, None, None)


async def end_session(settings: BusSettings, client_id: str) -> None:
    """Connect once with a clean session and leave: the broker drops ``client_id``'s persistent
    session and whatever it still queues for it. A party does this when it has finished, else
    every session it ever ran stays in the broker's memory (and its persistence file) for good."""
    try:
        async with settings.client(client_id, True, timeout=5):
            pass
    except aiomqtt.MqttError as exc:  # the results are out; only the broker's memory is at stake
        log.warning("%s: could not end its broker session (%s); the broker keeps it", client_id, exc)
