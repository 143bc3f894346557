"""docker-compose.yml: valid, each party sees only what its role may know, and it runs.

There is no Docker engine here: `privbandit.services.compose.up` runs the same services, commands
and environments as local processes, against a local Mosquitto with the generated conf and ACL.
"""

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import aiomqtt
import pytest
import typer
import yaml
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.runner import config as experiment_files
from privbandit.protocol.primitives.seeding import analyzer_master_key
from privbandit.services import acl, compose
from privbandit.services.bus import read_credentials
from tests.services.test_distributed import refusals

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
PARTIES = ("observer", "analyzer", "aggregator", "users-0", "users-1")


def _raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _workdir(tmp_path: Path, edit=lambda text: text, demo_sets: dict[str, str] | None = None) -> Path:
    """A copy of what the compose file needs, so the real ./deploy and ./results stay untouched,
    with the dashboard on a free port (tests run side by side). ``demo_sets``: top-level settings
    of the copied demo.toml to replace (each must be there)."""
    (tmp_path / "experiments").mkdir()
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

def test_docker_compose_validates_the_file():
    if shutil.which("docker-compose") is None:
        message = "docker-compose is not installed (apt-get install docker-compose)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "-q"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_analyzer_is_never_given_the_experiment(tmp_path):
    spec = _raw()["services"]["analyzer"]
    assert spec["command"] == ["analyzer"] and "env_file" not in spec
    for value in [*spec["volumes"], *spec["environment"].values()]:
        assert "experiment" not in str(value) and ".toml" not in str(value), value
    for inside, host in compose.load(COMPOSE, tmp_path)["analyzer"].mounts:  # and so not under `privbandit up`
        assert not host.is_relative_to(tmp_path / "experiments"), (inside, host)
    # Its key comes from a volume only the keys service (which reads the seed) and it mount.
    assert {name for name, spec in _raw()["services"].items()
            if any(str(v).startswith("analyzer-key:") for v in spec.get("volumes", []))} == {"keys", "analyzer"}
    # The users' report-authentication keys: only their one-shot and the aggregator.
    assert {name for name, spec in _raw()["services"].items()
            if any(str(v).startswith("intermediary-key:") for v in spec.get("volumes", []))} == {
        "intermediary-keys", "aggregator"}
    # Each fleet's secure-aggregation key: its own volume, mounted by it and the one-shot that draws
    # them; their master only by that one-shot and the aggregator.
    mounts = {name: [str(v).split(":")[0] for v in spec.get("volumes", [])] for name, spec in _raw()["services"].items()}
    for volume, holders in (("users-0-key", {"fleet-keys", "users-0"}), ("users-1-key", {"fleet-keys", "users-1"}),
                            ("fleet-master-key", {"fleet-keys", "aggregator"})):
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
    for name, svc in compose.load(COMPOSE).items():
        if not svc.is_broker:
            cmd, *args = svc.command
            assert cmd in commands, f"service {name}: `privbandit {cmd}` does not exist"
            options = {opt for param in commands[cmd].params for opt in param.opts}
            for arg in args:
                assert not arg.startswith("-") or arg in options, f"service {name}: `privbandit {cmd}` has no {arg}"
            used[cmd] = name
    assert set(used) >= {"broker-config", "keys", "observer", "analyzer", "aggregator", "users"}
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
        assert env["PRIVBANDIT_BROKER_URL"] == f"mqtt://broker:{port}"
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
        "listener 1883 0.0.0.0\nallow_anonymous false\npassword_file /config/passwd\nacl_file /config/acl\n")
    lines = compose.host_conf(broker, 5555).read_text().splitlines()
    assert lines == ["allow_anonymous false", f"password_file {generated}/passwd", f"acl_file {generated}/acl",
                     "listener 5555 127.0.0.1"]


async def _connect(url: str, username: str, password: str) -> None:
    host, port = url.removeprefix("mqtt://").split(":")
    async with aiomqtt.Client(host, int(port), username=username, password=password, identifier="probe", timeout=5):
        pass


@pytest.mark.parametrize("kind", ["mosquitto", "embedded"])
def test_the_local_broker_enforces_the_generated_passwords(tmp_path, monkeypatch, kind):
    if kind == "mosquitto" and compose.mosquitto_binary() is None:
        pytest.fail("no mosquitto binary") if os.environ.get("CI") == "true" else pytest.skip("no mosquitto binary")
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


def test_an_anonymous_external_broker_is_refused_naming_what_was_readable(tmp_path, mosquitto_url):
    """What `up --broker` does before starting any party (the one-shot services have run): the
    probe with the generated accounts; test_up_runs_… shows the verdict reaching summary.json."""
    work = _workdir(tmp_path)
    files = acl.write_broker_config(work / "deploy" / "generated", "compose", 1883, host="0.0.0.0")
    for role in ("observer", "analyzer", "aggregator", "users"):  # as the config service writes them
        acl.write_role_credentials(files, role, work / "deploy" / f"{role}-secret")
    services = compose.load(work / "docker-compose.yml", work)
    with pytest.raises(compose.ComposeError, match=r"does not enforce the trust model for run compose: anonymous read "
                                                   r"plans, .*; analyzer read plans, reports \(aggregator"):
        compose.check_broker(services, mosquitto_url, "compose", insecure=False)
    assert compose.check_broker(services, mosquitto_url, "compose", insecure=True) == "insecure"


# --- end to end ---------------------------------------------------------------------------------

def test_up_runs_the_compose_topology_as_local_processes(tmp_path):
    # A shorter demo (300,000 users × 3 runs in the file): nothing below depends on the session's
    # size, and the demo's numbers against the in-process run are test_distributed's
    # (test_privbandit_demo_…, at this same size); `up` then spends its time on what it tests: the
    # one-shots, the probe, the generated accounts, the parties and their logs.
    work = _workdir(tmp_path, demo_sets={"horizon": "40_000", "runs": "2"})
    assert compose.up(work / "docker-compose.yml", timeout_s=150) == 0
    out = work / "results" / "compose"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["transport"] == "mqtt" and summary["experiment"] == "demo"
    assert summary["parties_missing_stats"] == [] and refusals(summary) == {}
    assert summary["broker"] == {"acl": "enforced", "tls": False}  # probed before the parties started
    # The analyzer got the key `privbandit run` would give it, so the numbers are the same.
    seed = experiment_files.load(work / "experiments" / "demo.toml")[1].seed
    key = (work / "deploy" / "analyzer-key" / "analyzer.env").read_text()
    assert f"PRIVBANDIT_ANALYZER_KEY={hex(analyzer_master_key(seed))}" in key
    # Every party logged in to Mosquitto with its own role's generated password.
    broker_log = (out / "logs" / "compose-broker.log").read_text()
    everyone = read_credentials(work / "deploy" / "generated" / "credentials.env")
    for role in ("observer", "analyzer", "aggregator", "users"):
        assert f"u'{role}'" in broker_log, role
        # ... read from a file that holds that role's password and no other
        assert read_credentials(work / "deploy" / f"{role}-secret" / "credentials.env") == {role: everyone[role]}
    assert {p.name for p in (out / "logs").iterdir()} >= {f"compose-{s}.log" for s in (*PARTIES, "config", "keys")}
    # The observer served its page on the loopback, at the port the test gave it.
    port = yaml.safe_load((work / "docker-compose.yml").read_text())["services"]["observer"]["ports"][0].split(":")[1]
    assert f"dashboard at http://127.0.0.1:{port}/" in (out / "logs" / "compose-observer.log").read_text()


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


@pytest.mark.parametrize("policy, restarts", [("no", 0), (None, 0), ("on-failure", float("inf")),
                                              ("on-failure:3", 3), ("always", float("inf")),
                                              ("unless-stopped", float("inf"))])
def test_restart_policies_are_read_from_the_compose_file(tmp_path, policy, restarts):
    def edit(text):
        return text if policy is None else text.replace("    command: [aggregator]\n",
                                                        f"    command: [aggregator]\n    restart: {policy}\n")
    work = _workdir(tmp_path, edit)
    assert compose.load(work / "docker-compose.yml", work)["aggregator"].restarts == restarts


def test_a_bad_restart_policy_names_the_service(tmp_path):
    work = _workdir(tmp_path, lambda t: t.replace("    command: [aggregator]\n",
                                                  "    command: [aggregator]\n    restart: sometimes\n"))
    with pytest.raises(compose.ComposeError, match="service aggregator: restart 'sometimes'"):
        compose.load(work / "docker-compose.yml", work)
