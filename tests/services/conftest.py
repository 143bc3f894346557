"""Brokers for the service tests.

A test that needs Mosquitto fails, never skips, when CI=true: CI installs and starts it (.ci/run).
"""

import socket

import pytest
from tests.needs import missing

SYSTEM_MOSQUITTO = ("127.0.0.1", 1883)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def mosquitto_url() -> str:
    """The system Mosquitto at 127.0.0.1:1883 (anonymous, local only)."""
    if not _reachable(*SYSTEM_MOSQUITTO):
        missing("no Mosquitto at 127.0.0.1:1883 (start it: mosquitto -d)")
    return "mqtt://127.0.0.1:1883"
