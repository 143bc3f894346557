"""``privbandit up -f docker-compose.yml``: the compose topology, every service a local process.

What runs is read from the compose file (``command``, ``environment``, ``env_file``, ``volumes``,
``depends_on``), so it is what ``docker compose up`` runs:

- a service built from this project (``build:``) runs as ``python -m privbandit <command>``;
- the ``eclipse-mosquitto`` service runs as a local ``mosquitto`` with its generated conf, listening
  on a free port of 127.0.0.1; with no ``mosquitto`` binary, as the embedded amqtt broker with the
  same passwords; with ``broker_url``, not at all (that broker is used);
- a ``nats`` service (a node of the ``cluster`` profile) runs as a local ``nats-server`` with its
  conf's host names made 127.0.0.1, on the ports the conf gives; ``mqtt://<node service>:<port>``
  becomes ``mqtt://127.0.0.1:<port>``; before any party starts, every node must be ready
  (:func:`~privbandit.services.cluster.wait_ready`) and pass the probe;
- a service with ``profiles:`` runs only when one of them is given (``profiles``), as in Compose;
  ``${VAR:-default}`` / ``${VAR-default}`` take VAR from the environment, then from ``env_file``
  (Compose's ``--env-file``);
- a bind mount maps its container path to its source (relative to ``workdir``), a named volume to
  ``<workdir>/deploy/<name>``; every argument or environment value under a container mount path is
  rewritten to the host path, and ``mqtt[s]://<broker service>:<port>`` to the local broker's URL;
- a dependency with ``condition: service_completed_successfully`` runs to completion first (such
  one-shots run side by side, as Docker runs them, each waited for when a service needs it); one
  with ``condition: service_healthy`` on the broker waits for the broker's healthcheck (a
  ``CMD`` test, its ``-h``/``-p`` pointed at the local listener) to pass, when its program is here;
- a broker conf with a TLS listener (``certfile``) is reached as ``mqtts://127.0.0.1:<port>`` and
  probed with the parties' ``PRIVBANDIT_CA_FILE``; a ``--dynsec-plugin`` of the config step that is
  not on this machine (the broker image's) becomes this machine's plugin.

A service with ``restart: on-failure[:N]`` (or ``always`` / ``unless-stopped``) that exits with a
non-zero status is started again, up to N times (unbounded without N), as Docker would; unlike
Docker, exit status 2 (bad configuration, a foreign checkpoint) is never restarted, and a clean
exit never is. The observer too: ``up`` ends when it exits for good. Give the analyzer, the
intermediaries and the observer ``--state-dir`` so that a restarted one resumes from its
checkpoint (docs/distributed.md, "Faults and restarts").

An observer with ``--dashboard-host`` (0.0.0.0 in its container) serves its page on 127.0.0.1 here.

Logs: ``<observer --out>/logs/compose-<service>.log``. Not reproduced: filesystem isolation (a local
process can read any file you can; ``:ro`` is not enforced), ``user:``, networks, the parties'
healthchecks.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from privbandit.runner.provenance import BROKER_ACL_ENV
from privbandit.services.acl import find_dynsec_plugin
from privbandit.services.acl.broker_files import write_with_mode
from privbandit.services.launcher import PARTY_EXIT_WAIT_S, USAGE_ERROR, log_tail, stop_process
from privbandit.services.mosquitto_process import MosquittoError, mosquitto_binary, start_on_free_port

BROKER_START_S = 10.0
HEALTHCHECK_S = 10.0  # for the broker's healthcheck to pass once it listens
ONE_SHOT = "service_completed_successfully"
HEALTHY = "service_healthy"
_VAR = re.compile(r"\$\$|\$\{(\w+)(?:(:?)-([^}]*))?\}")  # $$, ${VAR}, ${VAR:-default}, ${VAR-default}


class ComposeError(RuntimeError):
    """The compose file cannot run here, or a service failed; the message names the service."""


@dataclass
class Service:
    name: str
    command: list[str]
    env: dict[str, str]
    env_files: list[Path]
    mounts: list[tuple[str, Path]]  # (container path, host path), longest container path first
    depends: dict[str, str]  # service → condition
    image: str
    is_broker: bool  # a broker process (Mosquitto or a NATS node): supervised, not run by python
    restarts: float = 0  # how many more times to restart it after a failure (compose `restart:`)
    healthcheck: list[str] | None = None  # its `CMD` test, host paths; None: none, or a shell test
    log: Path = Path(os.devnull)
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def is_nats(self) -> bool:
        return self.is_broker and self.image.startswith("nats:")

    def to_host(self, value: str) -> str:
        """``value`` with a container path under a mount made the host path; also the value of a
        ``NAME=PATH`` argument (``--role-dir users=/secret-users``)."""
        name, sep, rest = value.partition("=")
        if sep and not name.startswith("/") and rest.startswith("/"):
            return f"{name}={self.to_host(rest)}"
        for inside, host in self.mounts:
            if value == inside or value.startswith(inside.rstrip("/") + "/"):
                return str(host) + value[len(inside.rstrip("/")):]
        return value


# --- the compose file ---------------------------------------------------------------------------

def _environment(raw) -> dict[str, str]:
    if isinstance(raw, dict):
        return {str(k): "" if v is None else str(v) for k, v in raw.items()}
    pairs = [str(item).split("=", 1) for item in raw or []]
    return {p[0]: p[1] if len(p) == 2 else os.environ.get(p[0], "") for p in pairs}


def read_env_file(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return _environment([line for line in lines if line and not line.startswith("#")])


def _mounts(volumes, base: Path) -> list[tuple[str, Path]]:
    mounts = []
    for v in volumes or []:
        source, target = (v.get("source"), v.get("target")) if isinstance(v, dict) else (str(v).split(":") + [""])[:2]
        if source and target:  # (an anonymous volume has nothing to map)
            named = not source.startswith((".", "/", "~"))
            mounts.append((target, base / "deploy" / source if named else (base / Path(source).expanduser()).resolve()))
    return sorted(mounts, key=lambda m: -len(m[0]))


def _depends(raw) -> dict[str, str]:
    if isinstance(raw, dict):
        return {name: (c or {}).get("condition", "service_started") for name, c in raw.items()}
    return {name: "service_started" for name in raw or []}


def _restarts(name: str, policy) -> float:
    """Compose's ``restart:`` as a number of restarts after failures."""
    text = str(policy)
    if text in ("no", "False", "false"):
        return 0
    if text in ("always", "unless-stopped", "on-failure"):
        return float("inf")
    if text.startswith("on-failure:") and text.split(":", 1)[1].isdigit():
        return int(text.split(":", 1)[1])
    raise ComposeError(f"service {name}: restart {policy!r}: expected no, always, unless-stopped, on-failure[:N]")


def _service(name: str, spec: dict, base: Path) -> Service:
    if spec.get("entrypoint") not in (None, "privbandit", ["privbandit"]):
        raise ComposeError(f"service {name}: a custom entrypoint cannot run here")
    image = str(spec.get("image", ""))
    if "build" not in spec and not image.startswith(("eclipse-mosquitto", "nats:")):
        raise ComposeError(f"service {name}: image {image!r} cannot run here (only ours, eclipse-mosquitto and nats)")
    command = spec.get("command") or []
    env_files = spec.get("env_file") or []
    svc = Service(name, shlex.split(command) if isinstance(command, str) else [str(c) for c in command],
                  _environment(spec.get("environment")),
                  [base / (f["path"] if isinstance(f, dict) else f) for f in
                   ([env_files] if isinstance(env_files, str) else env_files)],
                  _mounts(spec.get("volumes"), base), _depends(spec.get("depends_on")), image, "build" not in spec,
                  _restarts(name, spec.get("restart", "no")))
    svc.command = [svc.to_host(a) for a in svc.command]
    svc.env = {k: svc.to_host(v) for k, v in svc.env.items()}
    test = (spec.get("healthcheck") or {}).get("test")
    if isinstance(test, list) and test[:1] == ["CMD"]:
        svc.healthcheck = [svc.to_host(str(a)) for a in test[1:]]
    if svc.command[:1] == ["broker-config"] and "--dynsec-plugin" in svc.command[:-1]:
        # The plugin of the broker's image; here, this machine's (or, if none, the broker fails to
        # start, saying so: host_conf).
        at = svc.command.index("--dynsec-plugin") + 1
        local = find_dynsec_plugin()
        if not Path(svc.command[at]).is_file() and local is not None:
            svc.command[at] = str(local)
    # Healthchecks are Docker's; here the parties would all mark themselves alive in one host file.
    svc.env.pop("PRIVBANDIT_HEALTH_FILE", None)
    if "--dashboard-host" in svc.command[:-1]:
        # In its container the dashboard listens on every address, behind a port Docker publishes
        # on the host's loopback; a local process listens on the loopback itself.
        svc.command[svc.command.index("--dashboard-host") + 1] = "127.0.0.1"
    return svc


def interpolate(text: str, variables: dict[str, str]) -> str:
    """Compose's variable substitution: ``${VAR:-default}`` when VAR is unset or empty,
    ``${VAR-default}`` when it is unset only (so an env file can set a value empty); ``$$`` is ``$``."""
    def value(m: re.Match) -> str:
        if m[0] == "$$":  # an escaped $: `$${A}` is the text ${A}, not A's value after a $
            return "$"
        got = variables.get(m[1])
        if got is None or (got == "" and m[2] == ":"):
            return m[3] or ""
        return got

    return _VAR.sub(value, text)


def load(compose_file: Path, workdir: Path | None = None, *, profiles=(),
         env_file: Path | None = None) -> dict[str, Service]:
    """The services of ``compose_file``, their paths already rewritten to host paths: those without
    ``profiles:`` and those with one of ``profiles``. Variables come from the environment, then
    ``env_file`` (as Compose: the shell's win)."""
    try:
        variables = (read_env_file(Path(env_file)) if env_file is not None else {}) | dict(os.environ)
        doc = yaml.safe_load(interpolate(Path(compose_file).read_text(), variables)) or {}
    except (OSError, ValueError, yaml.YAMLError) as exc:  # ValueError: not UTF-8
        where = exc.filename if isinstance(exc, OSError) else compose_file  # (the env file, too)
        raise ComposeError(f"cannot read {where}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("services", {}), dict):
        raise ComposeError(f"{compose_file}: expected a map with a 'services' map at the top level")
    base = Path(workdir or Path(compose_file).parent).resolve()
    services = {}
    for name, spec in doc.get("services", {}).items():
        if not isinstance(spec, dict):
            raise ComposeError(f"service {name}: expected a map, got {type(spec).__name__}")
        if spec.get("profiles") and not set(map(str, spec["profiles"])) & set(profiles):
            continue  # (Compose starts it only with one of its profiles)
        try:
            services[str(name)] = _service(str(name), spec, base)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a field of the wrong shape
            raise ComposeError(f"service {name}: malformed ({type(exc).__name__}: {exc})") from None
    return services


def start_order(services: dict[str, Service]) -> list[str]:
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name not in services:
            raise ComposeError(f"service {path[-1]} depends on unknown service {name}")
        if name in path:
            raise ComposeError(f"depends_on cycle: {' → '.join(path + (name,))}")
        for dep in services[name].depends:
            visit(dep, path + (name,))
        if name not in order:
            order.append(name)

    for name in services:
        visit(name, ())
    return order


# --- the broker ---------------------------------------------------------------------------------

def _conf(broker: Service) -> Path:
    conf = Path(broker.command[broker.command.index("-c") + 1]) if "-c" in broker.command else None
    if conf is None or not conf.is_file():
        raise ComposeError(f"service {broker.name}: no conf file in {broker.command} (did its config service run?)")
    return conf


def _tls(conf: Path) -> bool:
    """Does the conf's listener speak TLS (a ``certfile``)?"""
    return any(line.split()[:1] == ["certfile"] for line in conf.read_text().splitlines())


def host_conf(broker: Service, port: int) -> Path:
    """The generated mosquitto.conf with host paths and one listener, on 127.0.0.1:``port``, where
    its first listener was (the TLS lines after it are that listener's)."""
    conf = _conf(broker)
    lines: list[str] = []
    for line in conf.read_text().splitlines():
        words = line.split()
        if words[:1] == ["listener"] and not any(w.startswith("listener ") for w in lines):
            lines.append(f"listener {port} 127.0.0.1")
        elif words[:1] not in (["listener"], ["port"], ["bind_address"]):
            lines.append(" ".join(broker.to_host(word) for word in line.split(" ")))
            plugin = lines[-1].split(" ", 1)[1] if words[:1] == ["plugin"] else None
            if plugin is not None and not Path(plugin).is_file():
                raise ComposeError(f"service {broker.name}: its conf loads {plugin}, which is not on this machine "
                                   "(the dynsec backend needs Mosquitto's dynamic-security plugin: install "
                                   "mosquitto, or give the config service --backend acl_file)")
    if not any(w.startswith("listener ") for w in lines):
        lines.append(f"listener {port} 127.0.0.1")
    out = conf.with_name("mosquitto.host.conf")
    out.write_text("\n".join(lines + [""]))
    return out


def start_broker(broker: Service, run_id: str, stack: ExitStack) -> str:
    """Start the broker service here; returns its URL."""
    binary = mosquitto_binary()
    if binary is None:
        from privbandit.services.embedded_broker import start_embedded_broker

        if _tls(_conf(broker)):
            raise ComposeError(f"service {broker.name}: its conf listens with TLS, which the embedded broker "
                               "(used here without a mosquitto binary) does not: install mosquitto")

        print(f"[up] {broker.name}: no mosquitto binary, using the embedded broker (same passwords and ACL)",
              file=sys.stderr)
        creds = read_env_file(_conf(broker).with_name("credentials.env"))
        passwords = {k.removeprefix("PRIVBANDIT_").removesuffix("_PASSWORD").lower(): pw for k, pw in creds.items()}
        return stack.enter_context(start_embedded_broker(run_id, passwords)).url
    try:
        mosquitto = start_on_free_port(lambda port: host_conf(broker, port), log=broker.log, binary=binary,
                                       timeout=BROKER_START_S)
    except MosquittoError:
        raise _failed(broker, "did not start (mosquitto)") from None
    broker.proc = mosquitto.proc  # supervised, restarted and stopped like every service
    stack.callback(_stop, broker)
    return f"mqtts://127.0.0.1:{mosquitto.port}" if _tls(mosquitto.conf) else mosquitto.url


def local_healthcheck(broker: Service, url: str) -> list[str] | None:
    """The broker's healthcheck, its ``-h``/``-p`` (the container's own listener) pointed at
    ``url``; None if it has no ``CMD`` healthcheck or its program is not on this machine."""
    argv = list(broker.healthcheck or [])
    if not argv or shutil.which(argv[0]) is None:
        return None
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    for option, value in (("-h", host), ("-p", port)):
        if option in argv[:-1]:
            argv[argv.index(option) + 1] = value
    return argv


def wait_healthy(broker: Service, url: str, timeout_s: float = HEALTHCHECK_S) -> bool:
    """Run the broker's healthcheck (:func:`local_healthcheck`) until it passes; False if there is
    none to run here. Raises ComposeError with its output if it has not passed in ``timeout_s``."""
    argv = local_healthcheck(broker, url)
    if argv is None:
        return False
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")} | broker.env
    end = time.monotonic() + timeout_s
    while True:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
            if done.returncode == 0:
                return True
            said = f"exit status {done.returncode}: {(done.stdout + done.stderr).strip()}"
        except subprocess.TimeoutExpired:
            said = f"no answer in {timeout_s:g} s"
        if time.monotonic() > end:
            raise ComposeError(f"service {broker.name}: its healthcheck {shlex.join(argv)} failed ({said})")
        time.sleep(0.2)


def check_broker(services: dict[str, Service], url: str, run_id: str, insecure: bool,
                 users: list[Service] | None = None) -> str:
    """Probe the broker at ``url`` with the roles' passwords of the generated credentials.env
    (:mod:`privbandit.services.broker_probe`); returns the verdict for ``summary.json``. Raises
    ComposeError saying what was readable by whom, unless ``insecure``. ``users``: the services
    that connect to it, whose CA file the probe uses (default: every service)."""
    from privbandit.services.broker_probe import BrokerInsecure, BrokerUnusable, check_broker as probe
    from privbandit.services.bus import BusSettings, read_credentials

    files = {s.env["PRIVBANDIT_CREDENTIALS_FILE"] for s in services.values() if "PRIVBANDIT_CREDENTIALS_FILE" in s.env}
    # Each party holds its own role's password only; the probe needs every role's (a topic only the
    # shuffler may read is checked with the shuffler's account), which the config step's full
    # credentials.env holds: `up`, the operator, reads it where `broker-config --out` wrote it.
    for svc in services.values():
        if svc.command[:1] == ["broker-config"] and "--out" in svc.command:
            full = Path(svc.command[svc.command.index("--out") + 1]) / "credentials.env"
            if full.is_file():
                files.add(str(full))
    cas = sorted({s.env["PRIVBANDIT_CA_FILE"] for s in (services.values() if users is None else users)
                  if s.env.get("PRIVBANDIT_CA_FILE")})  # (set empty: none, as BusSettings reads it)
    if cas and not url.startswith("mqtts://"):
        raise ComposeError(f"the parties connect with TLS (PRIVBANDIT_CA_FILE {cas[0]}), the broker at {url} without: "
                           "give an mqtts:// broker")
    try:
        passwords = {k: v for f in sorted(files) for k, v in read_credentials(f).items()}
        settings = BusSettings(broker_url=url, run_id=run_id, username=None, password=None, credentials_file=None,
                               ca_file=cas[0] if cas else None, cert_file=None, key_file=None)
        verdict, result = probe(settings, run_id, passwords, insecure)
    except (BrokerInsecure, BrokerUnusable, ValueError) as exc:
        raise ComposeError(str(exc)) from None
    if verdict != "enforced":
        print(f"[up] --insecure-broker: {url} does not enforce the trust model ({result.describe()}); running anyway",
              file=sys.stderr)
    return verdict


def _broker_users(services: dict[str, Service], broker: str) -> list[Service]:
    """The services whose PRIVBANDIT_BROKER_URL names the service ``broker``."""
    named = re.compile(rf"^mqtts?://{re.escape(broker)}(:\d+)?$")
    return [s for s in services.values() if named.match(s.env.get("PRIVBANDIT_BROKER_URL", ""))]


def _use_broker(services: dict[str, Service], broker: str, url: str) -> None:
    for svc in services.values():
        svc.env = {k: re.sub(rf"^mqtts?://{re.escape(broker)}(:\d+)?$", url, v) for k, v in svc.env.items()}


# --- the NATS nodes of the cluster profile ------------------------------------------------------

def _nats_conf(node: Service) -> tuple[Path, dict]:
    conf = _conf(node)
    try:  # JSON after the generated comment line (nats_files.render_nats_conf)
        return conf, json.loads("\n".join(ln for ln in conf.read_text().splitlines() if not ln.startswith("#")))
    except ValueError as exc:
        raise ComposeError(f"service {node.name}: {conf} is not the JSON `privbandit cluster --config-only` "
                           f"writes ({exc})") from None


def nats_host_conf(node: Service, names: set[str]) -> tuple[Path, str]:
    """The node's conf with the nodes' host names (``names``, their compose services) made
    127.0.0.1 on the same ports and container paths made host paths, written beside it (0600: it
    holds the passwords); returns (that file, the node's MQTT URL here)."""
    conf, doc = _nats_conf(node)

    def here(address: str) -> str:
        scheme, sep, rest = address.rpartition("://")
        host, _, port = rest.rpartition(":")
        return f"{scheme}{sep}127.0.0.1:{port}" if host in names else address

    for section in (doc, doc.get("mqtt", {}), doc.get("cluster", {})):
        if "listen" in section:
            section["listen"] = here(section["listen"])
    if "cluster" in doc:
        doc["cluster"]["routes"] = [here(r) for r in doc["cluster"].get("routes", [])]
    if "jetstream" in doc:
        doc["jetstream"]["store_dir"] = node.to_host(doc["jetstream"]["store_dir"])
    if "listen" not in doc.get("mqtt", {}):
        raise ComposeError(f"service {node.name}: {conf} has no MQTT listener (mqtt.listen)")
    out = conf.with_name(f"{conf.stem}.host.conf")
    write_with_mode(out, json.dumps(doc, indent=2), 0o600)  # it holds the accounts' passwords
    return out, f"mqtt://{doc['mqtt']['listen']}"


def start_nats(node: Service, names: set[str], stack: ExitStack) -> str:
    """Start the NATS node service here, on its conf's ports; returns its MQTT URL."""
    from privbandit.services.cluster import nats_binary

    binary = nats_binary()
    if binary is None:
        raise ComposeError(f"service {node.name}: nats-server is not installed (apt install nats-server)")
    conf, url = nats_host_conf(node, names)
    _popen(node, [binary, "-c", str(conf)])
    stack.callback(_stop, node)
    return url


def wait_cluster(nodes: list[Service], urls: list[str], run_id: str, timeout_s: float | None = None) -> None:
    """Until the nodes form a cluster that carries a QoS 1 message from the first node to every
    node (:func:`~privbandit.services.cluster.wait_ready`, as the launcher's account); raises
    ComposeError with the nodes' logs if a node exits or it is not ready in time."""
    from privbandit.services.bus import read_credentials
    from privbandit.services.cluster import _LEADER_LINE, READY_TIMEOUT_S, ClusterError, wait_ready

    end = time.monotonic() + (timeout_s or READY_TIMEOUT_S)
    # An MQTT CONNECT before the JetStream metadata leader is elected blocks and fails: wait for
    # the election first (as NatsCluster does), failing at once if a node died.
    while len(nodes) > 1 and time.monotonic() < end and not any(
            _LEADER_LINE in n.log.read_text(errors="replace") for n in nodes if n.log.exists()):
        if dead := [n for n in nodes if n.proc.poll() is not None]:
            raise _failed(dead[0], f"exited with code {dead[0].proc.returncode} before the cluster was ready")
        time.sleep(0.05)
    try:
        password = read_credentials(_conf(nodes[0]).with_name("credentials.env"))["launcher"]
        asyncio.run(wait_ready(urls, run_id, password, max(1.0, end - time.monotonic())))
    except (ClusterError, KeyError, ValueError) as exc:
        tails = "\n".join(f"--- {n.log} ---\n{log_tail(n.log)}" for n in nodes)
        raise ComposeError(f"the NATS nodes {', '.join(n.name for n in nodes)} did not become a cluster: "
                           f"{exc!r}\n{tails}") from None


# --- the processes ------------------------------------------------------------------------------

def _popen(svc: Service, argv: list[str], **kwargs) -> None:
    with open(svc.log, "ab") as log:
        try:
            svc.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        **kwargs)
        except OSError as exc:
            raise ComposeError(f"service {svc.name} failed to start: {exc}") from None


def _start(svc: Service, workdir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}  # none of yours leak in
    for path in svc.env_files:  # read now, not at load: an earlier one-shot service may write it
        try:
            env |= {k: svc.to_host(v) for k, v in read_env_file(path).items()}
        except OSError as exc:
            raise ComposeError(f"service {svc.name}: env_file {path}: {exc.strerror}") from None
    _popen(svc, [sys.executable, "-m", "privbandit", *svc.command], cwd=workdir, env=env | svc.env)


def _stop(svc: Service) -> None:
    stop_process(svc.proc)


def _failed(svc: Service, what: str) -> ComposeError:
    return ComposeError(f"service {svc.name} {what}; last lines of {svc.log}:\n{log_tail(svc.log)}")


def _restartable(svc: Service, code: int | None) -> bool:
    return code is not None and code not in (0, USAGE_ERROR) and svc.restarts > 0


def _restart(svc: Service, code: int, workdir: Path) -> None:
    svc.restarts -= 1
    print(f"[up] {svc.name}: exited with code {code}; restarting it", file=sys.stderr)
    if svc.is_broker:
        _popen(svc, svc.proc.args)  # same conf, same port: the parties reconnect
    else:
        _start(svc, workdir)


def _supervise(observer: Service, running: list[Service], deadline: float | None, workdir: Path) -> None:
    """Until the observer exits for good; a service that fails (or a broker that stops) before is
    an error, unless its restart policy lets it start again (the observer's too)."""
    while observer.proc.poll() is None or _restartable(observer, observer.proc.returncode):
        for svc in running:
            code = svc.proc.poll()
            if svc is observer:
                if _restartable(svc, code):
                    _restart(svc, code, workdir)
            elif code is not None and (code != 0 or svc.is_broker):
                if not _restartable(svc, code):
                    raise _failed(svc, f"exited with code {code} before the observer finished")
                _restart(svc, code, workdir)
        if deadline is not None and time.monotonic() > deadline:
            raise _failed(observer, "did not finish in time")
        time.sleep(0.2)
    end = time.monotonic() + (PARTY_EXIT_WAIT_S if observer.proc.returncode == 0 else 0)
    for svc in running:
        if not svc.is_broker:
            try:
                svc.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # stopped on the way out


def up(compose_file: Path, broker_url: str | None = None, workdir: Path | None = None,
       *, timeout_s: float | None = None, insecure_broker: bool = False, profiles=(),
       env_file: Path | None = None) -> int:
    """Run the compose topology as local processes; returns the observer's exit code.

    ``broker_url``: a running broker to use instead of the file's broker service; the parties
    log in with the generated credentials, so that broker must run the generated conf
    (``deploy/generated/mosquitto.conf``) or at least accept them. Either broker is probed before
    any party starts: one that lets a role or an anonymous client read what the ACL denies is
    refused (ComposeError) unless ``insecure_broker``; so is every NATS node (``profiles``
    ``cluster``), once the nodes form a cluster. ``profiles``, ``env_file``: as :func:`load`.
    """
    workdir = Path(workdir or Path(compose_file).parent).resolve()
    services = load(compose_file, workdir, profiles=profiles, env_file=env_file)
    observer = next((s for s in services.values() if s.command[:1] == ["observer"] and "--out" in s.command),
                    None)
    if observer is None:
        raise ComposeError(f"{compose_file}: no service runs `observer ... --out DIR`")
    out = Path(observer.command[observer.command.index("--out") + 1])
    (out / "logs").mkdir(parents=True, exist_ok=True)
    for svc in services.values():
        svc.log = out / "logs" / f"compose-{svc.name}.log"
        svc.log.unlink(missing_ok=True)
    one_shots = {d for s in services.values() for d, condition in s.depends.items() if condition == ONE_SHOT}
    run_id = next((s.env["PRIVBANDIT_RUN_ID"] for s in services.values() if "PRIVBANDIT_RUN_ID" in s.env),
                  "default")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with ExitStack() as stack:
        running: list[Service] = []
        pending: list[Service] = []  # one-shots started and not yet waited for: they run side by side

        def finish(names: set[str]) -> None:
            """Wait for the one-shots ``names``; any one-shot that has already failed stops `up` now."""
            for one in [p for p in pending if p.name in names or p.proc.poll() not in (None, 0)]:
                if one.proc.wait() != 0:
                    raise _failed(one, f"exited with code {one.proc.returncode}")
                pending.remove(one)
                print(f"[up] {one.name}: done", file=sys.stderr)

        verdicts: list[str] = []  # the probes' of every broker a party uses
        nats = {n: s for n, s in services.items() if s.is_nats}
        nodes: list[tuple[Service, str]] = []  # NATS nodes started, not yet checked
        order = start_order(services)
        # The parties last, once every broker (the NATS nodes too: no party depends on them) is up.
        parties = [n for n in order if not services[n].is_broker and n not in one_shots]
        for name in [n for n in order if n not in parties] + parties:
            svc = services[name]
            finish({d for d, condition in svc.depends.items() if condition == ONE_SHOT})
            if svc.is_nats:
                nodes.append((svc, start_nats(svc, set(nats), stack)))
                running.append(svc)
                print(f"[up] {name}: started, log {svc.log}", file=sys.stderr)
                continue
            if svc.is_broker:
                url = broker_url or start_broker(svc, run_id, stack)
                if not broker_url and any(s.depends.get(name) == HEALTHY for s in services.values()):
                    # (else its listening port and the probe below are all `up` waits for)
                    print(f"[up] {name}: healthy" if wait_healthy(svc, url) else
                          f"[up] {name}: no healthcheck to run here ({(svc.healthcheck or ['none'])[0]})",
                          file=sys.stderr)
                if users := _broker_users(services, name):
                    verdicts.append(check_broker(services, url, run_id, insecure_broker, users))
                    print(f"[up] {name}: {url} (ACL {verdicts[-1]})", file=sys.stderr)
                else:
                    print(f"[up] {name}: {url} (no party connects to it: not probed)", file=sys.stderr)
                _use_broker(services, name, url)
                running += [svc] if svc.proc else []
                continue
            if nodes and name not in one_shots:  # the first party: the cluster must be ready, each node probed
                wait_cluster([n for n, _ in nodes], [u for _, u in nodes], run_id)
                for node, url in nodes:
                    users = _broker_users(services, node.name)
                    verdicts.append(check_broker(services, url, run_id, insecure_broker, users))
                    _use_broker(services, node.name, url)
                    print(f"[up] {node.name}: {url} (ACL {verdicts[-1]}; parties: "
                          f"{', '.join(s.name for s in users) or 'none'})", file=sys.stderr)
                nodes = []
            if svc.command[:1] == ["observer"] and verdicts:  # it writes summary.json: broker.acl
                svc.env[BROKER_ACL_ENV] = "insecure" if "insecure" in verdicts else "enforced"
            _start(svc, workdir)
            stack.callback(_stop, svc)
            if name in one_shots:
                pending.append(svc)
            else:
                running.append(svc)
                print(f"[up] {name}: started, log {svc.log}", file=sys.stderr)
                if "--dashboard" in svc.command:
                    from privbandit.services.dashboard import DEFAULT_PORT

                    port = svc.command[svc.command.index("--dashboard-port") + 1] if "--dashboard-port" in svc.command \
                        else DEFAULT_PORT
                    print(f"[up] {name}: dashboard at http://127.0.0.1:{port}/ while the session runs", file=sys.stderr)
        finish({p.name for p in pending})
        _supervise(observer, running, deadline, workdir)
    code = observer.proc.returncode
    print(f"[up] results in {out}" if code == 0 else
          f"[up] observer exited with code {code}; last lines of {observer.log}:\n{log_tail(observer.log)}",
          file=sys.stderr)
    return code
