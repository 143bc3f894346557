"""privbandit.Policy (a caller's loop over the same engine and parties) and the Accountant.

The byte-for-byte tests feed a policy the family's own simulated rewards (drawn as its users draw
them) and hold its regret, added up as the observer adds it, and its ledger to ``privbandit.run``'s
at the same seed: the same plans, the same releases, the same decisions.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import privbandit
from privbandit.policy import Exhausted, Policy, PolicyError
from privbandit.protocol.primitives.seeding import USER_BLOCK, stream
from privbandit.protocol.privacy.accountant import Accountant, NoProof
from privbandit.protocol.spine.observer import checkpoint_grid
from privbandit.runner.config import ConfigError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api.md"
EXTRA = ("algorithm", "mechanism", "proofs")


def mab(algorithm: str, horizon: int = 20_000, seed: int = 5, **table) -> dict:
    return {"family": "distributed-dp-mab", "name": "policy-test", "horizon": horizon, "seed": seed, "runs": 1,
            "environment": {"arms": 6}, "algorithms": {algorithm: {"algorithm": algorithm, **table}}}


def linear(algorithm: str, batch: int = 40) -> dict:
    return {"family": "shuffle-linear-bandits", "name": "policy-test", "horizon": 1210, "seed": 23, "epsilon": 1,
            "delta": 0.1, "runs": 1, "checkpoints": 60, "environment": {"arms": 10, "dim": 3},
            "algorithms": {algorithm: {"batch": batch}}}


class Curves:
    """The observer's running sums (Observer.regret_curves), block by block in serving order."""

    def __init__(self, horizon: int, points: int):
        self.t = checkpoint_grid(horizon, points)
        self.pseudo, self.realized = np.full(self.t.size, np.nan), np.full(self.t.size, np.nan)
        self.before = np.zeros(2)

    def add(self, first: int, size: int, totals, at_pseudo, at_realized) -> None:
        lo, hi = np.searchsorted(self.t, [first + 1, first + size + 1])
        self.pseudo[lo:hi] = self.before[0] + at_pseudo
        self.realized[lo:hi] = self.before[1] + at_realized
        self.before = self.before + np.asarray(totals)

    def cps(self, first: int, size: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.t, [first + 1, first + size + 1])
        return self.t[lo:hi]


def mab_policy_loop(data: dict, label: str, reward_seed: int | None = None) -> tuple[Policy, Curves]:
    """Feed a policy the MAB family's simulated rewards: plan k's (one block each while cohorts fit
    a block) from its users' stream (seed, run, label, "users", k, 0), as BanditUsers.act draws
    them, and the realized regret's counterfactual best-arm draw after them."""
    from privbandit.families.distributed_dp_mab.family import instance_for
    from privbandit.runner import load_experiment

    policy = Policy(data)
    inst = instance_for(load_experiment(data)[1], 0)
    curves = Curves(data["horizon"], 240)
    plan = 0
    while not policy.done:
        first = policy.served
        arms = policy.next(USER_BLOCK)
        assert arms.size < USER_BLOCK and np.all(arms == arms[0])  # one plan, one block: plan ids are counts
        arm, size = int(arms[0]), arms.size
        rng = stream(data["seed"] if reward_seed is None else reward_seed, 0, label, "users", plan, 0)
        rewards = inst.sample(arm, size, rng)
        running = np.zeros(size) if arm == inst.best_arm else np.cumsum(inst.sample(inst.best_arm, size, rng) - rewards)
        gap = float(inst.gaps[arm])
        cps = curves.cps(first, size)
        curves.add(first, size, [gap * size, running[-1]], gap * (cps - first), running[cps - first - 1])
        policy.update(rewards)
        plan += 1
    return policy, curves


def spent_equals_run(policy: Policy, result) -> None:
    spent = policy.accountant.spent()
    assert {k: v for k, v in spent.items() if k not in EXTRA} == result.privacy


@pytest.mark.parametrize("algorithm", ["dp-se", "se"])
def test_mab_policy_reproduces_run(algorithm):
    """Users who draw nothing of their own (central DP-SE, non-private SE): the same releases, ledger
    and regret as privbandit.run, bit for bit."""
    data = mab(algorithm, epsilon=1.0) if algorithm == "dp-se" else mab(algorithm)
    policy, curves = mab_policy_loop(data, algorithm)
    result = privbandit.run(data).results[algorithm][0]
    assert np.array_equal(curves.pseudo, result.pseudo[0]) and np.array_equal(curves.realized, result.realized[0])
    spent_equals_run(policy, result)
    assert policy.served == data["horizon"] and len(policy.records) == result.privacy["releases"]


def test_mab_policy_fed_other_rewards_decides_otherwise():
    """The check above can fail: the same loop fed another seed's rewards makes other decisions."""
    data = mab("dp-se", epsilon=1.0)
    _, curves = mab_policy_loop(data, "dp-se", reward_seed=data["seed"] + 1)
    result = privbandit.run(data).results["dp-se"][0]
    assert not np.array_equal(curves.pseudo, result.pseudo[0])


@pytest.mark.parametrize("label", ["LinUCB-SDP-Amp", "LinUCB-SDP-Vec"])
def test_linear_policy_reproduces_run(label):
    """The shuffle linear bandits, the caller giving the arms' features and each user's Bernoulli
    reward 1{U_t < μ_a} (the family's common random numbers): privbandit.run's regret and ledger."""
    from privbandit.families.shuffle_linear_bandits.world import instances, user_uniforms

    data = linear(label)
    inst = instances("paper-code", 10, 3, 23, [0])
    means, best = inst.means[0], inst.means[0].max()
    policy = Policy(data, contexts=inst.arms[0])
    curves = Curves(data["horizon"], data["checkpoints"])
    while not policy.done:
        first = policy.served
        arms = policy.next(10**6)
        size = arms.size
        assert size <= 40 and np.all(arms == arms[0])
        u = user_uniforms(23, 0, first, size)
        y = (u < means[arms]).astype(np.float64)
        pseudo = np.repeat(best - means[arms[0]], size).cumsum()
        realized = ((u < best) - y).cumsum()
        at = curves.cps(first, size) - first - 1
        curves.add(first, size, [pseudo[-1], realized[-1]], pseudo[at], realized[at])
        policy.update(y)
    result = privbandit.run(data).results[label][0]
    assert np.array_equal(curves.pseudo, result.pseudo[0]) and np.array_equal(curves.realized, result.realized[0])
    spent_equals_run(policy, result)


@pytest.mark.parametrize("label,table", [("lazy", {"algorithm": "anytime-lazy-ucb", "trust": "distributed"}),
                                         ("hybrid", {"algorithm": "hybrid-ucb"})])
def test_online_policy_reproduces_run(label, table):
    """Hu, Huang & Mehta's bandit-feedback algorithms, the caller giving each user's reward as the
    simulated world keys it (by user index): privbandit.run's regret and ledger. Hybrid-UCB's run looks
    ahead in-process; the policy serves one user per plan, as over MQTT: the same decisions."""
    from privbandit.families.private_online_learning.family import instance_of
    from privbandit.families.private_online_learning.parties import on_regret_grid
    from privbandit.families.private_online_learning.world import OnlineUsers
    from privbandit.runner import load_experiment

    data = {"family": "private-online-learning", "name": "policy-test", "horizon": 3_000, "seed": 7, "epsilon": 1.0,
            "runs": 1, "environment": {"setting": 2}, "algorithms": {label: table}}
    config = load_experiment(data)[1]
    inst = instance_of(config)
    sim, gaps = OnlineUsers(inst, 7, (0, label), 2), on_regret_grid(inst.gaps)
    policy = Policy(data)
    curves = Curves(data["horizon"], config.checkpoints)
    while not policy.done:
        first = policy.served
        arms = policy.next(USER_BLOCK)
        got, realized = sim.pull(first + 1, arms)
        pseudo, running = np.cumsum(gaps[arms]), np.cumsum(on_regret_grid(realized))
        at = curves.cps(first, arms.size) - first - 1
        curves.add(first, arms.size, [pseudo[-1], running[-1]], pseudo[at], running[at])
        policy.update(got)
    result = privbandit.run(data).results[label][0]
    assert np.array_equal(curves.pseudo, result.pseudo[0]) and np.array_equal(curves.realized, result.realized[0])
    spent_equals_run(policy, result)


def test_next_hands_out_at_most_n_and_partial_updates_add_up():
    policy = Policy("dp-se", family="distributed-dp-mab", horizon=2_000, seed=1, epsilon=1.0)
    first = policy.next(3)
    assert first.shape == (3,) and first.dtype == np.int64
    policy.update([0.5, 0.5, 0.5])
    rest = policy.next(10**6)
    assert rest.size >= 1 and np.all(rest == first[0])  # the rest of the same cohort: one arm
    assert policy.records == []  # nothing released before the cohort is complete
    policy.partial_fit(rest, np.full(rest.size, 0.25))
    assert policy.served == 3 + rest.size
    assert len(policy.records) == 1 and policy.records[0].n_reports == policy.served  # its round, released


def test_bad_input_names_the_field_and_range():
    policy = Policy("dp-se", family="distributed-dp-mab", horizon=200, seed=1, epsilon=1.0)
    with pytest.raises(PolicyError, match=r"update before next"):
        policy.update([0.5])
    arms = policy.next(4)
    with pytest.raises(PolicyError, match=r"next: 4 arms handed out still await their rewards"):
        policy.next(1)
    with pytest.raises(PolicyError, match=re.escape("rewards: shape (3,), but 4 arms await rewards (give shape (4,))")):
        policy.update([0.1, 0.2, 0.3])
    with pytest.raises(PolicyError, match=re.escape("rewards[2]=1.5: must lie in [0, 1] (1 of 4 do not)")):
        policy.update([0.1, 0.2, 1.5, 0.3])
    with pytest.raises(PolicyError, match=r"rewards: every reward must be a finite number"):
        policy.update([0.1, np.nan, 0.2, 0.3])
    with pytest.raises(PolicyError, match=r"decisions: .* are not the arms handed out"):
        policy.partial_fit((arms + 1) % 6, [0.5] * 4)
    with pytest.raises(PolicyError, match=r"n=0: must be an integer ≥ 1"):
        Policy("dp-se", family="distributed-dp-mab", horizon=200, epsilon=1.0).next(0)
    policy.update([0.1, 0.2, 0.3, 0.4])
    while not policy.done:
        policy.update(np.full(policy.next(10**6).size, 0.5))
    with pytest.raises(Exhausted, match=r"next: horizon exhausted: all 200 users were served"):
        policy.next(1)
    with pytest.raises(Exhausted, match=r"horizon exhausted"):
        policy.update([0.5])


def test_an_engine_error_reaches_the_caller_and_close_stops_the_thread(monkeypatch):
    policy = Policy(mab("dp-se", horizon=2_000, epsilon=1.0))

    def broken(rnd, release):
        raise RuntimeError("a broken learner")

    monkeypatch.setattr(policy._analyzer.logic, "on_release", broken)
    with pytest.raises(RuntimeError, match="a broken learner"):
        while True:
            policy.update(np.full(policy.next(USER_BLOCK).size, 0.5))
    assert policy.done and not policy._thread.is_alive()
    with pytest.raises(PolicyError, match=r"next: the run stopped on an error: RuntimeError\('a broken learner'\)"):
        policy.next(1)
    left = Policy(mab("dp-se", horizon=2_000, epsilon=1.0))
    left.next(2)
    left.close()
    assert not left._thread.is_alive()


def test_linear_bad_input():
    from privbandit.families.shuffle_linear_bandits.world import instances

    arms = instances("paper-code", 10, 3, 23, [0]).arms[0]
    with pytest.raises(ConfigError, match=re.escape("contexts: the 10 arms' features, shape (10, 3)")):
        Policy(linear("LinUCB-SDP-Amp"))
    with pytest.raises(ConfigError, match=re.escape("contexts: the 10 arms' features, shape (10, 3) (environment.arms, "
                                                    "environment.dim), not (10, 2)")):
        Policy(linear("LinUCB-SDP-Amp"), contexts=arms[:, :2])
    with pytest.raises(ConfigError, match=r"contexts: every arm's ‖φ‖₂ must be ≤ 1.414 and every \|φ_k\| ≤ 1 "
                                          r"\(the bounds generator = 'paper-code'"):
        Policy(linear("LinUCB-SDP-Amp"), contexts=2 * arms)
    policy = Policy(linear("LinUCB-SDP-Amp"), contexts=arms)
    got = policy.next(5)
    with pytest.raises(PolicyError, match=re.escape("rewards[1]=0.5: must be 0 or 1 (1 of 5 do not)")):
        policy.update([0, 0.5, 1, 1, 0])
    policy.update(np.ones(got.size))


def test_experiment_errors():
    with pytest.raises(ConfigError, match=r"algorithm='dp-se': offered by distributed-dp-mab, private-online-learning"):
        Policy("dp-se", horizon=100)
    with pytest.raises(ConfigError, match=r"algorithm='no-such': not an algorithm of any family"):
        Policy("no-such", horizon=100)
    with pytest.raises(ConfigError, match=r"contexts: family distributed-dp-mab is a multi-armed bandit"):
        Policy(mab("dp-se", epsilon=1.0), contexts=np.eye(6))
    with pytest.raises(ConfigError, match=r"run=1: must lie in \[0, 0\]"):
        Policy(mab("dp-se", epsilon=1.0), run=1)
    two = mab("dp-se", epsilon=1.0)
    two["algorithms"]["se"] = {"algorithm": "se"}
    with pytest.raises(ConfigError, match=r"label: the experiment has 2 algorithms \(dp-se, se\); name one"):
        Policy(two)
    with pytest.raises(ConfigError, match=r"label='x': not one of dp-se, se"):
        Policy(two, "x")


def test_what_hands_out_no_arms_is_refused_by_name():
    """The counters (Algorithms 2/3) count bits; GLM and Algorithm 4: tests/test_policy_glm_cs.py."""
    with pytest.raises(ConfigError, match=r"a counter \(Algorithms 2/3\) hands out no arms"):
        Policy("experiments/cs_demo.toml", label=_first_label("experiments/cs_demo.toml"))


def _first_label(path: str) -> str:
    from privbandit.runner import load_experiment

    fam, config = load_experiment(path)
    return fam.labels(config)[0]


# --- the accountant ----------------------------------------------------------------------------
def finished(data: dict) -> Policy:
    policy = Policy(data)
    rng = np.random.default_rng(1)
    while not policy.done:
        policy.update(rng.random(policy.next(USER_BLOCK).size))
    return policy


def test_accountant_pure_epsilon_at_every_delta():
    acct = finished(mab("dp-se", horizon=2_000, epsilon=0.7)).accountant
    assert acct.epsilon(0) == 0.7 and acct.epsilon(1e-9) == 0.7 and acct.epsilon(acct.delta) == 0.7
    spent = acct.spent()
    assert spent["epsilon_at_delta"] == 0.7 and spent["mechanism"].startswith("dp-se: Sajed & Sheffet")
    assert any("pure ε" in p for p in spent["proofs"])
    for bad in (-0.1, 1.0, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match=r"delta=.*: must be a number in \[0, 1\)"):
            acct.epsilon(bad)


def test_accountant_renyi_converts_at_the_asked_delta():
    """Skellam shares: an RDP curve, no pure ε; ε(δ) falls as δ grows, δ = 0 is refused."""
    acct = finished(mab("dist-rdp-se", horizon=4_000, epsilon=1.0)).accountant
    spent = acct.spent()
    assert spent["epsilon_pure"] is None and acct.epsilon(acct.delta) == spent["epsilon_at_delta"]
    assert acct.epsilon(1e-3) < acct.epsilon(acct.delta) < acct.epsilon(1e-12)
    with pytest.raises(NoProof, match=r"δ = 0: no pure ε is proven for dist-rdp-se .*Canonne, Kamath & Steinke"):
        acct.epsilon(0)


def test_accountant_refuses_below_the_theorems_delta():
    """P_Amp's (ε, δ) comes from the amplification theorem at the run's δ: no smaller δ is proven."""
    from privbandit.families.shuffle_linear_bandits.world import instances

    policy = Policy(linear("LinUCB-SDP-Amp"), contexts=instances("paper-code", 10, 3, 23, [0]).arms[0])
    rng = np.random.default_rng(2)
    while not policy.done:
        policy.update((rng.random(policy.next(10**6).size) < 0.5).astype(float))
    acct = policy.accountant
    theorems = acct.spent()["delta_from_theorems"]
    assert acct.epsilon(0.2) == acct.epsilon(0.1) == acct.spent()["epsilon_at_delta"]
    with pytest.raises(NoProof, match=r"the theorems' \(ε, δ\) statements alone spend δ"):
        acct.epsilon(theorems / 2)


def test_accountant_none_proven():
    acct = finished(mab("dist-dp-se", horizon=2_000, epsilon=1.0, intermediary="shuffler-residues")).accountant
    assert acct.spent()["guarantee"] == "none proven"
    with pytest.raises(NoProof, match=r"none proven: .*no proof covers the shuffled multiset"):
        acct.epsilon(1e-6)


def test_results_accountant_reads_the_runs_ledger():
    data = {**mab("dist-rdp-se", horizon=4_000, epsilon=1.0), "runs": 2}
    results = privbandit.run(data)
    run0 = results.accountant("dist-rdp-se", run=0)
    assert run0.spent()["epsilon_at_delta"] == results.results["dist-rdp-se"][0].privacy["epsilon_at_delta"]
    assert run0.spent()["mechanism"].startswith("dist-rdp-se: Algorithm 1 with Skellam")
    worst = results.accountant("dist-rdp-se")
    assert worst.spent()["epsilon_at_delta"] == results.summary["privacy"]["dist-rdp-se"]["epsilon_at_delta"]
    with pytest.raises(KeyError, match=r"run=5: not held \(these results hold runs \[0, 1\]"):
        results.accountant("dist-rdp-se", run=5)


def test_a_summary_reads_a_valid_bound_at_another_delta():
    """A finished run's summary keeps nine Rényi orders: at another δ its ε is a bound no smaller than
    the live ledger's (the same releases), and equal at the run's own δ."""
    live = finished(mab("dist-rdp-se", horizon=4_000, epsilon=1.0)).accountant
    frozen = Accountant(live.source.summary(), live.mechanism, live.label)
    assert frozen.epsilon(live.delta) == live.epsilon(live.delta)
    for d in (1e-3, 1e-9, 1e-15):
        assert frozen.epsilon(d) >= live.epsilon(d)
    assert frozen.epsilon(1e-15) > live.epsilon(1e-15)  # the sparser curve costs something out there


# --- the documented example ----------------------------------------------------------------------
def test_docs_example_runs_verbatim():
    text = DOCS.read_text()
    section = text[text.index("## A policy in your own loop"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(DOCS), "exec"), scope)  # noqa: S102 - the page's own example
    assert scope["policy"].done and scope["eps"] > 0
