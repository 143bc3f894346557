"""Brokers for the service tests.

A test that needs Mosquitto fails, never skips, when CI=true: CI installs it (.ci/run).
"""

import tempfile
from pathlib import Path

import pytest
from tests.needs import missing


@pytest.fixture(scope="session")
def mosquitto_url():
    """An anonymous Mosquitto of this test process's own (each xdist worker has one), on a free port,
    with ``set_tcp_nodelay true`` as every broker the project configures: the distro's default
    config leaves Nagle's algorithm on at the broker's end, which adds ~40 ms to each message a party
    receives (benchmarks/bench_latency.py) and made the sequential algorithms' sessions crawl."""
    from privbandit.services.mosquitto_process import (MosquittoError, mosquitto_binary, start_on_free_port,
                                                       write_open_conf)

    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    with tempfile.TemporaryDirectory(prefix="privbandit-test-mosquitto-") as tmp:
        try:
            broker = start_on_free_port(lambda port: write_open_conf(Path(tmp), port))
        except MosquittoError as exc:
            pytest.fail(f"cannot start the tests' Mosquitto: {exc}")
        try:
            yield broker.url
        finally:
            broker.stop()
