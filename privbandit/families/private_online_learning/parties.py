"""Hu, Huang & Mehta's learners as the spine's analyzer logic, and their users.

Every algorithm runs the one loop: plans to cohorts of users, reports into rounds, releases.

- :class:`LazyServer`, Anytime-Lazy-UCB (Algorithm 1): between two array completions the policy
  is constant, so one plan serves the whole cohort up to the next completion; each user derives
  its arm from the broadcast :class:`~.anytime_lazy_ucb.LazyPolicy` and its own arrival time. Every
  arm's filling array is a round that stays open across cohorts until its 2^r reports are in:
  raw rewards to the trusted analyzer, which adds Lap(1/ε) (central), or a modular sum of Pólya-
  noised residues (distributed: Chowdhury & Zhou's Thm 1 mechanism, spec §5.4 [INFERRED]).
- :class:`HybridServer`, Hybrid-UCB (Algorithm 4), central only: every pull refreshes the pulled
  arm's private mean, so each user's arm depends on the last user's reward. Over MQTT a plan serves
  the users whose arm no reward of the earlier ones can change (the leader's streak that it wins
  even with rewards 0, :func:`~.hybrid_streaks.decided_streak`), one user otherwise. In-process
  the trusted analyzer may look ahead (the users' ``oracle``) and decide a block of users at once
  with the leader-streak speculation of :mod:`.hybrid_streaks`. All three give the arms of one user
  per plan, bit for bit (the tests hold the drivers equal); a release is checked against what was
  looked ahead at, or decided.
- :class:`FtnlServer`, FTNL (Algorithms 2–3, full information): epoch s's 2^s users play one
  action and report their reward vectors; report-noisy-max picks the next. Central: the analyzer
  adds Lap(c/ε) to the K sums. Distributed: K Pólya-noised residues per user; the intermediary
  releases only the index (``argmax``) or the K sums (``argmax_at = "analyzer"``).

Randomness: users draw from streams keyed by their own index (:class:`~.world.OnlineUsers`) and,
to randomize, by (plan, block, arm); the analyzer's noise comes from its key, per round, so its
decisions depend on neither the order releases arrive in nor on which process draws them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privbandit.families.distributed_dp_mab.base import RoundParams
from privbandit.families.distributed_dp_mab.parties import release_threshold
from privbandit.families.private_online_learning.anytime_lazy_ucb import AnytimeLazyUCB, LazyPolicy
from privbandit.families.private_online_learning.experts import (
    DRAW_BLOCK,
    EXPERTS,
    ExpertsLearner,
    ftl_decided,
    hedge_decided,
)
from privbandit.families.private_online_learning.ftnl import FTNL
from privbandit.families.private_online_learning.hybrid_streaks import HybridStreaks, decided_streak
from privbandit.families.private_online_learning.hybrid_ucb import HybridUCB
from privbandit.families.private_online_learning.mechanisms import (
    ArraySumRelease,
    DistributedArraySum,
    DistributedNoisyMax,
    NoisyMeans,
    ReportNoisyMax,
)
from privbandit.families.private_online_learning.world import OnlineUsers
from privbandit.families.private_online_learning.world import rewards_from_uniforms
from privbandit.protocol.primitives.noise.grid_laplace import sample_grid_steps
from privbandit.protocol.primitives.secagg.parameters import GraphParameters, ThreatModel, graph_for
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import NonPrivate, PureDP
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend
from privbandit.protocol.spine.one_user import OneUserPlans

NOISE_BLOCK = 1 << 16  # the analyzer's per-round noise is drawn this many rounds at a time
HEDGE_LOOK = 1 << 14  # users a Hedge plan may decide at once: its draws are copied per plan


def raw_round(rid: int, n: int, width: int = 1) -> Round:
    """Raw rewards in [0, 1] to the trusted analyzer (the central model): attributable reports. A
    report outside [0, 1] is refused (``out-of-range``) and its user counts as a dropout: the round
    is released over the others once at least the MAB family's ⌊2n/3⌋ + 1 reported (a poisoning
    user cannot stall the run); an honest round is complete. (:class:`OneUserPlans` asks all.)"""
    return Round(rid, "aggregator", "pass", expected=n, width=width, integer=False, low=0.0, high=1.0,
                 threshold=release_threshold(n))


def modular_round(rid: int, n: int, q: RoundParams, width: int = 1, rule: str = "sum",
                  secure: GraphParameters | None = None, mode: str | None = None) -> Round:
    """Pólya-noised residues summed mod m by the aggregator (``argmax``: only the index leaves),
    ideally or, with a ``secure`` graph, by secure aggregation over a ``mode`` graph."""
    decode = (-q.tau, q.n * q.g + q.tau) if rule == "argmax" else None
    return Round(rid, "aggregator", rule, expected=n, width=width, m=q.m, decode=decode,
                 secagg=None if secure is None else mode, secagg_degree=None if secure is None else secure.k,
                 secagg_threshold=None if secure is None else secure.t)


class LazyServer:
    """Anytime-Lazy-UCB's analyzer (see the module docstring)."""

    def __init__(self, n_arms: int, epsilon: float, horizon: int, key: int, trust: str, p: float,
                 secagg: str | None = None, threat: ThreatModel | None = None):
        self.learner = AnytimeLazyUCB(n_arms, epsilon)
        # Secure aggregation ("complete" | "sparse") of every array of at least two users, among
        # exactly the users who pull the arm: the joins name them. An array of one user (array 0)
        # has no one to mask with; its sum is its one report, which the release is anyway.
        self.secagg, self.threat = secagg, threat
        self.horizon = horizon
        self.key = key
        self.release = ArraySumRelease(epsilon) if trust == "central" else DistributedArraySum(epsilon, p)
        self.central = trust == "central"
        self.t = 1  # the next user
        self.next_round = 0
        self.filling: dict[int, tuple[int, int]] = {}  # arm → (its open array's round, size)
        self.arm_of: dict[int, int] = {}  # open round → arm
        self.waiting: set[int] = set()  # rounds the last plan completed: released before we plan on

    @property
    def done(self) -> bool:
        return self.t > self.horizon

    def awaiting(self) -> set[int]:
        """The arrays the last cohort filled; an array the horizon cut short is never released."""
        return self.waiting

    def round_for(self, arm: int) -> tuple[Round | None, int]:
        """The round arm's filling array reports into, opening it (returned) on its first pull."""
        if arm in self.filling:
            return None, self.filling[arm][0]
        _, n = self.learner.filling(arm)
        rid, self.next_round = self.next_round, self.next_round + 1
        secure = graph_for(self.secagg, n, self.threat) if self.secagg is not None and n >= 2 else None
        rnd = raw_round(rid, n) if self.central else modular_round(rid, n, self.release.params(n), secure=secure,
                                                                    mode=self.secagg)
        self.filling[arm] = (rid, n)
        self.arm_of[rid] = arm
        return rnd, rid

    def plans(self) -> list[Plan]:
        if self.waiting or self.done:
            return []
        t0 = self.t
        arms = self.learner.plan_cohort(t0, self.horizon)
        counts = np.bincount(arms, minlength=self.learner.n_arms)
        opens, joins = [], []
        for j in np.flatnonzero(counts):
            rnd, rid = self.round_for(int(j))
            if rnd is not None:
                opens.append(rnd)
            secure = self.secagg is not None and self.filling[int(j)][1] >= 2
            users = tuple((t0 - 1 + np.flatnonzero(arms == j)).tolist()) if secure else None
            joins.append(Join(rid, t0 - 1, arms.size, int(counts[j]), users))
        rounds = np.full(self.learner.n_arms, -1, dtype=np.int64)
        sizes = np.zeros(self.learner.n_arms, dtype=np.int64)
        for j, (rid, n) in self.filling.items():
            rounds[j], sizes[j] = rid, n
        if self.learner.initialized:
            policy = self.learner.policy()
            body = {"kind": "lazy", "t0": t0, "means": policy.means[None], "sizes": policy.sizes[None],
                    "epsilon": policy.epsilon, "round_of_arm": rounds, "array_size": sizes}
        else:  # the initial pulls: user t pulls arm t − 1
            body = {"kind": "arms", "t0": t0, "arms": arms[None], "round_of_arm": rounds, "array_size": sizes}
        self.waiting = {self.filling[j][0] for j in self.learner.record_pulls(arms)}
        self.t += arms.size
        return [Plan(t0 - 1, t0 - 1, arms.size, body, tuple(opens), tuple(joins))]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        arm = self.arm_of.get(rnd.id)
        if arm is None or rnd.id not in self.waiting:
            raise ProtocolError("unknown-round", f"round {rnd.id} is not an array this analyzer waits for")
        r, n = self.learner.filling(arm)
        rng = stream(self.key, "round", rnd.id)
        if self.central:
            # Refused reports are dropouts: the survivors' noisy sum, scaled to the array's n
            # (post-processing of the release: ε unchanged; × 1.0, exactly, when all reported).
            noisy = self.release.release(float(release.values[0, :, 0].sum()), n, rng) * n / release.n_reports
            wrapped, extra = False, {}
        else:
            q = self.release.params(n)
            noisy, wrapped = self.release.decode(int(release.values[0, 0]), q, rng)
            extra = {"g": q.g, "tau": q.tau, "m": q.m}
        self.learner.on_release(arm, noisy, n)
        del self.filling[arm], self.arm_of[rnd.id]
        self.waiting.discard(rnd.id)
        return ({"user": self.t - 1, "arm": arm, "array": r, "estimate_sum": noisy, "wrapped": wrapped, **extra},
                Spend(self.release.privacy_event(n)))

    def summary(self) -> list[dict]:
        return [{"pulls": self.learner.pulls.tolist()}]


class HybridServer(OneUserPlans):
    """Hybrid-UCB's analyzer (see the module docstring; :class:`OneUserPlans` serves its plans).
    ``oracle(t0, n)``: the users' reward of every arm, (n, K), for users t0 …; in-process only."""

    block = NOISE_BLOCK
    reports = "rewards"

    def __init__(self, n_arms: int, epsilon: float, depth: str, horizon: int, key: int,
                 oracle: Callable[[int, int], np.ndarray] | None = None):
        self.learner = HybridUCB(n_arms, epsilon, depth)
        self.streaks = HybridStreaks(self.learner)
        self.key = key
        self._noise_block, self._noise = -1, None
        self.start(horizon, oracle)

    def noise(self, t0: int, n: int) -> np.ndarray:
        """Unit grid steps ``Lap_Z(2²⁰)`` (node, array) of rounds t0 … t0 + n − 1, from the analyzer's key in
        blocks of :data:`NOISE_BLOCK` rounds: a round's draws never depend on how rounds are grouped."""
        out = np.empty((n, 2))
        k = 0
        while k < n:
            b, off = divmod(t0 + k - 1, NOISE_BLOCK)
            if b != self._noise_block:
                self._noise_block = b
                self._noise = sample_grid_steps((NOISE_BLOCK, 2), stream(self.key, "noise", b))
            take = min(n - k, NOISE_BLOCK - off)
            out[k:k + take] = self._noise[off:off + take]
            k += take
        return out

    def choose(self, t: int) -> int:
        return self.learner.choose(t)

    def decided(self, t0: int, n: int) -> np.ndarray:
        size = decided_streak(self.learner, t0, n, lambda t, m: self.noise(t, m)[:, 0])
        return np.full(size, self.learner.choose(t0))

    def observe_decided(self, rnd: Round, release: Release, x: np.ndarray) -> np.ndarray:
        xs = np.repeat(x[:, None], self.learner.n_arms, axis=1)  # the pulled arm's column is all it reads
        return self.streaks.decide(rnd.id + 1, xs, self.noise(rnd.id + 1, x.size))

    def look_ahead(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        xs = self.oracle(t0, n)
        arms = self.streaks.decide(t0, xs, self.noise(t0, n))
        return arms, xs[np.arange(n), arms]

    def report_round(self, rid: int, n: int) -> Round:
        return raw_round(rid, n)

    def observe(self, rnd: Round, release: Release, arm: int, x: np.ndarray) -> None:
        node, array = self.noise(rnd.id + 1, 1)[0]
        self.learner.observe(arm, float(x[0]), float(node), float(array))

    def event(self) -> PureDP:
        # Each observation refreshes the private means (eq. 34): every user has the guarantee of
        # the worst tree so far.
        return PureDP(self.learner.epsilon_spent())

    def summary(self) -> list[dict]:
        return [{"pulls": list(self.learner.pulls), **self.streaks.stats}]


class FtnlServer:
    """FTNL's analyzer (see the module docstring)."""

    def __init__(self, n_actions: int, epsilon: float, horizon: int, key: int, trust: str, p: float,
                 multiplier: float, argmax_at: str, secagg: str | None = None, threat: ThreatModel | None = None,
                 naive: bool = False):
        self.learner = FTNL(n_actions)
        # With argmax_at = "analyzer" the epoch's K sums are released: secure aggregation of each
        # user's K residues ("complete" | "sparse") computes them; an epoch of one user has no one
        # to mask with. An argmax inside the intermediary would need more than secure aggregation.
        self.secagg, self.threat = secagg, threat
        self.horizon = horizon
        self.key = key
        self.central = trust == "central"
        # The naive FTNL (§5): each action's sum at ε/K, all K released (distributed: the K sums
        # leave the aggregator, Lap_Z(K·g/ε) each); otherwise report noisy max (Alg. 3).
        self.argmax_at = "analyzer" if naive else argmax_at
        if naive:
            self.rnm = (NoisyMeans(epsilon, n_actions) if self.central
                        else DistributedNoisyMax(epsilon, p, float(n_actions), "analyzer"))
        else:
            self.rnm = (ReportNoisyMax(epsilon, multiplier) if self.central
                        else DistributedNoisyMax(epsilon, p, multiplier, argmax_at))
        self.t = 1
        self.open: dict[int, int] = {}  # round (the epoch) → the plan that opened it

    @property
    def done(self) -> bool:
        return self.t > self.horizon

    def plans(self) -> list[Plan]:
        if self.open or self.done:
            return []
        k = self.learner.n_actions
        s, n, action = self.learner.epoch, self.learner.epoch_length, self.learner.action
        t0 = self.t
        cohort = min(n, self.horizon - t0 + 1)
        body = {"kind": "epoch", "t0": t0, "action": action, "epoch": s, "n": n}
        self.t += cohort
        if cohort < n:  # a truncated last epoch is never released: nothing follows it
            self.learner.conclude_epoch(None)
            return [Plan(t0 - 1, t0 - 1, cohort, body)]
        if self.central:
            rnd = raw_round(s, n, width=k)
        else:
            secure = graph_for(self.secagg, n, self.threat) if self.secagg is not None and n >= 2 else None
            rnd = modular_round(s, n, self.rnm.params(n), width=k,
                                rule="argmax" if self.argmax_at == "intermediary" else "sum", secure=secure,
                                mode=self.secagg)
        self.open[s] = t0 - 1
        return [Plan(t0 - 1, t0 - 1, cohort, body, (rnd,), (Join(s, t0 - 1, n, n),))]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        if rnd.id not in self.open or rnd.id != self.learner.epoch:
            raise ProtocolError("unknown-round", f"epoch {rnd.id} is not the one this analyzer waits for")
        s, n, played = self.learner.epoch, self.learner.epoch_length, self.learner.action
        rng = stream(self.key, "round", rnd.id)
        k = self.learner.n_actions
        row = {"epoch": s, "played": played, "plan": self.open[rnd.id]}  # plan: its users' truths (observer)
        if self.central and isinstance(self.rnm, NoisyMeans):
            nxt, noisy = self.rnm.release(release.values[0].sum(axis=0), rng)
            row["means"] = (noisy / n).tolist()  # what the naive FTNL releases
        elif self.central:
            nxt = self.rnm.select(release.values[0].sum(axis=0), rng)
        elif rnd.rule == "argmax":
            nxt = int(release.values[0, 0])
            q = self.rnm.params(n)
            row.update(g=q.g, tau=q.tau, m=q.m, sums_released=False)
        else:
            q = self.rnm.params(n)
            nxt, _ = self.rnm.select(release.values[0], q, rng)
            row.update(g=q.g, tau=q.tau, m=q.m, sums_released=True)
        self.learner.conclude_epoch(nxt)
        del self.open[rnd.id]
        row["next"] = nxt
        return row, Spend(self.rnm.privacy_event(k))

    def summary(self) -> list[dict]:
        return [{"action": self.learner.action}]


class ExpertsServer(OneUserPlans):
    """FTL's or Hedge's analyzer (:mod:`.experts`), non-private: every user reports her whole reward
    vector. Over MQTT a plan serves the users no vector can send elsewhere
    (:func:`~.experts.ftl_decided`, :func:`~.experts.hedge_decided`); in-process ``oracle(t0, n)``
    (the users' vectors, (n, K), which the analyzer receives anyway) lets it decide up to the end of
    a draw block at once, and the release is checked against what it looked at
    (:class:`OneUserPlans`)."""

    block = DRAW_BLOCK
    reports = "vectors"
    plan_body = {"full": True}

    def __init__(self, name: str, n_actions: int, horizon: int, key: int, oracle: Callable | None = None):
        self.learner = ExpertsLearner(name, n_actions, horizon, key)
        self.k = n_actions
        self.start(horizon, oracle)

    def choose(self, t: int) -> int:
        return self.learner.choose(t)

    def decided(self, t0: int, n: int) -> np.ndarray:
        learner = self.learner
        if learner.kind == EXPERTS["ftl"]:
            return np.full(ftl_decided(learner.sums, n), learner.choose(t0))
        return hedge_decided(learner.sums, learner.eta, learner.uniforms(t0, min(n, HEDGE_LOOK)))

    def observe_decided(self, rnd: Round, release: Release, x: np.ndarray) -> np.ndarray:
        return self.learner.run(rnd.id + 1, x)

    def look_ahead(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        vectors = self.oracle(t0, n)
        return self.learner.run(t0, vectors), vectors

    def report_round(self, rid: int, n: int) -> Round:
        return raw_round(rid, n, width=self.k)

    def reported(self, release: Release) -> np.ndarray:
        return release.values[0]

    def observe(self, rnd: Round, release: Release, arm: int, x: np.ndarray) -> None:
        if release.n_reports != 1:
            raise ProtocolError("bad-report-count", f"plan {rnd.id}: one user's vector, got {release.n_reports}")
        self.learner.observe(x[0])

    def event(self) -> NonPrivate:
        return NonPrivate()

    def summary(self) -> list[dict]:
        return [{"sums": self.learner.sums.tolist()}]


REGRET_GRID = 2.0**-24


def on_regret_grid(x: np.ndarray) -> np.ndarray:
    """Regret rounded to multiples of 2^-24 (at most 3·10⁻⁸ per user): sums of such values below
    2^29 are exact in float64, so the regret curves do not depend on how users are grouped into
    plans and blocks. Hybrid-UCB's in-process analyzer serves a streak of users in one plan, over
    MQTT a shorter decided block; with exact sums both give the same bytes."""
    return np.round(np.asarray(x, dtype=np.float64) / REGRET_GRID) * REGRET_GRID


class OnlineBanditUsers:
    """The users of one run of this family: rewards from :class:`~.world.OnlineUsers` (keyed by
    user index), actions from the plan (the lazy policy and their arrival time, or given arms, or
    FTNL's epoch action), randomized by the mechanism the plan's rounds need."""

    def __init__(self, users: OnlineUsers, seed: int, prefix: tuple, checkpoints: np.ndarray,
                 randomizer=None, full_information: bool = False):
        self.users = users
        self.instance = users.instance
        self.seed = seed
        self.prefix = prefix
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        self.randomizer = randomizer  # DistributedArraySum / DistributedNoisyMax, or None (central)
        self.gaps = on_regret_grid(self.instance.gaps)
        self.full_information = full_information  # FTL, Hedge: every user reports her reward vector

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return block % shards

    def oracle(self, t0: int, n: int) -> np.ndarray:
        """Every arm's reward for users t0 … t0 + n − 1, (n, K): what the trusted analyzer of the
        central model may look ahead at in-process (:class:`HybridServer`); under full information
        (:class:`ExpertsServer`) the users' reward vectors themselves."""
        if self.full_information:
            return self.users.vectors(t0, n)
        u = self.users.uniforms(t0, n)
        return rewards_from_uniforms(self.instance, self.instance.means[None], u[:, :1])

    def arms_of(self, plan: Plan, t: np.ndarray) -> np.ndarray:
        b = plan.body
        if b["kind"] == "lazy":
            policy = LazyPolicy(np.asarray(b["means"])[0], np.asarray(b["sizes"])[0], float(b["epsilon"]))
            return policy.arms(t)
        if b["kind"] == "arms":
            return np.asarray(b["arms"])[0][t - b["t0"]]
        return np.full(t.size, b["action"], dtype=np.int64)

    def act(self, plan: Plan, block: int, first: int, size: int, stay) -> BlockAnswer:
        inst = self.instance
        t = np.arange(first + 1, first + size + 1)  # users' arrival times (1-based)
        arms = self.arms_of(plan, t)
        offsets = np.arange(size)
        full = plan.body["kind"] == "epoch" or bool(plan.body.get("full", False))
        if full:  # full information: the whole reward vector
            x = self.users.vectors(first + 1, size)
            got = x[offsets, arms]
            realized = x[:, inst.best_arm] - got
        else:
            got, realized = self.users.pull(first + 1, arms)
        running = np.cumsum(on_regret_grid(realized))
        pseudo_steps = np.cumsum(self.gaps[arms])
        lo, hi = np.searchsorted(self.checkpoints, [first + 1, first + size + 1])
        at = self.checkpoints[lo:hi] - first - 1
        truth = Truth(plan.id, block, first, size, pseudo=pseudo_steps[-1:], realized=running[-1:],
                      pseudo_at=pseudo_steps[at][None], realized_at=running[at][None])
        if not plan.joins:
            return BlockAnswer(truth)
        reports = []
        b = plan.body
        if b["kind"] == "epoch":
            values, encoded = (x, x) if self.randomizer is None else self.randomizer.randomized(
                x, self.randomizer.params(b["n"]), stream(self.seed, *self.prefix, "randomizer", plan.id, block))
            reports.append((plan.joins[0].round_id, offsets, values[None], encoded))
            return BlockAnswer(truth, reports)
        if full:  # FTL, Hedge: every user's reward vector into the plan's one round
            return BlockAnswer(truth, [(plan.joins[0].round_id, offsets, x[None], None)])
        if "round_of_arm" not in b:  # Hybrid-UCB: every user's raw reward into the plan's one round
            return BlockAnswer(truth, [(plan.joins[0].round_id, offsets, got.reshape(1, -1, 1), None)])
        rounds = np.asarray(b["round_of_arm"])
        for j in np.unique(arms):
            sel = np.flatnonzero(arms == j)
            rid = int(rounds[j])
            if self.randomizer is None:
                values = encoded = got[sel]
            else:
                q = self.randomizer.params(int(np.asarray(b["array_size"])[j]))
                rng = stream(self.seed, *self.prefix, "randomizer", plan.id, block, int(j))
                values, encoded = self.randomizer.randomized(got[sel], q, rng)
            reports.append((rid, sel, values.reshape(1, -1, 1), encoded.reshape(-1, 1)))
        return BlockAnswer(truth, reports)

