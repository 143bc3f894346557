"""The concurrent-shuffle family's k shufflers as k parties (issue #15, "Distributed").

- the rules: ``shuffler-i`` is an account of its own that reads only ``report/shuffler-i`` and writes
  only its own release, relay and metrics topics; the users may report to each shuffler of the run
  and forge none's metrics; a shuffler's party id is its own account's;
- the family: level i's rounds go to ``shuffler-i``, released only as a full batch; the server
  answers t only once every shuffler holding a node of V_t has released it, in any release order;
- real brokers with the generated files (Mosquitto acl_file and dynsec, the embedded broker):
  ``shuffler-1``'s account receives none of ``shuffler-2``'s reports and cannot publish its releases,
  while ``shuffler-2`` itself can;
- end to end over Mosquitto with those ACLs, each shuffler its own process and account: the run
  equals the in-process run, and the fleets' bytes are counted per shuffler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import uuid

import aiomqtt
import numpy as np
import pytest

from privbandit.families.concurrent_shuffle.parties import CounterAnalyzer, Layout, shuffler_of
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Release
from privbandit.runner import config as experiment_files
from privbandit.services import acl
from privbandit.services.bus import read_credentials
from privbandit.services.embedded_broker import start_embedded_broker
from privbandit.services.launcher import plan_parties
from privbandit.services.mosquitto_process import MosquittoError, PortInUse, mosquitto_binary, start_with_broker_config
from tests.services.test_acl import SETTLE_S, Inbox, _missing
from tests.services.test_distributed import _inproc, _wait, assert_same_numbers

RUN = "cs-run_1"
SHUFFLERS = ("shuffler-1", "shuffler-2", "shuffler-3")


def _t(rest: str) -> str:
    return f"pb/{RUN}/{rest}"


# --- the rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("account", "action", "topic", "ok"), [
    ("shuffler-1", "read", "report/shuffler-1", True),
    ("shuffler-1", "read", "report/shuffler-1/7", True),
    ("shuffler-1", "read", "report/shuffler-2", False),
    ("shuffler-1", "read", "report/+", False),  # a wildcard that could match another's reports
    ("shuffler-1", "read", "report/shuffler", False),
    ("shuffler-1", "write", "release/shuffler-1", True),
    ("shuffler-1", "write", "release/shuffler-2", False),
    ("shuffler-1", "write", "relay/shuffler-2", False),
    ("shuffler-1", "write", "metrics/shuffler-1", True),
    ("shuffler-1", "write", "metrics/shuffler-2", False),
    ("shuffler-1", "read", "plan", True),
    ("shuffler", "read", "report/shuffler-2", False),  # the role's own account does not reach its instances
    ("users", "write", "report/shuffler-3", True),
    ("users", "write", "report/shuffler-4", False),  # not a shuffler of this run
    ("users", "read", "relay/shuffler-2", True),
    ("users", "write", "metrics/shuffler-2", False),  # no forging a shuffler's metrics
    ("users", "read", "report/shuffler-2", False),
    ("analyzer", "read", "release/shuffler-3", True),
    ("analyzer", "read", "report/shuffler-3", False),
    ("observer", "read", "metrics/shuffler-2", True),
])
def test_each_shuffler_is_an_account_of_its_own(account, action, topic, ok):
    assert acl.allowed(account, action, _t(topic), RUN, SHUFFLERS) is ok


@pytest.mark.parametrize(("account", "client", "ok"), [
    ("shuffler-2", "shuffler-2", True), ("shuffler-1", "shuffler-2", False), ("shuffler", "shuffler-2", False),
    ("shuffler-2", "shuffler", False), ("users", "shuffler-2", False), ("shuffler-12", "shuffler-12", True),
])
def test_a_shuffler_party_id_belongs_to_its_account(account, client, ok):
    assert acl.client_id_allowed(account, f"{RUN}-{client}", RUN) is ok


@pytest.mark.parametrize("bad", ["shuffler-0", "shuffler-1000", "shuffler-x", "analyzer-2", "users-1", "shuffler-01"])
def test_instance_names_are_checked(bad):
    with pytest.raises(ValueError, match="instances"):
        acl.validate_instances([bad])
    with pytest.raises(ValueError, match="account"):
        acl.account_role(bad)


def test_generated_files_name_every_shuffler(tmp_path):
    files = acl.write_broker_config(tmp_path, RUN, 1883, instances=SHUFFLERS)
    text = files.acl.read_text()
    for name in SHUFFLERS:
        assert f"\nuser {name}\n" in text and f"topic read pb/{RUN}/report/{name}/#" in text
        assert f"topic write pb/{RUN}/report/{name}/#" in text  # the users' grant
        assert f"{acl.password_env(name)}={files.password(name)}" in files.credentials.read_text()
    assert acl.read_password_file(files.passwd).keys() == {*(r.value for r in acl.Role), *SHUFFLERS}
    assert files.instances == SHUFFLERS
    assert acl.password_env("shuffler-2") == "PRIVBANDIT_SHUFFLER_2_PASSWORD"
    # a party reading the credentials file finds its own account's password by its name
    found = read_credentials(files.credentials)
    assert {name: found[name] for name in SHUFFLERS} == {name: files.password(name) for name in SHUFFLERS}
    assert found["shuffler"] == files.password("shuffler") and len(set(found.values())) == len(found)


def test_broker_config_writes_the_shuffler_instances_and_keeps_their_passwords(tmp_path, capsys):
    """`privbandit broker-config --instance shuffler-i` (an external broker for k shufflers): every
    instance gets its own password, ACL and, with --role-dir, its own credentials file; a second run
    keeps them (#20 item 11); a kept instance password without its --instance, and a bad name, are
    errors naming them."""
    from typer.testing import CliRunner

    from privbandit.cli import app

    cfg = tmp_path / "cfg"
    argv = ["broker-config", "--out", str(cfg), "--run-id", RUN, *(f"--instance={n}" for n in SHUFFLERS),
            "--role-dir", f"shuffler-2={tmp_path / 's2'}"]
    first = CliRunner().invoke(app, argv)
    assert first.exit_code == 0, first.output
    found = read_credentials(cfg / "credentials.env")
    assert set(SHUFFLERS) <= set(found) and len(set(found.values())) == len(found)
    text = (cfg / "acl").read_text()
    for name in SHUFFLERS:
        assert f"\nuser {name}\n" in text and f"topic read pb/{RUN}/report/{name}/#" in text
    assert read_credentials(tmp_path / "s2" / "credentials.env") == {"shuffler-2": found["shuffler-2"]}
    assert CliRunner().invoke(app, argv).exit_code == 0
    assert read_credentials(cfg / "credentials.env") == found  # kept, so a running broker still accepts them
    alone = CliRunner().invoke(app, ["broker-config", "--out", str(cfg), "--run-id", RUN])
    assert alone.exit_code == 2 and "PRIVBANDIT_SHUFFLER_1_PASSWORD names no account" in alone.output
    bad = CliRunner().invoke(app, ["broker-config", "--out", str(tmp_path / "x"), "--instance", "shuffler-0"])
    assert bad.exit_code == 2 and "--instance 'shuffler-0'" in bad.output
    # `run --broker URL --credentials FILE` takes the instances' passwords (it refused them as roles)
    from privbandit.cli import _broker_access
    from privbandit.runner.config import ConfigError

    access = _broker_access("mqtt://127.0.0.1:1883", RUN, cfg / "credentials.env", None, None, None)
    assert access["passwords"] == found
    (tmp_path / "root.env").write_text("PRIVBANDIT_ROOT_PASSWORD=x\n")
    with pytest.raises(ConfigError, match="unknown role.s. root"):
        _broker_access("mqtt://127.0.0.1:1883", RUN, tmp_path / "root.env", None, None, None)


# --- the family -----------------------------------------------------------------------------------

COUNTERS = """
family = "concurrent-shuffle"
name = "cs-k"
horizon = {n}
seed = 15
epsilon = 1.0
runs = 1
checkpoints = 8
[algorithms."csta@k2"]
algorithm = "csta_k"
k = 2
[algorithms."csta@k3"]
algorithm = "csta_k"
k = 3
{more}
"""


def _load(tmp_path, n: int = 600, more: str = ""):
    path = tmp_path / "cs.toml"
    path.write_text(COUNTERS.format(n=n, more=more))
    return path, *experiment_files.load(path)


def test_level_i_goes_to_shuffler_i_as_a_full_batch(tmp_path):
    _, fam, config = _load(tmp_path, more="[algorithms.central_tree]\n")
    assert fam.intermediaries(config) == ["aggregator", "shuffler-1", "shuffler-2", "shuffler-3"]
    layout = Layout(fam.spec(config, "csta@k3"))
    seen = set()
    for pid in range(layout.plans):
        plan = layout.plan(pid)
        _, level = layout.segment_level(pid)
        for rnd in plan.opens:
            assert rnd.intermediary == shuffler_of(level)
            assert rnd.threshold is None and rnd.expected == layout.spec.tree.sizes[level - 1]  # all or nothing
            seen.add(rnd.intermediary)
    assert seen == {"shuffler-1", "shuffler-2", "shuffler-3"}
    levels = fam.label_summary(config, "csta@k3", [])["communication_per_user"]["levels"]
    assert [x["shuffler"] for x in levels] == ["shuffler-1", "shuffler-2", "shuffler-3"]


def _v_t(sizes, t0: int) -> list[tuple[int, int]]:
    """V_t by Definition 3.1, written out independently of the tree: [1, t0] split greedily into
    the largest aligned nodes, top level first: (level, node) pairs."""
    out, covered = [], 0
    for level in range(len(sizes), 0, -1):
        s = sizes[level - 1]
        out += [(level, j) for j in range(covered // s, covered // s + (t0 - covered) // s)]
        covered += (t0 - covered) // s * s
    return out


def test_the_server_answers_t_only_once_every_shuffler_of_v_t_released_in_any_order(tmp_path):
    """Releases from k independent shufflers arrive in any order: the top level's first, the
    lowest level's last, interleaved at random. After each, Ŝ_t is available exactly when every node
    of V_t has been released (by whichever shuffler), and it is then Σ_{v∈V_t} S_v; the end state
    equals the in-order one (the server draws nothing)."""
    _, fam, config = _load(tmp_path)
    spec = fam.spec(config, "csta@k3")
    layout = Layout(spec)
    rounds = [r for pid in range(layout.plans) for r in layout.plan(pid).opens]
    rng = np.random.default_rng(3)
    # a split-mix node releases its users' shares (every one a message), a count-encoded one its total
    totals = {r.id: rng.integers(0, r.m, size=(1, r.expected * r.width, 1)) if r.messages
              else rng.integers(0, r.high + 1, size=(1, 1)) for r in rounds}
    in_order = CounterAnalyzer(spec, [0])
    for r in rounds:
        in_order.on_release(r, Release(r.id, r.expected, totals[r.id]))
    by_level = sorted(rounds, key=lambda r: -int(r.intermediary.split("-")[1]))  # shuffler-3's first
    shuffled = [rounds[i] for i in rng.permutation(len(rounds))]
    sizes = spec.tree.sizes
    probe_t = rng.choice(np.arange(1, spec.n + 1), 40, replace=False)
    for order in (by_level, shuffled):
        server = CounterAnalyzer(spec, [0])
        released = set()
        for step, r in enumerate(order):
            server.on_release(r, Release(r.id, r.expected, totals[r.id]))
            released.add(layout.node_of(r.id))
            if step % 7 and step != len(order) - 1:
                continue
            for t in probe_t:
                v_t = _v_t(sizes, int(sizes[0] * (t // sizes[0])))
                assert server.server.ready(int(t)) == all(v in released for v in v_t), (t, step)
                if server.server.ready(int(t)):
                    expected = sum(in_order.server.nodes[lvl - 1][0, j] for lvl, j in v_t)
                    assert server.server.estimate(int(t))[0] == pytest.approx(expected, abs=1e-9)
                else:
                    with pytest.raises(ProtocolError, match="not-ready|have not executed"):
                        server.server.estimate(int(t))
        np.testing.assert_array_equal(server.server.estimates(), in_order.server.estimates())


# --- real brokers with the generated ACL ------------------------------------------------------------

@contextlib.contextmanager
def _broker(kind: str, tmp_path):
    """(port, passwords by account name, protocol) of a broker with per-shuffler accounts."""
    if kind == "amqtt":
        with start_embedded_broker(RUN, {name: secrets.token_urlsafe(12) for name in SHUFFLERS}) as b:
            yield b.port, {str(a): p for a, p in b.passwords.items()}, aiomqtt.ProtocolVersion.V311
        return
    if mosquitto_binary() is None:
        _missing("mosquitto")
    backend = "dynsec" if kind == "mosquitto-dynsec" else "acl_file"
    if backend == "dynsec" and acl.find_dynsec_plugin() is None:
        _missing("mosquitto's dynamic-security plugin")
    try:
        mosquitto, files = start_with_broker_config(tmp_path / kind, RUN, backend=backend, instances=SHUFFLERS)
    except (PortInUse, MosquittoError) as exc:
        pytest.fail(f"mosquitto did not start: {exc}", pytrace=False)
    with mosquitto:
        yield mosquitto.port, {str(a): p for a, p in files.passwords.items()}, aiomqtt.ProtocolVersion.V5


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["mosquitto", "mosquitto-dynsec", "amqtt"])
async def test_shuffler_1_cannot_read_shuffler_2s_reports_nor_publish_its_releases(kind, tmp_path):
    """Each denial beside its control: the message the forbidden client must not get reaches the
    legitimate one (so the broker did deliver it), and a forged release never reaches the analyzer
    while shuffler-2's own does."""
    with _broker(kind, tmp_path) as (port, passwords, protocol):
        def client(account: str) -> aiomqtt.Client:
            return aiomqtt.Client("127.0.0.1", port, username=account, password=passwords[account], protocol=protocol,
                                  identifier=f"t-{account}-{uuid.uuid4().hex[:6]}", timeout=5)

        async with client("shuffler-1") as s1, client("shuffler-2") as s2, client("users") as users, \
                client("analyzer") as analyzer:
            inboxes = [Inbox(c) for c in (s1, s2, analyzer)]
            spy, own, server = inboxes
            try:
                await s1.subscribe([(_t("report/shuffler-2"), 1), (_t("report/#"), 1)])
                await s2.subscribe(_t("report/shuffler-2"), qos=1)
                await analyzer.subscribe(_t("release/+"), qos=1)
                await asyncio.sleep(SETTLE_S)
                report = b"report for shuffler-2 " + uuid.uuid4().bytes
                await users.publish(_t("report/shuffler-2"), report, qos=1)
                await own.wait_for((_t("report/shuffler-2"), report))
                forged, genuine = b"forged " + uuid.uuid4().bytes, b"genuine " + uuid.uuid4().bytes
                with contextlib.suppress(aiomqtt.MqttError):  # dynsec/amqtt may refuse the PUBLISH outright
                    await s1.publish(_t("release/shuffler-2"), forged, qos=1)
                await s2.publish(_t("release/shuffler-2"), genuine, qos=1)
                await server.wait_for((_t("release/shuffler-2"), genuine))
                await asyncio.sleep(SETTLE_S)
                assert report not in spy.payloads(), f"{kind}: shuffler-1 read shuffler-2's report"
                assert forged not in server.payloads(), f"{kind}: shuffler-1 published shuffler-2's release"
            finally:
                for inbox in inboxes:
                    await inbox.close()


# --- end to end -----------------------------------------------------------------------------------

def test_k_shuffler_processes_over_mosquitto_with_acls_equal_the_in_process_run(tmp_path):
    """k = 2 and k = 3 shufflers as separate processes, each logged in with its own account on a
    Mosquitto enforcing the generated ACL: the same numbers as in-process, nothing refused, and the
    fleets' reports counted per shuffler, adding up to their total."""
    if mosquitto_binary() is None:
        _missing("mosquitto")
    path, fam, config = _load(tmp_path, n=300)
    _inproc(path, tmp_path / "inproc")
    run_id = "c" + secrets.token_hex(4)
    shufflers = [n for n in fam.intermediaries(config) if acl.is_instance(n)]
    assert shufflers == ["shuffler-1", "shuffler-2", "shuffler-3"]
    mosquitto, files = start_with_broker_config(tmp_path / "broker", run_id, instances=shufflers)
    with mosquitto:
        passwords = {str(a): p for a, p in files.passwords.items()}
        # one fleet: fewer processes to start on a loaded machine (two fleets: test_families_e2e)
        parties = plan_parties(fam, config, path, [], tmp_path / "mqtt", mosquitto.url, run_id, 1, passwords,
                               observer_log=tmp_path / "observer.log", checkpoint=False)
        assert [p.name for p in parties if p.name.startswith("shuffler")] == shufflers
        for p in parties:
            assert p.env["PRIVBANDIT_USERNAME"] == ("users" if p.name.startswith("users-") else p.name)
            p.start()
        try:
            assert _wait(parties, timeout=120) == 0, (tmp_path / "observer.log").read_text()[-3000:]
        finally:
            for p in parties:
                p.stop()
    assert_same_numbers(tmp_path / "inproc", tmp_path / "mqtt")
    summary = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    assert summary["rejected"] == {} and summary["parties_missing_stats"] == []
    for label, k in (("csta@k2", 2), ("csta@k3", 3)):
        per_user = summary["communication"][label]["per_user"]
        assert per_user["users"] == config.horizon
        by = per_user["by_intermediary"]
        assert sorted(by) == [shuffler_of(i) for i in range(1, k + 1)]  # this label's shufflers, no other
        for key in ("messages", "payload_bytes", "wire_bytes"):
            assert all(by[s][key] > 0 for s in by)
            assert sum(by[s][key] for s in by) == pytest.approx(per_user["total"][key], rel=1e-12)
        assert per_user["total"]["wire_bytes"] * config.horizon == pytest.approx(
            summary["communication"][label]["bytes_per_user_wire"] * summary["communication"][label]["reports_per_run"])
