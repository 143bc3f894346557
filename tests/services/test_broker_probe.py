"""Issue #21 §1: a broker that lets anyone read is refused, not used.

The probe against real brokers: the system Mosquitto (anonymous, no ACL) is refused by
``privbandit run --transport mqtt`` with what was readable by whom, and runs only with
``--insecure-broker``, recorded in summary.json; the project's own ACL'd Mosquitto passes, and a
weakened ACL does not; a session over TLS (CA, server and client certificates made here) runs, and
a wrong CA is refused at once with a clear error.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from typer.testing import CliRunner

import privbandit.services.mosquitto_process as mp
from privbandit.cli import app
from privbandit.runner import config as experiment_files
from privbandit.services import acl
from privbandit.services.broker_probe import GRACE_S, BrokerInsecure, check_broker, probe_broker
from privbandit.services.bus import BusSettings, connect
from privbandit.services.launcher import _inherited_env, plan_parties
from tests.services.test_acl import _missing
from tests.services.test_distributed import refusals

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "experiments" / "demo.toml"
SHORT = ["--set", "horizon=5000", "--set", "runs=1", "--shards", "1"]  # one small session: its cost is starting processes


@pytest.fixture
def mosquitto():
    if mp.mosquitto_binary() is None:
        _missing("mosquitto")


async def _enter(context) -> None:
    async with context:
        pass


def _cli(argv: list[str]):
    result = CliRunner().invoke(app, argv)
    return result, " ".join((result.stdout + result.stderr).split())


# --- an open broker ----------------------------------------------------------------------------------

def test_an_anonymous_readable_broker_is_refused_naming_what_was_readable_by_whom(tmp_path, mosquitto_url):
    start = time.monotonic()
    result, text = _cli(["run", str(DEMO), "--transport", "mqtt", "--broker", mosquitto_url,
                         "--out", str(tmp_path / "o"), *SHORT])
    assert result.exit_code == 1, text
    assert f"the broker at {mosquitto_url} does not enforce the trust model" in text
    assert "anonymous read plans, control, reports (aggregator, shuffler), releases (aggregator, shuffler)" in text
    assert "--insecure-broker" in text and "Traceback" not in text
    assert not (tmp_path / "o" / "logs").exists()  # no party was started
    assert time.monotonic() - start < 30


def test_role_accounts_are_probed_too(mosquitto_url):
    """An open broker accepts any credentials: each role then reads what its ACL denies it."""
    passwords = {r.value: "anything" for r in acl.Role}
    with pytest.raises(BrokerInsecure) as info:
        check_broker(BusSettings(broker_url=mosquitto_url), "probe1", passwords)
    readable = info.value.result.readable
    assert set(readable) == {"anonymous", *passwords}
    assert "pb/probe1/report/aggregator/probe" in readable["analyzer"]  # the analyzer would read reports
    assert "pb/probe1/release/aggregator/probe" in readable["users"]
    assert "pb/probe1/plan" not in readable["users"]  # what a role may read is no finding
    assert "analyzer read plans, reports (aggregator, shuffler)" in str(info.value)


def test_insecure_broker_runs_and_is_recorded_as_insecure(tmp_path, mosquitto_url):
    result, text = _cli(["run", str(DEMO), "--transport", "mqtt", "--broker", mosquitto_url, "--insecure-broker",
                         "--out", str(tmp_path / "o"), *SHORT])
    assert result.exit_code == 0, text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["broker"] == {"acl": "insecure", "tls": False}
    assert "insecure broker: its ACL was not enforced" in text


# --- the project's own brokers ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["acl_file", "dynsec"])
def test_the_projects_acl_broker_passes_the_probe(tmp_path, mosquitto, backend):
    if backend == "dynsec" and acl.find_dynsec_plugin() is None:
        _missing("mosquitto_dynamic_security.so")
    broker, files = mp.start_with_broker_config(tmp_path, "own1", backend=backend)
    with broker:
        passwords = {r.value: pw for r, pw in files.passwords.items()}
        verdict, result = check_broker(BusSettings(broker_url=broker.url), "own1", passwords)
    assert verdict == "enforced" and result.readable == {} and result.unverified == []
    assert result.refused == ["anonymous"] and len(result.accounts) == len(acl.Role)
    assert result.elapsed_s < GRACE_S + 3


def test_a_weakened_acl_is_caught_by_the_role_that_reads_too_much(tmp_path, mosquitto):
    """The probe must be able to fail on an ACL'd broker: grant the analyzer the reports."""
    def write(port: int) -> Path:
        files = acl.write_broker_config(tmp_path, "weak1", port, {r.value: f"pw-{r.value}" for r in acl.Role})
        rules = files.acl.read_text().replace("user analyzer\n", "user analyzer\ntopic read pb/weak1/report/#\n")
        files.acl.write_text(rules)
        return files.conf

    with mp.start_on_free_port(write) as broker:
        result = probe_broker(BusSettings(broker_url=broker.url), "weak1", {r.value: f"pw-{r.value}" for r in acl.Role})
    assert result.readable == {"analyzer": ["pb/weak1/report/aggregator/probe", "pb/weak1/report/shuffler/probe"]}
    assert result.describe() == "analyzer read reports (aggregator, shuffler)"


def test_a_broker_that_refuses_anonymous_clients_needs_credentials(tmp_path, mosquitto):
    broker, _ = mp.start_with_broker_config(tmp_path, "nocred")
    with broker:
        result, text = _cli(["run", str(DEMO), "--transport", "mqtt", "--broker", broker.url, "--run-id", "nocred",
                             "--out", str(tmp_path / "o"), *SHORT])
    assert result.exit_code == 1 and "refuses anonymous clients and no credentials were given" in text, text


# --- credentials reach each party alone ---------------------------------------------------------------

def test_each_party_gets_its_own_password_and_no_other(tmp_path, monkeypatch):
    passwords = {r.value: f"secret-{r.value}" for r in acl.Role}
    for role, pw in passwords.items():  # the launcher's environment holds them all
        monkeypatch.setenv(f"PRIVBANDIT_{role.upper()}_PASSWORD", pw)
    monkeypatch.setenv("PRIVBANDIT_CREDENTIALS_FILE", "/somewhere/credentials.env")
    monkeypatch.setenv("PRIVBANDIT_USERNAME", "analyzer")  # one account for all: not what a party gets
    monkeypatch.setenv("PRIVBANDIT_BROKER_ACL", "enforced")  # a verdict comes from the probe, not from here
    # a shell set up for a deployment may hold parties' keys: each party gets its own, from the launcher
    monkeypatch.setenv("PRIVBANDIT_FLEET_MASTER_KEY", "0xfeed")
    monkeypatch.setenv("PRIVBANDIT_ANALYZER_KEY_FILE", "/keys/analyzer.env")
    family, config = experiment_files.load(DEMO)
    parties = plan_parties(family, config, DEMO, [], tmp_path, "mqtts://broker:8883", "r1", 2, passwords,
                           tls_files={"ca_file": "/ca.pem"}, broker_acl="enforced")
    inherited = _inherited_env()
    assert not any(pw in inherited.values() for pw in passwords.values())
    assert not {"PRIVBANDIT_CREDENTIALS_FILE", "PRIVBANDIT_USERNAME", "PRIVBANDIT_BROKER_ACL",
                "PRIVBANDIT_FLEET_MASTER_KEY", "PRIVBANDIT_ANALYZER_KEY_FILE"} & set(inherited)
    for party in parties:
        role = party.env["PRIVBANDIT_USERNAME"]
        env = {**inherited, **party.env}
        assert [pw for pw in passwords.values() if pw in env.values()] == [passwords[role]], party.name
        assert not any(pw in arg for pw in passwords.values() for arg in party.argv), party.name  # not in ps
        assert env["PRIVBANDIT_CA_FILE"] == "/ca.pem"
    assert parties[0].env["PRIVBANDIT_BROKER_ACL"] == "enforced"
    keys = {p.name: {k for k in p.env if k.endswith("_KEY")} for p in parties}
    assert keys["users-0"] == keys["users-1"] == {"PRIVBANDIT_REPORT_AUTH_KEY", "PRIVBANDIT_FLEET_KEY",
                                                  "PRIVBANDIT_IDENTITY_KEY"}
    assert parties[-1].env["PRIVBANDIT_FLEET_KEY"] != parties[-2].env["PRIVBANDIT_FLEET_KEY"]
    assert keys["aggregator"] == {"PRIVBANDIT_REPORT_AUTH_KEY", "PRIVBANDIT_FLEET_MASTER_KEY"}
    assert keys["analyzer"] == {"PRIVBANDIT_ANALYZER_KEY"} and keys["observer"] == {"PRIVBANDIT_REPORT_AUTH_KEY"}


# --- TLS ----------------------------------------------------------------------------------------------

def _key_pair(directory: Path, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    path = directory / f"{name}.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return key, path


def _certificate(directory: Path, name: str, key, issuer_key=None, issuer=None, *, ca=False, server=False) -> Path:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"privbandit test {name}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer or subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed, and a second,
    unrelated CA."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, _ = _key_pair(directory, "ca")
    ca = _certificate(directory, "ca", ca_key, ca=True)
    ca_name = x509.load_pem_x509_certificate(ca.read_bytes()).subject
    server_key, server_key_path = _key_pair(directory, "server")
    client_key, client_key_path = _key_pair(directory, "client")
    other_key, _ = _key_pair(directory, "other-ca")
    return {"ca": ca, "other_ca": _certificate(directory, "other-ca", other_key, ca=True),
            "server": _certificate(directory, "server", server_key, ca_key, ca_name, server=True),
            "server_key": server_key_path,
            "client": _certificate(directory, "client", client_key, ca_key, ca_name), "client_key": client_key_path}


def test_a_session_over_tls_with_client_certificates_and_a_wrong_ca_refused(tmp_path, mosquitto):
    pki = _pki(tmp_path / "pki")
    broker, files = mp.start_with_broker_config(tmp_path / "broker", "tls1", tls_cert=pki["server"],
                                                tls_key=pki["server_key"], client_ca=pki["ca"])
    url = f"mqtts://127.0.0.1:{broker.port}"
    common = ["--transport", "mqtt", "--broker", url, "--run-id", "tls1", "--credentials", str(files.credentials),
              "--cert-file", str(pki["client"]), "--key-file", str(pki["client_key"]), *SHORT]
    with broker:
        start = time.monotonic()
        refused, text = _cli(["run", str(DEMO), *common, "--ca-file", str(pki["other_ca"]),
                              "--out", str(tmp_path / "wrong")])
        assert refused.exit_code == 1, text
        assert f"TLS with the broker at {url} failed (CA file {pki['other_ca']})" in text
        assert "certificate verify failed" in text and "Traceback" not in text
        assert time.monotonic() - start < 15  # refused at once, not after the parties' 30 s of retries
        # A party started by hand with the wrong CA gives up at once too, naming TLS.
        wrong = BusSettings(broker_url=url, run_id="tls1", username="analyzer", password=files.password("analyzer"),
                            ca_file=str(pki["other_ca"]), cert_file=str(pki["client"]),
                            key_file=str(pki["client_key"]), connect_timeout_s=30)
        start = time.monotonic()
        with pytest.raises(ConnectionError, match="TLS with the broker at .* failed: .*certificate verify failed"):
            asyncio.run(_enter(connect(wrong, "tls1-analyzer", [])))
        assert time.monotonic() - start < 5

        result, text = _cli(["run", str(DEMO), *common, "--ca-file", str(pki["ca"]), "--out", str(tmp_path / "o")])
        assert result.exit_code == 0, text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["broker"] == {"acl": "enforced", "tls": True}
    assert summary["parties_missing_stats"] == [] and refusals(summary) == {}
    assert "insecure broker" not in text


def test_tls_files_are_checked_by_name():
    with pytest.raises(ValueError, match="ca_file: only with an mqtts:// broker_url"):
        BusSettings(broker_url="mqtt://127.0.0.1:1883", ca_file="/x.pem").tls_context()
    with pytest.raises(ValueError, match="ca_file '/no/such.pem': cannot load CA certificates"):
        BusSettings(broker_url="mqtts://127.0.0.1", ca_file="/no/such.pem").tls_context()
    with pytest.raises(ValueError, match="key_file: given without cert_file"):
        BusSettings(broker_url="mqtts://127.0.0.1", key_file="/k.pem").tls_context()
    assert BusSettings(broker_url="mqtts://127.0.0.1").endpoint() == ("127.0.0.1", 8883)


def test_broker_config_writes_a_tls_listener_and_checks_its_files(tmp_path):
    pki = _pki(tmp_path / "pki")
    files = acl.write_broker_config(tmp_path / "b", "tls2", 8883, tls_cert=pki["server"], tls_key=pki["server_key"],
                                    client_ca=pki["ca"])
    conf = files.conf.read_text().splitlines()
    at = conf.index("listener 8883 127.0.0.1")
    assert conf[at + 1:at + 5] == [f"certfile {pki['server']}", f"keyfile {pki['server_key']}",
                                   f"cafile {pki['ca']}", "require_certificate true"]
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        acl.write_broker_config(tmp_path / "c", "tls2", 8883, tls_cert=pki["server"])
    with pytest.raises(ValueError, match="tls_key must be a readable PEM file"):
        acl.write_broker_config(tmp_path / "c", "tls2", 8883, tls_cert=pki["server"], tls_key=tmp_path / "no.key")
