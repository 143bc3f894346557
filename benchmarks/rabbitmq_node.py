"""RabbitMQ 3.10 nodes with the MQTT plugin, for timing only (docs/cluster.md, "What it costs"):
started as root's own processes from ``/usr/lib/rabbitmq/bin`` (``/usr/sbin/rabbitmq-server``
would switch to the ``rabbitmq`` user and the system node's directories), each with its own
directory, ports, Erlang cookie and node name, so the machine's own RabbitMQ is not touched.

    with RabbitNode(directory) as node:      # one node; node.url is its MQTT listener
        node.add_user("users", "pw")         # every permission on the default vhost
    with rabbit_cluster(directory, 2) as nodes: ...   # nodes 1.. joined to node 0 (join_cluster)

    python benchmarks/rabbitmq_node.py --nodes 3 --quorum   # start-up time, a QoS 1 session's queue

No ACL: the accounts get every permission (a RabbitMQ port of the project's rules would be topic
permissions, not built; docs/cluster.md says what it would need).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from privbandit.services.embedded_broker import HOST, free_port
from privbandit.services.launcher import stop_process

BIN = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT_S = 120  # one node took 11 s to its MQTT listener at load 11.5


class RabbitNode:
    """One RabbitMQ node in ``directory``: AMQP, MQTT and Erlang distribution ports free a moment
    ago; a context manager (started on entry, stopped on exit)."""

    def __init__(self, directory: Path, cookie: str | None = None, name: str | None = None, conf: str = ""):
        self.directory = Path(directory).resolve()
        self.name = f"{name or 'pbrmq-' + secrets.token_hex(3)}@localhost"
        self.cookie = cookie or secrets.token_hex(16)
        self.amqp_port, self.mqtt_port, self.dist_port = free_port(HOST), free_port(HOST), free_port(HOST)
        self.conf = conf  # more rabbitmq.conf lines
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{HOST}:{self.mqtt_port}"

    def env(self) -> dict[str, str]:
        d = self.directory
        return {**os.environ, "HOME": str(d), "RABBITMQ_NODENAME": self.name, "RABBITMQ_NODE_IP_ADDRESS": HOST,
                "RABBITMQ_NODE_PORT": str(self.amqp_port), "RABBITMQ_DIST_PORT": str(self.dist_port),
                "RABBITMQ_MNESIA_BASE": str(d / "mnesia"), "RABBITMQ_LOG_BASE": str(d / "log"),
                "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"), "RABBITMQ_CONF_ENV_FILE": str(d / "env.conf"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"), "RABBITMQ_PID_FILE": str(d / "pid"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
                # a VM that fails to start writes erl_crash.dump into its working directory: keep it here
                "ERL_CRASH_DUMP": str(d / "erl_crash.dump")}

    def start(self) -> RabbitNode:
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        cookie = d / ".erlang.cookie"
        cookie.write_text(self.cookie)
        cookie.chmod(0o400)
        (d / "env.conf").write_text("")  # not /etc/rabbitmq's, which names the system node
        (d / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {HOST}:{self.amqp_port}\n"
            f"mqtt.listeners.tcp.default = {HOST}:{self.mqtt_port}\n"
            "mqtt.allow_anonymous = false\n"
            "loopback_users = none\n" + self.conf)
        with open(d / "stdout.log", "wb") as out:
            self.proc = subprocess.Popen([str(BIN / "rabbitmq-server")], env=self.env(), cwd=d,
                                         stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.await_startup()
        return self

    def await_startup(self) -> None:
        """Until the node runs its apps (``await_startup`` fails at once while the VM has not yet
        registered its name): RuntimeError with the log's tail if it exits or takes too long."""
        end = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.ctl("await_startup", timeout=max(1.0, end - time.monotonic()))
                return
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                log = (self.directory / "stdout.log").read_text(errors="replace")[-2000:]
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"RabbitMQ node {self.name} did not start: {exc}\n{log}") from None
            time.sleep(0.5)

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """``rabbitmqctl -n NODE ARGS``: its output; RuntimeError with it when it fails."""
        proc = subprocess.run([str(BIN / "rabbitmqctl"), "-n", self.name, *args], env=self.env(),
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {self.name}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def add_user(self, user: str, password: str) -> None:
        if password.startswith("-"):
            raise ValueError("password: rabbitmqctl would read one starting with '-' as an option")
        self.ctl("add_user", user, password)
        self.ctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")

    def pid(self) -> int:
        """The Erlang VM's process id (the start script's child)."""
        return int((self.directory / "pid").read_text().strip())

    def stop(self) -> None:
        """``rabbitmqctl stop``; if the VM outlives it, SIGTERM then SIGKILL to the start script's
        process group (its own session: the VM is the script's child)."""
        if self.proc is None:
            return
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl("stop", timeout=30)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        stop_process(self.proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> RabbitNode:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def rabbit_cluster(directory: Path, count: int, conf: str = ""):
    """``count`` nodes sharing one cookie, nodes 1.. joined to node 0 (stop_app, join_cluster,
    start_app); users added on any node exist on all. ``conf``: more rabbitmq.conf lines."""
    cookie = secrets.token_hex(16)
    nodes = [RabbitNode(Path(directory) / f"n{i}", cookie, conf=conf) for i in range(count)]
    try:
        for node in nodes:
            node.start()
        for node in nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", nodes[0].name)
            node.ctl("start_app")
            node.await_startup()
        yield nodes
    finally:
        for node in reversed(nodes):
            node.stop()


def _main() -> None:
    """Start ``--nodes`` joined nodes (``--quorum``: quorum queues for the MQTT plugin's durable
    queues), print the start-up time, subscribe a persistent QoS 1 session on the last node and
    print the queue RabbitMQ made for it (its type and members), then stop."""
    import argparse
    import asyncio
    import tempfile

    import aiomqtt

    parser = argparse.ArgumentParser(description=_main.__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2, 3))
    parser.add_argument("--quorum", action="store_true")
    args = parser.parse_args()

    async def subscribe(url: str, password: str) -> None:
        host, port = url.removeprefix("mqtt://").split(":")
        async with aiomqtt.Client(host, int(port), username="probe", password=password,
                                  identifier="pb-queue-probe", clean_session=False) as client:
            await client.subscribe("pb/r/report/aggregator", qos=1)

    with tempfile.TemporaryDirectory(prefix="pb-rabbit-") as tmp:
        t0 = time.monotonic()
        conf = "mqtt.durable_queue_type = quorum\n" if args.quorum else ""
        with rabbit_cluster(Path(tmp), args.nodes, conf) as nodes:
            print(f"{len(nodes)} node(s) ready in {time.monotonic() - t0:.1f} s (load {os.getloadavg()[0]:.1f}): "
                  + ", ".join(n.url for n in nodes))
            password = secrets.token_hex(8)
            nodes[0].add_user("probe", password)
            asyncio.run(subscribe(nodes[-1].url, password))
            print(nodes[0].ctl("list_queues", "name", "type", "durable", "members").strip())


if __name__ == "__main__":
    _main()
