"""The in-process engine: drives the same party objects the MQTT services drive, with function
calls instead of messages. One call of :func:`run_once` is one run of one algorithm."""

from __future__ import annotations

from collections import Counter

import numpy as np

from privbandit.protocol.adversaries import Adversary, report_slack
from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.learners.successive_elimination import SuccessiveElimination
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.observer import Observer, RunResult, coalition_ledger
from privbandit.protocol.parties import Analyzer, Intermediary, SecureAggregator, Shuffler, UserPopulation
from privbandit.protocol.privacy import PrivacyLedger
from privbandit.protocol.seeding import derive_key, analyzer_master_key, stream


def run_once(
    *,
    instance: BanditInstance,
    mechanism: Mechanism,
    learner: SuccessiveElimination,
    horizon: int,
    seed: int,
    stream_prefix: tuple,
    checkpoints: np.ndarray,
    p: float,
    ledger: PrivacyLedger,
    shuffle_seed: int | None = None,
    secagg_graph: str | None = None,
    dropout_rate: float = 0.0,
    adversary: Adversary | None = None,
    range_check: bool = False,
) -> RunResult:
    """One run. Rounds go through the ideal :class:`Intermediary`; with ``shuffle_seed`` set,
    through a :class:`Shuffler` seeded with it; with ``secagg_graph`` set ("complete" or
    "sparse"), through a real secure-aggregation round (:class:`SecureAggregator`). With
    ``dropout_rate``, that fraction of each collected cohort never reports, and every round is
    released over the reports that came (the simulation knows nobody else is coming).

    With an ``adversary``, some users of every cohort attack (:mod:`privbandit.protocol.adversaries`);
    rounds are released over what the intermediary accepted. ``range_check`` turns on the
    clear-text defences: the intermediary's window check and the analyzer's bounded sum."""
    analyzer = Analyzer(learner, mechanism, horizon, ledger, derive_key(analyzer_master_key(seed), *stream_prefix),
                        bounded=range_check)
    users = UserPopulation(instance, mechanism, seed, checkpoints, stream_prefix, dropout_rate, adversary)
    observer = Observer(checkpoints, p, coalition_ledger(mechanism, ledger, adversary))
    rejected = Counter()
    partial = dropout_rate > 0 or adversary is not None
    while plans := analyzer.next_plans():
        for plan in plans:
            sent, truths = users.respond(plan)
            for truth in truths:
                observer.on_truth(truth)
            if sent is None:
                continue
            window = report_slack(mechanism, plan.params) if range_check and plan.params.m is not None else None
            if secagg_graph is not None:
                box = SecureAggregator(plan, mechanism, secagg_graph, rejected)
            elif shuffle_seed is not None:
                box = Shuffler(plan, mechanism, stream(shuffle_seed, "shuffle", plan.round_id), rejected, window)
            else:
                box = Intermediary(plan, mechanism, rejected, window)
            box.receive(sent)
            observer.on_record(analyzer.on_release(box.release(partial=partial)))
    return observer.result(ledger.summary(), learner.eliminated_at.tolist(), instance.best_arm, rejected)

