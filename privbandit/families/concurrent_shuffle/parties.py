"""Algorithm 1 with Algorithm 2/3's counter as the spine's analyzer and user logic.

- :class:`CounterAnalyzer` (the server): plans the users in segments of whole top-level nodes, one
  plan at a time. A plan opens the rounds of every node it contains, one per node at shuffler
  ``shuffler-i`` for level i (``sum`` of count-encoded reports: the totals determine the shuffled multiset of
  one-bit messages, :mod:`.mechanisms`), and joins each of its users into the node of every level
  around her (Alg. 1 steps 1–3; exactly k rounds each, fewer only in a truncated tail). Each release
  is one executed node: :class:`~.counter.CounterServer` turns it into S_v, with no randomness.
  Ŝ_t = Σ_{v∈V_t} S_v is post-processing of the node estimates (:func:`~.tree.prefix_estimates`);
  it is formed once every node of V_t has executed (Alg. 1 step 3 before step 4), whatever order
  the shufflers' releases arrive in.
- The baselines without shufflers: ``central_tree`` (raw bits, attributable, to a trusted server
  that adds Lap_Z to each node) and ``ldp`` (randomized response, attributable) collect one ``pass``
  round per plan at the ``aggregator``.
- :class:`CounterUsers`: a block of a plan's users reads its bits from the world and reports to
  each round it joined, drawing from the same streams as :func:`~.counter.simulate`.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.concurrent_shuffle import counter as cnt
from privbandit.families.concurrent_shuffle import world
from privbandit.families.concurrent_shuffle.mechanisms import SplitMixSum
from privbandit.families.concurrent_shuffle.tree import SHUFFLE_MODES
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.primitives.shuffle_sum import mixed_sum, split
from privbandit.protocol.privacy import PureDP
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend
from privbandit.protocol.spine.observer import checkpoints_in

# A plan covers whole top-level nodes and at least this many users: few plans, few broker round trips.
MIN_PLAN_USERS = 256


def spec_of(public: dict) -> cnt.CounterSpec:
    a = public["algorithm"]
    return cnt.counter_spec(a["algorithm"], public["horizon"], a["k"], a["epsilon"], public["delta"], a["protocol"],
                            a["d_low"], a["D_tree"], a["vec_scale"])


def shuffler_of(level: int) -> str:
    """The shuffler party collecting level ``level``'s batches (1-based): ``shuffler-<level>``, a
    process and broker account of its own, reading only its own reports (Alg. 1: k shufflers at once)."""
    return f"shuffler-{level}"


class Layout:
    """Plans and rounds of one counter. Segment j = users j·P … (j+1)·P − 1 (P a multiple of s_k).
    Shuffle modes: one plan per (segment, level), id j·k + i − 1, opening level i's nodes in the
    segment at level i's own shuffler, ``shuffler-i`` (:func:`shuffler_of`); a user reports to the
    k shufflers active at her arrival, one plan each; the level-1 plan carries the users' truth. Round ids number the
    nodes level by level. central_tree / ldp: one plan per segment, one ``pass`` round."""

    def __init__(self, spec: cnt.CounterSpec):
        self.spec = spec
        top = spec.tree.sizes[-1]
        self.plan_users = top * max(1, -(-MIN_PLAN_USERS // top))
        self.segments = -(-spec.n // self.plan_users)
        self.shuffled = spec.mode in SHUFFLE_MODES
        self.per_segment = spec.k if self.shuffled else 1
        self.plans = self.segments * self.per_segment
        self.offsets = np.cumsum([0] + [spec.tree.nodes(i) for i in range(1, spec.k + 1)])

    def cohort(self, segment: int) -> tuple[int, int]:
        first = segment * self.plan_users
        return first, min(self.plan_users, self.spec.n - first)

    def segment_level(self, pid: int) -> tuple[int, int]:
        return pid // self.per_segment, pid % self.per_segment + 1

    def nodes_in(self, level: int, first: int, size: int) -> range:
        """Level nodes (0-based) inside users first … first + size − 1 that are opened at all."""
        s = self.spec.tree.sizes[level - 1]
        return range(first // s, min((first + size) // s, self.spec.tree.nodes(level)))

    def round_id(self, level: int, j: int) -> int:
        return int(self.offsets[level - 1]) + j

    def node_of(self, rid: int) -> tuple[int, int]:
        level = int(np.searchsorted(self.offsets, rid, side="right"))
        return level, rid - int(self.offsets[level - 1])

    def plan(self, pid: int) -> Plan:
        segment, level = self.segment_level(pid)
        first, size = self.cohort(segment)
        body = {"segment": segment, "level": level}
        if not self.shuffled:  # one attributable round per plan
            rnd = Round(pid, "aggregator", "pass", expected=size, width=1, integer=True, low=0, high=1)
            return Plan(pid, first, size, body, (rnd,), (Join(pid, first, size, size),))
        s = self.spec.tree.sizes[level - 1]
        m = self.spec.mechanisms[level - 1]
        opens, joins = [], []
        for j in self.nodes_in(level, first, size):
            rid = self.round_id(level, j)
            # threshold None: a shuffler releases a full batch or nothing (no partial node)
            if isinstance(m, SplitMixSum):  # every user's shares, each a message: the shuffled multiset
                opens.append(Round(rid, shuffler_of(level), "shuffle", expected=s, width=m.shares, m=m.modulus,
                                   messages=True))
            else:  # count-encoded one-bit messages: the totals are the shuffled multiset
                opens.append(Round(rid, shuffler_of(level), "sum", expected=s, width=1, integer=True, low=0,
                                   high=int(m.max_report)))
            joins.append(Join(rid, j * s, s, s))
        return Plan(pid, first, size, body, tuple(opens), tuple(joins))


class CounterAnalyzer:
    """The server's logic of one task (R runs stacked; see the module docstring)."""

    def __init__(self, spec: cnt.CounterSpec, keys: list[int]):
        self.spec = spec
        self.layout = Layout(spec)
        self.runs = len(keys)
        self.server = cnt.CounterServer(spec, self.runs, keys if spec.mode == "central_tree" else None)
        self.next_plan = 0
        self.events = [m.event() for m in spec.mechanisms]

    @property
    def done(self) -> bool:
        return self.next_plan >= self.layout.plans

    def plans(self) -> list[Plan]:
        if self.done:
            return []
        plan = self.layout.plan(self.next_plan)
        self.next_plan += 1
        return [plan]

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        if not self.layout.shuffled:
            return self._attributable(rnd, release)
        level, j = self.layout.node_of(rnd.id)
        if self.server.done[level - 1][j]:
            raise ProtocolError("duplicate-node", f"round {rnd.id}: node {j} of level {level} already executed")
        totals = mixed_sum(release.values, rnd.m) if rnd.messages else release.values[:, 0]
        est = self.server.on_node(level, j, totals)
        first = j * self.spec.tree.sizes[level - 1]
        plan = (first // self.layout.plan_users) * self.layout.per_segment + level - 1
        body = {"plan": plan, "level": level, "node": j, "first": first + 1,
                "estimate": est.copy()}
        return body, Spend(self.events[level - 1], f"level-{level}")

    def _attributable(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        """central_tree / ldp: one plan's raw bits or RR reports, with their senders."""
        first, size = self.layout.cohort(rnd.id)
        values = release.values[:, :, 0]
        if release.n_reports != size or not np.array_equal(release.user_ids, np.arange(first, first + size)):
            raise ProtocolError("bad-release", f"round {rnd.id}: every user of the plan must report once")
        estimates, firsts = [], []
        for level in range(1, self.spec.k + 1):
            s = self.spec.tree.sizes[level - 1]
            nodes = self.layout.nodes_in(level, first, size)
            if not len(nodes):
                estimates.append(np.zeros((self.runs, 0)))
                firsts.append(int(nodes.start))
                continue
            lo = nodes.start * s - first
            totals = values[:, lo:lo + len(nodes) * s].reshape(self.runs, len(nodes), s).sum(axis=2)
            est = self.server.decode(level, np.arange(nodes.start, nodes.stop), totals)
            self.server.nodes[level - 1][:, nodes.start:nodes.stop] = est
            self.server.done[level - 1][nodes.start:nodes.stop] = True
            estimates.append(est)
            firsts.append(int(nodes.start))
        # Each of the plan's users is in one node per level: their per-user guarantee is the levels'
        # composition (central: L nodes at ε/L each; local: one ε-RR report).
        eps = sum(e.pure_epsilon for e in self.events)
        body = {"plan": rnd.id, "first_node": firsts, "estimates": estimates}
        return body, Spend(PureDP(eps), "user")

    def summary(self) -> list[dict]:
        complete = all(d.all() for d in self.server.done)
        return [{"nodes_executed": int(sum(d.sum() for d in self.server.done)), "complete": complete}
                for _ in range(self.runs)]


class CounterUsers:
    """The users of R runs stacked: their bits (the world) and their randomizers' streams."""

    def __init__(self, spec: cnt.CounterSpec, config, label: str, runs: list[int], checkpoints: np.ndarray):
        self.spec = spec
        self.layout = Layout(spec)
        self.config = config
        self.label = label
        self.runs = runs
        self.checkpoints = checkpoints

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return (plan.id + block) % shards

    def bits(self, first: int, last: int) -> np.ndarray:
        c = self.config
        return np.stack([world.bits(c.input, c.p, self.spec.n, self.spec.k, self.spec.epsilon, c.seed, r, first, last)
                         for r in self.runs])

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        R = len(self.runs)
        level = int(plan.body["level"])
        truth = None
        if level == 1:  # a user's truth once, with her first plan (counters have no regret)
            at = checkpoints_in(self.checkpoints, first, size)
            zeros = np.zeros((R, at.size))
            truth = Truth(plan.id, block, first, size, pseudo=np.zeros(R), realized=np.zeros(R), pseudo_at=zeros,
                          realized_at=zeros.copy())
        if not plan.joins:
            return BlockAnswer(truth, [])
        b = self.bits(first, first + size)
        keep = np.ones(size, bool) if stay is None else stay
        reports = []
        seed = self.config.seed
        if not self.layout.shuffled:
            values = cnt.user_reports(self.spec, 1, b, seed, self.label, self.runs, first) if self.spec.mode == "ldp" \
                else b.astype(np.int64)
            offsets = np.flatnonzero(keep)
            reports.append((plan.joins[0].round_id, offsets, values[:, offsets, None], None))
            return BlockAnswer(truth, reports)
        s = self.spec.tree.sizes[level - 1]
        last = min(first + size, self.spec.tree.nodes(level) * s)
        if last <= first:
            return BlockAnswer(truth, reports)
        values = cnt.user_reports(self.spec, level, b[:, :last - first], seed, self.label, self.runs, first)
        m = self.spec.mechanisms[level - 1]
        if isinstance(m, SplitMixSum):  # each residue as its shares, from a stream of their own per run
            values = np.stack([split(values[i], m.shares, m.modulus,
                                     stream(seed, "cs-user-shares", self.label, run, plan.id, block))
                               for i, run in enumerate(self.runs)])
        else:
            values = values[..., None]
        for j in range(first // s, (last - 1) // s + 1):
            lo, hi = max(j * s, first) - first, min((j + 1) * s, last) - first
            offsets = np.arange(lo, hi)[keep[lo:hi]]
            reports.append((self.layout.round_id(level, j), offsets, values[:, offsets], None))
        return BlockAnswer(truth, reports)
