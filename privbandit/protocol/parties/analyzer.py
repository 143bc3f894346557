"""The analyzer server: Algorithm 1's outer loop around a learner and a mechanism's analyzer A.

It sees plans it made and releases; never a report, never ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from privbandit.protocol.adversaries.defences import bounded_sum, report_slack
from privbandit.protocol.events import Release, RoundPlan
from privbandit.protocol.learners.successive_elimination import SuccessiveElimination
from privbandit.protocol.mechanisms.base import Mechanism, RoundParams
from privbandit.protocol.parties.intermediary import ProtocolError
from privbandit.protocol.privacy import PrivacyLedger
from privbandit.protocol.seeding import stream


@dataclass(frozen=True)
class RoundRecord:
    """The analyzer's diagnostics for one released round."""

    round_id: int
    batch: int
    arm: int
    params: RoundParams
    release: float
    estimate: float  # R_a(b), reward units
    wrapped: bool
    central_noise: float  # reward units; 0 unless the analyzer adds noise itself
    reports: int = 0  # n′: reports the release covers (the cohort, less dropouts)
    epsilon: float | None = None  # the guarantee this round actually gave (pure ε, else ε at δ)


class Analyzer:
    """Opens one batch of rounds at a time (one round per active arm, contiguous user blocks),
    decodes each release, and concludes the batch once every round of it is released."""

    def __init__(
        self,
        learner: SuccessiveElimination,
        mechanism: Mechanism,
        horizon: int,
        ledger: PrivacyLedger,
        key: int,
        bounded: bool = False,
    ):
        self.learner = learner
        # With a range check, visible reports are summed as bounded integers, not residues
        # (defences.bounded_sum), so attackers inside the window cannot wrap the sum around.
        self.bounded = bounded
        self.mechanism = mechanism
        self.horizon = horizon
        self.ledger = ledger
        self.key = key  # from seeding.derive_key: the analyzer never holds the run seed
        self.users_planned = 0
        self.next_round_id = 0
        self.open: dict[int, RoundPlan] = {}
        self.sums: dict[int, float] = {}
        self.counts: dict[int, int] = {}
        self.batch_params: RoundParams | None = None
        self.batch_complete = False  # the open batch got all l(b) users of every arm

    def next_plans(self) -> list[RoundPlan]:
        """The next batch's plans, or [] while a batch is open or once the horizon is served."""
        if self.open or self.users_planned >= self.horizon:
            return []
        n = self.learner.batch_size()
        params = self.mechanism.params(n)
        plans = []
        for arm in self.learner.active:
            cohort = min(n, self.horizon - self.users_planned)
            plan = RoundPlan(
                round_id=self.next_round_id,
                batch=self.learner.batch,
                arm=int(arm),
                first_user=self.users_planned,
                cohort=cohort,
                params=params,
                collect=cohort == n,
            )
            plans.append(plan)
            self.next_round_id += 1
            self.users_planned += cohort
            if plan.collect:
                self.open[plan.round_id] = plan
            if self.users_planned >= self.horizon:
                break
        self.batch_params = params
        self.batch_complete = len(self.open) == self.learner.active.size
        self.sums, self.counts = {}, {}
        return plans

    def on_release(self, release: Release) -> RoundRecord:
        plan = self.open.get(release.round_id)
        if plan is None:
            raise ProtocolError("unknown-round", f"no open round {release.round_id}")
        if not 1 <= release.n_reports <= plan.cohort:
            raise ProtocolError(
                "bad-report-count", f"round {plan.round_id}: {release.n_reports} reports, cohort {plan.cohort}"
            )
        # Fewer than n reports is a dropout: the intermediary (SecAgg's threshold) decided the
        # release was still safe to make; the ledger records what the n′ survivors' noise gives.
        del self.open[plan.round_id]  # only now: a malformed release must not close the round
        # A shuffler or the local model's pass-through releases the reports; reduce them here
        # (for a shuffled multiset, footnote 6: its sum mod m is the secure-aggregation release).
        if release.reports is None:
            value = release.value
        elif self.bounded and plan.params.m is not None:
            value = bounded_sum(release.reports, plan.params, report_slack(self.mechanism, plan.params))
        else:
            value = self.mechanism.aggregate(release.reports, plan.params)
        rng = stream(self.key, "round", plan.round_id)
        est = self.mechanism.analyze(value, plan.params, rng)
        event = self.mechanism.privacy_event(plan.params, release.n_reports)
        self.ledger.record(event)
        self.sums[plan.arm] = est.reward_sum
        self.counts[plan.arm] = release.n_reports
        if not self.open and self.batch_complete:
            partial = any(c != self.batch_params.n for c in self.counts.values())
            self.learner.conclude_batch(self.sums, self.batch_params, self.counts if partial else None)
        return RoundRecord(
            round_id=plan.round_id,
            batch=plan.batch,
            arm=plan.arm,
            params=plan.params,
            release=float(value),
            estimate=est.reward_sum,
            wrapped=est.wrapped,
            central_noise=est.central_noise,
            reports=release.n_reports,
            epsilon=self.ledger.event_epsilon(event),
        )
