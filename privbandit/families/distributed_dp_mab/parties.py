"""Algorithm 1 of Chowdhury & Zhou (2023) as the spine's analyzer and user logic.

- :class:`EliminationServer` (the analyzer's logic): opens one batch at a time, one round per
  active arm with a contiguous block of l(b) new users (lines 5–8), decodes each release with the
  mechanism's analyzer A (lines 26–30), and concludes the batch (lines 13–16) once every round of
  it is released. It never sees a report, ground truth or the run seed (only its own key).
- :class:`BanditUsers` (the users' logic): each user pulls the prescribed arm, draws a reward from
  the instance and runs the mechanism's randomizer R on it (lines 18–22). Ground truth (rewards,
  the served arm's gap, realized regret) goes to the block's Truth, which only the observer gets.

The round a plan opens says what the intermediary releases: the modular sum (the aggregator's ideal
functionality, or real secure aggregation), the plain sum of DP-SE/SE's raw rewards (for a trusted
analyzer), the reports themselves (local model), or, behind a shuffler, a uniformly permuted multiset: of every
user's split-and-mix shares of her residue (``intermediary = "shuffler"``, Theorem 3's route:
:mod:`privbandit.protocol.primitives.shuffle_sum`), or of the residues themselves
(``"shuffler-residues"``, which no proof covers).
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
from privbandit.protocol.primitives.shuffle_sum import closeness, mixed_sum, shares_for, split
from privbandit.protocol.privacy import NoneProven, closeness_budget, near_secure_sum
from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Join, Plan, Release, Round, Truth
from privbandit.protocol.spine.family import BlockAnswer, Spend

log = logging.getLogger(__name__)

SHUFFLED_SHARES = ("every user's residue (x̂ + η) mod m behind a shuffler (intermediary = 'shuffler-residues'), "
                   "with shares calibrated for secure aggregation: no proof covers the shuffled multiset (Theorem 3 "
                   "needs a relaxed secure aggregation on top: intermediary = 'shuffler' runs split-and-mix)")
# What the analyzer's round says the intermediary does: the aggregator's sum (or the reports), the
# shuffled split-and-mix shares, or the shuffled residues.
ROUTES = ("aggregator", "shuffler", "shuffler-residues")


def release_threshold(cohort: int) -> int:
    """``⌊2n/3⌋ + 1``: fewest reports a partial round is released with (secure aggregation's rule,
    so the ideal functionality and the real protocol release in the same cases)."""
    return min(cohort, default_threshold(cohort))


def release_event(mechanism: Mechanism, rnd: Round, q: RoundParams, n: int, delta: float,
                  noise_shares: int | None = None):
    """The privacy event the ledger records for a release of ``rnd`` covering ``n`` reports (also
    what ``privbandit audit`` holds the release to). Fewer than n reports is a dropout: the release
    was still safe to make (the threshold); the event is what the n′ survivors' noise gives.
    ``noise_shares``: how many of the n noise shares protect the users (default all; colluders
    reveal theirs). Split-and-mix (``rnd.messages``): the secure sum's event, within the closeness
    η(n, s, m) of the n reporters' s shares (:func:`~privbandit.protocol.privacy.near_secure_sum`,
    ``delta`` the ledger's)."""
    shares = n if noise_shares is None else noise_shares
    if rnd.rule == "shuffle" and rnd.messages:
        return near_secure_sum(mechanism.privacy_event(q, shares), closeness(n, rnd.width, q.m), delta)
    if rnd.rule == "shuffle" and mechanism.trust_model == "distributed":
        return NoneProven(SHUFFLED_SHARES)
    return mechanism.privacy_event(q, shares)


def split_shares(mechanism: Mechanism, q: RoundParams, n: int, delta: float) -> int:
    """Theorem 3 through a real shuffler: the fewest split-and-mix shares per user for which a
    complete round of n users spends at most δ (:func:`~privbandit.protocol.privacy.closeness_budget`
    of the secure sum's own event). The analyzer opens its rounds with it and the users check it (a
    curious analyzer asking for fewer shares is refused). Raises ShuffleSumError (a ValueError) for a
    round the closeness bound does not cover."""
    return shares_for(n, q.m, closeness_budget(mechanism.privacy_event(q, n), delta))


def params_of(plan: Plan) -> RoundParams:
    return RoundParams(**plan.body["params"])


def check_split_round(mechanism: Mechanism, delta: float | None, rnd: Round) -> None:
    """The users' check of a split-and-mix round: at least the shares their own δ requires (a
    curious analyzer could ask for fewer and see more), mod the modulus their own parameters give;
    ``delta`` None: these users do not run split-and-mix. ValueError otherwise."""
    if delta is None:
        raise ValueError(f"round {rnd.id} asks for split-and-mix shares; these users do not run split-and-mix")
    q = mechanism.params(rnd.expected)
    need = split_shares(mechanism, q, rnd.expected, delta)
    if rnd.width < need or rnd.m != q.m:
        raise ValueError(f"round {rnd.id}: {rnd.width} shares mod {rnd.m} for n = {rnd.expected}, but these users' "
                         f"δ = {delta:.3g} needs at least {need} mod {q.m}")


def split_round(round_id: int, n: int, shares: int, m: int) -> Round:
    """A split-and-mix round at the shuffler: n users' ``shares`` shares mod m, every share a message."""
    return Round(round_id, "shuffler", "shuffle", expected=n, width=shares, m=m, threshold=release_threshold(n),
                 messages=True)


class EliminationServer:
    """The analyzer's logic of one run (see the module docstring).

    ``intermediary``: one of :data:`ROUTES`: ``"aggregator"`` (the mechanism's own release: a modular
    sum, or the reports), ``"shuffler"`` (the shuffled multiset of every user's split-and-mix shares,
    as many as :func:`split_shares` gives for the run's ``delta``) or ``"shuffler-residues"`` (the
    shuffled multiset of the residues). ``secagg``: the aggregator computes
    the sum by real secure aggregation ("complete" or "sparse" graph), whose degree and threshold
    each round's plan carries, chosen for ``threat`` (:mod:`~privbandit.protocol.primitives.secagg.
    parameters`; a cohort no graph can serve under it raises its ParameterError). ``bounded``: the clear-text
    defences of :mod:`.defences`: the intermediary's window check and the analyzer's bounded sum.
    """

    def __init__(self, learner: SuccessiveElimination, mechanism: Mechanism, horizon: int, key: int,
                 intermediary: str = "aggregator", secagg: str | None = None, bounded: bool = False,
                 threat: ThreatModel | None = None, delta: float | None = None):
        if intermediary not in ROUTES:
            raise ValueError(f"intermediary {intermediary!r} is not one of {', '.join(ROUTES)}")
        if intermediary == "shuffler" and (delta is None or mechanism.trust_model != "distributed"):
            raise ValueError("split-and-mix through the shuffler needs distributed noise shares and the run's δ")
        self.learner = learner
        self.mechanism = mechanism
        self.horizon = horizon
        self.key = key  # from seeding.derive_key: the analyzer never holds the run seed
        self.intermediary = intermediary
        self.delta = delta
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
        if self.intermediary != "aggregator":
            rule = "shuffle"
        else:
            rule = "pass" if self.mechanism.intermediary == "pass-through" else "sum"
        if self.intermediary == "shuffler":  # Theorem 3: each user's residue as s shares, every share a message
            return split_round(rid, cohort, split_shares(self.mechanism, q, cohort, self.delta), q.m)
        window = None
        if self.bounded and modular:
            slack = report_slack(self.mechanism, q)
            window = (-slack, q.g + slack)
        secure = self.secagg if rule == "sum" else None
        graph = self.graph(cohort) if secure else None
        box = "aggregator" if self.intermediary == "aggregator" else "shuffler"
        return Round(rid, box, rule, expected=cohort, integer=modular, m=q.m,
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
        footnote 6: its sum mod m is the secure-aggregation release; for split-and-mix shares, the
        same sum)."""
        if rnd.rule == "sum":
            v = release.values[0, 0]
            return int(v) if q.m is not None else float(v)
        if rnd.messages:
            return int(mixed_sum(release.values, q.m)[0])
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
        event = release_event(self.mechanism, rnd, q, n, self.delta)
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
        if rnd.messages:
            body.update(shares=rnd.width, closeness=closeness(n, rnd.width, q.m))
        return body, Spend(event)

    def summary(self) -> list[dict]:
        return [{"eliminated_at": self.learner.eliminated_at.tolist()}]


class BanditUsers:
    """The users of one run: the bandit instance and the mechanism's randomizer.

    Each block of a plan draws from its own stream ``(seed, run, label, "users", plan, block)``, so
    a fleet hosting any shard of blocks draws exactly what the in-process engine draws. Behind a
    split-and-mix shuffler (``delta`` set: the run's δ) each user splits her residue into the shares
    her own :func:`split_shares` asks for, drawn from ``(…, "shares", plan, block)``: a stream of
    their own, so every other draw is the aggregator route's and the sums the analyzer decodes are
    identical."""

    def __init__(self, instance: BanditInstance, mechanism: Mechanism, seed: int, prefix: tuple,
                 checkpoints: np.ndarray, delta: float | None = None):
        self.instance = instance
        self.mechanism = mechanism
        self.seed = seed
        self.prefix = prefix
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)  # counts of users served, 1-based
        self.delta = delta



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
            q = params_of(plan)
            out = self.mechanism.randomize(reported, q, rng)
            messages = out.messages.reshape(1, -1, 1)
            rnd = plan.opens[0] if plan.opens else None
            if rnd is not None and rnd.messages:
                try:
                    check_split_round(self.mechanism, self.delta, rnd)
                except ValueError as exc:
                    raise ProtocolError("bad-round", str(exc)) from None
                messages = split(out.messages, rnd.width, q.m, stream(self.seed, *self.prefix, "shares", plan.id,
                                                                      block))[None]
            reports.append((plan.id, offsets, messages, out.encoded))
            noise = out.noise_sum
        truth = Truth(plan.id, block, first, size,
                      pseudo=np.array([gap * size]), realized=np.array([running[-1]]),
                      pseudo_at=(gap * (cps - first))[None], realized_at=running[cps - first - 1][None],
                      extras={"reward_sum": float(reported.sum()), "noise_sum": int(noise), "attackers": 0})
        return BlockAnswer(truth, reports)
