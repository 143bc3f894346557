"""In-process driver for the online-learning family (Hu, Huang & Mehta): one run of one algorithm.

It moves the same sans-I/O pieces a bus would move:

- the analyzer's learner publishes a policy (:class:`~privbandit.protocol.learners.anytime_lazy_ucb.LazyPolicy`,
  or FTNL's epoch action); users derive their arms from it and their arrival time t;
- users (:class:`~privbandit.protocol.parties.online_users.OnlineUsers`) report to the session of
  the block they fill: the trusted analyzer itself (central) or a
  :class:`~privbandit.protocol.mechanisms.private_online_learning.SecureBlockSum` (distributed;
  the in-process intermediary is the ideal secure sum);
- a full block is released once; the analyzer decodes it and updates the learner.

DP-SE is not re-implemented: :func:`run_dp_se` calls the distributed-DP family's engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from privbandit.protocol.engine import run_once
from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.learners.anytime_lazy_ucb import AnytimeLazyUCB
from privbandit.protocol.learners.ftnl import FTNL
from privbandit.protocol.learners.hybrid_streaks import run_hybrid
from privbandit.protocol.learners.hybrid_ucb import HybridFeed, HybridUCB, run_hybrid_stepwise
from privbandit.protocol.learners.successive_elimination import (
    SajedSheffetSchedule,
    SuccessiveElimination,
    sajed_sheffet_width,
)
from privbandit.protocol.mechanisms.distributed_dp_mab import CentralLaplace, PolyaSecAgg
from privbandit.protocol.mechanisms.private_online_learning import (
    ArraySumRelease,
    DistributedArraySum,
    DistributedNoisyMax,
    ReportNoisyMax,
)
from privbandit.protocol.parties.online_users import OnlineUsers, rewards_from_uniforms
from privbandit.protocol.privacy import PrivacyLedger, PureDP
from privbandit.protocol.seeding import stream


@dataclass
class OnlineResult:
    checkpoints: np.ndarray
    pseudo_regret: np.ndarray
    realized_regret: np.ndarray
    privacy: dict
    pulls: np.ndarray
    best_arm: int
    releases: list[dict] = field(default_factory=list)
    reports: int = 0
    protocol_bits: int = 0
    max_report_bits: int = 0


@dataclass(frozen=True)
class OnlineRun:
    """What every algorithm's run is given: the world, ε, the trust model, the horizon, the seed
    path its streams hang from, the observer's checkpoints and the privacy ledger to fill."""

    instance: BanditInstance
    epsilon: float
    horizon: int
    seed: int
    prefix: tuple
    checkpoints: np.ndarray
    ledger: PrivacyLedger
    trust: str = "central"

    def by_trust(self, central, distributed):
        """``central()`` or ``distributed()`` for this run's trust model; anything else is refused."""
        if self.trust == "central":
            return central()
        if self.trust == "distributed":
            return distributed()
        raise ValueError(f"trust={self.trust!r} must be 'central' or 'distributed'")

    def stream(self, *path):
        return stream(self.seed, *self.prefix, *path)

    def or_one_over_t(self, prob: float | None) -> float:
        """A probability parameter (decode failure p, DP-SE's β) as given, else 1/T (Hu et al. §6)."""
        return prob if prob is not None else 1.0 / self.horizon


def _curves(gaps: np.ndarray, arms: np.ndarray, realized: np.ndarray, checkpoints: np.ndarray):
    idx = np.asarray(checkpoints, dtype=np.int64) - 1
    return np.cumsum(gaps[arms])[idx], np.cumsum(realized)[idx]


def run_anytime_lazy_ucb(run: OnlineRun, p: float | None = None) -> OnlineResult:
    """Algorithm 1, central (``trust="central"``) or with one secure sum per array (``"distributed"``)."""
    instance, epsilon, horizon, trust, ledger = run.instance, run.epsilon, run.horizon, run.trust, run.ledger
    learner = AnytimeLazyUCB(instance.n_arms, epsilon)
    users = OnlineUsers(instance, run.seed, run.prefix, width=2)
    release = run.by_trust(lambda: ArraySumRelease(epsilon),
                           lambda: DistributedArraySum(epsilon, run.or_one_over_t(p)))
    analyzer_rng = run.stream("analyzer")
    arms_all = np.empty(horizon, dtype=np.int64)
    realized = np.empty(horizon)
    open_sums: dict[int, list] = {}  # central: arm -> [true sum]; distributed: arm -> SecureBlockSum
    rows, bits = [], 0
    t = 1
    while t <= horizon:
        arms = learner.plan_cohort(t, horizon)
        x, reg = users.pull(t, arms)
        arms_all[t - 1 : t - 1 + arms.size] = arms
        realized[t - 1 : t - 1 + arms.size] = reg
        for j in np.unique(arms):
            sel = np.flatnonzero(arms == j)
            r, n = learner.filling(int(j))
            if trust == "central":
                open_sums.setdefault(int(j), [0.0])[0] += float(x[sel].sum())
            else:
                session = open_sums.get(int(j))
                if session is None:
                    session = open_sums[int(j)] = release.open((int(j), r), n)
                rng = run.stream("randomizer", int(j), r, t)
                session.receive(t + sel, release.randomize(x[sel], session.params, rng))
            bits += sel.size * release.bits(n)
        for j in learner.record_pulls(arms):
            r, n = learner.filling(j)
            if trust == "central":
                true_sum = open_sums.pop(j)[0]
                noisy, wrapped, extra = release.release(true_sum, n, analyzer_rng), False, {}
            else:
                session = open_sums.pop(j)
                noisy, wrapped = release.decode(int(session.release()[0]), session.params, analyzer_rng)
                q = session.params
                extra = {"g": q.g, "tau": q.tau, "m": q.m}
            ledger.record(release.privacy_event(n))
            learner.on_release(j, noisy, n)
            rows.append({"round": t + arms.size - 1, "arm": j, "array": r, "n": n, "estimate_sum": noisy,
                         "wrapped": wrapped, **extra})
        t += arms.size
    pseudo, real = _curves(instance.gaps, arms_all, realized, run.checkpoints)
    result = OnlineResult(np.asarray(run.checkpoints), pseudo, real, ledger.summary(), learner.pulls.copy(),
                          instance.best_arm, rows)
    result.reports, result.protocol_bits = horizon, bits
    result.max_report_bits = max(release.bits(1 << int(r + 1)) for r in learner.full)
    return result


def hybrid_feed(run: OnlineRun) -> HybridFeed:
    """Hybrid-UCB's users (two uniforms each) and the analyzer's noise stream, by round."""
    instance = run.instance
    users = OnlineUsers(instance, run.seed, run.prefix, width=2)
    noise_rng = run.stream("analyzer")
    return HybridFeed(
        run.horizon, instance.means, instance.best_arm,
        uniforms=users.uniforms,
        laplace=lambda t0, n: noise_rng.laplace(0.0, 1.0, size=(n, 2)),
        rewards=lambda m, u: rewards_from_uniforms(instance, m, u),
    )


def run_hybrid_ucb(run: OnlineRun, depth: str = "r", stepwise: bool = False, stats: dict | None = None) -> OnlineResult:
    """Algorithm 4, central model. By default the leader's streaks run vectorized
    (:func:`~privbandit.protocol.learners.hybrid_streaks.run_hybrid`); ``stepwise=True`` runs the
    reference loop, one :meth:`HybridUCB.choose`/:meth:`HybridUCB.observe` per round. Both give
    the same pulls and regret, bit for bit. ``stats``, if given, receives the fast driver's counts."""
    if run.trust != "central":
        raise ValueError(f"trust={run.trust!r}: hybrid-ucb runs in the central model only")
    instance = run.instance
    learner = HybridUCB(instance.n_arms, run.epsilon, depth)
    drive = run_hybrid_stepwise if stepwise else partial(run_hybrid, stats=stats)
    pseudo, real, pulls = drive(learner, hybrid_feed(run), run.checkpoints)
    run.ledger.record(PureDP(learner.epsilon_spent()))
    result = OnlineResult(np.asarray(run.checkpoints), pseudo, real, run.ledger.summary(), pulls, instance.best_arm)
    result.reports, result.protocol_bits, result.max_report_bits = run.horizon, 64 * run.horizon, 64
    return result


def run_ftnl(run: OnlineRun, multiplier: float = 1.0, argmax_at: str = "intermediary",
             p: float | None = None) -> OnlineResult:
    """Algorithms 2–3 on a full-information instance (every user holds a K-vector)."""
    instance, epsilon, horizon, trust, ledger = run.instance, run.epsilon, run.horizon, run.trust, run.ledger
    k = instance.n_arms
    learner = FTNL(k)
    users = OnlineUsers(instance, run.seed, run.prefix, width=k)
    rnm = run.by_trust(
        lambda: ReportNoisyMax(epsilon, multiplier),
        lambda: DistributedNoisyMax(epsilon, run.or_one_over_t(p), multiplier, argmax_at))
    analyzer_rng = run.stream("analyzer")
    arms_all = np.empty(horizon, dtype=np.int64)
    realized = np.empty(horizon)
    rows, bits, max_bits = [], 0, 0
    t = 1
    while t <= horizon:
        s, n, action = learner.epoch, learner.epoch_length, learner.action
        cohort = min(n, horizon - t + 1)
        x = users.vectors(t, cohort)
        arms_all[t - 1 : t - 1 + cohort] = action
        realized[t - 1 : t - 1 + cohort] = x[:, instance.best_arm] - x[:, action]
        if cohort == n:  # a truncated last epoch is never released: nothing follows it
            row = {"round": t + n - 1, "epoch": s, "n": n, "played": action}
            if trust == "central":
                nxt = rnm.select(x.sum(axis=0), analyzer_rng)
                per_user = 64 * k
            else:
                session = rnm.open(("epoch", s), n, k)
                session.receive(np.arange(t, t + n), rnm.randomize(x, session.params, run.stream("randomizer", s)))
                nxt, leaked = rnm.select(session.release(), session.params, analyzer_rng)
                per_user = rnm.bits(n, k)
                row.update(g=session.params.g, tau=session.params.tau, m=session.params.m,
                           sums_released=leaked is not None)
            ledger.record(rnm.privacy_event(k))
            learner.conclude_epoch(nxt)
            row["next"] = nxt
            rows.append(row)
        else:
            per_user = 64 * k if trust == "central" else rnm.bits(n, k)
            learner.conclude_epoch(None)
        bits += cohort * per_user
        max_bits = max(max_bits, per_user)
        t += cohort
    pseudo, real = _curves(instance.gaps, arms_all, realized, run.checkpoints)
    pulls = np.bincount(arms_all, minlength=k)
    result = OnlineResult(np.asarray(run.checkpoints), pseudo, real, ledger.summary(), pulls, instance.best_arm, rows)
    result.reports, result.protocol_bits, result.max_report_bits = horizon, bits, max_bits
    return result


def run_dp_se(run: OnlineRun, beta: float | None = None) -> OnlineResult:
    """DP-SE (Sajed & Sheffet 2019) with β = 1/T (Hu et al. §6), through the distributed-DP
    family's engine: ``CentralLaplace`` (central) or ``PolyaSecAgg`` (distributed, Dist-DP-SE's
    mechanism under DP-SE's epoch schedule and radius) driving ``SuccessiveElimination``."""
    instance, epsilon = run.instance, run.epsilon
    beta = run.or_one_over_t(beta)
    mechanism = run.by_trust(lambda: CentralLaplace(epsilon), lambda: PolyaSecAgg(epsilon, beta))
    learner = SuccessiveElimination(instance.n_arms, SajedSheffetSchedule(epsilon, beta), sajed_sheffet_width(beta))
    res = run_once(instance=instance, mechanism=mechanism, learner=learner, horizon=run.horizon, seed=run.seed,
                   stream_prefix=run.prefix, checkpoints=run.checkpoints, p=beta, ledger=run.ledger)
    pulls = np.zeros(instance.n_arms, dtype=np.int64)
    rows = []
    for row in res.rounds:
        pulls[row["arm"]] += row["n"]
        rows.append({k: row[k] for k in ("round", "batch", "arm", "n", "estimate_sum", "wrapped", "g", "tau", "m")})
    out = OnlineResult(res.checkpoints, res.pseudo_regret, res.realized_regret, res.privacy, pulls,
                       res.best_arm, rows)
    out.reports, out.protocol_bits, out.max_report_bits = res.reports, res.protocol_bits, res.max_report_bits
    return out


ALGORITHMS = {
    "anytime-lazy-ucb": run_anytime_lazy_ucb,
    "hybrid-ucb": run_hybrid_ucb,
    "dp-se": run_dp_se,
    "ftnl": run_ftnl,
}

__all__ = ["ALGORITHMS", "OnlineResult", "OnlineRun", "run_anytime_lazy_ucb", "run_dp_se", "run_ftnl", "run_hybrid_ucb"]
