"""Algorithm 1 of Chowdhury & Zhou (2023) as the spine's analyzer and user logic.

- :class:`EliminationServer` (the analyzer's logic): opens one batch at a time, one round per
  active arm with a contiguous block of l(b) new users (lines 5–8), decodes each release with the
  mechanism's analyzer A (lines 26–30), and concludes the batch (lines 13–16) once every round of
  it is released. It never sees a report, ground truth or the run seed (only its own key).
- :class:`BanditUsers` (the users' logic): each user pulls the prescribed arm, draws a reward from
  the instance and runs the mechanism's randomizer R on it (lines 18–22). Ground truth (rewards,
  the served arm's gap, realized regret) goes to the block's Truth, which only the observer gets.

The round a plan opens says what the intermediary releases: the modular sum (the aggregator's ideal
functionality, or real secure aggregation), the reports themselves (local model, or DP-SE/SE's raw
rewards to a trusted analyzer), or, behind a shuffler, their uniformly permuted multiset.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

import numpy as np

from privbandit.families.distributed_dp_mab.base import Mechanism, RoundParams
from privbandit.families.distributed_dp_mab.defences import bounded_sum, report_slack
from privbandit.families.distributed_dp_mab.learners import SuccessiveElimination
from privbandit.families.distributed_dp_mab.world import BanditInstance
from privbandit.protocol.primitives.secagg.graph import default_threshold
from privbandit.protocol.primitives.secagg.parameters import GraphParameters, ThreatModel, graph_for
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import NoneProven
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend

log = logging.getLogger(__name__)

SHUFFLED_SHARES = ("every user's residue (x̂ + η) mod m behind a shuffler, with shares calibrated for secure "
                   "aggregation: no proof covers the shuffled multiset (Theorem 3 needs Cheu & Yan's relaxed "
                   "secure aggregation on top)")


def release_threshold(cohort: int) -> int:
    """``⌊2n/3⌋ + 1``: fewest reports a partial round is released with (secure aggregation's rule,
    so the ideal functionality and the real protocol release in the same cases)."""
    return min(cohort, default_threshold(cohort))


def release_event(mechanism: Mechanism, rnd: Round, q: RoundParams, n: int):
    """The privacy event the ledger records for a release of ``rnd`` covering ``n`` reports (also
    what ``privbandit audit`` holds the release to). Fewer than n reports is a dropout: the release
    was still safe to make (the threshold); the event is what the n′ survivors' noise gives."""
    if rnd.rule == "shuffle" and mechanism.trust_model == "distributed":
        return NoneProven(SHUFFLED_SHARES)
    return mechanism.privacy_event(q, n)


def params_of(plan: Plan) -> RoundParams:
    return RoundParams(**plan.body["params"])


class EliminationServer:
    """The analyzer's logic of one run (see the module docstring).

    ``intermediary``: ``"aggregator"`` (the mechanism's own release: a modular sum, or the reports)
    or ``"shuffler"`` (the shuffled multiset of the reports). ``secagg``: the aggregator computes
    the sum by real secure aggregation ("complete" or "sparse" graph), whose degree and threshold
    each round's plan carries, chosen for ``threat`` (:mod:`~privbandit.protocol.primitives.secagg.
    parameters`; a cohort no graph can serve under it raises its ParameterError). ``bounded``: the clear-text
    defences of :mod:`.defences`: the intermediary's window check and the analyzer's bounded sum.
    """

    def __init__(self, learner: SuccessiveElimination, mechanism: Mechanism, horizon: int, key: int,
                 intermediary: str = "aggregator", secagg: str | None = None, bounded: bool = False,
                 threat: ThreatModel | None = None):
        self.learner = learner
        self.mechanism = mechanism
        self.horizon = horizon
        self.key = key  # from seeding.derive_key: the analyzer never holds the run seed
        self.intermediary = intermediary
        self.secagg = secagg
        self.threat = threat or ThreatModel()
        self.graphs: dict[int, GraphParameters] = {}  # per cohort size: the (k, t) its rounds use
        self.bounded = bounded
        self.users_planned = 0
        self.next_round = 0
        self.open: dict[int, Plan] = {}
        self.sums: dict[int, float] = {}
        self.counts: dict[int, int] = {}
        self.batch_params: RoundParams | None = None
        self.batch_complete = False  # the open batch got all l(b) users of every arm

    @property
    def done(self) -> bool:
        return self.users_planned >= self.horizon

    def round_of(self, rid: int, cohort: int, q: RoundParams) -> Round:
        modular = q.m is not None
        if self.intermediary == "shuffler":
            rule = "shuffle"
        else:
            rule = "sum" if self.mechanism.intermediary == "modular-sum" else "pass"
        window = None
        if self.bounded and modular:
            slack = report_slack(self.mechanism, q)
            window = (-slack, q.g + slack)
        secure = self.secagg if rule == "sum" else None
        graph = self.graph(cohort) if secure else None
        return Round(rid, self.intermediary, rule, expected=cohort, integer=modular, m=q.m,
                     low=None if modular else 0.0, high=None if modular else 1.0, window=window,
                     threshold=release_threshold(cohort), secagg=secure,
                     secagg_degree=graph.k if graph else None, secagg_threshold=graph.t if graph else None)

    def graph(self, cohort: int) -> GraphParameters:
        """The secure-aggregation graph of a cohort, from the threat model (logged once per size)."""
        if cohort not in self.graphs:
            self.graphs[cohort] = graph_for(self.secagg, cohort, self.threat)
            log.info("secure aggregation (%s graph) for %s", self.secagg, self.graphs[cohort].describe())
        return self.graphs[cohort]

    def plans(self) -> list[Plan]:
        """The next batch's plans (one per active arm), or [] while a batch is open or once the
        horizon is served. A trailing partial batch is served but never collected: Algorithm 1
        exits at T (line 9) before the batch is aggregated (line 11)."""
        if self.open or self.users_planned >= self.horizon:
            return []
        n = self.learner.batch_size()
        q = self.mechanism.params(n)
        body_params = asdict(q)
        plans = []
        for arm in self.learner.active:
            cohort = min(n, self.horizon - self.users_planned)
            rid = self.next_round
            body = {"batch": self.learner.batch, "arm": int(arm), "params": body_params}
            if cohort == n:
                rnd = self.round_of(rid, cohort, q)
                plan = Plan(rid, self.users_planned, cohort, body, (rnd,), (Join(rid, self.users_planned, cohort, cohort),))
                self.open[rid] = plan
            else:
                plan = Plan(rid, self.users_planned, cohort, body)
            plans.append(plan)
            self.next_round += 1
            self.users_planned += cohort
            if self.users_planned >= self.horizon:
                break
        self.batch_params = q
        self.batch_complete = len(self.open) == self.learner.active.size
        self.sums, self.counts = {}, {}
        return plans

    def value_of(self, rnd: Round, release: Release, q: RoundParams) -> int | float:
        """What A decodes: the modular sum, or the reports reduced to it (for a shuffled multiset,
        footnote 6: its sum mod m is the secure-aggregation release)."""
        if rnd.rule == "sum":
            v = release.values[0, 0]
            return int(v) if q.m is not None else float(v)
        reports = release.values[0, :, 0]
        if self.bounded and q.m is not None:
            return bounded_sum(reports, q, report_slack(self.mechanism, q))
        return self.mechanism.aggregate(reports, q)

    def on_release(self, rnd: Round, release: Release) -> tuple[dict, Spend]:
        plan = self.open.get(rnd.id)
        if plan is None:
            raise ProtocolError("unknown-round", f"no open round {rnd.id}")
        q = params_of(plan)
        value = self.value_of(rnd, release, q)
        est = self.mechanism.analyze(value, q, stream(self.key, "round", rnd.id))
        del self.open[rnd.id]
        n = release.n_reports
        event = release_event(self.mechanism, rnd, q, n)
        self.sums[plan.body["arm"]] = est.reward_sum
        self.counts[plan.body["arm"]] = n
        if not self.open and self.batch_complete:
            partial = any(c != self.batch_params.n for c in self.counts.values())
            self.learner.conclude_batch(self.sums, self.batch_params, self.counts if partial else None)
        body = {"batch": plan.body["batch"], "arm": plan.body["arm"], "params": plan.body["params"],
                "release": float(value), "estimate": est.reward_sum, "wrapped": bool(est.wrapped),
                "central_noise": est.central_noise}
        if rnd.secagg is not None:
            body.update(secagg_k=rnd.secagg_degree, secagg_t=rnd.secagg_threshold)
        return body, Spend(event)

    def summary(self) -> list[dict]:
        return [{"eliminated_at": self.learner.eliminated_at.tolist()}]


class BanditUsers:
    """The users of one run: the bandit instance and the mechanism's randomizer.

    Each block of a plan draws from its own stream ``(seed, run, label, "users", plan, block)``, so
    a fleet hosting any shard of blocks draws exactly what the in-process engine draws."""

    def __init__(self, instance: BanditInstance, mechanism: Mechanism, seed: int, prefix: tuple,
                 checkpoints: np.ndarray):
        self.instance = instance
        self.mechanism = mechanism
        self.seed = seed
        self.prefix = prefix
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)  # counts of users served, 1-based

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        return block % shards

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        inst = self.instance
        arm = plan.body["arm"]
        rng = stream(self.seed, *self.prefix, "users", plan.id, block)
        rewards = inst.sample(arm, size, rng)
        if arm == inst.best_arm:
            running = np.zeros(size)  # no regret, so none accumulates
        else:
            # Realized regret as the authors' code plots it: the reward the best arm would have
            # paid this user minus the reward it got, drawn independently.
            running = np.cumsum(inst.sample(inst.best_arm, size, rng) - rewards)
        lo, hi = np.searchsorted(self.checkpoints, [first + 1, first + size + 1])
        cps = self.checkpoints[lo:hi]
        gap = float(inst.gaps[arm])
        reports, reported, noise = [], rewards, 0
        if plan.joins:
            offsets = np.arange(size) if stay is None else np.flatnonzero(stay)
            reported = rewards if stay is None else rewards[stay]
            out = self.mechanism.randomize(reported, params_of(plan), rng)
            reports.append((plan.id, offsets, out.messages.reshape(1, -1, 1), out.encoded))
            noise = out.noise_sum
        truth = Truth(plan.id, block, first, size,
                      pseudo=np.array([gap * size]), realized=np.array([running[-1]]),
                      pseudo_at=(gap * (cps - first))[None], realized_at=running[cps - first - 1][None],
                      extras={"reward_sum": float(reported.sum()), "noise_sum": int(noise), "attackers": 0})
        return BlockAnswer(truth, reports)
