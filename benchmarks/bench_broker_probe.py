"""What the broker probe (privbandit/services/broker_probe.py) costs before a session starts.

    python benchmarks/bench_broker_probe.py [--repeat 10]

Probes, each ``--repeat`` times, and prints the median and the slowest wall time:

- ``open``: the system Mosquitto at 127.0.0.1:1883 (anonymous, no ACL), no credentials: the probe
  that refuses it;
- ``acl_file`` / ``dynsec``: a Mosquitto started here with ``privbandit broker-config``'s files,
  the six role accounts;
- ``embedded``: the embedded amqtt broker with the same accounts (the launcher's default);
- ``tls``: the ``acl_file`` Mosquitto behind a TLS listener that requires client certificates.

Most of it is :data:`~privbandit.services.broker_probe.GRACE_S` (the wait for deliveries that must
not come); the rest is connecting seven clients and one round trip per canary.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privbandit.services.acl import Role  # noqa: E402
from privbandit.services.broker_probe import GRACE_S, probe_broker  # noqa: E402
from privbandit.services.bus import BusSettings  # noqa: E402
from privbandit.services.embedded_broker import start_embedded_broker  # noqa: E402
from privbandit.services.mosquitto_process import start_with_broker_config  # noqa: E402


def timed(settings: BusSettings, run_id: str, passwords, repeat: int, expect_enforced: bool) -> list[float]:
    times = []
    for _ in range(repeat):
        result = probe_broker(settings, run_id, passwords)
        assert result.enforced == expect_enforced, result.describe()
        times.append(result.elapsed_s)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    rows["open"] = timed(BusSettings(broker_url="mqtt://127.0.0.1:1883"), "b" + secrets.token_hex(4), None,
                         args.repeat, False)
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("acl_file", "dynsec"):
            broker, files = start_with_broker_config(Path(tmp) / backend, "bench", backend=backend)
            with broker:
                passwords = {r.value: p for r, p in files.passwords.items()}
                rows[backend] = timed(BusSettings(broker_url=broker.url), "bench", passwords, args.repeat, True)
        passwords = {r.value: secrets.token_urlsafe(12) for r in Role}
        with start_embedded_broker("bench", passwords) as broker:
            rows["embedded"] = timed(BusSettings(broker_url=broker.url), "bench", passwords, args.repeat, True)
        from tests.services.test_broker_probe import _pki

        pki = _pki(Path(tmp) / "pki")
        broker, files = start_with_broker_config(Path(tmp) / "tls", "bench", tls_cert=pki["server"],
                                                 tls_key=pki["server_key"], client_ca=pki["ca"])
        with broker:
            settings = BusSettings(broker_url=f"mqtts://127.0.0.1:{broker.port}", ca_file=str(pki["ca"]),
                                   cert_file=str(pki["client"]), key_file=str(pki["client_key"]))
            passwords = {r.value: p for r, p in files.passwords.items()}
            rows["tls"] = timed(settings, "bench", passwords, args.repeat, True)
    print(f"machine: {platform.platform(terse=True)}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.1f}; GRACE_S = {GRACE_S}")
    print(f"{'broker':10s} {'median s':>9s} {'max s':>7s}  ({args.repeat} probes each)")
    for name, times in rows.items():
        print(f"{name:10s} {statistics.median(times):9.3f} {max(times):7.3f}")


if __name__ == "__main__":
    main()
