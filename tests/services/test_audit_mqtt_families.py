"""``privbandit audit --transport mqtt`` beyond the MAB family (issue #17): the shuffle-linear
family's shuffler and aggregator releases (LinUCB-SDP-Amp's shuffled reports, LinUCB-SDP-Vec's label
totals, LinUCB-LDP's attributable reports), the concurrent-shuffle family's nodes at k shufflers
(and Algorithm 4's, and randomized response), ShuffleGLM's P_Vec rounds and the online family's
distributed Anytime-Lazy-UCB array sums and FTNL epochs (argmax or K sums), each released by the
real intermediary process on a Mosquitto enforcing the run's ACL and read with the analyzer's
account. Every release must equal the round's rule applied to the reports sent, and the releases
must follow the in-process sampler's law; a broken randomizer is flagged over MQTT as in-process.

A test needing Mosquitto fails, never skips, when CI=true. Fixed seeds throughout: the bounds and
p-values are reproducible numbers, so each threshold is a property of the code, not a coin flip."""

from __future__ import annotations

import secrets
from dataclasses import replace

import numpy as np
import pytest

from privbandit.audit.mqtt import Broker, audit_over_mqtt
from privbandit.runner import config as experiment_files
from privbandit.services.mosquitto_process import mosquitto_binary, start_with_broker_config
from tests.needs import missing

LAW_P = 1e-3  # as tests/services/test_audit_mqtt.py: its law-check power test holds at this level
SAMPLES = 300  # per input: a few seconds a target over the broker


def load(path: str, *overrides: str):
    return experiment_files.load_data(experiment_files.read_experiment_data(path, list(overrides)), path)


@pytest.fixture
def acl_broker(tmp_path):
    """A factory: Mosquitto with `privbandit broker-config`'s accounts (and those of the
    intermediary ``instances``, e.g. shuffler-2) and ACL for one fresh run id, as a Broker."""
    if mosquitto_binary() is None:
        missing("mosquitto is not installed (apt-get install mosquitto)")
    started = []

    def make(instances=()) -> Broker:
        run_id = "a" + secrets.token_hex(4)
        mosquitto, files = start_with_broker_config(tmp_path / f"broker{len(started)}", run_id, instances=instances)
        started.append(mosquitto)
        mosquitto.__enter__()
        return Broker(mosquitto.url, {str(k): v for k, v in files.passwords.items()}, run_id=run_id)

    yield make
    for m in started:
        m.__exit__(None, None, None)


def audited(fam, config, pairs, broker, tmp_path, seed, mechanisms=None) -> tuple[dict, dict]:
    results, session = audit_over_mqtt(fam, config, pairs, SAMPLES, None, 0.95, seed, broker, tmp_path,
                                       mechanisms=mechanisms)
    assert session["acl"] == "enforced"
    assert all(not refused for refused in session["rejected"].values()), session["rejected"]
    return {r["name"]: r for r in results}, session


def over_mqtt(r: dict, intermediary: str, rule: str) -> None:
    """Released by ``intermediary`` under ``rule``, every release exact, the law the in-process one."""
    assert r["transport"] == "mqtt" and r["mqtt"]["intermediary"] == intermediary and r["mqtt"]["rule"] == rule, r["mqtt"]
    assert r["mqtt"]["exact"] == {"releases": 2 * SAMPLES, "equal": 2 * SAMPLES}
    for which in ("input_0", "input_1"):
        law = r["mqtt"]["law_check"][which]
        assert law["mqtt"] == law["inproc"] == SAMPLES
        assert min(law["p_chi2"], law["p_ks"]) > LAW_P, (r["name"], which, law)


# --- shuffle-linear-bandits ------------------------------------------------------------------------


def test_linear_releases_through_the_real_shuffler_and_aggregator(tmp_path, acl_broker):
    """Fig. 1(b)'s linear algorithms at the authors' constants, one session: P_Amp's multiset (S1
    and S2 shuffled apart) and P_Vec's label totals from the shuffler, LDP's attributable reports
    from the aggregator, each exact and in law; none exceeds its claim (P_Vec states none).
    LinUCB-JDP's privacy is the trusted analyzer's tree: audited in-process, and says why."""
    fam, config = load("experiments/linear_fig1b_eps1.toml")
    pairs = [(label, t) for label in fam.labels(config) for t in fam.audit_targets(config, label)]
    results, session = audited(fam, config, pairs, acl_broker(), tmp_path, seed=2)
    assert session["intermediaries"] == ["aggregator", "shuffler"]
    amp, vec, ldp = (results[f"shuffle-linear-bandits/{x}"] for x in ("LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP"))
    over_mqtt(amp, "shuffler", "shuffle")
    over_mqtt(vec, "shuffler", "sum")
    over_mqtt(ldp, "aggregator", "pass")
    assert amp["verdict"] == ldp["verdict"] == "consistent" and vec["verdict"] == "no claim"
    assert amp["audit"]["epsilon"] > 1, amp["audit"]  # the authors' σ: the multiset shows it (9.1 at 10⁶)
    # B = 20 reports of D = 20 float64 entries: the release carries them all
    assert amp["mqtt"]["release_payload_bytes"] > 20 * 20 * 8
    jdp = results["shuffle-linear-bandits/LinUCB-JDP"]
    assert jdp["transport"] == "inproc" and jdp["mqtt"]["why_not"].startswith("central model: the aggregator passes "
                                                                               "the raw (φ, y)")


def test_broken_linear_randomizers_are_flagged_over_mqtt(tmp_path, acl_broker):
    """The theorems' calibration (`preset=theory`), every user's randomizer broken, the ledger's
    claim kept: P_Amp at σ/1000 (claim 0.555 at δ = 0.1) and P_Vec with no noise bits (b = 0,
    claim 1), through the real shuffler. Both violations over MQTT, both in the in-process law of
    the same broken randomizer (and the same pair: the one the wire reads)."""
    from privbandit.families.shuffle_linear_bandits import mechanisms as slb
    from privbandit.families.shuffle_linear_bandits.audit import default_pair, noised_target

    fam, config = load("experiments/linear_fig1b_eps1.toml", "preset=theory")
    pairs, broken = [], {}
    for label in ("LinUCB-SDP-Amp", "LinUCB-SDP-Vec"):
        public = fam.public_task(config, label, [0])
        server = fam.analyzer(public, [0])
        s = server.s
        broken[label] = (slb.GaussianRandomizer(s.sigma / 1000) if s.vec is None
                         else slb.BitSumRandomizer(replace(s.vec, b=0)))
        pairs.append((label, noised_target(fam, public, server, label, *default_pair(s), randomizer=broken[label])))
    results, _ = audited(fam, config, pairs, acl_broker(), tmp_path, seed=4, mechanisms=broken)
    amp, vec = results["shuffle-linear-bandits/LinUCB-SDP-Amp"], results["shuffle-linear-bandits/LinUCB-SDP-Vec"]
    over_mqtt(amp, "shuffler", "shuffle")
    over_mqtt(vec, "shuffler", "sum")
    assert amp["claim"]["epsilon_at_delta"] == pytest.approx(0.5549, abs=1e-3)
    assert vec["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    for r in (amp, vec):
        assert r["verdict"] == "violation" and r["audit"]["epsilon"] > 2, r["audit"]


# --- concurrent-shuffle ----------------------------------------------------------------------------


def test_counter_nodes_through_k_shufflers_and_a_broken_stand_in(tmp_path, acl_broker):
    """`audit_concurrent.toml`'s releases in one session with three intermediary processes:
    csta@k2's nodes through shuffler-1 and shuffler-2 (split-and-mix shares, the multiset of every
    share), Algorithm 4's P_Vec nodes (counts summed), randomized response through the aggregator
    (attributable); every release exact and in law, none exceeding its claim. The sequential
    counter's bin-a baseline with no noise bits (ℓ = 0; claim 1 at the node's δ) is flagged through
    shuffler-1. The central tree's noise is the trusted server's: in-process, and says why."""
    from privbandit.families.concurrent_shuffle.audit import node_target

    fam, config = load("experiments/audit_concurrent.toml")
    spec = fam.spec(config, "sequential-bin")
    noiseless = replace(spec.mechanisms[0], ell=0)
    pairs = [("sequential-bin", node_target(spec, 1, "sequential-bin", noiseless, family=fam.name))]
    pairs += [(label, t) for label in ("csta@k2", "alg4@k2", "ldp", "central_tree")
              for t in fam.audit_targets(config, label)]
    results, session = audited(fam, config, pairs, acl_broker(("shuffler-1", "shuffler-2")), tmp_path, seed=3,
                               mechanisms={"sequential-bin": noiseless})
    assert session["intermediaries"] == ["aggregator", "shuffler-1", "shuffler-2"]
    name = "concurrent-shuffle/{}".format
    for label, rule in (("csta@k2", "shuffle"), ("alg4@k2", "sum")):
        for level in (1, 2):
            r = results[name(f"{label}/level-{level}")]
            over_mqtt(r, f"shuffler-{level}", rule)
            assert r["verdict"] == "consistent", r["audit"]
    ldp = results[name("ldp")]
    over_mqtt(ldp, "aggregator", "pass")
    assert ldp["verdict"] == "consistent" and ldp["audit"]["epsilon"] > 0.3, ldp["audit"]  # RR at ε = 1
    flagged = results[name("sequential-bin/level-1")]
    over_mqtt(flagged, "shuffler-1", "sum")
    assert flagged["claim"]["epsilon_at_delta"] == pytest.approx(1.0)
    assert flagged["verdict"] == "violation" and flagged["audit"]["epsilon"] > 2, flagged["audit"]
    tree = results[name("central_tree")]
    assert tree["transport"] == "inproc" and tree["mqtt"]["why_not"].startswith("central model")


# --- glm-bandits -----------------------------------------------------------------------------------


def test_shuffle_glm_rounds_through_the_real_shuffler(tmp_path, acl_broker):
    """ShuffleGLM's P_Vec rounds (`audit_glm.toml`: the covariance and a 𝒫_GD gradient round of
    batches 1 and 2) through the shuffler, exact and in law, within their claims; and batch 1's
    covariance round with one noise bit per label (b = 1) in every user's randomizer, the claim
    kept (2 at δ = 0.01): flagged over MQTT. Private-GLM's tree is the trusted analyzer's: refused
    by name."""
    from privbandit.families.glm_bandits import shuffle_parties as sp
    from privbandit.families.glm_bandits.audit import round_pair
    from privbandit.families.shuffle_linear_bandits import mechanisms as slb
    from privbandit.families.shuffle_linear_bandits.audit import vec_sum_target

    data = experiment_files.read_experiment_data("experiments/audit_glm.toml", [])
    data["algorithms"]["broken"] = dict(data["algorithms"]["shuffle-glm"], algorithm="shuffle-glm")
    fam, config = experiment_files.load_data(data, "audit_glm.toml + broken")
    pairs = [(label, t) for label in ("shuffle-glm", "private-glm") for t in fam.audit_targets(config, label)]
    real = next(t for _, t in pairs if t.label == "shuffle-glm/covariance-1")
    s = sp.shuffle_setup(fam.public_task(config, "broken", [0]))
    vec, c0, c1 = round_pair(s, 0, "covariance")
    one_bit = replace(vec, b=1)
    pairs.append(("broken", vec_sum_target(fam.name, "broken/covariance-1", "shuffle-glm", one_bit, c0, c1,
                                           s.schedule[0], real.claim, real.delta, real.release,
                                           {"batch": 1, "round": "covariance"})))
    results, _ = audited(fam, config, pairs, acl_broker(), tmp_path, seed=6,
                         mechanisms={"broken": slb.BitSumRandomizer(one_bit)})
    for k in (1, 2):
        for kind in ("covariance", "gradient"):
            r = results[f"glm-bandits/shuffle-glm/{kind}-{k}"]
            over_mqtt(r, "shuffler", "sum")
            assert r["verdict"] == "consistent", r["audit"]
    flagged = results["glm-bandits/broken/covariance-1"]
    over_mqtt(flagged, "shuffler", "sum")
    assert flagged["claim"]["epsilon_at_delta"] == pytest.approx(2.0)
    assert flagged["verdict"] == "violation" and flagged["audit"]["epsilon"] > 2.2, flagged["audit"]  # 2.51
    tree = results["glm-bandits/private-glm/tree-V"]
    assert tree["transport"] == "inproc" and tree["mqtt"]["why_not"].startswith("central model")


# --- private-online-learning -----------------------------------------------------------------------


def test_online_array_sums_through_the_real_aggregator(tmp_path, acl_broker):
    """`pol_setting1.toml` in one session: distributed Anytime-Lazy-UCB's array (16 Pólya residues,
    the aggregator's modular `sum`) and DP-SE's distributed batch, exact, in law and within their
    claims (ε = 1); and a Lazy-UCB array whose users' Pólya shares are calibrated for ε = 20 (noise
    1/20 of a reward, the analyzer's claim of 1 kept): flagged over MQTT. The central Lazy-UCB and
    DP-SE and Hybrid-UCB pass raw rewards: audited in-process, each saying why."""
    from privbandit.families.private_online_learning.audit import lazy_target
    from privbandit.families.private_online_learning.mechanisms import DistributedArraySum

    data = experiment_files.read_experiment_data("experiments/pol_setting1.toml", [])
    data["algorithms"]["broken"] = dict(data["algorithms"]["anytime-lazy-ucb@distributed"],
                                        algorithm="anytime-lazy-ucb")
    fam, config = experiment_files.load_data(data, "pol_setting1.toml + broken")
    shares = DistributedArraySum(20.0, 1.0 / config.horizon)
    pairs = [(label, t) for label in fam.labels(config) if label != "broken" for t in fam.audit_targets(config, label)]
    pairs.append(("broken", lazy_target(fam, config, "broken", None, shares)))
    results, session = audited(fam, config, pairs, acl_broker(), tmp_path, seed=7, mechanisms={"broken": shares})
    assert session["intermediaries"] == ["aggregator"]
    name = "private-online-learning/{}".format
    for label in ("anytime-lazy-ucb@distributed", "dp-se@distributed"):
        r = results[name(label)]
        over_mqtt(r, "aggregator", "sum")
        assert r["verdict"] == "consistent" and r["claim"]["epsilon_pure"] == pytest.approx(1.0), r["audit"]
    flagged = results[name("broken")]
    over_mqtt(flagged, "aggregator", "sum")
    assert flagged["claim"]["epsilon_pure"] == pytest.approx(1.0)
    assert flagged["verdict"] == "violation" and flagged["audit"]["epsilon"] > 2, flagged["audit"]
    for label, why in (("anytime-lazy-ucb", "central model: the aggregator passes the array's raw rewards"),
                       ("dp-se", "central model: the intermediary sums the users' unnoised data"),
                       ("hybrid-ucb", "central model (Hybrid-UCB has no other)")):
        r = results[name(label)]
        assert r["transport"] == "inproc" and r["mqtt"]["why_not"].startswith(why), (label, r["mqtt"])


def test_ftnl_argmax_and_sums_through_the_real_aggregator(tmp_path, acl_broker):
    """`pol_ftnl.toml` in one session: distributed FTNL's epoch of 16 users × K = 5 Pólya residues
    through the aggregator, its `argmax` rule releasing the index (claim 2ε/c = 2) and, with
    `argmax_at = "analyzer"`, the K modular sums (claim Kε/c = 5), exact, in law and consistent;
    and an argmax released without noise in effect (every user's shares calibrated for ε = 10⁴,
    no head start, the claim of 2 kept): the index tells the inputs apart, a violation over MQTT.
    The central FTNLs pass raw reward vectors: in-process, saying why."""
    from privbandit.families.private_online_learning.audit import ftnl_distributed_target
    from privbandit.families.private_online_learning.mechanisms import DistributedNoisyMax

    data = experiment_files.read_experiment_data("experiments/pol_ftnl.toml", [])
    data["algorithms"]["noiseless"] = dict(data["algorithms"]["ftnl@distributed"], algorithm="ftnl")
    fam, config = experiment_files.load_data(data, "pol_ftnl.toml + noiseless")
    noiseless = DistributedNoisyMax(1e4, 1.0 / config.horizon)
    pairs = [(label, t) for label in fam.labels(config) if label != "noiseless"
             for t in fam.audit_targets(config, label)]
    pairs.append(("noiseless", ftnl_distributed_target(fam, config, "noiseless", None, noiseless, lead=0.0)))
    results, _ = audited(fam, config, pairs, acl_broker(), tmp_path, seed=9, mechanisms={"noiseless": noiseless})
    name = "private-online-learning/{}".format
    for label, rule, claim in (("ftnl@distributed", "argmax", 2.0), ("ftnl@distributed-analyzer", "sum", 5.0)):
        r = results[name(label)]
        over_mqtt(r, "aggregator", rule)
        assert r["claim"]["epsilon_pure"] == pytest.approx(claim)
        assert r["verdict"] == "consistent", r["audit"]
    # the index alone crosses the wire: a few bytes, where the K sums are K integers
    assert results[name("ftnl@distributed")]["mqtt"]["release_payload_bytes"] < \
        results[name("ftnl@distributed-analyzer")]["mqtt"]["release_payload_bytes"]
    flagged = results[name("noiseless")]
    over_mqtt(flagged, "aggregator", "argmax")
    assert flagged["claim"]["epsilon_pure"] == pytest.approx(2.0)
    assert flagged["verdict"] == "violation" and flagged["audit"]["epsilon"] > 2.2, flagged["audit"]
    for label in ("ftnl", "ftnl@c=2"):
        r = results[name(label)]
        assert r["transport"] == "inproc" and r["mqtt"]["why_not"].startswith(
            "central model: the aggregator passes every user's raw reward vector"), (label, r["mqtt"])


def test_the_online_familys_central_releases_have_no_wire_and_say_why():
    """No broker: every central release of the online family is refused by `wire_target` with its
    own reason (the analyzer's noise is drawn after the wire), never the generic NOT_WIRED, which
    a family without the hook still gives (naming the wired releases); a --search candidate of
    distributed Lazy-UCB (another pair) is refused as not the wired pair."""
    from privbandit.audit.targets import NOT_WIRED, NoWirePath
    from privbandit.protocol.spine.family import Family

    reasons = {}
    for path in ("experiments/pol_setting1.toml", "experiments/pol_ftnl.toml"):
        fam, config = load(path)
        for label in fam.labels(config):
            if fam.algorithm(config, label).trust != "central":
                continue
            for t in fam.audit_targets(config, label):
                with pytest.raises(NoWirePath) as info:
                    fam.wire_target(config, label, t)
                reasons[label] = str(info.value)
    assert set(reasons) == {"anytime-lazy-ucb", "hybrid-ucb", "dp-se", "ftnl", "ftnl@c=2"}
    for label, why in reasons.items():
        assert why.startswith("central model") and why != NOT_WIRED and "after the wire" in why, (label, why)
    assert "grid Laplace on the array sum" in reasons["anytime-lazy-ucb"]
    assert "report-noisy-max" in reasons["ftnl"] and "tree and array noise" in reasons["hybrid-ucb"]
    fam, config = load("experiments/pol_setting1.toml")
    label = "anytime-lazy-ucb@distributed"
    (target,) = fam.audit_targets(config, label)
    # a family without the hook (every family in the tree has one): the generic reason, naming what is wired
    with pytest.raises(NoWirePath, match="no MQTT path yet: .*Anytime-Lazy-UCB's array sums"):
        Family.wire_target(fam, config, label, target)
    other = fam.audit_candidates(config, label)[0][1]  # (1; 1 vs 0)
    with pytest.raises(ValueError, match="not the pair this release is audited at"):
        fam.wire_target(config, label, other)


def test_the_wired_releases_read_what_the_in_process_targets_sample():
    """Without a broker: each new family's wire target, fed through the spine's own Intermediary,
    gives releases equal to the rule applied to the reports sent, and statistics in the law of the
    in-process target: a fast check of the same wiring (and `rule_check` refuses an altered
    release: a shuffled multiset with one S1 row changed, a sum off by one count, another index, an
    attributable report changed). The online family's array sums and FTNL rounds and the MAB rounds
    checked by the same `rule_check`: a modular sum, an argmax of decoded modular sums, a multiset of
    residues, attributable reports."""
    from privbandit.audit.mqtt import law_check
    from privbandit.protocol.spine.events import Join, Plan, Release, Reports
    from privbandit.protocol.spine.intermediary import Intermediary

    cases = [("experiments/linear_fig1b_eps1.toml", "LinUCB-SDP-Amp"), ("experiments/linear_fig1b_eps1.toml",
                                                                        "LinUCB-SDP-Vec"),
             ("experiments/audit_concurrent.toml", "csta@k2"), ("experiments/audit_glm.toml", "shuffle-glm"),
             ("experiments/pol_setting1.toml", "anytime-lazy-ucb@distributed"),
             ("experiments/pol_ftnl.toml", "ftnl@distributed"), ("experiments/pol_ftnl.toml", "ftnl@distributed-analyzer"),
             ("experiments/audit_mab.toml", "dist-dp-se"), ("experiments/audit_mab.toml", "dist-dp-se-shuffled"),
             ("experiments/audit_mab.toml", "dist-dp-se-mixed"),
             ("experiments/audit_mab.toml", "ldp-se")]
    rng = np.random.default_rng(8)
    for path, label in cases:
        fam, config = load(path)
        for t in fam.audit_targets(config, label)[:2]:
            w = fam.wire_target(config, label, t)
            n, rounds = w.round.expected, 400
            for which in (0, 1):
                inputs = np.zeros((rounds, n))
                inputs[:, 0] = which
                sent = w.randomize(inputs, rng)
                box = Intermediary(w.intermediary, 1, [17])
                plan = Plan(0, 0, rounds * n, w.body, tuple(replace(w.round, id=i) for i in range(rounds)),
                            tuple(Join(i, i * n, n, n) for i in range(rounds)))
                box.open_plan(plan)
                stats = []
                for i in range(rounds):
                    ids = np.arange(i * n, (i + 1) * n)
                    box.receive(Reports(i, 0, ids, sent[i].reshape(1, n, -1)))
                    release = box.release(i)
                    assert w.ideal(release, ids, sent[i]), (t.name, i)
                    stats.append(w.statistic(release, i * n))
                law = law_check(np.asarray(stats), t.draw(which, rounds, np.random.default_rng(9), 1))
                assert min(law["p_chi2"], law["p_ks"]) > LAW_P, (t.name, which, law)
            altered = release.values.copy()
            if w.round.rule == "shuffle":
                altered[0, 0, 0] += 1.0
            else:
                altered[0, -1] += 1
            assert not w.ideal(Release(release.round_id, release.n_reports, altered, release.user_ids), ids, sent[-1])
