"""Issue #32 item 1: every MAC and tag derives from a secret of the session, never from the seed.

The attacker of these tests holds what every fleet holds and the issue says leaks everywhere: the
users' broker account and the experiment file (its seed). Before, the users' report keys derived
from that seed (``seeding.report_auth_master``), so it could forge every invited user's report,
the "block complete" markers, truths and statuses with valid MACs. Now the launcher draws the keys
from the OS's randomness for each session and hands them to the parties that need them, like
their broker passwords.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from privbandit.runner.config import load
from privbandit.services import codec
from privbandit.services.hostile import TrafficAttacker, seed_derived_users_key
from privbandit.services.launcher import plan_parties
from tests.services.test_distributed import _experiment, _inproc, assert_same_numbers
from tests.services.test_hostile_input import Attacker, observer_log, rejected, run_attacked

HORIZON = 30_000


class _Watching(Attacker):
    """An attacker that also keeps the environments the launcher gave the parties (the test's own
    view, to look for the keys in the results afterwards)."""

    def __call__(self, parties) -> None:
        self.given = [p.env for p in parties]
        super().__call__(parties)


class Forger:
    """The issue's attack (``privbandit attack forge``'s messages): for every plan, the moment it
    appears, every invited user's report (residue 0) with the MAC the seed gave, each block closed
    with its block tag; and, once, an error status of ``users-1`` under the seed's fleets' MAC (it
    failed the session before)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.forge: TrafficAttacker | None = None
        self.attacker = _Watching(self.on_plan)

    def on_plan(self, plan: codec.PlanMsg) -> list:
        if self.forge is None:
            self.forge = TrafficAttacker("forge", self.attacker.run_id, experiment_seed=self.seed)
        return [(tuple(where.split("/")) if "/" in where else ("report", where), payload)
                for where, payload in self.forge.on_plan(plan)]


@pytest.fixture(scope="module")
def honest_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("honest")
    _inproc(_experiment(tmp, horizon=HORIZON, runs=1, extra=""), tmp / "inproc")
    return tmp / "inproc"


def test_reports_and_statuses_forged_with_the_experiment_file_are_refused_and_change_no_number(tmp_path,
                                                                                               honest_run):
    """The issue's forging attack, with the users' account and the experiment file: on the code
    before issue #32 the forged zeros won the race (every genuine record ``duplicate``) and the
    forged status failed the session. Now each is refused as forged (the reports whole, by their
    block tag: ``bad-block-tag``; the status ``bad-status-tag``) and the numbers are the honest in-process run's; and no
    key reaches the results directory."""
    _, config = load(_experiment(tmp_path, horizon=HORIZON, runs=1, extra=""))
    forger = Forger(config.seed)
    code, out = run_attacked(tmp_path, forger.attacker)
    assert code == 0, observer_log(out)
    assert forger.attacker.sent >= 10
    assert_same_numbers(honest_run, out)
    got = rejected(out)
    assert got.get("bad-block-tag", 0) > 0 and "bad-tag" not in got, got  # no record MAC was even computed
    assert got.get("bad-status-tag", 0) == 1, got
    assert "duplicate" not in got, got
    # The keys travel in the parties' environments only: no file of the results directory
    # (summary, config, logs, checkpoints) holds any of them.
    secrets = {v.removeprefix("0x") for env in forger.attacker.given for k, v in env.items() if k.endswith("_KEY")}
    assert len(secrets) >= 5
    for file in Path(out).rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            for s in secrets:
                assert s.encode() not in data and bytes.fromhex(s.rjust(64, "0")) not in data, file


def test_the_session_keys_are_fresh_for_each_session_and_given_only_where_needed(tmp_path):
    """The launcher draws the keys per session (two sessions of one experiment share none, and
    none is the seed's), and hands each party only its own: the users' report key to the fleets,
    the intermediaries and the observer; a fleet's chunk key to that fleet; the fleets' master to
    the aggregator; nothing to the analyzer; and nothing of it reaches a party's command line."""
    path = _experiment(tmp_path, horizon=HORIZON, runs=1, extra="")
    family, config = load(path)

    def session():
        parties = plan_parties(family, config, path, [], tmp_path / "out", "mqtt://127.0.0.1:1", "r1", 2, None)
        return {p.name: p for p in parties}

    a, b = session(), session()
    keys = {name: {k: v for k, v in p.env.items() if k.endswith("_KEY")} for name, p in a.items()}
    users_key = keys["users-0"]["PRIVBANDIT_REPORT_AUTH_KEY"]
    assert {name for name, k in keys.items() if k.get("PRIVBANDIT_REPORT_AUTH_KEY") == users_key} == {
        "users-0", "users-1", "aggregator", "observer"}
    assert int(users_key, 16) != seed_derived_users_key(config.seed)
    assert b["users-0"].env["PRIVBANDIT_REPORT_AUTH_KEY"] != users_key
    assert set(keys["analyzer"]) == {"PRIVBANDIT_ANALYZER_KEY"}
    assert set(keys["observer"]) == {"PRIVBANDIT_REPORT_AUTH_KEY"}
    assert set(keys["aggregator"]) == {"PRIVBANDIT_REPORT_AUTH_KEY", "PRIVBANDIT_FLEET_MASTER_KEY"}
    assert set(keys["users-0"]) == set(keys["users-1"]) == {
        "PRIVBANDIT_REPORT_AUTH_KEY", "PRIVBANDIT_FLEET_KEY", "PRIVBANDIT_IDENTITY_KEY"}
    assert keys["users-0"]["PRIVBANDIT_FLEET_KEY"] != keys["users-1"]["PRIVBANDIT_FLEET_KEY"]
    assert keys["users-0"]["PRIVBANDIT_IDENTITY_KEY"] == keys["users-1"]["PRIVBANDIT_IDENTITY_KEY"]
    secrets = {v for k in keys.values() for v in k.values()}
    for p in a.values():
        assert not any(s in arg for s in secrets for arg in p.argv), p.name


@pytest.mark.parametrize("command, missing", [
    (["users", "--shard", "0/1"], "PRIVBANDIT_REPORT_AUTH_KEY"),
    (["observer", "--parties", "analyzer", "--out", "o"], "PRIVBANDIT_REPORT_AUTH_KEY"),
])
def test_a_party_without_the_session_key_refuses_to_start(tmp_path, command, missing):
    """A fleet or an observer started without the users' report key says which variable is missing
    and exits 2 before touching the broker (it could sign or check nothing)."""
    path = _experiment(tmp_path, horizon=HORIZON, runs=1, extra="")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVBANDIT_")}
    env |= {"PRIVBANDIT_FLEET_KEY": "ab" * 32, "PRIVBANDIT_IDENTITY_KEY": "cd" * 32, "PRIVBANDIT_CONNECT_TIMEOUT_S": "1"}
    proc = subprocess.run([sys.executable, "-m", "privbandit", *command, "--experiment", str(path),
                           "--broker", "mqtt://127.0.0.1:9"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and f"neither {missing} nor {missing}_FILE is set" in said, said[-2000:]
