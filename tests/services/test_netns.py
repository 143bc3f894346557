"""Real hosts: the analyzer, the intermediary and two user fleets each on its own network host (a
Linux network namespace), each host with its own broker node, the four joined by a bridge; one
fleet's host is cut off mid-run (its link down) and healed (docs/cluster.md, "Hosts").

The run must either finish with the in-process run's numbers, bit for bit (so no accepted report
was lost or counted twice), or fail loudly within its deadline. Traffic never leaves the
namespaces: the bridge lives in a fifth namespace and the root namespace has no address on it.
Needs root and ``ip netns``: fails, never skips, when CI=true.
"""

import os
import secrets
import shutil
import subprocess
import sys
import time

import pytest

from privbandit.runner import config as experiment_files
from privbandit.services.acl.nats_files import NatsNode
from privbandit.services.cluster import NatsCluster, nats_binary
from privbandit.services.launcher import Party, _inherited_env, plan_parties
from tests.services.test_distributed import _experiment, _inproc, _log_tails, assert_same_numbers
from tests.needs import missing

# RFC 2544's benchmarking range: no real host has it, and it exists only inside the namespaces.
SUBNET = "198.18.213"
HOSTS = {"an": ("observer", "analyzer"), "im": ("aggregator",), "f0": ("users-0",), "f1": ("users-1",)}
# The aggregator's round deadline: a fleet that never comes back fails the run by then. After the
# heal the fleet's TCP retransmissions back off and it must reconnect to its node: at 20 s, 10 s
# after a 10-s cut, a loaded full-suite run once missed it (65,536 of 131,072 reports).
DEADLINE_S = 40
CUT_S = 10.0  # long enough for JetStream to move f1's leaderships away (~1-2 s Raft election) and to time out f1's requests


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def hosts():
    """Five namespaces: four hosts (``an``, ``im``, ``f0``, ``f1``) with one address each, and a
    switch namespace holding the bridge. Yields host → (namespace, address); deleted afterwards,
    whatever happened (deleting a namespace deletes its interfaces)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or nats_binary() is None:
        missing("needs root, iproute2 (ip netns) and nats-server")
    tag = secrets.token_hex(3)
    switch = f"pbsw{tag}"
    made = []
    try:
        _ip("netns", "add", switch)
        made.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        out = {}
        for i, host in enumerate(HOSTS, start=1):
            ns = f"pb{host}{tag}"
            _ip("netns", "add", ns)
            made.append(ns)
            # the pair is created in the switch namespace, one end then moved to the host
            _ip("-n", switch, "link", "add", f"v{host}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", switch, "link", "set", f"v{host}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            out[host] = (ns, f"{SUBNET}.{i}")
        yield out | {"switch": (switch, None)}
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


class HostParty(Party):
    """A party started inside a network namespace (``ip netns exec`` replaces itself with the
    party, so stopping the process stops the party)."""

    netns: str = ""

    def start(self) -> None:
        out = open(self.log, "ab") if self.log else None
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.netns, sys.executable, "-m", "privbandit", *self.argv],
                                     env={**_inherited_env(), **self.env}, stdout=out, stderr=out)


@pytest.mark.slow_e2e
def test_a_fleet_host_cut_off_and_healed_mid_run(tmp_path, hosts):
    run_id = "h" + secrets.token_hex(4)
    nodes = [NatsNode(f"n{h}", addr, 4222, 1883, 6222) for h, (_, addr) in hosts.items() if addr]
    cluster = NatsCluster(tmp_path / "cluster", run_id, nodes,
                          prefix={f"n{h}": ["ip", "netns", "exec", ns] for h, (ns, addr) in hosts.items() if addr})
    path = _experiment(tmp_path, horizon=2_000_000, runs=1, extra="")  # 31 blocks, odd ones on f1: needed throughout
    _inproc(path, tmp_path / "inproc")
    family, config = experiment_files.load(path)
    out = tmp_path / "mqtt"
    parties = []
    with cluster:
        planned = plan_parties(family, config, path, [], out, "mqtt://unset", run_id, 2,
                               {str(a): pw for a, pw in cluster.files.passwords.items()},
                               observer_log=out / "logs" / "observer.log", broker_acl="enforced")
        for p in planned:
            host = next(h for h, names in HOSTS.items() if p.name in names)
            party = HostParty(p.name, p.argv, p.env | {"PRIVBANDIT_BROKER_URL": f"mqtt://{hosts[host][1]}:1883"}, p.log)
            party.netns = hosts[host][0]
            if p.name == "aggregator":
                party.argv = [*party.argv, "--deadline", str(DEADLINE_S)]
            parties.append(party)
        try:
            for p in parties:
                p.start()
            _wait_for_rounds(out, parties)
            assert parties[0].proc.poll() is None, "the run ended before the cut: make it longer"
            switch = hosts["switch"][0]
            before = cluster.log("nf1").stat().st_size
            _ip("-n", switch, "link", "set", "vf1", "down")  # f1's cable pulled: node and fleet cut off
            time.sleep(CUT_S)
            gone = {p.name: p.proc.returncode for p in parties if p.proc.poll() is not None}
            assert not gone, f"parties exited while f1 was cut off: {gone}\n{_log_tails(parties)}"
            _ip("-n", switch, "link", "set", "vf1", "up")
            end = time.monotonic() + 180
            while parties[0].proc.poll() is None:
                assert time.monotonic() < end, "the run neither finished nor failed\n" + _log_tails(parties)
                time.sleep(0.2)
            code = parties[0].proc.returncode
        finally:
            for p in parties:
                p.stop()
        assert cluster.dead() == [], cluster.tails()
    # the cut was felt: f1's node logged a leader moving, a request to the others timing out, a
    # JetStream asset losing its quorum or a route to a peer closing (which of these NATS logs first
    # depends on where in its heartbeat cycle the cable is pulled)
    with open(cluster.log("nf1"), "rb") as fh:
        fh.seek(before)
        after_cut = fh.read().decode(errors="replace").split("Server Shutdown")[0]
    felt = ("metadata leader", "timeout", "NO quorum", "Router connection closed")
    assert any(sign in after_cut for sign in felt), after_cut[-3000:]
    observer_log = (out / "logs" / "observer.log").read_text(errors="replace")
    if code == 0:
        assert_same_numbers(tmp_path / "inproc", out)
    else:  # a loud failure: the observer says what failed, and wrote no results
        assert "fail" in observer_log.lower(), observer_log[-3000:]
        assert not (out / "summary.json").exists()
        pytest.fail(f"the run failed loudly (allowed by the issue, but not expected with a {CUT_S} s cut and a "
                    f"{DEADLINE_S} s deadline):\n{observer_log[-2000:]}")


def _wait_for_rounds(out, parties, timeout_s: float = 90.0) -> None:
    """Until the aggregator has released a round (the session is under way on every host)."""
    log = out / "logs" / "aggregator.log"
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if parties[0].proc.poll() is not None:
            return
        if (out / "state" / "aggregator" / "checkpoint.bin").exists():  # written at each round boundary
            return
        time.sleep(0.1)
    raise AssertionError(f"no round released within {timeout_s} s\n{_log_tails(parties)}\n{log}")
