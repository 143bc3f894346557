"""A broker cluster: several ``nats-server`` nodes, clustered, each with an MQTT listener, all
holding the run's accounts and ACLs (:mod:`privbandit.services.acl.nats_files`).

For a session that outgrows one machine (issue #21 §3, docs/cluster.md): each party connects to
one node of its choice (its ``PRIVBANDIT_BROKER_URL``), and a message published on one node
reaches the subscribers of every node. QoS 1 messages and persistent sessions live in JetStream,
replicated over the nodes. Mosquitto stays the single-node default; ``privbandit cluster`` runs this.

:class:`NatsCluster` writes the node files, starts the nodes, and returns once every node answers
MQTT with a JetStream-backed (QoS 1) subscription and a message published on the first node has
reached a subscriber on every node (:func:`wait_ready`); :func:`spread` points a session's planned
parties (:func:`~privbandit.services.launcher.plan_parties`) at the nodes in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from privbandit.services import acl
from privbandit.services.acl.nats_files import ClusterFiles, NatsNode, jetstream_dir, write_nats_cluster_config
from privbandit.services.embedded_broker import HOST, free_port
from privbandit.services.launcher import stop_process
from privbandit.services.mosquitto_process import mosquitto_binary

READY_TIMEOUT_S = 30.0  # a 3-node JetStream cluster elects its leaders in ~1-3 s on a loaded 2-core box
START_ATTEMPTS = 3  # free_port() races with other processes: a lost race gets new ports
MAX_NODES = 9
_TAIL_LINES = 20
_LEADER_LINE = "metadata leader"  # "Self is new JetStream cluster metadata leader", "… new metadata leader: n2/…"


class ClusterError(RuntimeError):
    """A node could not start, exited, or the cluster did not become ready in time."""


def nats_binary() -> str | None:
    """Where ``nats-server`` is installed (on PATH or in an sbin directory), None if nowhere."""
    return mosquitto_binary("nats-server")


def loopback_nodes(count: int, host: str = HOST) -> list[NatsNode]:
    """``count`` nodes on ``host``, each on three ports that were free a moment ago."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NODES:
        raise ValueError(f"nodes must be an integer in 1..{MAX_NODES}, got {count!r}")
    return [NatsNode(f"n{i}", host, free_port(host), free_port(host), free_port(host)) for i in range(count)]


async def wait_ready(urls: Sequence[str], run_id: str, password: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Return once every node in ``urls`` accepts the ``launcher`` account over MQTT with a QoS 1
    (JetStream) subscription to the run's control topic, and a QoS 1 message published on the
    first node has reached the subscriber on every node; raise ClusterError at ``timeout_s``.
    Nodes still electing their JetStream leaders refuse or drop the connection: retried."""
    import aiomqtt

    from privbandit.services.bus import BusSettings

    topic = acl.control_topic(run_id)
    end = time.monotonic() + timeout_s
    nonce = secrets.token_hex(4)
    last: Exception | None = None
    while time.monotonic() < end:
        async with contextlib.AsyncExitStack() as stack:
            try:
                clients = []
                for i, url in enumerate(urls):
                    settings = BusSettings(broker_url=url, run_id=run_id, username="launcher", password=password)
                    client = settings.client(f"pbready-{nonce}-{i}", True, timeout=5)
                    await asyncio.wait_for(stack.enter_async_context(client), 5)
                    codes = await client.subscribe(topic, qos=1, timeout=5)
                    if any(getattr(c, "value", c) >= 0x80 for c in codes):
                        raise ClusterError(f"{url} refused the launcher's subscription to {topic}")
                    clients.append(client)
                payload = b"privbandit cluster ready " + nonce.encode()
                await clients[0].publish(topic, payload, qos=1, timeout=5)

                async def heard(client) -> None:
                    async for message in client.messages:
                        if message.payload == payload:
                            return

                await asyncio.wait_for(asyncio.gather(*(heard(c) for c in clients)), 3)
                return
            except (aiomqtt.MqttError, asyncio.TimeoutError, ClusterError) as exc:
                last = exc
        await asyncio.sleep(0.2)
    raise ClusterError(f"the cluster {', '.join(urls)} was not ready within {timeout_s:g} s: {last!r}")


class NatsCluster:
    """A NATS cluster for run ``run_id``: :meth:`start` writes the files into ``directory`` and
    starts the nodes; :meth:`stop` stops them. A context manager (started on entry, stopped on exit).

    ``nodes``: a count (on loopback, free ports) or :class:`NatsNode` addresses. ``prefix``: node
    name → the argv that runs a command where that node lives (``ip netns exec pbA``); readiness is
    then checked from there too. ``passwords``/``instances``: as for Mosquitto's
    :func:`~privbandit.services.acl.write_broker_config`. ``stream_replicas``: JetStream copies of
    the MQTT streams (default min(nodes, 3), set explicitly: NATS would take the nodes it knows at the
    first MQTT CONNECT, fewer when a node is late). ``mqtt_options``: more settings of each node's
    ``mqtt`` block (:data:`~privbandit.services.acl.nats_files.MQTT_OPTIONS`). ``store``: where the
    nodes' JetStream stores go (default ``directory``)."""

    def __init__(self, directory: Path | str, run_id: str, nodes: int | Sequence[NatsNode] = 3, *,
                 passwords: Mapping[acl.Role | str, str] | None = None, instances=(),
                 prefix: Mapping[str, Sequence[str]] | None = None, binary: str | None = None,
                 stream_replicas: int | None = None, mqtt_options: Mapping | None = None,
                 store: Path | str | None = None):
        self.directory = Path(directory).expanduser().resolve()
        self.run_id = acl.validate_run_id(run_id)
        self.count = nodes if isinstance(nodes, int) else len(nodes)
        self.fixed = None if isinstance(nodes, int) else list(nodes)
        if self.fixed is None and (isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES):
            raise ValueError(f"nodes must be an integer in 1..{MAX_NODES}, got {nodes!r}")
        self.passwords, self.instances = passwords, tuple(instances)
        self.prefix = {k: list(v) for k, v in (prefix or {}).items()}
        self.binary = binary or nats_binary()
        if self.binary is None:
            raise ClusterError("nats-server is not installed (not on PATH nor in /usr/sbin): "
                               "install it, e.g. `apt install nats-server`")
        self.stream_replicas = stream_replicas or min(self.count, 3)
        self.mqtt_options = dict(mqtt_options or {})
        self.store = self.directory if store is None else Path(store).expanduser().resolve()
        self.files: ClusterFiles | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.started_s: float | None = None  # start-up wall time, nodes spawned → cluster ready

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.files.nodes] if self.files else []

    @property
    def nodes(self) -> tuple[NatsNode, ...]:
        return self.files.nodes if self.files else ()

    def log(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> NatsCluster:
        """Write the files, start every node, wait until the cluster is ready. Retries with new
        ports when one was taken meanwhile (loopback nodes only); raises ClusterError with the
        node logs' tails otherwise."""
        for attempt in range(1 if self.fixed else START_ATTEMPTS):
            nodes = self.fixed or loopback_nodes(self.count)
            self.files = write_nats_cluster_config(self.directory, self.run_id, nodes, self.passwords,
                                                   instances=self.instances, stream_replicas=self.stream_replicas,
                                                   mqtt_options=self.mqtt_options, store=self.store)
            self.passwords = dict(self.files.passwords)  # a retry keeps them
            for node in nodes:  # a new cluster: an earlier one's sessions and Raft peers must not come back
                shutil.rmtree(jetstream_dir(self.store, node), ignore_errors=True)
            t0 = time.monotonic()
            for node, conf in zip(nodes, self.files.confs):
                with open(self.log(node.name), "wb") as out:  # this start's log alone
                    self.procs[node.name] = subprocess.Popen(
                        [*self.prefix.get(node.name, []), self.binary, "-c", str(conf)],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            try:
                self._wait_ready(timeout_s)
                self.started_s = time.monotonic() - t0
                return self
            except ClusterError as exc:
                self.stop()
                in_use = any("address already in use" in self.log(n.name).read_text(errors="replace")
                             for n in nodes)
                if not in_use or self.fixed or attempt == START_ATTEMPTS - 1:
                    raise ClusterError(f"{exc}\n{self.tails()}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ready(self, timeout_s: float) -> None:
        password = self.files.password("launcher")
        # An MQTT CONNECT before the JetStream metadata leader is elected blocks ~4 s and fails:
        # wait for the election first, then for MQTT itself. Any node's log will do: a node that
        # joins after the election does not always log the leader (a start waited 30 s for it).
        end = time.monotonic() + timeout_s
        while self.count > 1 and time.monotonic() < end and not any(
                _LEADER_LINE in self.log(n.name).read_text(errors="replace") for n in self.nodes):
            if dead := self.dead():
                raise ClusterError(f"node(s) {', '.join(dead)} exited")
            time.sleep(0.05)
        timeout_s = max(1.0, end - time.monotonic())  # one budget for both waits
        prefixes = {tuple(self.prefix.get(n.name, ())) for n in self.nodes}
        if prefixes == {()}:
            return asyncio.run(self._watch(wait_ready(self.urls, self.run_id, password, timeout_s)))
        # nodes in other network namespaces: check from where each lives, one node at a time
        # (each against itself: cross-node routing is the session's own test there)
        for node in self.nodes:
            argv = [*self.prefix.get(node.name, []), sys.executable, "-m", "privbandit.services.cluster",
                    "--ready", node.url, self.run_id, str(timeout_s)]
            proc = subprocess.run(argv, input=password, text=True, capture_output=True, timeout=timeout_s + 10)
            if proc.returncode != 0:
                raise ClusterError(f"node {node.name} at {node.url} was not ready: {proc.stderr.strip()[-500:]}")

    async def _watch(self, ready) -> None:
        """``ready``, failing at once when a node exits (a taken port, a bad config)."""
        task = asyncio.ensure_future(ready)
        while not task.done():
            dead = [name for name, p in self.procs.items() if p.poll() is not None]
            if dead:
                task.cancel()
                raise ClusterError(f"node(s) {', '.join(dead)} exited with "
                                   f"{[self.procs[d].returncode for d in dead]}")
            await asyncio.sleep(0.05)
        task.result()

    def dead(self) -> list[str]:
        """The nodes that have exited."""
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def tails(self) -> str:
        out = []
        for name in self.procs:
            path = self.log(name)
            text = path.read_text(errors="replace") if path.exists() else ""
            out.append(f"--- {path} ---\n" + ("\n".join(text.splitlines()[-_TAIL_LINES:]) or "(empty)"))
        return "\n".join(out)

    def stop(self) -> None:
        """SIGTERM every node (SIGKILL after a few seconds); a no-op for nodes already stopped."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                if proc.poll() is None:
                    proc.terminate()
        for proc in self.procs.values():
            stop_process(proc)

    def __enter__(self) -> NatsCluster:
        if not self.procs:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def spread(parties: Sequence, urls: Sequence[str]) -> dict[str, str]:
    """Point planned parties (:func:`~privbandit.services.launcher.plan_parties`) at the nodes in
    turn — observer, analyzer, intermediaries, fleets — so that neighbours in the protocol sit on
    different nodes; returns party → URL."""
    if not urls:
        raise ValueError("urls: at least one node")
    where = {}
    for i, party in enumerate(parties):
        party.env["PRIVBANDIT_BROKER_URL"] = where[party.name] = urls[i % len(urls)]
    return where


def cluster_main(out: Path | None, run_id: str, nodes: int, instances: Sequence[str] = ()) -> int:
    """``privbandit cluster``: start the cluster, print the node URLs and how to use them, run
    until Ctrl-C (or SIGTERM), then stop every node. Returns a process exit code: 0 after a clean
    stop, 1 if a node died or the cluster did not start."""
    import functools
    import tempfile

    print_ = functools.partial(print, flush=True)  # read line by line through a pipe, too
    directory = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="privbandit-cluster-"))
    cluster = NatsCluster(directory, run_id, nodes, instances=instances)
    stopping = []
    handlers = {s: signal.signal(s, lambda *_: stopping.append(True)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        print_(f"privbandit broker cluster for run {run_id}: {len(cluster.urls)} NATS nodes ready in "
               f"{cluster.started_s:.1f} s")
        for node in cluster.nodes:
            print_(f"  {node.name}: {node.url}")
        print_(f"credentials: {cluster.files.credentials}   node files and logs: {cluster.directory}")
        print_(f"a party: --broker {cluster.urls[0]} --run-id {run_id} with its PRIVBANDIT_<ROLE>_PASSWORD; "
               f"a whole session: privbandit run EXPERIMENT --transport mqtt --broker {cluster.urls[0]} "
               f"--run-id {run_id} --credentials {cluster.files.credentials}")
        print_("Ctrl-C stops the cluster")
        while not stopping:
            if dead := cluster.dead():
                print_(f"error: node(s) {', '.join(dead)} exited; the cluster is stopped\n{cluster.tails()}")
                return 1
            time.sleep(0.2)
        print_("stopping the cluster")
        return 0
    except ClusterError as exc:
        print_(f"error: {exc}")
        return 1
    finally:
        cluster.stop()
        for s, h in handlers.items():
            signal.signal(s, h)


def compose_nodes(hosts: Sequence[str], client_port: int, mqtt_port: int, cluster_port: int) -> list[NatsNode]:
    """Nodes named after their hosts (compose services), node ``i`` on the three base ports ``+ i``:
    distinct ports, so that the same node files serve containers and local processes alike."""
    if not 1 <= len(hosts) <= MAX_NODES:
        raise ValueError(f"host: give 1..{MAX_NODES} nodes, got {len(hosts)}")
    for h in hosts:
        if not h or any(c in h for c in ":/ \t") or h.startswith("-"):
            raise ValueError(f"host {h!r}: must be a host name or an IPv4 address (no ':', '/' or spaces)")
    for option, port in (("client-port", client_port), ("mqtt-port", mqtt_port), ("cluster-port", cluster_port)):
        if not 1 <= port <= 65535 - len(hosts) + 1:
            raise ValueError(f"{option} must be in 1..{65535 - len(hosts) + 1} (node i listens on it + i), got {port}")
    return [NatsNode(h, h, client_port + i, mqtt_port + i, cluster_port + i) for i, h in enumerate(hosts)]


def write_config_only(out: Path, run_id: str, nodes: Sequence[NatsNode], credentials: Path) -> ClusterFiles:
    """``privbandit cluster --config-only``: the node files of a cluster whose accounts have the
    passwords in ``credentials`` (the ``credentials.env`` that ``privbandit broker-config`` wrote),
    so the parties log in to any node as they would to Mosquitto. Each node's JetStream store is
    emptied, as :meth:`NatsCluster.start` does: a new session must not find the last one's MQTT
    sessions and queued messages (the run id is fixed in docker-compose.yml). Raises ValueError
    naming a credentials file that cannot be read."""
    from privbandit.services.bus import read_credentials

    passwords = read_credentials(credentials)
    if not passwords:
        raise ValueError(f"credentials {str(credentials)!r}: no PRIVBANDIT_<ROLE>_PASSWORD line")
    files = write_nats_cluster_config(out, run_id, nodes, passwords,
                                      instances=[a for a in passwords if acl.is_instance(a)],
                                      stream_replicas=min(len(nodes), 3))
    for node in nodes:
        shutil.rmtree(jetstream_dir(files.directory, node), ignore_errors=True)
    return files


def _ready_main(argv: list[str]) -> int:
    """``python -m privbandit.services.cluster --ready URL RUN_ID TIMEOUT`` (the launcher's password on
    stdin): :func:`wait_ready` for one node, run where that node lives (another network namespace)."""
    url, run_id, timeout = argv
    try:
        asyncio.run(wait_ready([url], run_id, sys.stdin.read().strip(), float(timeout)))
    except ClusterError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - run by NatsCluster in another network namespace
    if sys.argv[1:2] == ["--ready"]:
        raise SystemExit(_ready_main(sys.argv[2:]))
    raise SystemExit("usage: python -m privbandit.services.cluster --ready URL RUN_ID TIMEOUT")
