"""The embedded default broker: amqtt in its own process, with the same users and ACL as Mosquitto.

``start_embedded_broker(run_id)`` writes the run's broker files (:func:`acl.write_broker_config`:
the same ``passwd`` a Mosquitto would use) to a private temporary directory, starts
``python -m privbandit.services.embedded_broker`` on a free port of 127.0.0.1, and returns once the
port accepts connections. The child loads two amqtt plugins (amqtt 0.12 ``plugins`` config):

- :class:`PasswordFileAuthPlugin` (``BaseAuthPlugin.authenticate``): the username must be a role
  and the password must match the role's ``$7$`` hash in ``passwd``; anonymous clients are refused
  (CONNACK 5, not authorized), and so is a client id of another role's party
  (:func:`acl.client_id_allowed`: no account takes over another role's session);
- :class:`RoleTopicPlugin` (``BaseTopicPlugin.topic_filtering``): amqtt calls it with
  ``Action.SUBSCRIBE`` for each topic filter of a SUBSCRIBE (refused → SUBACK 0x80),
  ``Action.PUBLISH`` for each incoming PUBLISH (refused → acknowledged but dropped, as Mosquitto
  does) and ``Action.RECEIVE`` before delivering each message to each subscriber. All three are
  answered by :func:`acl.allowed` (read for SUBSCRIBE/RECEIVE, write for PUBLISH).

Each connection of an account with a publish budget (:data:`acl.PUBLISH_BUDGETS`: the users'
account) spends it on every PUBLISH, and waits, before the packet's body is read, while it is
overspent; the account may hold only so many connections (issue #32 item 3). Mosquitto and NATS
have no per-account publish rate; this is the one broker of the project that enforces one.

amqtt publishes last wills without asking the topic plugin and stores retained messages for later
subscribers; no party uses either, so a CONNECT with a will is refused and nothing is retained
(as Mosquitto's generated config does with ``retain_available false``).

Four amqtt defects are patched in the child, each failing loudly if a newer amqtt moved what it
replaces: unbounded per-subscriber queues (:func:`_bound_queues`, issue #20 item 10), a taken-over
persistent session marked disconnected by its old connection's end, which left a party connected
and deaf after a broker pause (:func:`_keep_taken_over_sessions`, item 7), a SUBSCRIBE during
routing that lost the message being routed (:func:`_route_from_snapshots`), and every routed
message's payload formatted into a DEBUG line that is never logged (:func:`_quiet_broadcasts`,
most of its CPU at T = 10⁸). Packets over the size cap
close the connection (:func:`_cap_packets`).

amqtt speaks MQTT 3.1.1 only (aiomqtt's default). ``open_mode=True`` starts it without
authentication or ACL, for local quick runs.

The child exits when its parent closes its stdin (``stop()``) or dies, so a crashed parent never
leaves a broker behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from privbandit.services import acl
from privbandit.services.budget import PublishBucket

try:  # amqtt is needed only in the broker process and by the plugin classes below
    from amqtt.contexts import Action
    from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
except ImportError:  # pragma: no cover - the parent can still report a clear error from the child
    Action = None  # type: ignore[assignment,misc]
    BaseAuthPlugin = BaseTopicPlugin = object  # type: ignore[assignment,misc]

__all__ = [
    "EmbeddedBroker",
    "EmbeddedBrokerError",
    "PasswordFileAuthPlugin",
    "RoleTopicPlugin",
    "free_port",
    "start_embedded_broker",
    "wait_listening",
]

log = logging.getLogger("privbandit.embedded_broker")

HOST = "127.0.0.1"
_MODULE = "privbandit.services.embedded_broker"  # not __name__: that is "__main__" in the child
_START_ATTEMPTS = 3  # free_port() races with other processes; retry with a new port if so


class EmbeddedBrokerError(RuntimeError):
    pass


def free_port(host: str = HOST) -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# amqtt plugins (run inside the broker process)


def refusal(session, hashes: Mapping[str, str], run_id: str) -> str | None:
    """Why a CONNECT is refused, or None: the username must be a role and the password match its
    ``$7$`` hash; no will (amqtt publishes a will without the write ACL, issue #20 item 4, and no
    party leaves one); a client id of the run's parties must name the account's own role
    (:func:`acl.client_id_allowed`, item 8)."""
    username = getattr(session, "username", None)
    password = getattr(session, "password", None)
    if not username or password is None:
        return "anonymous connection"
    password_hash = hashes.get(username)
    if password_hash is None:
        return f"unknown user {username!r}"
    if isinstance(password, bytes):
        password = password.decode("utf-8", "replace")
    if not acl.verify_password(password, password_hash):
        return f"{username!r}: wrong password"
    if getattr(session, "will_flag", False):
        return f"{username!r}: a connection with a last will"
    client_id = getattr(session, "client_id", None)
    if not acl.client_id_allowed(username, client_id, run_id):
        return f"{username!r}: client id {client_id!r} belongs to another role's party"
    return None


def role_hashes(password_file: str) -> dict[str, str]:
    """The accounts of the password file: the roles and the intermediary instances (``shuffler-2``)."""
    hashes = acl.read_password_file(password_file)
    return {user: h for user, h in hashes.items() if user in {r.value for r in acl.Role} or acl.is_instance(user)}


class PasswordFileAuthPlugin(BaseAuthPlugin):  # type: ignore[misc,valid-type]
    """Accept a CONNECT only if :func:`refusal` finds nothing against it."""

    @dataclass
    class Config:
        password_file: str
        run_id: str

    def __init__(self, context) -> None:
        super().__init__(context)
        self._run_id = acl.validate_run_id(self.config.run_id)
        self._hashes = role_hashes(self.config.password_file)

    async def authenticate(self, *, session) -> bool:
        why = refusal(session, self._hashes, self._run_id)
        if why is not None:
            log.info("refused %s", why)
        return why is None


def _live(writers: list) -> list:
    """The connections of ``writers`` still open."""
    return [w for w in writers if not getattr(w, "is_closed", False)
            and not getattr(getattr(getattr(w, "_writer", None), "transport", None), "is_closing", lambda: False)()]


def _authenticate_first(broker_module, hashes: Mapping[str, str], run_id: str,
                        budgets: Mapping[str, acl.PublishBudget] = acl.PUBLISH_BUDGETS) -> None:
    """Refuse a bad CONNECT before amqtt touches any session (issue #20 item 8), and give each
    accepted connection its account's publish budget (issue #32 item 3).

    amqtt 0.12 handles a CONNECT's client id (deleting a clean session's namesake, taking over a
    connected one, updating a persistent one's credentials) before its auth plugins run, so any
    client, even with a wrong password, could disconnect a party by reusing its client id. The
    broker module's protocol handler is replaced by one whose ``init_from_connect`` (the step that
    reads the CONNECT, before any session handling) answers CONNACK 5 and closes the connection
    when :func:`refusal` finds a reason, or CONNACK 3 (server unavailable) when the account holds
    all the connections its budget allows; an accepted one's reader carries its
    :class:`~privbandit.services.budget.PublishBucket`, which :func:`_cap_packets` spends."""
    from amqtt.errors import MQTTError
    from amqtt.mqtt.connack import NOT_AUTHORIZED, SERVER_UNAVAILABLE, ConnackPacket

    base = broker_module.BrokerProtocolHandler
    if not hasattr(base, "init_from_connect"):  # a newer amqtt: fail, do not run unguarded
        raise RuntimeError("amqtt's BrokerProtocolHandler.init_from_connect is gone: cannot authenticate first")
    connections: dict[str, list] = {}  # account → its connections' writers

    class AuthenticatedFirst(base):
        @classmethod
        async def init_from_connect(cls, reader, writer, plugins_manager, loop=None):
            handler, session = await super().init_from_connect(reader, writer, plugins_manager, loop)
            why, code = refusal(session, hashes, run_id), NOT_AUTHORIZED
            budget = budgets.get(getattr(session, "username", None))
            if why is None and budget is not None:
                live = connections[session.username] = _live(connections.get(session.username, []))
                if len(live) >= budget.connections:
                    why, code = f"{session.username!r}: already {len(live)} connections, its budget's most", \
                        SERVER_UNAVAILABLE
            if why is not None:
                log.info("refused %s (before any session handling)", why)
                await ConnackPacket.build(0, code).to_stream(writer)
                await writer.close()
                raise MQTTError(f"refused: {why}")
            if budget is not None:
                connections[session.username].append(writer)
                reader._pb_bucket = PublishBucket(budget, f"{session.username} ({session.client_id})")
            return handler, session

    broker_module.BrokerProtocolHandler = AuthenticatedFirst


class RoleTopicPlugin(BaseTopicPlugin):  # type: ignore[misc,valid-type]
    """SUBSCRIBE, PUBLISH and per-message RECEIVE checks by :func:`acl.allowed`."""

    @dataclass
    class Config:
        run_id: str
        password_file: str | None = None  # its intermediary instances (``shuffler-2``) are accounts too

    _CACHE_MAX = 65_536  # allowed() is pure: remember verdicts (a run uses a handful of topics)

    def __init__(self, context) -> None:
        super().__init__(context)
        self._run_id = acl.validate_run_id(self.config.run_id)
        self._verdicts: dict[tuple[str, str, str], bool] = {}
        accounts = role_hashes(self.config.password_file) if self.config.password_file else {}
        self._instances = acl.validate_instances([a for a in accounts if acl.is_instance(a)])

    async def topic_filtering(self, *, session=None, topic=None, action=None) -> bool:
        username = getattr(session, "username", None)
        if not topic or (username not in acl.Role._value2member_map_ and username not in self._instances):
            return False
        if action == Action.PUBLISH:
            kind = "write"
        elif action in (Action.SUBSCRIBE, Action.RECEIVE):
            kind = "read"
        else:
            return False
        key = (username, kind, topic)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = acl.allowed(username, kind, topic, self._run_id, self._instances)
            if len(self._verdicts) >= self._CACHE_MAX:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        if not verdict:
            log.info("denied %s %s on %r", username, action, topic)
        return verdict


def _refuse_retained(broker_class) -> None:
    """Never store a retained message (issue #20 item 4): it would reach every later subscriber of
    the topic (a report replayed into each restarted aggregator). No party retains anything, and
    amqtt has no setting for it (Mosquitto's is ``retain_available false``), so the broker's one
    storing method is replaced; the message itself is still routed live, under the ACL."""
    if not callable(getattr(broker_class, "retain_message", None)):  # a newer amqtt: fail, do not run open
        raise RuntimeError("amqtt's Broker.retain_message is gone: cannot refuse retained messages")

    async def refuse(self, source_session, topic_name, data, qos=None) -> None:
        who = getattr(source_session, "username", None) or "the broker"
        log.info("refused a retained message from %s on %r", who, topic_name)

    broker_class.retain_message = refuse


class PacketTooLarge(Exception):
    """Not an MQTTError: amqtt's reader loop skips those and reads on, into the oversized body."""


_PUBLISH = 3  # MQTT 3.1.1's PUBLISH packet type


def _cap_packets(fixed_header_class, limit: int) -> None:
    """Close the connection of a client that announces a packet over ``limit`` bytes, before its
    body is read (issue #20 item 10: amqtt has no setting for it, Mosquitto's is
    ``max_packet_size``). amqtt's reader loop ends on any exception but its own MQTTError, and
    the connection closes with it. A PUBLISH of a connection with a publish budget
    (:func:`_authenticate_first`) waits here, before its body is read, while the budget is spent."""
    original = fixed_header_class.__dict__.get("from_stream")
    if not isinstance(original, classmethod):  # a newer amqtt: fail, do not run uncapped
        raise RuntimeError("amqtt's MQTTFixedHeader.from_stream is gone: cannot cap packet sizes")

    async def from_stream(cls, reader):
        header = await original.__func__(cls, reader)
        if header is not None and header.remaining_length > limit:
            log.warning("closed a connection that sent a %d-byte packet (limit %d)", header.remaining_length, limit)
            raise PacketTooLarge(f"{header.remaining_length} bytes > {limit}")
        bucket = getattr(reader, "_pb_bucket", None)
        if header is not None and bucket is not None and header.packet_type == _PUBLISH:
            await bucket.spend(header.remaining_length)
        return header

    fixed_header_class.from_stream = classmethod(from_stream)


# A subscriber's deliveries the broker holds (in flight, or queued while it is away): at most this
# many messages (Mosquitto's ``max_queued_messages``, the same figure) and bytes; more are dropped
# for that subscriber alone, and logged. amqtt bounds neither: a flood toward one slow or stopped
# client grew the broker to 922 MB and stalled a session (issue #20 item 10).
MAX_QUEUED_BYTES = acl.MAX_QUEUED_BYTES
DROP_LOG_S = 5.0  # one line per subscriber per this long, with the count so far


class _Held:
    """One subscriber's held deliveries, and what was dropped for it."""

    __slots__ = ("messages", "bytes", "dropped", "logged_at")

    def __init__(self):
        self.messages = self.bytes = self.dropped = 0
        self.logged_at = -DROP_LOG_S


def _over(held: _Held, size: int, max_messages: int, max_bytes: int, who: str, topic: str) -> bool:
    if held.messages < max_messages and held.bytes + size <= max_bytes:
        return False
    held.dropped += 1
    if time.monotonic() - held.logged_at >= DROP_LOG_S:
        held.logged_at = time.monotonic()
        log.warning("dropped a message on %r for %s: it holds %d messages, %d bytes (limits %d, %d); %d dropped "
                    "for it so far", topic, who, held.messages, held.bytes, max_messages, max_bytes, held.dropped)
    return True


class _PrunedTasks(deque):
    """amqtt's deque of delivery tasks, which it empties only from the front: one delivery waiting
    for ever (a stopped subscriber's) kept every later finished one, and its message, alive. This
    one forgets finished tasks wherever they are, in amortized constant time per append."""

    def __init__(self):
        super().__init__()
        self.mark = 1024

    def append(self, task) -> None:
        super().append(task)
        if len(self) > self.mark:
            live = []
            for t in self:
                if not t.done():
                    live.append(t)
                elif not t.cancelled() and t.exception() is not None:  # retrieved, as amqtt's loop would
                    log.warning("a delivery failed: %r", t.exception())
            self.clear()
            self.extend(live)
            self.mark = max(1024, 2 * len(live))


def _bound_queues(broker_class, handler_class, max_messages: int, max_bytes: int) -> None:
    """Bound what the broker holds per subscriber (see ``MAX_QUEUED_BYTES``): deliveries to a
    connected client until it acknowledges them, messages queued for an absent persistent session,
    and the finished delivery tasks amqtt kept behind a stuck one."""
    publish, queue = handler_class.__dict__.get("mqtt_publish"), getattr(broker_class, "_retain_broadcast_message", None)
    if publish is None:
        publish = getattr(handler_class, "mqtt_publish", None)
    if not callable(publish) or not callable(queue):  # a newer amqtt: fail, do not run unbounded
        raise RuntimeError("amqtt's mqtt_publish or Broker._retain_broadcast_message is gone: cannot bound queues")

    async def bounded_publish(self, topic, data, qos, retain, ack_timeout=None):
        held = self.__dict__.setdefault("_pb_held", _Held())
        size = len(data)
        who = getattr(self.session, "client_id", "?")
        if _over(held, size, max_messages, max_bytes, who, topic):
            return None
        held.messages, held.bytes = held.messages + 1, held.bytes + size
        try:
            return await publish(self, topic, data, qos, retain, ack_timeout)
        finally:
            held.messages, held.bytes = held.messages - 1, held.bytes - size

    async def bounded_queue(self, broadcast, qos, target_session) -> None:
        held = target_session.__dict__.setdefault("_pb_queued", _Held())
        # amqtt empties this queue when the client comes back; count what is in it now
        held.messages = target_session.retained_messages.qsize()
        held.bytes = 0 if held.messages == 0 else held.bytes
        size = len(broadcast["data"] or b"")
        if _over(held, size, max_messages, max_bytes, target_session.client_id, broadcast["topic"]):
            return
        held.bytes += size
        await queue(self, broadcast, qos, target_session)

    init = broker_class.__init__

    def init_pruned(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not isinstance(getattr(self, "_tasks_queue", None), deque):
            raise RuntimeError("amqtt's Broker._tasks_queue is gone: cannot bound queues")
        self._tasks_queue = _PrunedTasks()

    handler_class.mqtt_publish = bounded_publish
    broker_class._retain_broadcast_message = bounded_queue
    broker_class.__init__ = init_pruned


def _keep_taken_over_sessions(broker_class) -> None:
    """Issue #20 item 7, the cause. A client that reconnects while the broker still holds its old
    connection (the broker was paused, so it never saw that one die) takes its persistent session
    over; amqtt then closes the old connection, whose message loop ends in ``_handle_disconnect``
    and marks the *shared* session disconnected, although the new connection is live. From then on
    the broker queues every message for that session as if its client were away, and never sends
    them: the client is deaf for ever while its own publishes are still acknowledged. Here a
    connection that is no longer its session's current one ends alone: its handler stops, the
    session stays connected, and no will is sent (the client is still there)."""
    original = broker_class.__dict__.get("_handle_disconnect")
    loop = broker_class.__dict__.get("_client_message_loop")
    if not callable(original) or not callable(loop) or not callable(getattr(broker_class, "_stop_handler", None)):
        raise RuntimeError("amqtt's Broker._handle_disconnect is gone: cannot keep taken-over sessions")

    async def handle_disconnect(self, client_session, handler, disconnect_waiter) -> None:
        current = self._sessions.get(client_session.client_id, (None, None))[1]
        if current is not None and current is not handler:
            log.warning("%s reconnected before its old connection ended: the old one closes, the session stays",
                        client_session.client_id)
            await self._stop_handler(handler)
            return
        await original(self, client_session, handler, disconnect_waiter)

    async def client_message_loop(self, client_session, handler) -> None:
        # The old connection may have ended while the take-over awaited it, before the new
        # handler was registered: its end then marked the session disconnected. This connection is
        # the session's now, and live.
        if client_session.transitions.state != "connected":
            log.warning("%s: its old connection's end had marked the taken-over session away; it is connected",
                        client_session.client_id)
            client_session.transitions.connect()
        await loop(self, client_session, handler)

    broker_class._handle_disconnect = handle_disconnect
    broker_class._client_message_loop = client_message_loop


class _SnapshotItems(dict):
    """amqtt's subscription table: its broadcast iterates ``items()`` across awaits, and a
    subscription made meanwhile ended that iteration ("dictionary changed size during iteration")
    and lost the message being routed. Iterating a snapshot routes it to the subscribers of the
    moment it was taken."""

    def items(self):
        return list(super().items())


def _route_from_snapshots(broker_class) -> None:
    """Every broker's subscription table is a :class:`_SnapshotItems`."""
    init = broker_class.__init__

    def init_snapshots(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not isinstance(getattr(self, "_subscriptions", None), dict):  # a newer amqtt: fail, do not lose messages
            raise RuntimeError("amqtt's Broker._subscriptions is gone: cannot route safely")
        self._subscriptions = _SnapshotItems(self._subscriptions)

    broker_class.__init__ = init_snapshots


class _QuietBroadcast(dict):
    """A message queued for routing, whose text form leaves its payload out. amqtt's router
    formats every message it takes from the queue into a DEBUG line (``f"Processing broadcast
    message: {broadcast}"``), and builds that string even with DEBUG off: for a 770 kB report
    block that is a repr of several MB per message: about 60 % of the broker's CPU at T = 10⁸."""

    def __repr__(self) -> str:
        data = self.get("data")
        return f"<message on {self.get('topic')!r}, {len(data) if data is not None else 0} bytes>"

    __str__ = __repr__


def _quiet_broadcasts(broker_class) -> None:
    """Every message a broker queues for routing is a :class:`_QuietBroadcast`."""
    init = broker_class.__init__

    def init_quiet(self, *args, **kwargs):
        init(self, *args, **kwargs)
        queue = getattr(self, "_broadcast_queue", None)
        if not isinstance(queue, asyncio.Queue):  # a newer amqtt: say so rather than run slow unseen
            raise RuntimeError("amqtt's Broker._broadcast_queue is gone: cannot keep payloads out of its log lines")
        put = queue.put

        async def put_quiet(item):
            await put(_QuietBroadcast(item) if type(item) is dict else item)

        queue.put = put_quiet

    broker_class.__init__ = init_quiet


def _broker_config(port: int, *, run_id: str, password_file: str | None, open_mode: bool) -> dict:
    if open_mode:
        plugins: dict = {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}
    else:
        plugins = {
            f"{_MODULE}.PasswordFileAuthPlugin": {"password_file": password_file, "run_id": run_id},
            f"{_MODULE}.RoleTopicPlugin": {"run_id": run_id, "password_file": password_file},
        }
    return {
        "listeners": {"default": {"type": "tcp", "bind": f"{HOST}:{port}"}},
        "plugins": plugins,
    }


async def _serve(port: int, *, run_id: str, password_file: str | None, open_mode: bool,
                 max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
    from amqtt.broker import Broker
    from amqtt.mqtt.protocol.broker_handler import BrokerProtocolHandler

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    def watch_stdin() -> None:  # parent closed our stdin (stop() or parent died): shut down
        with contextlib.suppress(Exception):
            while sys.stdin.buffer.read(4096):
                pass
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()

    from amqtt.mqtt.packet import MQTTFixedHeader

    _cap_packets(MQTTFixedHeader, acl.MAX_PACKET_BYTES)
    _bound_queues(Broker, BrokerProtocolHandler, acl.MAX_QUEUED_MESSAGES, max_queued_bytes)
    _keep_taken_over_sessions(Broker)
    _route_from_snapshots(Broker)
    _quiet_broadcasts(Broker)
    if not open_mode:
        import amqtt.broker

        _refuse_retained(Broker)
        _authenticate_first(amqtt.broker, role_hashes(password_file), acl.validate_run_id(run_id))
    broker = Broker(_broker_config(port, run_id=run_id, password_file=password_file, open_mode=open_mode))
    await broker.start()
    print(f"READY {port}", flush=True)
    await stop.wait()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(broker.shutdown(), timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="privbandit embedded MQTT broker (amqtt)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--password-file")
    parser.add_argument("--open", action="store_true", help="no authentication, no ACL")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--max-queued-bytes", type=int, default=MAX_QUEUED_BYTES,
                        help="bytes held per subscriber before its messages are dropped")
    args = parser.parse_args(argv)
    if args.max_queued_bytes < 1:
        parser.error(f"--max-queued-bytes must be at least 1, got {args.max_queued_bytes}")
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # amqtt is chatty at INFO (one line per connection); keep it quiet unless debugging
    logging.getLogger("amqtt").setLevel(logging.DEBUG if args.log_level.upper() == "DEBUG" else logging.ERROR)
    if not args.open and not args.password_file:
        parser.error("--password-file is required unless --open")
    from privbandit.services.allocator import keep_freed_memory

    keep_freed_memory()  # each relayed report block's buffers reuse the last one's pages
    try:
        asyncio.run(_serve(args.port, run_id=args.run_id, password_file=args.password_file, open_mode=args.open,
                           max_queued_bytes=args.max_queued_bytes))
    except Exception as exc:  # report why, for the parent's error message
        print(f"embedded broker: failed on {HOST}:{args.port}: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        return 3
    return 0


# ---------------------------------------------------------------------------------------------
# the parent side


class EmbeddedBroker:
    """A running embedded broker. Use as a context manager, or call :meth:`stop`."""

    def __init__(self, *, process: subprocess.Popen, port: int, run_id: str, open_mode: bool,
                 files: acl.BrokerFiles | None, workdir: Path, stderr_path: Path):
        self.process = process
        self.host = HOST
        self.port = port
        self.url = f"mqtt://{HOST}:{port}"
        self.run_id = run_id
        self.open_mode = open_mode
        self.files = files  # the run's broker files (passwd, acl, credentials.env, mosquitto.conf)
        self._workdir = workdir
        self._stderr_path = stderr_path
        self._finalizer = weakref.finalize(self, _terminate, process, workdir)

    @property
    def passwords(self) -> dict[acl.Role, str]:
        return dict(self.files.passwords) if self.files else {}

    def password(self, role: acl.Role | str) -> str:
        if self.files is None:
            raise ValueError("an open-mode broker has no passwords")
        return self.files.password(role)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return self._stderr_path.read_text(errors="replace")
        return ""

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker process (gracefully, then by force) and delete its files. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _terminate(self.process, self._workdir, timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited({self.process.returncode})"
        return f"EmbeddedBroker({self.url}, run_id={self.run_id!r}, open={self.open_mode}, {state})"


def _terminate(process: subprocess.Popen, workdir: Path, timeout: float = 5.0) -> None:
    try:
        if process.poll() is None:
            with contextlib.suppress(OSError):
                if process.stdin:
                    process.stdin.close()  # the graceful path: the child shuts down on EOF
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=2)
        else:
            with contextlib.suppress(OSError):
                if process.stdin:
                    process.stdin.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def wait_listening(process: subprocess.Popen, port: int, deadline: float) -> bool:
    """True once ``HOST:port`` accepts a TCP connection; False if ``process`` (the broker meant to
    listen there) exited first or ``deadline`` (time.monotonic()) passed."""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def start_embedded_broker(
    run_id: str,
    passwords: Mapping[acl.Role | str, str] | None = None,
    *,
    open_mode: bool = False,
    timeout: float = 20.0,
    log_level: str = "WARNING",
    max_queued_bytes: int = MAX_QUEUED_BYTES,
) -> EmbeddedBroker:
    """Start an amqtt broker for run ``run_id`` in its own process on a free port of 127.0.0.1.

    Users, passwords and ACL are those of :func:`acl.write_broker_config` (roles missing from
    ``passwords`` get random ones; read them back from ``broker.password(role)`` or
    ``broker.files.credentials``). Returns once the port accepts connections; raises
    :class:`EmbeddedBrokerError` (with the broker's stderr) if it does not within ``timeout`` s.
    """
    acl.validate_run_id(run_id)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(log_level, str) or log_level.upper() not in logging.getLevelNamesMapping():
        raise ValueError(f"log_level must be a logging level name, got {log_level!r}")
    if open_mode and passwords:
        raise ValueError("passwords are meaningless with open_mode=True")
    if isinstance(max_queued_bytes, bool) or not isinstance(max_queued_bytes, int) or max_queued_bytes < 1:
        raise ValueError(f"max_queued_bytes must be a positive integer, got {max_queued_bytes!r}")

    deadline = time.monotonic() + timeout
    errors: list[str] = []
    for _attempt in range(_START_ATTEMPTS):
        port = free_port()
        workdir = Path(tempfile.mkdtemp(prefix=f"privbandit-broker-{run_id}-"))
        files = None
        try:
            if not open_mode:
                files = acl.write_broker_config(workdir / "broker", run_id, port, passwords)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        stderr_path = workdir / "stderr.log"
        cmd = [sys.executable, "-m", _MODULE, "--port", str(port), "--run-id", run_id, "--log-level", log_level,
               "--max-queued-bytes", str(max_queued_bytes)]
        cmd += ["--open"] if open_mode else ["--password-file", str(files.passwd)]
        env = dict(os.environ)
        project_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)
        with open(stderr_path, "wb") as stderr_file:
            process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=stderr_file, env=env, close_fds=True)
        broker = EmbeddedBroker(process=process, port=port, run_id=run_id, open_mode=open_mode,
                                files=files, workdir=workdir, stderr_path=stderr_path)
        if wait_listening(process, port, deadline):
            return broker
        text = broker.stderr()
        exited = process.poll()
        broker.stop(timeout=1)
        errors.append(text)
        if exited is not None and "in use" in text and time.monotonic() < deadline:
            continue  # lost the race for the port: try another
        reason = f"exited with code {exited}" if exited is not None else f"did not listen within {timeout:g} s"
        raise EmbeddedBrokerError(f"embedded broker on {HOST}:{port} {reason}; its stderr:\n{text.strip() or '(empty)'}")
    raise EmbeddedBrokerError("embedded broker could not bind a free port; last stderr:\n" + errors[-1].strip())


if __name__ == "__main__":
    sys.exit(main())
