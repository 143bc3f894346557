"""The in-process engine: drives the same party objects the MQTT services drive, with function
calls instead of messages. One call of :func:`run_once` is one run of one algorithm."""

from __future__ import annotations

import numpy as np

from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.learners.successive_elimination import SuccessiveElimination
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.observer import Observer, RunResult
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
) -> RunResult:
    """One run. Rounds go through the ideal :class:`Intermediary`; with ``shuffle_seed`` set,
    through a :class:`Shuffler` seeded with it; with ``secagg_graph`` set ("complete" or
    "sparse"), through a real secure-aggregation round (:class:`SecureAggregator`). With
    ``dropout_rate``, that fraction of each collected cohort never reports, and every round is
    released over the reports that came (the simulation knows nobody else is coming)."""
    analyzer = Analyzer(learner, mechanism, horizon, ledger, derive_key(analyzer_master_key(seed), *stream_prefix))
    users = UserPopulation(instance, mechanism, seed, checkpoints, stream_prefix, dropout_rate)
    observer = Observer(checkpoints, p)
    while plans := analyzer.next_plans():
        for plan in plans:
            sent, truths = users.respond(plan)
            for truth in truths:
                observer.on_truth(truth)
            if sent is None:
                continue
            if secagg_graph is not None:
                box = SecureAggregator(plan, mechanism, secagg_graph)
            elif shuffle_seed is not None:
                box = Shuffler(plan, mechanism, stream(shuffle_seed, "shuffle", plan.round_id))
            else:
                box = Intermediary(plan, mechanism)
            box.receive(sent)
            observer.on_record(analyzer.on_release(box.release(partial=dropout_rate > 0)))
    return observer.result(ledger.summary(), learner.eliminated_at.tolist(), instance.best_arm)
