"""The parties of the shuffle-model linear bandits (Chowdhury & Zhou 2022, Algorithm 1) as sans-I/O
objects for one run: the MQTT services (privbandit/services/linear.py) move their events. They run
the same mechanism objects, learner and random streams (protocol/linear_streams.py) as the in-process
engine (protocol/linear_engine.py), which steps all runs stacked, so both give the same numbers.

- :class:`LinearAnalyzer`: BatchedLinUCB; opens one batch at a time (:class:`LinearPlan`, the
  broadcast (θ̂, V⁻¹, β)), decodes the shuffler's :class:`LinearRelease` and updates (lines 13–16).
  It never sees a report or ground truth.
- :class:`LinearUsers`: the users of one run. From a plan and their own context each user picks her
  arm (line 4), observes her reward, randomizes [φy, upper(φφᵀ)] locally (line 7) and reports;
  ground truth goes to :class:`LinearTruth`, for the observer only. With fixed arms (the paper's
  experiments) every user of a batch has the same context, so the batch's choice is one computation.
- :class:`LinearShuffleBox`: one batch at the shuffler: admits each invited user once, then releases
  P_Vec's per-label totals or P_Amp's uniformly permuted list (line 11): no ids, no order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from privbandit.protocol.learners.batched_linucb import BatchedLinUCB, arm_outer, ucb_actions
from privbandit.protocol.linear_streams import BlockStreams, user_noise, user_uniforms
from privbandit.protocol.mechanisms import shuffle_linear_bandits as slb
from privbandit.protocol.parties.intermediary import Intermediary, ProtocolError


@dataclass(frozen=True)
class LinearPlan:
    """Analyzer → users: batch ``round_id`` (users first_user … first_user + cohort − 1) acts on
    (θ̂ (d,), V⁻¹ (d, d), β). ``collect`` is False for the trailing partial batch."""

    round_id: int
    first_user: int
    cohort: int
    collect: bool
    theta: np.ndarray
    v_inv: np.ndarray
    beta: float


@dataclass(frozen=True)
class LinearReports:
    """Users → shuffler: ``values[i]`` (D labels) is user ``user_ids[i]``'s randomized report."""

    round_id: int
    user_ids: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class LinearRelease:
    """Shuffler → analyzer: per-label totals (D,) for P_Vec, the permuted reports (n, D) for P_Amp."""

    round_id: int
    n_reports: int
    values: np.ndarray


@dataclass(frozen=True)
class LinearTruth:
    """Users → observer only: the served arm's gap, each user's realized regret, Σ entries."""

    round_id: int
    first_user: int
    gap: float
    realized: np.ndarray  # (n,) int8 in {−1, 0, 1}
    entries_sum: np.ndarray | None  # (D,) on diagnostic batches


@dataclass(frozen=True)
class LinearRecord:
    """Analyzer → observer, on diagnostic batches."""

    round_id: int
    estimate: np.ndarray  # (D,) the decoded batch sum
    theta: np.ndarray  # (d,) θ̂ after the update
    lambda_min: float  # λ_min(V_m) as released


class LinearAnalyzer:
    def __init__(self, protocol, conf, batch: int, horizon: int, d: int, diagnostic: set[int]):
        self.protocol = protocol
        self.batch, self.horizon, self.d = batch, horizon, d
        self.width = slb.n_entries(d)
        self.learner = BatchedLinUCB(1, d, conf.lam, conf.floor, lambda t: conf.beta(t, d))
        self.diagnostic = diagnostic
        self.next_batch = 0
        self.users_planned = 0
        self.open: LinearPlan | None = None

    @property
    def done(self) -> bool:
        return self.open is None and self.users_planned >= self.horizon

    def next_plan(self) -> LinearPlan | None:
        """The next batch, or None while one is open or once the horizon is served."""
        if self.open is not None or self.users_planned >= self.horizon:
            return None
        theta, v_inv, beta = self.learner.broadcast()
        cohort = min(self.batch, self.horizon - self.users_planned)
        plan = LinearPlan(self.next_batch, self.users_planned, cohort, cohort == self.batch,
                          theta[0].copy(), v_inv[0].copy(), float(beta))
        self.next_batch += 1
        self.users_planned += cohort
        if plan.collect:
            self.open = plan
        return plan

    def on_release(self, release: LinearRelease) -> LinearRecord | None:
        plan = self.open
        if plan is None or release.round_id != plan.round_id:
            raise ProtocolError("unknown-round", f"no open batch {release.round_id}")
        if release.n_reports != plan.cohort:
            raise ProtocolError("bad-report-count", f"batch {plan.round_id}: {release.n_reports} reports, "
                                                    f"cohort {plan.cohort}")
        values = self._checked(release.values, plan.cohort)
        self.open = None  # only now: a malformed release must not close the batch
        estimate = self.protocol.analyze(values[None], plan.cohort)
        u_inc, v_inc = slb.split_entries(estimate, self.d)
        self.learner.update(u_inc, v_inc, plan.cohort)
        if plan.round_id not in self.diagnostic:
            return None
        return LinearRecord(plan.round_id, estimate[0], self.learner.theta[0].copy(),
                            float(self.learner.smallest_eigenvalues()[0]))

    def _checked(self, values: np.ndarray, n: int) -> np.ndarray:
        """P_Vec: D integer totals in [0, n·max_count]; P_Amp: n × D finite reports."""
        if isinstance(self.protocol.analyzer, slb.BitSumAnalyzer):
            if values.dtype.kind not in "iu" or values.size != self.width:
                raise ProtocolError("bad-type", f"P_Vec releases {self.width} integer totals")
            top = n * self.protocol.analyzer.params.max_count
            if values.min() < 0 or values.max() > top:
                raise ProtocolError("out-of-range", f"a total lies outside [0, {top}]")
            return values.astype(np.int64)
        if values.dtype != np.float64 or values.size != n * self.width:
            raise ProtocolError("bad-type", f"P_Amp releases {n}×{self.width} float reports")
        if not np.isfinite(values).all():
            raise ProtocolError("out-of-range", "a report is not finite")
        return values.reshape(n, self.width)


class LinearUsers:
    """The users of one run: their world (arms, θ*, U_t) and their randomizer streams."""

    def __init__(self, instance, randomizer, seed: int, run: int, label: str, batch: int,
                 diagnostic: set[int]):
        self.arms = instance.arms  # (1, K, d): this run's instance, as the engine stacks it
        self.outer = arm_outer(self.arms)
        self.means = instance.means
        self.best = self.means.max(axis=1)
        self.randomizer = randomizer
        self.seed, self.run = seed, run
        self.width = slb.n_entries(self.arms.shape[-1])
        self.noise = user_noise(seed, label, run, batch, randomizer, self.width)
        self.diagnostic = diagnostic

    def respond(self, plan: LinearPlan) -> tuple[LinearReports | None, LinearTruth]:
        a = ucb_actions(self.arms, plan.theta[None], plan.v_inv[None], plan.beta, self.outer)  # line 4
        mu_a = self.means[0, a]
        u = user_uniforms(self.seed, self.run, plan.first_user, plan.cohort)[None]
        y = (u < mu_a[:, None]).astype(np.float64)
        realized = ((u < self.best[:, None]) - y)[0].astype(np.int8)
        gap = float((self.best - mu_a)[0])
        if not plan.collect:
            return None, LinearTruth(plan.round_id, plan.first_user, gap, realized, None)
        x = np.broadcast_to(self.arms[0, a[0]], (plan.cohort, self.arms.shape[-1]))
        entries = slb.user_entries(x, y[0])
        reports = self.randomizer.apply(entries, self.noise.for_batch(plan.round_id))  # line 7
        ids = np.arange(plan.first_user, plan.first_user + plan.cohort, dtype=np.int64)
        total = entries.sum(axis=0) if plan.round_id in self.diagnostic else None
        return (LinearReports(plan.round_id, ids, reports),
                LinearTruth(plan.round_id, plan.first_user, gap, realized, total))


class LinearShuffleBox(Intermediary):
    """One batch at the shuffler. Admission (invited ids only, each once) is :class:`Intermediary`'s;
    a report is a row of D labels: P_Vec counts in [0, max_count], or P_Amp's finite floats."""

    def __init__(self, plan: LinearPlan, shuffler, width: int, max_count: int | None,
                 streams: BlockStreams | None, rejected: Counter | None = None):
        if not plan.collect:
            raise ProtocolError("not-collected", f"batch {plan.round_id} is never aggregated")
        self.plan = plan
        self.shuffler, self.width, self.max_count, self.streams = shuffler, width, max_count, streams
        self.received = np.zeros(plan.cohort, dtype=bool)
        self.values = np.zeros((plan.cohort, width), dtype=np.float64 if max_count is None else np.int64)
        self.rejected = Counter() if rejected is None else rejected

    def receive(self, reports: LinearReports) -> int:
        values = np.asarray(reports.values)
        if values.ndim != 2 or values.shape != (len(reports.user_ids), self.width):
            self.rejected["wrong-shape"] += len(reports.user_ids)
            return 0
        return super().receive(reports)

    def _valid_values(self, values: np.ndarray, admitted: np.ndarray) -> np.ndarray:
        if self.max_count is not None and values.dtype.kind not in "iu":
            self.rejected["bad-type"] += int(admitted.sum())
            return np.zeros(len(values), dtype=bool)
        if self.max_count is None:
            ok = np.isfinite(values).all(axis=1)
        else:
            ok = ((values >= 0) & (values <= self.max_count)).all(axis=1)
        self.rejected["out-of-range"] += int((admitted & ~ok).sum())
        return ok

    def release(self, partial: bool = False) -> LinearRelease:
        """Every invited user's report, shuffled (Alg. 3 or 6); never a partial batch: Algorithm 1
        aggregates exactly B reports, and the ledger has no dropout accounting for this family."""
        if not self.complete:
            raise ProtocolError("incomplete-round", f"batch {self.plan.round_id}: "
                                                    f"{int(self.received.sum())} of {self.plan.cohort}")
        noise = self.shuffler.draw(self.values.shape, None) if self.streams is None else \
            self.streams.for_batch(self.plan.round_id)
        out = self.shuffler.apply(self.values, noise)
        return LinearRelease(self.plan.round_id, self.plan.cohort, out)
