"""Algorithm 4 (concurrent-shuffle private LinUCB) as the spine's analyzer and user logic.

The schedule is the counter's (:mod:`.parties`) at the granularity Alg. 4 needs: one plan per
(lowest-level batch b, level i), id b·k + i − 1, each carrying the broadcast (θ̂, V⁻¹, β) the batch's
users act on (steps 2–3). The level-i plan joins the batch's s_1 users into their level-i node,
opened by the node's first batch; every user reports once per level (to that level's shuffler,
``shuffler-i``, its own party), her P_Vec counts of [φy, upper(φφᵀ)] (step 5). A node's release is its totals per label
(step 6). The server plans batch b + 1 only once every node of V_{(b+1)s_1} has executed (Alg. 1
step 3 before 4), folds Σ_{v∈V_t} S_v into the learner (step 7; :class:`~.linucb.Alg4Server`),
and draws nothing. The users recompute the batch's choice in each level plan from the same
broadcast; the level-1 plan carries their truth (regret).
"""

from __future__ import annotations

import numpy as np

from privbandit.families.concurrent_shuffle import linucb
from privbandit.families.concurrent_shuffle.parties import shuffler_of
from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits.learners import Widths, context_actions
from privbandit.families.shuffle_linear_bandits.world import ClassContexts, UserUniforms, instances
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend
from privbandit.protocol.spine.observer import checkpoints_in



def alg4_of(public: dict) -> linucb.Alg4:
    a = public["algorithm"]
    return linucb.alg4(public["horizon"], a["k"], public["dim"], a["epsilon"], public["delta"], a["vec_scale"],
                       a["lambda_rule"], a["d_low"], a["D_tree"], private=a["algorithm"] == "cs-linucb",
                       preset=public.get("preset", "theory"),
                       policy="random" if a["algorithm"] == "cs-random" else "linucb")


class Schedule:
    """Plans and rounds of Algorithm 4 (see the module docstring)."""

    def __init__(self, a: linucb.Alg4):
        self.a = a
        self.k = a.tree.k
        self.s1 = a.tree.sizes[0]
        self.batches = a.tree.n // self.s1
        self.tail = a.tree.n - self.batches * self.s1
        self.offsets = np.cumsum([0] + [a.tree.nodes(i) for i in range(1, self.k + 1)])
        self.width = slb.n_entries(a.d)

    def round_id(self, level: int, j: int) -> int:
        return int(self.offsets[level - 1]) + j

    def node_of(self, rid: int) -> tuple[int, int]:
        level = int(np.searchsorted(self.offsets, rid, side="right"))
        return level, rid - int(self.offsets[level - 1])

    def node(self, b: int, level: int) -> int | None:
        """Batch b's node at ``level``, or None if that node is never opened (truncation)."""
        j = b * self.s1 // self.a.tree.sizes[level - 1]
        return j if j < self.a.tree.nodes(level) else None

    def round(self, level: int, j: int) -> Round:
        s = self.a.tree.sizes[level - 1]
        rid = self.round_id(level, j)
        if self.a.private:
            return Round(rid, shuffler_of(level), "sum", expected=s, width=self.width, integer=True, low=0,
                         high=self.a.vec[level - 1].max_count)
        return Round(rid, shuffler_of(level), "sum", expected=s, width=self.width, integer=False, low=-1.0, high=1.0)

    def plans(self, b: int, body: dict) -> list[Plan]:
        first = b * self.s1
        if b == self.batches or self.a.policy == "random":
            # the tail (no complete lowest-level node; acts on the last model), or random play: one
            # plan, nothing collected
            return [Plan(b * self.k, first, self.tail if b == self.batches else self.s1,
                         {**body, "segment": b, "level": 1})]
        out = []
        for level in range(1, self.k + 1):
            j = self.node(b, level)
            opens, joins = (), ()
            if j is not None:
                s = self.a.tree.sizes[level - 1]
                opens = (self.round(level, j),) if first % s == 0 else ()
                joins = (Join(self.round_id(level, j), first, self.s1, self.s1),)
            out.append(Plan(b * self.k + level - 1, first, self.s1, {**body, "segment": b, "level": level},
                            opens, joins))
        return out


class BanditServer:
    """The analyzer's logic of Algorithm 4 for R runs."""

    def __init__(self, a: linucb.Alg4, runs: int):
        self.a = a
        self.schedule = Schedule(a)
        self.server = linucb.Alg4Server(a, runs)
        self.runs = runs
        self.next_batch = 0
        self.events = [a.event(level) for level in range(1, a.tree.k + 1)]

    @property
    def done(self) -> bool:
        return self.next_batch > self.schedule.batches or (self.next_batch == self.schedule.batches
                                                           and not self.schedule.tail)

    def plans(self) -> list[Plan]:
        sc = self.schedule
        while self.a.policy != "random" and self.server.steps < min(self.next_batch, sc.batches) and self.server.ready():
            self.server.advance()
        if self.done or (self.a.policy != "random" and self.server.steps < self.next_batch):
            return []  # waiting for the nodes of V_t (random play waits for nothing)
        theta, v_inv, beta = self.server.learner.broadcast()
        body = {"theta": theta.copy(), "v_inv": v_inv.copy(), "beta": float(beta)}
        out = sc.plans(self.next_batch, body)
        self.next_batch += 1
        if self.a.policy == "random":  # nothing to wait for: every batch's plan at once (no release will ask)
            while not self.done:
                out += sc.plans(self.next_batch, body)
                self.next_batch += 1
        return out

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        level, j = self.schedule.node_of(rnd.id)
        if self.server.executed[level - 1][j]:
            raise ProtocolError("duplicate-node", f"round {rnd.id}: node {j} of level {level} already executed")
        self.server.on_node(level, j, release.values.astype(np.float64))
        first = j * self.a.tree.sizes[level - 1]
        body = {"plan": (first // self.schedule.s1) * self.schedule.k + level - 1, "level": level, "node": j}
        return body, Spend(self.events[level - 1], f"level-{level}")

    def summary(self) -> list[dict]:
        lrn = self.server.learner
        return [{"batches_clipped": int(lrn.clipped[r]), "batches_not_pd": int(lrn.not_pd[r]),
                 "lambda": self.a.lam, "sigma_tilde": self.a.sigma_tilde} for r in range(self.runs)]


class BanditUsers:
    """Algorithm 4's users of R runs: the linear family's fixed arms, rewards 1{U < μ}, P_Vec; or, with
    ``environment.conversion = "classes"``, each user her own arm set and her label's reward 1{a = y_t}
    (:class:`~privbandit.families.shuffle_linear_bandits.world.ClassContexts`; regret = mistakes)."""

    def __init__(self, a: linucb.Alg4, env, seed: int, runs: list[int], label: str, checkpoints: np.ndarray):
        self.a = a
        self.schedule = Schedule(a)
        self.k = env.arms
        self.contexts = None
        if getattr(env, "conversion", "fixed-arms") == "classes":
            self.contexts = ClassContexts(env.generator, env.arms, a.d, seed, runs)
            self.best = np.ones(len(runs))  # the label's arm always pays 1; μ is per user (act)
        else:
            self.inst = instances(env.generator, env.arms, a.d, seed, runs)
            self.choose = Widths(self.inst.arms)
            self.means = self.inst.means
            self.best = self.means.max(axis=1)
        self.ridx = np.arange(len(runs))
        self.seed, self.runs, self.label = seed, runs, label
        self.uniforms = UserUniforms(seed, runs)
        self.checkpoints = checkpoints

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return (int(plan.body["segment"]) + block) % shards

    def rewards(self, batch: int, picks: np.ndarray, u: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The batch's users' rewards (R, s_1) for the arms ``picks`` they play: 1{U_t < μ}, Bernoulli.
        The seam of a caller's world (:mod:`.caller`), where they are the caller's; every level's plan
        of a batch asks again, and must get the same rewards (the users recompute, they keep nothing)."""
        return (u < mu).astype(np.float64)

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        body = plan.body
        b, level = int(body["segment"]), int(body["level"])
        theta, v_inv = np.asarray(body["theta"]), np.asarray(body["v_inv"])
        R, d = self.ridx.size, self.a.d
        if theta.shape != (R, d) or v_inv.shape != (R, d, d):
            raise ValueError(f"plan {plan.id}: θ̂ {theta.shape} and V⁻¹ {v_inv.shape} do not fit {R} runs in d = {d}")
        u = self.uniforms.get(plan.first_user, plan.cohort)  # the linear family's U_t (paired with it)
        own = labels = None
        if self.contexts is not None:  # each user's own arm set (R, n, K, d) and label (R, n)
            own, labels = self.contexts.users(plan.first_user, plan.cohort)
        if self.a.policy == "random":  # every user a uniformly random arm, from a stream of its own
            picks = np.stack([stream(self.seed, "cs-random-arm", r, plan.first_user).integers(0, self.k, plan.cohort)
                              for r in self.runs])
            mu = self.means[self.ridx[:, None], picks] if own is None else (picks == labels).astype(np.float64)
        elif own is not None:
            picks = context_actions(own, theta, v_inv, float(body["beta"]))  # step 3, user by user
            mu = (picks == labels).astype(np.float64)
        else:
            act = self.choose(theta, v_inv, float(body["beta"]))  # step 3
            mu = np.broadcast_to(self.means[self.ridx, act][:, None], u.shape)
            picks = np.broadcast_to(act[:, None], u.shape)
        y = self.rewards(b, picks, u, mu)
        truth = None
        if level == 1:
            pseudo = np.cumsum(self.best[:, None] - mu, axis=1)
            realized = np.cumsum((u < self.best[:, None]) - y, axis=1)
            at = checkpoints_in(self.checkpoints, first, size) - first - 1
            truth = Truth(plan.id, block, first, size, pseudo=pseudo[:, -1].copy(), realized=realized[:, -1].copy(),
                          pseudo_at=pseudo[:, at], realized_at=realized[:, at])
        if not plan.joins:
            return BlockAnswer(truth, [])
        if own is None:
            x = np.broadcast_to(self.inst.arms[self.ridx, act][:, None, :], u.shape + (d,))
        else:
            x = np.take_along_axis(own, picks[:, :, None, None], axis=2)[:, :, 0]  # each user's own φ(c_t, a_t)
        entries = slb.user_entries(x, y)
        if size != plan.cohort:  # s_1 ≤ USER_BLOCK: a batch is always one block
            raise ValueError(f"plan {plan.id}: a lowest-level batch of {plan.cohort} users split into blocks")
        values = linucb.batch_reports(self.a, level, entries, self.seed, self.label, self.runs, b) \
            if self.a.private else entries
        offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
        return BlockAnswer(truth, [(plan.joins[0].round_id, offsets, np.ascontiguousarray(values[:, offsets]), None)])
