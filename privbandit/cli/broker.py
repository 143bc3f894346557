"""An external broker: the options and checks of the commands that use one (its accounts, TLS and
the probe of its ACL; docs/distributed.md), and the commands that set one up: broker-config,
tls-files and cluster (docs/cluster.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from privbandit.cli.common import _error, err
from privbandit.runner.config import ConfigError

def _run_id_option(when: str):
    return Annotated[Optional[str], typer.Option(
        "--run-id", help=f"{when}the run id the broker's ACL was written for (privbandit broker-config --run-id) "
                         f"[default: a fresh one]")]


RunIdForBroker = _run_id_option("with --transport mqtt: ")
DemoRunId = _run_id_option("")  # demo is always over MQTT: it has no --transport to name
CredentialsOption = Annotated[Optional[Path], typer.Option(
    "--credentials", help="with --broker: a file of PRIVBANDIT_<ROLE>_PASSWORD=... lines, one per role "
                          "(privbandit broker-config writes credentials.env) [default: those variables from the "
                          "environment; none: anonymous]. Passwords never go on the command line.")]
CaFileOption = Annotated[Optional[Path], typer.Option(
    "--ca-file", help="with an mqtts:// --broker: the CA certificates that sign the broker's [default: the system's]")]
CertFileOption = Annotated[Optional[Path], typer.Option(
    "--cert-file", help="with an mqtts:// --broker: the parties' client certificate (PEM)")]
KeyFileOption = Annotated[Optional[Path], typer.Option(
    "--key-file", help="with --cert-file: its private key (PEM) [default: in --cert-file]")]
InsecureBrokerOption = Annotated[bool, typer.Option(
    "--insecure-broker", help="run even if the broker lets a role, or anyone, read what the trust model denies "
                              "(summary.json records broker.acl = \"insecure\")")]


def _broker_access(broker: str | None, run_id: str | None, credentials: Path | None, ca_file: Path | None, cert_file: Path | None,
                   key_file: Path | None) -> dict:
    """The external broker's passwords (role → password; None: anonymous) and TLS files, for the
    launcher. Raises ConfigError naming the option."""
    from privbandit.services.acl import Role, validate_run_id
    from privbandit.services.bus import read_credentials

    if run_id is not None:
        try:
            validate_run_id(run_id, name="--run-id")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    tls = {k: str(v) for k, v in (("ca_file", ca_file), ("cert_file", cert_file), ("key_file", key_file)) if v}
    if broker is None and (credentials or tls):
        flags = ["--credentials"] * bool(credentials) + [f"--{k.replace('_', '-')}" for k in tls]
        raise ConfigError(f"{', '.join(flags)}: only with --broker (the embedded broker makes its own accounts)")
    if credentials is not None:
        try:
            passwords = read_credentials(credentials)
        except ValueError as exc:
            raise ConfigError(f"--credentials: {exc}") from None
        if not passwords:
            raise ConfigError(f"--credentials {credentials}: no PRIVBANDIT_<ROLE>_PASSWORD=... line")
    else:
        passwords = {r.value: os.environ[f"PRIVBANDIT_{r.name}_PASSWORD"] for r in Role
                     if os.environ.get(f"PRIVBANDIT_{r.name}_PASSWORD")}
    from privbandit.services.acl import is_instance

    unknown = sorted(n for n in passwords if n not in {r.value for r in Role} and not is_instance(n))
    if unknown:
        raise ConfigError(f"--credentials: unknown role(s) {', '.join(unknown)}; roles: {', '.join(r.value for r in Role)}, "
                          "or an intermediary instance such as shuffler-2")
    return {"passwords": passwords or None, "tls_files": tls or None}


def _broker_reachable(url: str) -> None:
    """Before any work: ``--broker`` is an MQTT URL whose host accepts a connection (the launcher
    then probes its accounts and ACL). A bad URL is a ConfigError; an unreachable broker exits 1
    with the launcher's words."""
    from privbandit.runner.sweep import unreachable
    from privbandit.services.bus import BusSettings

    try:  # model_construct: the URL alone, not the PRIVBANDIT_* environment the parties read
        host, port = BusSettings.model_construct(broker_url=url).endpoint()
    except ValueError as exc:
        raise ConfigError(f"--broker: {exc}") from None
    problem = unreachable(host, port, min(float(os.environ.get("PRIVBANDIT_CONNECT_TIMEOUT_S", 10)), 10))
    if problem is not None:
        _error(f"cannot reach the broker at {url}: {problem}; nothing was run, --out untouched")
        raise typer.Exit(1)


def broker_config(
    out: Annotated[Path, typer.Option(help="directory for mosquitto.conf, passwd, acl, credentials.env")],
    run_id: Annotated[str, typer.Option(help="the run id: topics live under pb/<run-id>/")] = "demo",
    port: Annotated[int, typer.Option(help="the listener port")] = 1883,
    host: Annotated[str, typer.Option(help="the listener address (0.0.0.0 in a container)")] = "127.0.0.1",
    backend: Annotated[str, typer.Option(help="acl_file (portable) or dynsec (refuses SUBSCRIBEs too)")] = "acl_file",
    tls_cert: Annotated[Optional[Path], typer.Option(help="the broker's certificate (PEM): the listener speaks TLS "
                                                          "only (parties connect to mqtts://)")] = None,
    tls_key: Annotated[Optional[Path], typer.Option(help="with --tls-cert: its private key (PEM)")] = None,
    client_ca: Annotated[Optional[Path], typer.Option(help="with --tls-cert: require a client certificate "
                                                           "signed by this CA")] = None,
    rotate: Annotated[bool, typer.Option("--rotate", help="draw new passwords even where OUT already holds a "
                                                          "credentials.env (by default its passwords are kept)")] = False,
    role_dir: Annotated[Optional[list[str]], typer.Option(
        metavar="ROLE=DIR", help="also write DIR/credentials.env with ROLE's password alone (repeatable), "
                                 "for that role's parties to mount")] = None,
    instance: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="an intermediary instance account, e.g. shuffler-2 (repeatable): the "
                             "concurrent-shuffle family's shuffler-1 … shuffler-k, each its own password and ACL")] = None,
    dynsec_plugin: Annotated[Optional[Path], typer.Option(
        help="with --backend dynsec: Mosquitto's plugin where the broker runs, written as given (e.g. "
             "/usr/lib/mosquitto_dynamic_security.so in the eclipse-mosquitto image) [default: found here]")] = None,
    budget_plugin: Annotated[str, typer.Option(
        help="the users' account's per-connection publish budget (issue #32): build (compile it here with cc; "
             "needs mosquitto-dev and libmosquitto-dev), auto (build if Mosquitto is installed here), none, or "
             "the compiled plugin's absolute path where the broker runs")] = "auto",
):
    """Write a Mosquitto configuration with one account per role and the run's ACLs. The passwords
    of a credentials.env already in OUT are kept, so a broker running the earlier config still
    accepts the parties; --rotate draws new ones (restart the broker with the new files)."""
    from privbandit.services.broker_cli import broker_config_main

    raise typer.Exit(broker_config_main(out, run_id, port, host=host, backend=backend, tls_cert=tls_cert,
                                        tls_key=tls_key, client_ca=client_ca, rotate=rotate, role_dirs=role_dir,
                                        instances=instance, dynsec_plugin=dynsec_plugin, budget_plugin=budget_plugin))


def tls_files(
    out: Annotated[Path, typer.Option(help="directory for the broker's broker.pem and broker.key")],
    ca_dir: Annotated[Path, typer.Option(help="directory for ca.pem, which every party verifies the broker with")],
    host: Annotated[list[str], typer.Option(help="a name or address the parties reach the broker by (repeatable)")],
    days: Annotated[int, typer.Option(help="validity in days (1..3650)")] = 365,
    rotate: Annotated[bool, typer.Option("--rotate", help="make new files even where valid ones are")] = False,
):
    """Make a CA and a broker certificate it signed (ECDSA P-256), for broker-config --tls-cert/--tls-key.
    The CA's private key is never written. Files still valid for the hosts and for 30 more days are kept."""
    from privbandit.services.broker_cli import tls_files_main

    raise typer.Exit(tls_files_main(out, ca_dir, host, days=days, rotate=rotate))


def cluster(
    out: Annotated[Optional[Path], typer.Option(help="directory for the node files, logs and credentials.env "
                                                     "[default: a new temporary directory]")] = None,
    run_id: Annotated[str, typer.Option(help="the run id: topics live under pb/<run-id>/")] = "demo",
    nodes: Annotated[int, typer.Option(help="how many NATS nodes (1..9)")] = 3,
    instance: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="an intermediary instance account, e.g. shuffler-2 (repeatable)")] = None,
    config_only: Annotated[bool, typer.Option(
        "--config-only", help="write the node files into --out for the --host nodes and exit, starting nothing "
                              "(docker-compose.yml's cluster profile)")] = False,
    host: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME", help="with --config-only: a node, named and reached by this host name (repeatable)")] = None,
    credentials: Annotated[Optional[Path], typer.Option(
        help="with --config-only: the credentials.env whose passwords the accounts get (broker-config's)")] = None,
    client_port: Annotated[int, typer.Option(help="with --config-only: node i's NATS port is this + i")] = 4222,
    mqtt_port: Annotated[int, typer.Option(help="with --config-only: node i's MQTT port is this + i")] = 1883,
    cluster_port: Annotated[int, typer.Option(help="with --config-only: node i's route port is this + i")] = 6222,
):
    """Start a NATS broker cluster (MQTT on every node) with one account per role and the run's
    ACLs, print the node URLs, and run until Ctrl-C (docs/cluster.md). With --config-only, only
    write the node files for the named hosts (docs/compose.md, "The clustered broker profile")."""
    from privbandit.services.cluster import cluster_main, compose_nodes, write_config_only

    if not config_only and (host or credentials):
        _error("--host and --credentials go with --config-only")
        raise typer.Exit(2)
    try:
        if config_only:
            if out is None or credentials is None or not host:
                _error("--config-only needs --out, --credentials and at least one --host")
                raise typer.Exit(2)
            files = write_config_only(out, run_id, compose_nodes(host, client_port, mqtt_port, cluster_port),
                                      credentials)
            for node, conf in zip(files.nodes, files.confs):
                err.print(f"{node.name}: {conf} (MQTT {node.url})", highlight=False)
            raise typer.Exit(0)
        code = cluster_main(out, run_id, nodes, instance or ())
    except ValueError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    raise typer.Exit(code)
