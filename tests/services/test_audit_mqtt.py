"""``privbandit audit --transport mqtt`` (issue #17): the releases come from the real intermediary
process, through a Mosquitto enforcing the run's generated ACL, read with the analyzer's account;
they follow the in-process sampler's law; a broken mechanism or ledger is flagged over MQTT too; and
every refusal names its option.

A test needing Mosquitto fails, never skips, when CI=true. Fixed seeds throughout: the bounds and
p-values are reproducible, so each threshold below is a property of the code, not a coin flip."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from privbandit.audit.mqtt import Broker, audit_over_mqtt, law_check
from privbandit.cli import app
from privbandit.families.distributed_dp_mab.mechanisms import PolyaSecAgg
from privbandit.runner import config as experiment_files
from privbandit.services.embedded_broker import free_port
from privbandit.services.mosquitto_process import mosquitto_binary, start_with_broker_config
from tests.test_audit import InvertedPolya, broken_target, target
from tests.needs import missing

# A law check failing below this p-value would flag the MQTT path as drawing from another law. At a
# fixed seed the p-values are fixed numbers; test_the_law_check_tells_neighbours_apart shows the
# check rejects a law one neighbour away at the same sample size.
LAW_P = 1e-3


@pytest.fixture
def acl_broker(tmp_path):
    """Mosquitto with `privbandit broker-config`'s accounts and ACL for one fresh run id."""
    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt-get install mosquitto)")
    run_id = "a" + secrets.token_hex(4)
    mosquitto, files = start_with_broker_config(tmp_path / "broker", run_id)
    with mosquitto:
        yield mosquitto, files, run_id


def _law_passes(result: dict) -> None:
    assert result["mqtt"]["exact"] == {"releases": 2 * result["samples"], "equal": 2 * result["samples"]}
    for which in ("input_0", "input_1"):
        law = result["mqtt"]["law_check"][which]
        assert law["mqtt"] == law["inproc"] == result["samples"]
        assert min(law["p_chi2"], law["p_ks"]) > LAW_P, (which, law)


def test_the_cli_audits_secure_aggregation_through_the_real_aggregator(tmp_path, acl_broker):
    """Dist-DP-SE end to end: the aggregator process of `plan_parties`, a Mosquitto with the ACL, the
    analyzer's account reading the sums. The releases pass the law check against the in-process
    sampler, the bound stays under the claim, the aggregator admitted every report (no refusal)."""
    mosquitto, files, run_id = acl_broker
    res = CliRunner().invoke(app, [
        "audit", "--family", "distributed-dp-mab", "--algorithm", "dist-dp-se", "--transport", "mqtt",
        "--samples", "600", "--seed", "5", "--broker", mosquitto.url, "--run-id", run_id,
        "--credentials", str(files.credentials), "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert report["transport"] == "mqtt"
    assert report["mqtt"]["acl"] == "enforced" and report["mqtt"]["run_id"] == run_id
    assert report["mqtt"]["rejected"] == {"aggregator": {}}
    (r,) = report["targets"]
    assert r["transport"] == "mqtt" and r["mqtt"]["intermediary"] == "aggregator" and r["mqtt"]["rule"] == "sum"
    assert r["verdict"] == "consistent" and r["claim"]["epsilon_at_delta"] == 1.0, r["audit"]
    _law_passes(r)
    assert r["releases_per_second"] > 0 and r["mqtt"]["release_payload_bytes"] > 0
    assert (tmp_path / "a" / "mqtt" / "logs" / "aggregator.log").exists()
    assert "law p" in res.output and "ACL enforced" in res.output


def test_broken_mechanisms_are_flagged_over_mqtt(tmp_path, acl_broker):
    """The in-process audit's broken cases (tests/test_audit.py), now through real processes in one
    session: the authors' inverted Pólya scale in every user's randomizer, released by the
    aggregator; and Dist-DP-SE's residues through the real shuffler, held to the secure-aggregation
    ledger (pre-#13). Both are violations; both releases follow the in-process law."""
    mosquitto, files, run_id = acl_broker
    data = {"family": "distributed-dp-mab", "horizon": 100_000, "epsilon": 1.0, "seed": 3,
            "algorithms": {"dist-dp-se": {}, "shuffled": {"algorithm": "dist-dp-se", "intermediary": "shuffler-residues"}}}
    fam, config = experiment_files.load_data(data)
    inverted = InvertedPolya(1.0, 1e-3)
    polya = PolyaSecAgg(1.0, 1e-3)
    secagg_event = polya.privacy_event(polya.params(16), 16)
    shuffled = target("dist-dp-se", cohort=16, intermediary="shuffler-residues")
    wrong_ledger = replace(broken_target(polya, "dist-dp-se", 16, event=secagg_event), sample=shuffled.sample,
                           release=shuffled.release, details=shuffled.details, label="shuffled")
    pairs = [("dist-dp-se", broken_target(inverted, "dist-dp-se", 16)), ("shuffled", wrong_ledger)]
    broker = Broker(mosquitto.url, {str(k): v for k, v in files.passwords.items()}, run_id=run_id)
    results, session = audit_over_mqtt(fam, config, pairs, 600, None, 0.95, 7, broker, tmp_path,
                                       mechanisms={"dist-dp-se": inverted})
    assert session["acl"] == "enforced" and session["rejected"] == {"aggregator": {}, "shuffler": {}}
    assert session["intermediaries"] == ["aggregator", "shuffler"]
    polya_r, shuffle_r = results
    assert polya_r["mqtt"]["rule"] == "sum" and shuffle_r["mqtt"]["rule"] == "shuffle"
    for r in results:
        assert r["transport"] == "mqtt" and r["verdict"] == "violation", r["audit"]
        _law_passes(r)
    assert polya_r["audit"]["epsilon"] > 3, polya_r["audit"]
    assert shuffle_r["audit"]["epsilon"] > 1.3, shuffle_r["audit"]


def test_the_law_check_tells_neighbours_apart():
    """The law check has power at the sample sizes MQTT affords: Dist-DP-SE's sums under input 0
    against those under input 1 (laws g apart, ε = 1) are rejected at 1,500 draws each, while two
    independent samples of one input are not."""
    import numpy as np

    t = target("dist-dp-se", cohort=16)
    rng = np.random.default_rng(11)
    a, b, c = t.draw(0, 1500, rng, 16), t.draw(1, 1500, rng, 16), t.draw(0, 1500, rng, 16)
    different = law_check(a, b)
    assert max(different["p_chi2"], different["p_ks"]) < LAW_P, different
    same = law_check(a, c)
    assert min(same["p_chi2"], same["p_ks"]) > LAW_P, same


@pytest.mark.parametrize("args, message", [
    (["--transport", "tcp"], "--transport 'tcp': choose inproc or mqtt"),
    (["--broker", "mqtt://127.0.0.1:1883"], "--broker: only with --transport mqtt"),
    (["--transport", "mqtt", "--jobs", "2"], "--jobs 2: only with --transport inproc"),
    (["--transport", "mqtt", "--canary"], "--canary: only with --transport inproc"),
    (["--transport", "mqtt", "--search"], "--search: only with --transport inproc"),
    (["--transport", "mqtt", "--samples", "2000000"], "--samples 2000000: with --transport mqtt, must lie in [100, 10^6]"),
    (["--transport", "mqtt", "--cohort", "100000"], "--cohort 100000: over MQTT at most 65536 users a round"),
    (["--transport", "mqtt", "--credentials", "x.env"], "--credentials: only with --broker"),
])
def test_refusals_name_the_option(args, message):
    res = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "dist-dp-se", *args])
    assert res.exit_code == 2 and message in res.output, res.output


@pytest.mark.parametrize("args, message", [
    (["--family", "distributed-dp-mab", "--algorithm", "cdp-se"],
     "--transport mqtt: central model: the intermediary sums the users' unnoised data"),
    (["experiments/pol_ftnl.toml", "--algorithm", "ftnl", "--algorithm", "ftnl@c=2"],
     "--transport mqtt: central model: the aggregator passes every user's raw reward vector"),
    (["experiments/pol_setting1.toml", "--algorithm", "hybrid-ucb"],
     "--transport mqtt: central model (Hybrid-UCB has no other)"),
    (["--family", "shuffle-linear-bandits", "--algorithm", "linucb-jdp"],
     "--transport mqtt: central model: the aggregator passes the raw (φ, y); the privacy is the trusted analyzer's "
     "tree noise"),
    (["experiments/audit_glm.toml", "--algorithm", "shuffle-glm", "--cohort", "70000"],
     "--transport mqtt: a round of 70000 users: over MQTT at most 65536 users a round (one block)"),
])
def test_releases_without_an_intermediary_path_are_refused(args, message, tmp_path):
    """Nothing to read from the broker (the central model's privacy is drawn after the wire: the MAB's,
    the online family's FTNL and Hybrid-UCB, the linear JDP's tree; a round over one block): refused
    before any broker or process starts. Every release of the tree's families now has a wire or a
    reason of its own; the generic NOT_WIRED is test_audit_mqtt_families.py's."""
    res = CliRunner().invoke(app, ["audit", *args, "--transport", "mqtt", "--out", str(tmp_path)])
    assert res.exit_code == 2 and message in res.output and "--transport inproc" in res.output, res.output
    assert not (tmp_path / "mqtt").exists()


def test_an_unreachable_broker_is_named(tmp_path):
    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    res = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "dist-dp-se",
                                   "--transport", "mqtt", "--broker", url, "--out", str(tmp_path)])
    assert res.exit_code == 1 and f"cannot reach the broker at {url}" in res.output, res.output


def test_a_broker_without_the_acl_is_refused(tmp_path, mosquitto_url):
    """The system Mosquitto lets anyone read every topic: the analyzer's account would not be what
    stands between the audit and the reports, so the session does not start (the launcher's probe)."""
    res = CliRunner().invoke(app, ["audit", "--family", "distributed-dp-mab", "--algorithm", "dist-dp-se",
                                   "--transport", "mqtt", "--broker", mosquitto_url, "--out", str(tmp_path)])
    assert res.exit_code == 1 and "does not enforce the trust model" in res.output, res.output
    assert not (tmp_path / "mqtt" / "logs").exists() or not any((tmp_path / "mqtt" / "logs").iterdir())
