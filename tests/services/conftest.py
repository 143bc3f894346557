"""Brokers for the service tests.

A test that needs Mosquitto fails, never skips, when CI=true: CI installs it (.ci/run).
"""

import tempfile
from pathlib import Path

import pytest
from tests.needs import missing

from privbandit.services import acl


def _open_conf(directory: Path, port: int) -> Path:
    """An anonymous Mosquitto on 127.0.0.1:``port`` with the limits of the generated config, and
    ``set_tcp_nodelay true`` as every broker the project configures: the distro's default config
    leaves Nagle's algorithm on at the broker's end, which adds ~40 ms to each message a party
    receives (benchmarks/bench_latency.py) and made the sequential algorithms' sessions crawl."""
    conf = directory / f"mosquitto-{port}.conf"
    conf.write_text("\n".join([
        f"listener {port} 127.0.0.1", "allow_anonymous true", "persistence false", "set_tcp_nodelay true",
        f"max_queued_messages {acl.MAX_QUEUED_MESSAGES}", f"max_packet_size {acl.MAX_PACKET_BYTES}", ""]))
    return conf


@pytest.fixture(scope="session")
def mosquitto_url():
    """An anonymous Mosquitto of this test process's own (each xdist worker has one), on a free port."""
    from privbandit.services.mosquitto_process import MosquittoError, mosquitto_binary, start_on_free_port

    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt install mosquitto)")
    with tempfile.TemporaryDirectory(prefix="privbandit-test-mosquitto-") as tmp:
        try:
            broker = start_on_free_port(lambda port: _open_conf(Path(tmp), port))
        except MosquittoError as exc:
            pytest.fail(f"cannot start the tests' Mosquitto: {exc}")
        try:
            yield broker.url
        finally:
            broker.stop()
