"""docker-compose.yml: valid, each party sees only what its role may know, and it runs.

There is no Docker engine here: `privbandit.services.compose.up` runs the same services, commands
and environments as local processes, against a local Mosquitto with the generated conf and ACL
(TLS, the dynamic-security plugin, the broker's healthcheck), restarting a killed party as the
file's restart policy says.
"""

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiomqtt
import psutil
import pytest
import typer
import yaml
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.runner import config as experiment_files
from privbandit.protocol.primitives.seeding import analyzer_master_key
from privbandit.services import acl, compose
from privbandit.services.broker_cli import make_tls_files
from privbandit.services.bus import BusSettings, connect, read_credentials
from privbandit.services.checkpoint import FILE_NAME, progress
from tests.services.test_distributed import _inproc, assert_same_numbers, refusals
from tests.needs import missing

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
PARTIES = ("observer", "analyzer", "aggregator", "users-0", "users-1")
CHECKPOINTING = ("observer", "analyzer", "aggregator")  # the parties with a --state-dir
SHORT = {"horizon": "40_000", "runs": "2"}  # the demo the `up` sessions run (300,000 × 3 in the file)


def _raw(variables: dict[str, str] | None = None) -> dict:
    """The file as Compose reads it with no variable set (``variables``: these set)."""
    return yaml.safe_load(compose.interpolate(COMPOSE.read_text(), variables or {}))


def _mounts() -> dict[str, dict[str, str]]:
    """service → {volume or bind source: container path[:ro]}."""
    return {name: {str(v).split(":", 1)[0]: str(v).split(":", 1)[1] for v in spec.get("volumes", [])}
            for name, spec in _raw()["services"].items()}


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _workdir(tmp_path: Path, edit=lambda text: text, demo_sets: dict[str, str] | None = None) -> Path:
    """A copy of what the compose file needs, so the real ./deploy and ./results stay untouched,
    with the dashboard on a free port (tests run side by side). ``demo_sets``: top-level settings
    of the copied demo.toml to replace (each must be there)."""
    (tmp_path / "experiments").mkdir(parents=True)
    demo = (REPO / "experiments" / "demo.toml").read_text()
    for key, value in (demo_sets or {}).items():
        demo, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", demo, count=1, flags=re.M)
        assert n == 1, f"demo.toml has no top-level {key}"
    (tmp_path / "experiments" / "demo.toml").write_text(demo)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "docker-compose.yml").write_text(edit(COMPOSE.read_text()).replace("8050", str(port)))
    return tmp_path


# --- the file -----------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [[], ["--profile", "cluster"], ["--profile", "cluster", "--env-file", "cluster.env"]])
def test_docker_compose_validates_the_file(options):
    if shutil.which("docker-compose") is None:
        missing("docker-compose is not installed (apt-get install docker-compose)")
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), *options, "config", "-q"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_analyzer_is_never_given_the_experiment(tmp_path):
    spec = _raw()["services"]["analyzer"]
    assert spec["command"] == ["analyzer", "--state-dir", "/state"] and "env_file" not in spec
    for value in [*spec["volumes"], *spec["environment"].values()]:
        assert "experiment" not in str(value) and ".toml" not in str(value), value
    for inside, host in compose.load(COMPOSE, tmp_path)["analyzer"].mounts:  # and so not under `privbandit up`
        assert not host.is_relative_to(tmp_path / "experiments"), (inside, host)
    # Its key comes from a volume only the keys service (which reads the seed) and it mount.
    assert {name for name, spec in _raw()["services"].items()
            if any(str(v).startswith("analyzer-key:") for v in spec.get("volumes", []))} == {"keys", "analyzer"}
    # The session's secrets (issue #32): drawn by one one-shot that reads no experiment; the
    # users' report key and the fleets' master only there and at the aggregator, each fleet's keys
    # only at that fleet, the observer's copy of the users' key only at the observer.
    mounts = {name: [str(v).split(":")[0] for v in spec.get("volumes", [])] for name, spec in _raw()["services"].items()}
    assert "./experiments" not in mounts["session-keys"]
    for volume, holders in (("users-0-key", {"session-keys", "users-0"}), ("users-1-key", {"session-keys", "users-1"}),
                            ("session-key", {"session-keys", "aggregator"}), ("observer-key", {"session-keys", "observer"})):
        assert {name for name, used in mounts.items() if volume in used} == holders, volume
    # Whoever mounts the experiments mounts them read-only; only the observer writes results.
    for name, spec in _raw()["services"].items():
        for volume in spec.get("volumes", []):
            if volume.startswith("./experiments:"):
                assert volume.endswith(":ro"), (name, volume)
            if volume.startswith("./results"):
                assert name == "observer"


def test_every_command_matches_the_cli():
    commands = typer.main.get_command(app).commands
    used = {}
    for name, svc in compose.load(COMPOSE, profiles=["cluster"]).items():
        if not svc.is_broker:
            cmd, *args = svc.command
            assert cmd in commands, f"service {name}: `privbandit {cmd}` does not exist"
            options = {opt for param in commands[cmd].params for opt in param.opts}
            for arg in args:
                assert not arg.startswith("-") or arg in options, f"service {name}: `privbandit {cmd}` has no {arg}"
            used[cmd] = name
    assert set(used) >= {"broker-config", "keys", "observer", "analyzer", "aggregator", "users", "cluster"}
    runner = CliRunner()
    for cmd, name in used.items():
        result = runner.invoke(app, [cmd, "--help"])
        assert result.exit_code == 0, f"service {name}: privbandit {cmd} --help: {result.stderr}"


def test_the_parties_agree_on_broker_run_and_roles():
    services = _raw()["services"]
    config = services["config"]["command"]
    run_id, port = config[config.index("--run-id") + 1], config[config.index("--port") + 1]
    observer = services["observer"]["command"]
    assert set(observer[observer.index("--parties") + 1].split(",")) == set(PARTIES) - {"observer"}
    for i in range(2):
        assert services[f"users-{i}"]["command"][:3] == ["users", "--shard", f"{i}/2"]
    for name in PARTIES:
        env = services[name]["environment"]
        assert env["PRIVBANDIT_BROKER_URL"] == f"mqtts://broker:{port}"
        assert env["PRIVBANDIT_RUN_ID"] == run_id
        assert env["PRIVBANDIT_USERNAME"] == name.split("-")[0]
        # Its role's password alone: no party mounts the broker's files (every role's password).
        role = name.split("-")[0]
        assert env["PRIVBANDIT_CREDENTIALS_FILE"] == "/secret/credentials.env"
        assert f"{role}-secret:/secret:ro" in services[name]["volumes"]
        assert not any(v.startswith("generated:") for v in services[name]["volumes"]), name
        assert f"{role}=/secret-{role}" in config and f"{role}-secret:/secret-{role}" in services["config"]["volumes"]
    mounts = {name: {v.split(":")[0] for v in spec.get("volumes", [])} for name, spec in services.items()}
    for role in ("observer", "analyzer", "aggregator", "users"):  # its secret: config and its own parties only
        assert {n for n, m in mounts.items() if f"{role}-secret" in m} == {"config", *(p for p in PARTIES if p.split("-")[0] == role)}
    assert services["broker"]["command"] == ["mosquitto", "-c", "/config/mosquitto.conf"]
    assert services["broker"]["depends_on"]["config"]["condition"] == compose.ONE_SHOT


def test_every_container_is_locked_down_and_every_image_pinned():
    """#21 section 4: no service runs with a writable image, a capability, privilege gain or
    unbounded memory and processes; the broker's image and the Dockerfile's base are pinned to a
    release (x.y.z), not a floating tag."""
    services = _raw()["services"]
    for name, spec in services.items():
        assert spec.get("read_only") is True, name
        assert spec.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in spec.get("security_opt", []), name
        assert spec.get("mem_limit") and spec.get("pids_limit"), name
    assert re.fullmatch(r"eclipse-mosquitto:\d+\.\d+\.\d+", services["broker"]["image"])
    base = re.search(r"^FROM (\S+)", (REPO / "Dockerfile").read_text(), re.M)[1]
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim", base), base


def test_every_party_reaches_the_broker_over_tls_verified_against_the_generated_ca():
    """#21 §4: the broker's listener is TLS only, with the certificate `tls` made; every party
    verifies it against that CA, mounted read-only; the broker's key is seen by the broker (and the
    one-shots that write and check it) alone. The conf `config` writes from this is checked in
    test_the_broker_healthcheck_…; the parties connecting over TLS in test_up_runs_…."""
    services, mounts = _raw()["services"], _mounts()
    tls, config = services["tls"]["command"], services["config"]["command"]
    assert tls[0] == "tls-files" and {"broker", "localhost", "127.0.0.1"} <= {
        tls[i + 1] for i, word in enumerate(tls) if word == "--host"}  # (its name, its healthcheck's, `up`'s)
    cert_dir, ca_dir = _option(tls, "--out"), _option(tls, "--ca-dir")
    assert mounts["tls"] == {"broker-tls": cert_dir, "ca": ca_dir}
    assert _option(config, "--tls-cert") == f"{cert_dir}/broker.pem"
    assert _option(config, "--tls-key") == f"{cert_dir}/broker.key"
    assert "--client-ca" not in config  # (the parties authenticate with their accounts: docs/compose.md)
    assert {name for name, m in mounts.items() if "broker-tls" in m} == {"tls", "config", "broker"}
    assert mounts["config"]["broker-tls"].endswith(":ro") and mounts["broker"]["broker-tls"] == f"{cert_dir}:ro"
    assert services["config"]["depends_on"]["tls"]["condition"] == compose.ONE_SHOT
    for name in PARTIES:
        env = services[name]["environment"]
        assert env["PRIVBANDIT_BROKER_URL"].startswith("mqtts://broker:"), name
        assert env["PRIVBANDIT_CA_FILE"] == f"{ca_dir}/ca.pem" and mounts[name]["ca"] == f"{ca_dir}:ro", name


def test_the_broker_is_healthy_before_any_party_starts():
    services = _raw()["services"]
    test = services["broker"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "mosquitto_sub"] and "-P" not in test and "-u" not in test  # the login is in a file
    assert _option(test, "--cafile") == services["analyzer"]["environment"]["PRIVBANDIT_CA_FILE"]
    config = services["config"]["command"]
    assert _option(test, "-p") == _option(config, "--port") and _option(test, "-h") == "localhost"
    # mosquitto_sub reads its login from $XDG_CONFIG_HOME/mosquitto_sub, which `config` writes
    assert services["broker"]["environment"]["XDG_CONFIG_HOME"] == _option(config, "--out")
    for name in PARTIES:
        assert services[name]["depends_on"]["broker"]["condition"] == compose.HEALTHY, name


def test_the_dynsec_backend_with_the_broker_images_plugin():
    config = _raw()["services"]["config"]["command"]
    assert _option(config, "--backend") == "dynsec"
    # where the eclipse-mosquitto image installs it (its Dockerfile); `up` uses this machine's
    assert _option(config, "--dynsec-plugin") == "/usr/lib/mosquitto_dynamic_security.so"


def test_broker_config_writes_the_broker_images_plugin_path_as_given(tmp_path):
    """The image that runs `config` has no Mosquitto: --dynsec-plugin is the broker's path, not
    looked for here; `up` gives its config step this machine's plugin instead."""
    elsewhere = "/nowhere/mosquitto_dynamic_security.so"
    result = CliRunner().invoke(app, ["broker-config", "--out", str(tmp_path / "a"), "--backend", "dynsec",
                                      "--dynsec-plugin", elsewhere])
    assert result.exit_code == 0, result.output
    assert f"plugin {elsewhere}\n" in (tmp_path / "a" / "mosquitto.conf").read_text()
    assert f"the conf loads {elsewhere}, not on this machine" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["broker-config", "--out", str(tmp_path / "b"), "--backend", "dynsec",
                                      "--dynsec-plugin", "relative.so"])  # a relative path is looked for here
    assert result.exit_code == 2 and "mosquitto_dynamic_security.so not found (relative.so)" in result.output
    local = compose.load(COMPOSE, tmp_path)["config"].command
    if acl.find_dynsec_plugin() is not None:
        assert _option(local, "--dynsec-plugin") == str(acl.find_dynsec_plugin())


def test_every_party_restarts_and_the_checkpointing_ones_keep_their_state_for_one_session():
    """A crashed party is restarted (restart policy); the analyzer, the aggregator and the observer
    resume from a state volume of their own, which the `state` one-shot, run before each session,
    empties: a restart within the session keeps it, a new session does not find it."""
    services, mounts = _raw()["services"], _mounts()
    reset = services["state"]["command"]
    assert reset[0] == "reset-state"
    for name in PARTIES:
        assert re.fullmatch(r"on-failure:\d+", services[name]["restart"]), name
    for name in CHECKPOINTING:
        state = _option(services[name]["command"], "--state-dir")
        volume = f"{name}-state"
        assert mounts[name][volume] == state, name  # its own volume, writable
        assert {n for n, m in mounts.items() if volume in m} == {name, "state"}, name
        assert mounts["state"][volume] in reset[1:], name  # emptied before the session
        assert services[name]["depends_on"]["state"]["condition"] == compose.ONE_SHOT, name
    assert len(reset) == 1 + len(CHECKPOINTING)
    # Under `privbandit up` they are host directories, one per party.
    local = compose.load(COMPOSE, REPO)
    dirs = [_option(local[name].command, "--state-dir") for name in CHECKPOINTING]
    assert len(set(dirs)) == len(dirs) and sorted(dirs) == sorted(local["state"].command[1:])


def test_reset_state_removes_the_checkpoints_only(tmp_path):
    runner = CliRunner()
    (tmp_path / "a").mkdir()
    for name in (FILE_NAME, f".{FILE_NAME}.tmp-123", "notes.txt"):
        (tmp_path / "a" / name).write_bytes(b"x")
    result = runner.invoke(app, ["reset-state", str(tmp_path / "a"), str(tmp_path / "missing")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["reset-state", str(tmp_path / "file")])
    assert result.exit_code == 2 and "not a directory" in result.stderr


def test_tls_files_are_kept_while_valid_and_renewed_before_they_expire(tmp_path):
    from cryptography import x509

    ca, cert, key, new = make_tls_files(tmp_path / "tls", tmp_path / "ca", ["broker", "127.0.0.1"])
    assert new and oct(key.stat().st_mode & 0o777) == "0o600" and sorted(p.name for p in ca.parent.iterdir()) == ["ca.pem"]
    x509.load_pem_x509_certificate(cert.read_bytes()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(ca.read_bytes()))
    assert make_tls_files(tmp_path / "tls", tmp_path / "ca", ["broker"])[3] is False  # kept: covers broker
    assert make_tls_files(tmp_path / "tls", tmp_path / "ca", ["broker", "other"])[3] is True  # a new name
    assert make_tls_files(tmp_path / "tls", tmp_path / "ca", ["broker"], rotate=True)[3] is True
    make_tls_files(tmp_path / "tls", tmp_path / "ca", ["broker"], days=10, rotate=True)
    assert make_tls_files(tmp_path / "tls", tmp_path / "ca", ["broker"])[3] is True  # < 30 days left: renewed
    with pytest.raises(ValueError, match="--host 'a b': must be an IP address or a DNS name"):
        make_tls_files(tmp_path / "tls", tmp_path / "ca", ["a b"])


def test_every_party_has_a_healthcheck_on_the_file_it_marks_alive():
    services = _raw()["services"]
    for name in PARTIES:
        spec = services[name]
        alive = spec["environment"]["PRIVBANDIT_HEALTH_FILE"]
        test = spec["healthcheck"]["test"]
        assert test[:4] == ["CMD", "privbandit", "health", alive], name
        assert alive.startswith("/tmp/") and "/tmp" in services[name]["tmpfs"]  # writable in a read-only image
    local = compose.load(COMPOSE, REPO)
    assert not any("PRIVBANDIT_HEALTH_FILE" in svc.env for svc in local.values())  # `up` runs no healthchecks


def test_the_dashboard_is_published_on_the_hosts_loopback_only():
    observer = _raw()["services"]["observer"]
    command = observer["command"]
    port = command[command.index("--dashboard-port") + 1]
    assert "--dashboard" in command and command[command.index("--dashboard-host") + 1] == "0.0.0.0"
    assert observer["ports"] == [f"127.0.0.1:{port}:{port}"]  # not 0.0.0.0 of the host
    assert [name for name, spec in _raw()["services"].items() if "ports" in spec] == ["observer"]


# --- how `privbandit up` maps it here --------------------------------------------------------------

def test_container_paths_become_host_paths(tmp_path):
    services = compose.load(COMPOSE, tmp_path)

    def option(service: str, name: str) -> str:
        command = services[service].command
        return command[command.index(name) + 1]

    assert option("observer", "--out") == str(tmp_path / "results" / "compose")
    assert option("observer", "--dashboard-host") == "127.0.0.1"  # 0.0.0.0 in its container
    assert option("observer", "--experiment") == str(tmp_path / "experiments" / "demo.toml")
    assert option("config", "--out") == str(tmp_path / "deploy" / "generated")
    assert option("keys", "--out") == str(tmp_path / "deploy" / "analyzer-key")
    assert services["observer"].env["PRIVBANDIT_CREDENTIALS_FILE"] == str(tmp_path / "deploy/observer-secret/credentials.env")
    key_file = services["analyzer"].env["PRIVBANDIT_ANALYZER_KEY_FILE"]
    assert key_file == str(tmp_path / "deploy/analyzer-key/analyzer.env")
    order = compose.start_order(services)
    assert order.index("config") < order.index("broker") < order.index("observer")
    assert order.index("keys") < order.index("analyzer")


def test_the_broker_conf_is_rewritten_for_the_host(tmp_path):
    broker = compose.load(COMPOSE, tmp_path)["broker"]
    generated = tmp_path / "deploy" / "generated"
    generated.mkdir(parents=True)
    (generated / "mosquitto.conf").write_text(  # as written inside the config container
        "per_listener_settings false\nlistener 8883 0.0.0.0\ncertfile /tls/broker.pem\nkeyfile /tls/broker.key\n"
        "allow_anonymous false\npassword_file /config/passwd\nacl_file /config/acl\n")
    lines = compose.host_conf(broker, 5555).read_text().splitlines()
    # The listener where it was: the TLS lines after it are its own (before any, Mosquitto would
    # give them to a default listener, and this one would speak plain MQTT).
    assert lines == ["per_listener_settings false", "listener 5555 127.0.0.1",
                     f"certfile {tmp_path}/deploy/broker-tls/broker.pem", f"keyfile {tmp_path}/deploy/broker-tls/broker.key",
                     "allow_anonymous false", f"password_file {generated}/passwd", f"acl_file {generated}/acl"]
    (generated / "mosquitto.conf").write_text("listener 8883 0.0.0.0\nplugin /no/such/plugin.so\n")
    with pytest.raises(compose.ComposeError, match="loads /no/such/plugin.so, which is not on this machine"):
        compose.host_conf(broker, 5555)


async def _connect(url: str, username: str, password: str) -> None:
    host, port = url.removeprefix("mqtt://").split(":")
    async with aiomqtt.Client(host, int(port), username=username, password=password, identifier="probe", timeout=5):
        pass


@pytest.mark.parametrize("kind", ["mosquitto", "embedded"])
def test_the_local_broker_enforces_the_generated_passwords(tmp_path, monkeypatch, kind):
    if kind == "mosquitto" and compose.mosquitto_binary() is None:
        missing("no mosquitto binary")
    if kind == "embedded":
        monkeypatch.setattr(compose, "mosquitto_binary", lambda: None)
    broker = compose.load(COMPOSE, tmp_path)["broker"]
    broker.log = tmp_path / "broker.log"
    files = acl.write_broker_config(tmp_path / "deploy" / "generated", "compose", 1883, host="0.0.0.0")
    with ExitStack() as stack:
        url = compose.start_broker(broker, "compose", stack)
        services = {"observer": compose.Service("observer", [], {"PRIVBANDIT_CREDENTIALS_FILE": str(files.credentials)},
                                                [], [], {}, "", False)}
        assert compose.check_broker(services, url, "compose", insecure=False) == "enforced"
        asyncio.run(_connect(url, "analyzer", files.password("analyzer")))
        with pytest.raises(aiomqtt.MqttError):
            asyncio.run(_connect(url, "analyzer", files.password("users")))


def _plain(text: str) -> str:
    """The compose file without TLS between the parties and the broker."""
    return text.replace("mqtts://broker:8883", "mqtt://broker:8883").replace(
        "  PRIVBANDIT_CA_FILE: ${PRIVBANDIT_CA_FILE-/ca/ca.pem}\n", "")


def test_an_anonymous_external_broker_is_refused_naming_what_was_readable(tmp_path, mosquitto_url):
    """What `up --broker` does before starting any party (the one-shot services have run): the
    probe with the generated accounts; test_up_runs_… shows the verdict reaching summary.json."""
    with pytest.raises(compose.ComposeError, match=r"the parties connect with TLS \(PRIVBANDIT_CA_FILE .*/deploy/ca/"
                                                   rf"ca.pem\), the broker at {re.escape(mosquitto_url)} without"):
        compose.check_broker(compose.load(COMPOSE, tmp_path), mosquitto_url, "compose", insecure=True)
    work = _workdir(tmp_path / "plain", _plain)
    files = acl.write_broker_config(work / "deploy" / "generated", "compose", 1883, host="0.0.0.0")
    for role in ("observer", "analyzer", "aggregator", "users"):  # as the config service writes them
        acl.write_role_credentials(files, role, work / "deploy" / f"{role}-secret")
    services = compose.load(work / "docker-compose.yml", work)
    with pytest.raises(compose.ComposeError, match=r"does not enforce the trust model for run compose: anonymous read "
                                                   r"plans, .*; analyzer read plans, reports \(aggregator"):
        compose.check_broker(services, mosquitto_url, "compose", insecure=False)
    assert compose.check_broker(services, mosquitto_url, "compose", insecure=True) == "insecure"


# --- end to end ---------------------------------------------------------------------------------

KILL_AFTER = 30  # rounds the analyzer has checkpointed when it is killed (a task has ~107 here)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One `privbandit up -f docker-compose.yml` session, the analyzer SIGKILLed mid-run (once its
    checkpoint holds KILL_AFTER rounds of the first task) and restarted by its restart policy.
    Returns (work directory, up's stderr).

    A shorter demo (300,000 users × 3 runs in the file): the numbers against the in-process run
    are compared below at this size, and `up` spends its time on what it tests: the one-shots,
    the broker's healthcheck and probe, TLS, the generated accounts, the parties, a restart."""
    work = _workdir(tmp_path_factory.mktemp("compose"), demo_sets=SHORT)
    with open(work / "up.err", "w") as err:
        up = subprocess.Popen([sys.executable, "-m", "privbandit", "up", "-f", str(work / "docker-compose.yml")],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        state, end = work / "deploy" / "analyzer-state", time.monotonic() + 120
        while progress(state) < (0, KILL_AFTER):
            assert up.poll() is None, f"up ended before the kill: {(work / 'up.err').read_text()}"
            assert time.monotonic() < end, "the analyzer never checkpointed KILL_AFTER rounds"
            time.sleep(0.05)
        [analyzer] = [p for p in psutil.Process(up.pid).children() if p.cmdline()[3:4] == ["analyzer"]]
        analyzer.kill()  # SIGKILL: no goodbye, messages in flight are lost
        assert up.wait(timeout=150) == 0, (work / "up.err").read_text()
    finally:
        if up.poll() is None:
            up.kill()  # (its services are stopped by the test's end; none outlives a passing run)
    return work, (work / "up.err").read_text()


def test_up_runs_the_compose_topology_as_local_processes(session):
    work, said = session
    out = work / "results" / "compose"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["transport"] == "mqtt" and summary["experiment"] == "demo"
    assert summary["parties_missing_stats"] == []
    # The one refusal the analyzer's kill allows: releases of rounds it had opened before it died
    # and has not opened again yet ("no open round"; they come again, the numbers are exact).
    assert set(refusals(summary)) <= {"unknown-round"}, summary["rejected"]
    # Probed before the parties started, over TLS (mqtts://, the generated CA), which every
    # party then used: BusSettings refuses a CA file with a plain mqtt:// URL.
    assert summary["broker"] == {"acl": "enforced", "tls": True}
    assert re.search(r"\[up\] broker: mqtts://127\.0\.0\.1:\d+ \(ACL enforced\)", said)
    assert "[up] broker: healthy" in said  # its healthcheck passed before any party started
    # The analyzer got the key `privbandit run` would give it, so the numbers are the same.
    seed = experiment_files.load(work / "experiments" / "demo.toml")[1].seed
    key = (work / "deploy" / "analyzer-key" / "analyzer.env").read_text()
    assert f"PRIVBANDIT_ANALYZER_KEY={hex(analyzer_master_key(seed))}" in key
    # Every party logged in to Mosquitto, with the dynamic-security plugin, with its own role's
    # generated password; the healthcheck with the launcher's.
    broker_log = (out / "logs" / "compose-broker.log").read_text()
    assert "Loading plugin: " in broker_log and "mosquitto_dynamic_security.so" in broker_log
    everyone = read_credentials(work / "deploy" / "generated" / "credentials.env")
    for role in ("observer", "analyzer", "aggregator", "users"):
        assert f"u'{role}'" in broker_log, role
        # ... read from a file that holds that role's password and no other
        assert read_credentials(work / "deploy" / f"{role}-secret" / "credentials.env") == {role: everyone[role]}
    assert "as healthcheck (p2, c1, k60, u'launcher')" in broker_log
    assert {p.name for p in (out / "logs").iterdir()} >= {f"compose-{s}.log" for s in (*PARTIES, "config", "keys")}
    # The observer served its page on the loopback, at the port the test gave it.
    port = yaml.safe_load((work / "docker-compose.yml").read_text())["services"]["observer"]["ports"][0].split(":")[1]
    assert f"dashboard at http://127.0.0.1:{port}/" in (out / "logs" / "compose-observer.log").read_text()


def test_a_killed_party_is_restarted_resumes_and_the_numbers_equal_an_uninterrupted_run(session, tmp_path):
    work, said = session
    assert "[up] analyzer: exited with code -9; restarting it" in said
    analyzer_log = (work / "results" / "compose" / "logs" / "compose-analyzer.log").read_text()
    assert re.search(r"resumed task 0 from .*/deploy/analyzer-state/checkpoint\.bin: \d+ releases replayed",
                     analyzer_log), analyzer_log[-2000:]
    _inproc(work / "experiments" / "demo.toml", tmp_path / "inproc")
    assert_same_numbers(tmp_path / "inproc", work / "results" / "compose")
    # What the session leaves, checkpoints of its later tasks, a next one starting at task 0 would
    # refuse ("checkpoint-ahead"); the `state` one-shot it starts with empties them (and what the
    # killed analyzer was writing when it died).
    assert all(progress(work / "deploy" / f"{name}-state")[0] > 0 for name in CHECKPOINTING)
    state = compose.load(work / "docker-compose.yml", work)["state"]
    assert CliRunner().invoke(app, state.command).exit_code == 0
    assert all(not any((work / "deploy" / f"{name}-state").iterdir()) for name in CHECKPOINTING)


def test_the_broker_healthcheck_passes_on_a_live_broker_and_fails_on_a_dead_one(tmp_path):
    """The file's healthcheck command, as `up` runs it (pointed at the local listener), against
    Mosquitto with the generated conf: it needs TLS with the generated CA and the launcher's login;
    a party with another CA is refused at once, naming TLS."""
    if compose.mosquitto_binary() is None:
        missing("no mosquitto binary")
    work = _workdir(tmp_path)
    services = compose.load(work / "docker-compose.yml", work)
    for name in ("tls", "config"):  # the one-shots the broker needs, as `up` runs them
        result = CliRunner().invoke(app, services[name].command)
        assert result.exit_code == 0, result.output
    conf = (work / "deploy" / "generated" / "mosquitto.conf").read_text().splitlines()
    assert [line for line in conf if line.startswith("listener")] == ["listener 8883 0.0.0.0"]  # one, TLS:
    assert conf[conf.index("listener 8883 0.0.0.0") + 1].startswith("certfile ")
    broker = services["broker"]
    broker.log = tmp_path / "broker.log"
    login = work / "deploy" / "generated" / "mosquitto_sub"
    with ExitStack() as stack:
        url = compose.start_broker(broker, "compose", stack)
        assert url.startswith("mqtts://127.0.0.1:")
        argv = compose.local_healthcheck(broker, url)
        env = {**os.environ, **broker.env}
        assert subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode == 0
        assert compose.wait_healthy(broker, url)
        other = make_tls_files(tmp_path / "other", tmp_path / "other-ca", ["127.0.0.1"])[0]
        wrong_ca = [str(other) if a == argv[argv.index("--cafile") + 1] else a for a in argv]
        assert subprocess.run(wrong_ca, env=env, capture_output=True, timeout=30).returncode != 0
        password = login.read_text()
        login.write_text(password.replace("-P ", "-P wrong"))
        assert subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode != 0  # it logs in
        login.write_text(password)
        wrong = BusSettings(broker_url=url, run_id="compose", username="launcher", password=password.split("-P ")[1].strip(),
                            ca_file=str(other), connect_timeout_s=30)
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="TLS with the broker at .* failed: .*certificate verify failed"):
            asyncio.run(_enter(connect(wrong, "compose-wrong-ca", [])))
        assert time.monotonic() - started < 5
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)  # the broker is stopped
    assert done.returncode != 0
    with pytest.raises(compose.ComposeError, match="service broker: its healthcheck mosquitto_sub .* failed"):
        compose.wait_healthy(broker, url, timeout_s=0.5)


async def _enter(context) -> None:
    async with context:
        pass


# A one-shot that fails (the keys service) is test_privbandit_up_…'s case: the same session, seen
# through the command's exit status and its output.
@pytest.mark.parametrize("service, edit, message", [
    ("analyzer", lambda t: t.replace("      PRIVBANDIT_ANALYZER_KEY_FILE: /keys/analyzer.env\n", ""),
     "PRIVBANDIT_ANALYZER_KEY"),
    ("aggregator", lambda t: t.replace("      PRIVBANDIT_REPORT_AUTH_KEY_FILE: /keys/intermediary.env\n", ""),
     "PRIVBANDIT_REPORT_AUTH_KEY"),
])
def test_a_failing_service_is_named_with_its_log(tmp_path, service, edit, message):
    work = _workdir(tmp_path, edit)
    with pytest.raises(compose.ComposeError, match=f"service {service} exited") as failure:
        compose.up(work / "docker-compose.yml", timeout_s=60)
    assert message in " ".join(str(failure.value).split())  # (rich wraps the log at 80 columns)
    assert not (work / "results" / "compose" / "summary.json").exists()


def test_privbandit_up_reports_the_failing_service_and_exits_1(tmp_path):
    """A failing one-shot (the keys service, given an experiment that is not there) stops `up`
    before any party: the command exits 1 naming the service, its exit code and its log's tail."""
    work = _workdir(tmp_path, lambda t: t.replace("demo.toml, --out, /keys", "missing.toml, --out, /keys"))
    result = subprocess.run([sys.executable, "-m", "privbandit", "up", "-f", str(work / "docker-compose.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    said = " ".join(result.stderr.split())  # (rich wraps the log at 80 columns)
    assert "service keys exited with code 2" in said and "no such experiment" in said
    assert not (work / "results" / "compose" / "summary.json").exists()


@pytest.mark.parametrize("policy, restarts", [("no", 0), (None, 5), ("on-failure", float("inf")),
                                              ("on-failure:3", 3), ("always", float("inf")),
                                              ("unless-stopped", float("inf"))])
def test_restart_policies_are_read_from_the_compose_file(tmp_path, policy, restarts):
    def edit(text):  # (None: the file's own, on-failure:5)
        return text if policy is None else text.replace("    command: [aggregator, --state-dir, /state]\n",
                                                        f"    command: [aggregator, --state-dir, /state]\n"
                                                        f"    restart: {policy}\n")
    work = _workdir(tmp_path, edit)
    assert compose.load(work / "docker-compose.yml", work)["aggregator"].restarts == restarts


def test_a_bad_restart_policy_names_the_service(tmp_path):
    work = _workdir(tmp_path, lambda t: t.replace("    command: [aggregator, --state-dir, /state]\n",
                                                  "    command: [aggregator, --state-dir, /state]\n    restart: sometimes\n"))
    with pytest.raises(compose.ComposeError, match="service aggregator: restart 'sometimes'"):
        compose.load(work / "docker-compose.yml", work)


# --- the clustered broker profile (#21 section 3) -----------------------------------------------

NODES = ("nats-0", "nats-1", "nats-2")


def test_the_cluster_profile_is_started_only_when_asked_and_spreads_the_parties(tmp_path):
    """Without --profile cluster, `up` loads (and so starts) none of its services and every party
    uses Mosquitto over TLS, as before; with it and cluster.env, the nodes and their one-shot, and
    the parties on three nodes, without a CA (the nodes speak plain MQTT)."""
    default = compose.load(COMPOSE, tmp_path)
    assert not set(default) & {"cluster-config", *NODES}
    assert {default[p].env["PRIVBANDIT_BROKER_URL"] for p in PARTIES} == {"mqtts://broker:8883"}
    assert all(default[p].env["PRIVBANDIT_CA_FILE"].endswith("/deploy/ca/ca.pem") for p in PARTIES)
    clustered = compose.load(COMPOSE, tmp_path, profiles=["cluster"], env_file=REPO / "cluster.env")
    assert set(clustered) == set(default) | {"cluster-config", *NODES}
    assert all(clustered[n].is_nats and clustered[n].depends == {"cluster-config": compose.ONE_SHOT} for n in NODES)
    urls = {p: clustered[p].env["PRIVBANDIT_BROKER_URL"] for p in PARTIES}
    assert {u.split("://")[1].split(":")[0] for u in urls.values()} == set(NODES), urls
    assert urls["analyzer"] != urls["aggregator"] and urls["users-0"] != urls["users-1"]  # neighbours apart
    assert all(clustered[p].env["PRIVBANDIT_CA_FILE"] == "" for p in PARTIES)  # set empty: BusSettings reads none
    # The nodes get the passwords `config` wrote: the one-shot reads its credentials.env.
    config = clustered["config"].command
    assert _option(clustered["cluster-config"].command, "--credentials") == \
        str(Path(_option(config, "--out")) / "credentials.env")
    with pytest.raises(compose.ComposeError, match=r"cannot read .*missing\.env: .*No such file"):
        compose.load(COMPOSE, tmp_path, profiles=["cluster"], env_file=tmp_path / "missing.env")
    # ${VAR-default} keeps an empty value, ${VAR:-default} does not (Compose's rules).
    assert compose.interpolate("${A:-x} ${A-x} ${B-x} ${B:-x} $${A}", {"A": ""}) == "x  x x ${A}"


def test_cluster_config_only_writes_the_nodes_with_the_given_passwords_and_refuses_bad_input(tmp_path):
    files = acl.write_broker_config(tmp_path / "generated", "compose", 8883)
    argv = ["cluster", "--config-only", "--run-id", "compose", "--out", str(tmp_path / "nats"),
            "--credentials", str(files.credentials), "--mqtt-port", "21883"]
    (tmp_path / "nats" / "nats-0.jetstream" / "jetstream").mkdir(parents=True)  # a last session's store
    result = CliRunner().invoke(app, [*argv, "--host", "nats-0", "--host", "nats-1"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "nats" / "nats-0.jetstream").exists()  # emptied: a new session starts afresh
    assert read_credentials(tmp_path / "nats" / "credentials.env") == read_credentials(files.credentials)
    conf = json.loads((tmp_path / "nats" / "nats-1.conf").read_text().split("\n", 1)[1])
    assert conf["mqtt"]["listen"] == "nats-1:21884" and conf["cluster"]["routes"] == ["nats-route://nats-0:6222"]
    assert {u["user"]: u["password"] for u in conf["authorization"]["users"]}["users"] == files.password("users")
    for extra, message in ((["--host", "a:1"], "host 'a:1': must be a host name"), ([], "at least one --host"),
                           (["--host", "a", "--mqtt-port", "0"], "mqtt-port must be in 1..65535")):
        result = CliRunner().invoke(app, [*argv, *extra])
        assert result.exit_code == 2 and message in result.output, result.output
    result = CliRunner().invoke(app, ["cluster", "--host", "a"])
    assert result.exit_code == 2 and "--host and --credentials go with --config-only" in result.output
    result = CliRunner().invoke(app, [*argv[:-4], "--credentials", str(tmp_path / "none.env"), "--host", "a"])
    assert result.exit_code == 2 and "none.env" in result.output and "No such file" in result.output


def _free_ports(count: int) -> int:
    """A base port such that base .. base + count - 1 were free a moment ago, below the kernel's
    ephemeral range (``net.ipv4.ip_local_port_range``): every outgoing connection and every bind to
    port 0 of the tests running beside this one draws from that range, and one of them took a node's
    port between this pick and nats-server's bind (CI load, 2026-11-29). Below it, only a process
    that binds that very port can collide."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10_000, max(10_001, low - count))
        try:
            with ExitStack() as stack:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise AssertionError("no run of free ports")


@pytest.mark.slow_e2e
def test_up_with_the_cluster_profile_spreads_the_parties_over_three_nodes_and_reproduces_the_numbers(tmp_path):
    """`privbandit up --profile cluster --env-file cluster.env`: three local nats-server nodes with
    the config service's passwords, every node probed, each party connected (its TCP connection,
    seen from outside) to the node cluster.env gives it, and the numbers of the in-process run."""
    from privbandit.services.cluster import nats_binary

    if nats_binary() is None:
        missing("no nats-server")
    # One run of free ports for the nine node ports and the dashboard (other tests run beside this
    # one; ports picked one by one could collide with each other, as the kernel hands out neighbours).
    first = _free_ports(10)
    bases = {old: first + 3 * i for i, old in enumerate((14222, 11883, 16222))}

    def moved(text: str) -> str:
        for old, new in bases.items():
            for i in range(3):
                text = text.replace(str(old + i), str(new + i))
        return text.replace("8050", str(first + 9))  # (before _workdir picks one)

    work = _workdir(tmp_path / "work", moved, demo_sets=SHORT)
    (work / "cluster.env").write_text(moved((REPO / "cluster.env").read_text()))
    env_urls = compose.read_env_file(work / "cluster.env")
    expected = {p: int(env_urls[f"PRIVBANDIT_{p.upper().replace('-', '_')}_BROKER_URL"].rsplit(":", 1)[1])
                for p in PARTIES}
    with open(work / "up.err", "w") as err:
        up = subprocess.Popen([sys.executable, "-m", "privbandit", "up", "-f", str(work / "docker-compose.yml"),
                               "--profile", "cluster", "--env-file", str(work / "cluster.env")],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    seen: dict[str, set[int]] = {}  # party → the MQTT ports it was connected to
    try:
        end = time.monotonic() + 150
        while up.poll() is None and time.monotonic() < end:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(up.pid).children():
                    argv = child.cmdline()[3:]
                    party = f"users-{argv[2][0]}" if argv[:1] == ["users"] else argv[0] if argv else ""
                    if party in PARTIES:
                        seen.setdefault(party, set()).update(
                            c.raddr.port for c in child.net_connections("tcp") if c.raddr and c.status == "ESTABLISHED")
            time.sleep(0.1)
        assert up.wait(timeout=5) == 0, (work / "up.err").read_text()
    finally:
        if up.poll() is None:
            up.kill()
    said = (work / "up.err").read_text()
    nodes = {m[1]: int(m[2]) for m in re.finditer(r"\[up\] (nats-\d): mqtt://127\.0\.0\.1:(\d+) \(ACL enforced", said)}
    assert nodes == {f"nats-{i}": bases[11883] + i for i in range(3)}, said  # all three probed, enforced
    assert "[up] broker: mqtts://127.0.0.1:" in said and "no party connects to it: not probed" in said
    node_ports = set(nodes.values())
    assert {p: seen.get(p, set()) & node_ports for p in PARTIES} == {p: {port} for p, port in expected.items()}, seen
    out = work / "results" / "compose"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["broker"] == {"acl": "enforced", "tls": False}  # the cluster path has no TLS: said so
    assert refusals(summary) == {}, summary["rejected"]
    _inproc(work / "experiments" / "demo.toml", tmp_path / "inproc")
    assert_same_numbers(tmp_path / "inproc", out)
    # The nodes were a cluster: each logged its routes to the two others.
    for name in NODES:
        log = (out / "logs" / f"compose-{name}.log").read_text()
        assert "Listening for MQTT clients on mqtt://127.0.0.1:" in log and log.count("Route connection created") >= 2, name
