"""``privbandit broker-config``: write a Mosquitto configuration enforcing a run's trust model."""

from __future__ import annotations

import sys
from pathlib import Path

from privbandit.services import acl
from privbandit.services.acl.topics import MAX_INSTANCE
from privbandit.services.bus import read_credentials
from privbandit.services.mosquitto_process import mosquitto_binary


def broker_config_main(out_dir: Path, run_id: str, port: int, *, host: str = "127.0.0.1",
                       backend: str = "acl_file", tls_cert: Path | None = None, tls_key: Path | None = None,
                       client_ca: Path | None = None, rotate: bool = False,
                       role_dirs: list[str] | None = None, instances: list[str] | None = None) -> int:
    """Write ``mosquitto.conf``, ``passwd``, ``acl`` and ``credentials.env`` into ``out_dir``.

    A ``credentials.env`` already in ``out_dir`` keeps its passwords (issue #20 item 11: a broker
    still running the deployment's earlier config must accept the parties of its next run), unless
    ``rotate``; roles it lacks get new ones. Prints where the files are and how to start Mosquitto.
    Returns a process exit code: 0 on success, 2 for invalid arguments (the message names the
    argument, or the file).

    ``role_dirs``: ``ROLE=DIR`` items; each DIR gets a ``credentials.env`` with that role's
    password alone, for the parties of that role to mount (docker-compose.yml).

    ``instances``: intermediary instance accounts beside the roles (``shuffler-1`` … ``shuffler-k``,
    the concurrent-shuffle family's k shufflers), each with its own password and ACL.
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
        passwords = read_credentials(kept) if kept.is_file() and not rotate else {}
        unknown = sorted(set(passwords) - set(accounts))
        if unknown:
            env_name = f"PRIVBANDIT_{unknown[0].upper().replace('-', '_')}_PASSWORD"
            raise ValueError(f"{kept}: {env_name} names no account of this configuration "
                             f"({', '.join(accounts)}); pass its --instance, fix the file, or pass --rotate")
        files = acl.write_broker_config(out_dir, run_id, port, passwords, host=host, backend=backend,  # type: ignore[arg-type]
                                        tls_cert=tls_cert, tls_key=tls_key, client_ca=client_ca, instances=names)
        written = [(role, acl.write_role_credentials(files, role, where)) for role, where in per_role]
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
    print(f"  passwords    {files.passwd}   (PBKDF2-SHA512 hashes, mode 0600)")
    print(f"  acl          {files.acl}")
    print(f"  credentials  {files.credentials}   (PRIVBANDIT_<ROLE>_PASSWORD=..., mode 0600: keep secret)")
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
