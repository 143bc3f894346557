"""A private Mosquitto child process: the errors it raises when it cannot start, and the retry on
another port when its port was taken."""

from __future__ import annotations

import socket

import pytest

import privbandit.services.mosquitto_process as mp
from tests.services.test_acl import _missing


@pytest.fixture(autouse=True)
def _installed():
    if mp.mosquitto_binary() is None:
        _missing("mosquitto")


@pytest.fixture(params=["bound", "listening"])
def taken(request):
    """A port of 127.0.0.1 another socket holds: bound (Mosquitto's bind fails), or listening (it
    would answer the wait for the port in Mosquitto's stead: start() must check first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        if request.param == "listening":
            s.listen()
        yield s.getsockname()[1]


def test_a_taken_port_raises_port_in_use(tmp_path, taken):
    with pytest.raises(mp.PortInUse, match=f"127.0.0.1:{taken} is in use"):
        mp.MosquittoProcess(mp.write_persistent_conf(tmp_path, taken), taken).start()


def test_a_bad_conf_raises_with_the_log(tmp_path):
    conf = tmp_path / "mosquitto.conf"
    conf.write_text("listener 1 127.0.0.1\nno_such_option true\n")
    with pytest.raises(mp.MosquittoError, match="exited with code") as info:
        mp.MosquittoProcess(conf, 1).start()
    assert not isinstance(info.value, mp.PortInUse)
    assert "no_such_option" in info.value.log_text and "no_such_option" in str(info.value)


def test_start_on_free_port_tries_another_port_when_its_port_was_taken(tmp_path, taken, monkeypatch):
    ports = iter([taken, taken, mp.free_port()])
    monkeypatch.setattr(mp, "free_port", lambda: next(ports))
    with mp.start_on_free_port(lambda port: mp.write_persistent_conf(tmp_path / str(port), port)) as broker:
        assert broker.port != taken and broker.running
    assert not broker.running


def test_start_on_free_port_gives_up_after_its_attempts(tmp_path, taken, monkeypatch):
    monkeypatch.setattr(mp, "free_port", lambda: taken)
    with pytest.raises(mp.PortInUse):
        mp.start_on_free_port(lambda port: mp.write_persistent_conf(tmp_path, port), attempts=2)


def test_killed_it_starts_again_on_the_same_port_from_what_it_saved(tmp_path):
    broker = mp.start_on_free_port(lambda port: mp.write_persistent_conf(tmp_path, port))
    try:
        broker.saved()
        broker.kill()
        assert not broker.running
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", broker.port)) != 0
        broker.start()
        assert broker.running and broker.url == f"mqtt://127.0.0.1:{broker.port}"
        assert (tmp_path / "mosquitto.db").exists()
    finally:
        broker.stop()
