"""privbandit.Policy for the GLM family (Private-GLM and its baselines: per-user arm sets, κ and κ*
stated or bounded from S) and for concurrent shuffle's Algorithm 4 (the caller's fixed arms).

As in tests/test_policy.py, the byte-for-byte tests feed a policy the family's own simulated world
(its arm sets, its reward uniforms, the κ its world gives) and hold its regret, added up as the
observer adds it, and its ledger to ``privbandit.run``'s at the same seed; fed another seed's
rewards, the same loop decides otherwise (so the check can fail).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import privbandit
from privbandit.policy import Policy, PolicyError
from privbandit.runner.config import ConfigError
from tests.test_policy import DOCS, Curves, spent_equals_run


def glm(algorithm: str = "private-glm", horizon: int = 300, link: str = "probit", preset: str = "paper",
        **table) -> dict:
    return {"family": "glm-bandits", "name": "policy-test", "horizon": horizon, "seed": 11, "epsilon": 6.0,
            "delta": 0.02, "runs": 1, "checkpoints": 30, "preset": preset,
            "environment": {"link": link, "dim": 3, "arms": 8, "norm": 2.0},
            "algorithms": {algorithm: {"algorithm": algorithm, **table}}}


def glm_world(data: dict, run: int = 0):
    from privbandit.runner import load_experiment

    fam, config = load_experiment(data)
    return fam.world(config, [run])


def glm_policy_loop(data: dict, label: str, reward_seed: int | None = None, online: bool = False, run: int = 0,
                    bounds: bool = False):
    """Feed a policy run ``run``'s simulated arm sets and its rewards 1{u_t < μ(⟨x, θ*⟩)} (the uniforms
    of ``reward_seed``'s world, default the experiment's), with the κ, κ* that world gives (``bounds``:
    none stated, the policy's bounds from S)."""
    w = glm_world(data, run)
    u = w.uniforms[0] if reward_seed is None else glm_world({**data, "seed": reward_seed}, run).uniforms[0]
    k = w.kappas(0)
    world = None if bounds else {"kappa": k.kappa, "kappa_star": k.kappa_star}
    policy = Policy(data, run=run, world=world) if online else Policy(data, run=run, contexts=w.arms[0], world=world)
    curves = Curves(data["horizon"], data["checkpoints"])
    while not policy.done:
        t = policy.served
        arms = policy.next(10**6, contexts=w.arms[0, t:t + 1]) if online else policy.next(10**6)
        if data["algorithms"][label]["algorithm"] != "shuffle-glm":
            assert arms.shape == (1,)  # one user per plan: the next arm needs this reward
        users = t + np.arange(arms.size)
        mean, best = w.means[0, users, arms], w.best[0, users]
        y = (u[users] < mean).astype(np.float64)
        gap, won = best - mean, (u[users] < best) - y
        at = curves.cps(t, arms.size) - t - 1
        # a block's totals as its truth carries them (np.sum, pairwise), its checkpoints by np.cumsum
        curves.add(t, arms.size, [gap.sum(), won.sum()], np.cumsum(gap)[at], np.cumsum(won)[at])
        policy.update(y)
    return policy, curves


@pytest.mark.parametrize("algorithm,link,preset", [
    ("private-glm", "probit", "paper"),       # 𝒫_GD through P_Vec
    ("private-glm", "logistic", "paper-code"),  # DP-SGD, the authors' constants
    ("rs-glinucb", "probit", "paper"),
    ("glm-ucb", "probit", "paper"),
    ("gloc", "probit", "paper-code"),
    ("ecolog", "logistic", "paper"),
])
def test_glm_policy_reproduces_run(algorithm, link, preset):
    """The caller giving run 0's arm sets, rewards and κ, κ*: privbandit.run's regret and ledger."""
    data = glm(algorithm, link=link, preset=preset)
    policy, curves = glm_policy_loop(data, algorithm)
    result = privbandit.run(data).results[algorithm][0]
    assert np.array_equal(curves.pseudo, result.pseudo[0]) and np.array_equal(curves.realized, result.realized[0])
    spent_equals_run(policy, result)
    assert policy.served == data["horizon"] and len(policy.records) == data["horizon"]


def test_glm_policy_contexts_as_they_come():
    """Arm sets given one user at a time through next(n, contexts=...) make the same run."""
    data = glm()
    result = privbandit.run(data).results["private-glm"][0]
    policy, online = glm_policy_loop(data, "private-glm", online=True)
    assert np.array_equal(online.pseudo, result.pseudo[0]) and np.array_equal(online.realized, result.realized[0])
    spent_equals_run(policy, result)


def test_glm_policy_learns_from_the_callers_rewards():
    """Where Private-GLM's choices depend on the rewards (at T = 300 both presets still explore with
    every user: the other tests' runs would match whatever the rewards), the policy fed the world's
    rewards makes privbandit.run's run, and fed another seed's it does not (the check can fail)."""
    data = {**glm(link="logistic", preset="paper-code", horizon=1000), "epsilon": 100.0}
    result = privbandit.run(data).results["private-glm"][0]
    policy, same = glm_policy_loop(data, "private-glm")
    assert np.array_equal(same.pseudo, result.pseudo[0]) and np.array_equal(same.realized, result.realized[0])
    spent_equals_run(policy, result)
    _, other = glm_policy_loop(data, "private-glm", reward_seed=data["seed"] + 1)
    assert not np.array_equal(other.pseudo, result.pseudo[0])


def test_glm_kappa_from_the_public_bounds():
    """No world stated: κ ≤ 1/μ̇(S), κ* ≥ 1/μ̇(0) (eq. (4) under Assumption 4.2), in the analyzer's public task."""
    from scipy.special import expit

    from privbandit.families.glm_bandits.caller import kappa_bounds

    s = expit(2.0)
    assert kappa_bounds("logistic", 2.0) == pytest.approx((1 / (s * (1 - s)), 4.0), rel=1e-12)
    root = math.sqrt(2 * math.pi)  # 1/φ(0); 1/φ(2) = √(2π)·e²
    assert kappa_bounds("probit", 2.0) == pytest.approx((root * math.exp(2.0), root), rel=1e-12)
    data = glm(horizon=40)
    w = glm_world(data)
    policy = Policy(data, contexts=w.arms[0])
    assert policy.public["kappa"] == [kappa_bounds("probit", 2.0)[0]]
    assert policy.public["kappa_star"] == [kappa_bounds("probit", 2.0)[1]]
    true = w.kappas(0)  # the bounds bracket the world's own
    assert policy.public["kappa"][0] >= true.kappa and policy.public["kappa_star"][0] <= true.kappa_star
    rng = np.random.default_rng(0)
    while not policy.done:
        policy.update((rng.random(policy.next(1).size) < 0.5).astype(float))
    assert policy.accountant.spent()["epsilon_at_delta"] > 0


def test_glm_bad_input_names_the_field_and_range():
    data = glm(horizon=20)
    arms = glm_world(data).arms[0]
    with pytest.raises(ConfigError, match=re.escape("contexts: users' arm sets, shape (m, 8, 3)")):
        Policy(data, contexts=arms[:, :, :2])
    with pytest.raises(ConfigError, match=r"contexts\[0, \d\]: ‖x‖₂ = .* must be ≤ 1 \(Assumption 4.2"):
        Policy(data, contexts=2 * arms)
    with pytest.raises(ConfigError, match=r"world\['kappa_star'\]=1.0: must be ≥ 1/sup μ̇ = 2.50663 for the probit"):
        Policy(data, contexts=arms, world={"kappa": 50.0, "kappa_star": 1.0})
    with pytest.raises(ConfigError, match=r"world\['kappa'\]=3.0: must be ≥ world\['kappa_star'\]=4.0"):
        Policy(data, contexts=arms, world={"kappa": 3.0, "kappa_star": 4.0})
    with pytest.raises(ConfigError, match=r"world: the GLM family takes exactly 'kappa' and 'kappa_star'"):
        Policy(data, contexts=arms, world={"kappa": 30.0})
    with pytest.raises(ConfigError, match=r"world\['kappa'\]=nan: must be a finite number"):
        Policy(data, contexts=arms, world={"kappa": float("nan"), "kappa_star": 4.0})
    with pytest.raises(ConfigError, match=r"contexts: 0 users' contexts given already and 21 more"):
        Policy(data, contexts=np.concatenate([arms, arms[:1]]))
    policy = Policy(data)  # no contexts yet: the first user's are asked for
    with pytest.raises(PolicyError, match=r"contexts: the contexts of users up to 0 \(0-based\) are needed before "
                                          r"their arms, 1 more"):
        policy.next(1)
    got = policy.next(1, contexts=arms[:2])
    with pytest.raises(PolicyError, match=re.escape("rewards[0]=0.5: must be 0 or 1 (1 of 1 do not)")):
        policy.update([0.5])
    policy.update([1.0])
    policy.update([0.0] * policy.next(1).size)  # user 1's arm set was given with user 0's
    with pytest.raises(PolicyError, match=r"contexts: the contexts of users up to 2 \(0-based\) are needed"):
        policy.next(1)
    with pytest.raises(PolicyError, match=re.escape("contexts: users' arm sets, shape (m, 8, 3)")):
        policy.next(1, contexts=arms[2])
    assert got.shape == (1,) and policy.served == 2
    policy.close()
    assert not policy._thread.is_alive()
    with pytest.raises(ConfigError, match=r"world: family distributed-dp-mab takes nothing stated"):
        Policy("dp-se", family="distributed-dp-mab", horizon=100, epsilon=1.0, world={"kappa": 2.0})
    mab = Policy("dp-se", family="distributed-dp-mab", horizon=100, epsilon=1.0)
    with pytest.raises(PolicyError, match=r"contexts: family distributed-dp-mab takes no per-user contexts in next"):
        mab.next(1, contexts=arms[:1])
    mab.close()


@pytest.mark.parametrize("preset", ["paper"])  # "exact" passes too, in 61 s (its count accountant): not kept
def test_shuffle_glm_policy_reproduces_run(preset):
    """Algorithm 1: batches of users in blocks, each batch's 𝒫_GD plans serving its users again (their
    rewards held, not asked twice): privbandit.run's regret and ledger. Another seed's rewards: other
    θ̂'s released (at T = 2000 the choices, drawn from G-optimal designs whose widths dwarf θ̂, do not move)."""
    data = glm("shuffle-glm", horizon=2000, link="logistic", preset=preset, warmup=400, max_iterations=20)
    result = privbandit.run(data).results["shuffle-glm"][0]
    policy, same = glm_policy_loop(data, "shuffle-glm")
    assert np.array_equal(same.pseudo, result.pseudo[0]) and np.array_equal(same.realized, result.realized[0])
    spent_equals_run(policy, result)
    assert policy.served == 2000 and len(policy.records) == result.privacy["releases"] > 0
    moved, _ = glm_policy_loop(data, "shuffle-glm", reward_seed=data["seed"] + 1)
    thetas = [[np.asarray(r.body["theta"]) for r in p.records if "theta" in r.body] for p in (policy, moved)]
    assert len(thetas[0]) == len(thetas[1]) == 2 and np.isfinite(thetas[0]).all()
    assert not any(np.array_equal(a, b) for a, b in zip(*thetas))


def test_shuffle_glm_needs_a_blocks_arm_sets_at_once():
    data = glm("shuffle-glm", horizon=2000, link="logistic", warmup=400, max_iterations=20)
    arms = glm_world(data).arms[0]
    policy = Policy(data, contexts=arms[:10])
    with pytest.raises(PolicyError, match=r"contexts: the contexts of users up to 399 \(0-based\) are needed before "
                                          r"their arms, 390 more"):
        policy.next(1)
    got = policy.next(1000, contexts=arms[10:400])
    assert got.shape == (400,)
    policy.close()


# --- concurrent shuffle, Algorithm 4 ---------------------------------------------------------------
def alg4(algorithm: str = "cs-linucb", horizon: int = 3000, k: int = 2) -> dict:
    return {"family": "concurrent-shuffle", "name": "policy-test", "horizon": horizon, "seed": 13, "epsilon": 1.0,
            "delta": 0.1, "runs": 1, "checkpoints": 50, "environment": {"arms": 12, "dim": 3},
            "algorithms": {algorithm: {"algorithm": algorithm, "k": k}}}


def alg4_policy_loop(data: dict, label: str, reward_seed: int | None = None, n: int = 10**6):
    """Feed a policy the linear instance's arms and rewards 1{U_t < μ_a} (the family's U_t)."""
    from privbandit.families.shuffle_linear_bandits.world import instances, user_uniforms

    env = data["environment"]
    inst = instances("paper", env["arms"], env["dim"], data["seed"], [0])
    means, best = inst.means[0], inst.means[0].max()
    policy = Policy(data, contexts=inst.arms[0])
    curves = Curves(data["horizon"], data["checkpoints"])
    seed = data["seed"] if reward_seed is None else reward_seed
    while not policy.done:
        first = policy.served
        arms = policy.next(n)
        size = arms.size
        u = user_uniforms(seed, 0, first, size)
        y = (u < means[arms]).astype(np.float64)
        if label != "cs-random":
            assert np.all(arms == arms[0])  # a batch plays one arm
        pseudo = (best - means[arms]).cumsum()
        realized = ((u < best) - y).cumsum()
        at = curves.cps(first, size) - first - 1
        curves.add(first, size, [pseudo[-1], realized[-1]], pseudo[at], realized[at])
        policy.update(y)
    return policy, curves


@pytest.mark.parametrize("label,k", [("cs-linucb", 1), ("cs-linucb", 2), ("cs-linucb-exact", 2), ("cs-random", 2)])
def test_alg4_policy_reproduces_run(label, k):
    data = alg4(label, k=k)
    policy, curves = alg4_policy_loop(data, label)
    result = privbandit.run(data).results[label][0]
    assert np.array_equal(curves.pseudo, result.pseudo[0]) and np.array_equal(curves.realized, result.realized[0])
    spent_equals_run(policy, result)
    assert policy.served == data["horizon"] and len(policy.records) == result.privacy["releases"]


def test_alg4_policy_small_hand_outs_and_other_rewards():
    """Handing out 7 arms at a time makes the same run as whole batches. Another seed's rewards: the
    exact-sum reference decides otherwise; the private runs (theory constants, λ = 2σ̃√d: at n = 3000
    their choices do not move with the data, docs/concurrent-shuffle.md) fold other node sums Σ φy."""
    data = alg4("cs-linucb", k=2)
    result = privbandit.run(data).results["cs-linucb"][0]
    same, small = alg4_policy_loop(data, "cs-linucb", n=7)
    assert np.array_equal(small.pseudo, result.pseudo[0])
    other, _ = alg4_policy_loop(data, "cs-linucb", reward_seed=data["seed"] + 1)
    u = [p._analyzer.logic.server.learner.u for p in (same, other)]
    assert np.isfinite(u[0]).all() and not np.array_equal(u[0], u[1])
    exact = alg4("cs-linucb-exact", k=2)
    reference = privbandit.run(exact).results["cs-linucb-exact"][0]
    _, moved = alg4_policy_loop(exact, "cs-linucb-exact", reward_seed=exact["seed"] + 1)
    assert not np.array_equal(moved.pseudo, reference.pseudo[0])


def test_alg4_bad_input():
    from privbandit.families.shuffle_linear_bandits.world import instances

    arms = instances("paper", 12, 3, 13, [0]).arms[0]
    with pytest.raises(ConfigError, match=re.escape("contexts: the 12 arms' features, shape (12, 3)")):
        Policy(alg4())
    with pytest.raises(ConfigError, match=r"contexts: every arm's ‖φ‖₂ must be ≤ 1 and every \|φ_k\| ≤ 1 \(the bounds "
                                          r"generator = 'paper'"):
        Policy(alg4(), contexts=1.5 * arms)
    policy = Policy(alg4(), contexts=arms)
    got = policy.next(3)
    with pytest.raises(PolicyError, match=re.escape("rewards[1]=1.5: must lie in [0, 1]")):
        policy.update([0.2, 1.5, 0.0])
    policy.update([0.2, 0.7, 0.0])  # y_t ∈ [0, 1] (Assumption C.1), not only Bernoulli
    assert got.shape == (3,)
    policy.close()


def test_counters_stay_refused():
    data = {"family": "concurrent-shuffle", "name": "policy-test", "horizon": 1000, "seed": 1, "epsilon": 1.0,
            "runs": 1, "algorithms": {"csta_k": {"k": 2}}}
    with pytest.raises(ConfigError, match=r"a counter \(Algorithms 2/3\) hands out no arms"):
        Policy(data)


# --- the documented examples -------------------------------------------------------------------
@pytest.mark.parametrize("heading", ["### GLM bandits", "### Concurrent shuffle, Algorithm 4"])
def test_docs_family_examples_run_verbatim(heading):
    text = DOCS.read_text()
    section = text[text.index(heading):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(DOCS), "exec"), scope)  # noqa: S102 - the page's own example
    assert scope["policy"].done and scope["eps"] > 0


# --- the figures docs/api.md quotes: PYTHONPATH=. .venv/bin/python tests/test_policy_glm_cs.py [cost|kappa] --
def _figures(parts: list[str], runs: int = 10) -> None:
    """What a policy costs beside privbandit.run (best of 3), and what the κ bounds from S cost in regret
    against the world's own κ, κ*, paired by run (the same arm sets and rewards)."""
    import time

    g = {**glm(link="logistic", preset="paper-code", horizon=1000), "epsilon": 100.0}
    sg = glm("shuffle-glm", horizon=2000, link="logistic", warmup=400, max_iterations=20)
    a = alg4("cs-linucb", horizon=20000, k=2)
    timed = (("private-glm (paper-code, logistic, T = 1000, ε = 100)", g, lambda: glm_policy_loop(g, "private-glm")),
             ("shuffle-glm (paper, logistic, T = 2000, warmup 400, T_it = 20)", sg,
              lambda: glm_policy_loop(sg, "shuffle-glm")),
             ("cs-linucb (k = 2, T = 20,000)", a, lambda: alg4_policy_loop(a, "cs-linucb")))
    for name, data, loop in timed if "cost" in parts else ():
        best = [math.inf, math.inf]
        for _ in range(3):
            t0 = time.perf_counter()
            loop()
            t1 = time.perf_counter()
            privbandit.run(data)
            best = [min(best[0], t1 - t0), min(best[1], time.perf_counter() - t1)]
        print(f"{name}: the policy loop {best[0]:.2f} s, privbandit.run {best[1]:.2f} s (best of 3)")
    paired = (("private-glm", "logistic", "paper-code", 100.0), ("private-glm", "logistic", "paper-code", 6.0),
              ("glm-ucb", "logistic", "paper", 6.0))
    for label, link, preset, eps in paired if "kappa" in parts else ():
        data = {**glm(label, link=link, preset=preset, horizon=1000), "epsilon": eps, "runs": runs,
                "environment": {"link": link, "dim": 3, "arms": 8, "norm": 2.0, "reuse_contexts": False}}
        diff = []
        for r in range(runs):
            exact = glm_policy_loop(data, label, run=r)[1].pseudo[-1]
            bound = glm_policy_loop(data, label, run=r, bounds=True)[1].pseudo[-1]
            diff.append(bound - exact)
        d = np.array(diff)
        se = d.std(ddof=1) / math.sqrt(runs)
        print(f"{label} ({preset}, {link}, S = 2, T = 1000, ε = {eps:g}), κ bounds from S − the world's κ: "
              f"pseudo-regret {d.mean():+.2f} ± {se:.2f} (t = {d.mean() / se if se else math.nan:.2f}; bounds lower "
              f"in {int((d < 0).sum())} of {runs} runs, equal in {int((d == 0).sum())})")


if __name__ == "__main__":
    import sys

    _figures(sys.argv[1:] or ["cost", "kappa"])
