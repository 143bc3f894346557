"""``privbandit broker-config``: write a Mosquitto configuration enforcing a run's trust model;
``privbandit tls-files``: the CA and the broker certificate for it (docker-compose.yml)."""

from __future__ import annotations

import datetime
import ipaddress
import re
import sys
from pathlib import Path

from privbandit.services import acl
from privbandit.services.acl.broker_files import write_with_mode
from privbandit.services.acl.topics import MAX_INSTANCE, Role, password_env
from privbandit.services.bus import read_credentials
from privbandit.services.mosquitto_process import mosquitto_binary


def broker_config_main(out_dir: Path, run_id: str, port: int, *, host: str = "127.0.0.1",
                       backend: str = "acl_file", tls_cert: Path | None = None, tls_key: Path | None = None,
                       client_ca: Path | None = None, rotate: bool = False,
                       role_dirs: list[str] | None = None, instances: list[str] | None = None,
                       dynsec_plugin: Path | None = None, budget_plugin: str = "auto") -> int:
    """Write ``mosquitto.conf``, ``passwd``, ``acl``, ``credentials.env`` and the healthcheck's
    login (:data:`HEALTHCHECK_LOGIN`) into ``out_dir``.

    A ``credentials.env`` already in ``out_dir`` keeps its passwords (issue #20 item 11: a broker
    still running the deployment's earlier config must accept the parties of its next run), unless
    ``rotate``; roles it lacks get new ones. Prints where the files are and how to start Mosquitto.
    Returns a process exit code: 0 on success, 2 for invalid arguments (the message names the
    argument, or the file).

    ``role_dirs``: ``ROLE=DIR`` items; each DIR gets a ``credentials.env`` with that role's
    password alone, for the parties of that role to mount (docker-compose.yml).

    ``instances``: intermediary instance accounts beside the roles (``shuffler-1`` … ``shuffler-k``,
    the concurrent-shuffle family's k shufflers), each with its own password and ACL.

    ``dynsec_plugin``: with ``backend="dynsec"``, the plugin's path where the broker runs, written
    as given (the eclipse-mosquitto image's, where the image running this has none).

    ``budget_plugin``: the per-account publish budget (issue #32): ``build`` compiles it here
    (:func:`~privbandit.services.mosquitto_process.build_budget_plugin`; an error if it cannot),
    ``auto`` does so when Mosquitto is installed here (the broker will run here) and otherwise
    writes none and says so, ``none`` writes none, an absolute path is written as given (where the
    broker runs).
    """
    kept = Path(out_dir) / "credentials.env"
    try:
        names = list(dict.fromkeys(instances or []))
        for name in names:
            if not acl.is_instance(name):
                raise ValueError(f"--instance {name!r}: must be aggregator-<i> or shuffler-<i> with i in "
                                 f"1..{MAX_INSTANCE}")
        accounts = [r.value for r in acl.Role] + names
        per_role = []
        for item in role_dirs or []:
            role, sep, where = item.partition("=")
            if not sep or not where or role not in accounts:
                raise ValueError(f"--role-dir {item!r}: must be ROLE=DIR with ROLE one of {', '.join(accounts)}")
            per_role.append((role, Path(where)))
        plugin, plugin_note = _budget_plugin(budget_plugin)
        passwords = read_credentials(kept) if kept.is_file() and not rotate else {}
        unknown = sorted(set(passwords) - set(accounts))
        if unknown:
            env_name = f"PRIVBANDIT_{unknown[0].upper().replace('-', '_')}_PASSWORD"
            raise ValueError(f"{kept}: {env_name} names no account of this configuration "
                             f"({', '.join(accounts)}); pass its --instance, fix the file, or pass --rotate")
        files = acl.write_broker_config(out_dir, run_id, port, passwords, host=host, backend=backend,  # type: ignore[arg-type]
                                        dynsec_plugin=dynsec_plugin, plugin_here=False, budget_plugin=plugin,
                                        tls_cert=tls_cert,
                                        tls_key=tls_key, client_ca=client_ca, instances=names)
        written = [(role, acl.write_role_credentials(files, role, where)) for role, where in per_role]
        login = _write_healthcheck_login(files)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the broker files to {out_dir}: {exc}", file=sys.stderr)
        return 2

    scheme = "mqtts" if tls_cert else "mqtt"
    print(f"Broker files for run {files.run_id!r} (listener {files.host}:{files.port}{', TLS' if tls_cert else ''}, "
          f"backend {files.backend}):")
    print(f"  config       {files.conf}")
    if files.backend == "dynsec":
        print(f"  dynsec       {files.dynsec}   (users, passwords and ACL for the dynamic-security plugin)")
        plugin = next(line.split(" ", 1)[1] for line in files.conf.read_text().splitlines() if line.startswith("plugin "))
        if not Path(plugin).is_file():
            print(f"  (the conf loads {plugin}, not on this machine: it must be where the broker runs)")
    print(f"  budget       {plugin_note}")
    print(f"  passwords    {files.passwd}   (PBKDF2-SHA512 hashes, mode 0600)")
    print(f"  acl          {files.acl}")
    print(f"  credentials  {files.credentials}   (PRIVBANDIT_<ROLE>_PASSWORD=..., mode 0600: keep secret)")
    print(f"  healthcheck  {login}   (the launcher account's login for mosquitto_sub, mode 0600)")
    for role, path in written:
        print(f"  {role:<12} {path}   (the {role} password alone, mode 0600: for that role's parties)")
    if passwords:
        print(f"  (kept the {len(passwords)} passwords it held: a broker running the earlier config still "
              f"accepts them; --rotate draws new ones)")
    print()
    print("Start the broker with:")
    print(f"  mosquitto -c {files.conf}")
    if mosquitto_binary() is None:
        print("  (mosquitto is not on this machine's PATH: install it, e.g. `apt install mosquitto`)")
    print()
    print("Then give each party its role's credentials, e.g.:")
    print(f"  set -a; . {files.credentials}; set +a")
    print(f"  PRIVBANDIT_BROKER_URL={scheme}://{files.host}:{files.port} PRIVBANDIT_RUN_ID={files.run_id} \\")
    print("  PRIVBANDIT_USERNAME=analyzer PRIVBANDIT_PASSWORD=$PRIVBANDIT_ANALYZER_PASSWORD ...")
    print("or start a whole session on it (every role's password from the file, never the command line):")
    print(f"  privbandit run FILE --transport mqtt --broker {scheme}://{files.host}:{files.port} --run-id {files.run_id} "
          f"--credentials {files.credentials}{' --ca-file CA.pem' if tls_cert else ''}")
    if files.backend == "acl_file":
        print()
        print("Note: with acl_file, Mosquitto accepts every SUBSCRIBE and enforces 'read' per message at")
        print("delivery; use backend 'dynsec' to have forbidden subscriptions refused outright.")
    return 0


def _budget_plugin(choice: str) -> tuple[Path | None, str]:
    """The budget plugin's path for ``--budget-plugin`` (build, auto, none or a path) and a line
    saying what the conf gets; ValueError naming the option if it cannot be had."""
    from privbandit.services.mosquitto_process import MosquittoError, build_budget_plugin

    if choice == "none":
        return None, "none (--budget-plugin none): the users' account may publish without limit"
    if choice in ("build", "auto"):
        if choice == "auto" and mosquitto_binary() is None:
            return None, ("none: Mosquitto is not installed here, so the plugin was not built (--budget-plugin build, "
                          "or PATH where the broker runs)")
        try:
            plugin = build_budget_plugin()
        except MosquittoError as exc:
            raise ValueError(f"--budget-plugin {choice}: {exc}") from None
        return plugin, f"{plugin}   (per-connection publish budget of the users' account, built here)"
    if not Path(choice).is_absolute():
        raise ValueError(f"--budget-plugin {choice!r}: must be build, auto, none or an absolute path")
    return Path(choice), f"{choice}   (as given: it must be where the broker runs)"


# --- the broker's healthcheck -------------------------------------------------------------------

# mosquitto_sub reads default options from $XDG_CONFIG_HOME/mosquitto_sub, one per line: the
# broker's healthcheck (docker-compose.yml) logs in with them, so no password is on its command
# line, which `ps` on the host shows to every user.
HEALTHCHECK_LOGIN = "mosquitto_sub"


def _write_healthcheck_login(files: acl.BrokerFiles) -> Path:
    """``mosquitto_sub`` beside the broker's files: the launcher account's login. No compose party
    uses that account, and it may read only the run's control topic."""
    path = files.directory / HEALTHCHECK_LOGIN
    write_with_mode(path, f"# privbandit: the broker healthcheck's login for run {files.run_id} "
                 f"({password_env(Role.LAUNCHER)}): keep secret\n"
                 f"-u {Role.LAUNCHER.value}\n-P {files.password(Role.LAUNCHER)}\n", 0o600)
    return path


# --- ``privbandit tls-files``: a CA and the broker's certificate ---------------------------------

TLS_DAYS = 365
RENEW_DAYS = 30  # certificates with less left are replaced, not kept
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # RFC 1123: letters, digits, inner hyphens
_DNS_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def _subject_names(hosts: list[str]) -> list:
    from cryptography import x509

    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not _DNS_NAME.fullmatch(host):
                raise ValueError(f"--host {host!r}: must be an IP address or a DNS name "
                                 "(letters, digits, '-' and '.')") from None
            names.append(x509.DNSName(host.lower()))
    return names


def _kept(ca_pem: Path, cert_pem: Path, key_pem: Path, names: list) -> bool:
    """Are the files there, the broker's certificate signed by the CA and for its key, naming
    every host, and valid for more than RENEW_DAYS?"""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    try:
        ca = x509.load_pem_x509_certificate(ca_pem.read_bytes())
        cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
        key = serialization.load_pem_private_key(key_pem.read_bytes(), password=None)
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):  # unusable: new ones
        return False
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    return (key.public_key().public_bytes(serialization.Encoding.DER, public)
            == cert.public_key().public_bytes(serialization.Encoding.DER, public)
            and set(names) <= set(san) and left > datetime.timedelta(days=RENEW_DAYS))


def make_tls_files(out_dir: Path, ca_dir: Path, hosts: list[str], *, days: int = TLS_DAYS,
                   rotate: bool = False) -> tuple[Path, Path, Path, bool]:
    """``ca_dir/ca.pem``, a new CA's certificate, and ``out_dir/broker.pem`` (``broker.key``, mode
    0600) for a broker reached as any of ``hosts`` (DNS names or IP addresses), signed by it; ECDSA
    P-256, SHA-256. The CA's private key signs once and is dropped, never written: nothing can
    issue another certificate the parties would trust. Files already there that still serve
    (:func:`_kept`) are kept unless ``rotate``, so a broker still running with them stays
    trusted. Returns the three paths and whether they are new."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("--host: give at least one name the parties reach the broker by")
    if not 1 <= days <= 3650:
        raise ValueError(f"--days {days}: must be in 1..3650")
    names = _subject_names(hosts)
    ca_pem, cert_pem, key_pem = Path(ca_dir) / "ca.pem", Path(out_dir) / "broker.pem", Path(out_dir) / "broker.key"
    if not rotate and _kept(ca_pem, cert_pem, key_pem, names):
        return ca_pem, cert_pem, key_pem, False
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)  # (clock skew)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "privbandit broker CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))
    for directory in {Path(out_dir), Path(ca_dir)}:
        directory.mkdir(parents=True, exist_ok=True)
    _write_bytes(key_pem, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()), 0o600)
    _write_bytes(cert_pem, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write_bytes(ca_pem, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    return ca_pem, cert_pem, key_pem, True


def _write_bytes(path: Path, data: bytes, mode: int) -> None:
    write_with_mode(path, data.decode("ascii"), mode)  # PEM is ASCII


def tls_files_main(out_dir: Path, ca_dir: Path, hosts: list[str], *, days: int = TLS_DAYS,
                   rotate: bool = False) -> int:
    """``privbandit tls-files``: :func:`make_tls_files`, then where the files are. Returns 0, or 2
    for an invalid argument or an unwritable directory (the message names it)."""
    try:
        ca_pem, cert_pem, key_pem, new = make_tls_files(out_dir, ca_dir, hosts, days=days, rotate=rotate)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the TLS files to {exc.filename or out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{'New' if new else 'Kept the'} TLS files for a broker reached as {', '.join(hosts)}"
          f"{'' if new else ' (still valid; --rotate makes new ones)'}:")
    print(f"  CA           {ca_pem}   (for every party: PRIVBANDIT_CA_FILE)")
    print(f"  certificate  {cert_pem}   (for the broker: broker-config --tls-cert)")
    print(f"  key          {key_pem}   (for the broker alone, mode 0600: broker-config --tls-key)")
    return 0
