"""The in-process engine: drives the same party objects the MQTT services drive, with function
calls instead of messages. One call of :func:`run_once` is one run of one algorithm."""

from __future__ import annotations

import numpy as np

from privbandit.protocol.environments import BanditInstance
from privbandit.protocol.learners.successive_elimination import SuccessiveElimination
from privbandit.protocol.mechanisms.base import Mechanism
from privbandit.protocol.observer import Observer, RunResult
from privbandit.protocol.parties import Analyzer, Intermediary, Shuffler, UserPopulation
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
) -> RunResult:
    """One run. With ``shuffle_seed`` set, rounds go through a :class:`Shuffler` seeded with it."""
    analyzer = Analyzer(learner, mechanism, horizon, ledger, derive_key(analyzer_master_key(seed), *stream_prefix))
    users = UserPopulation(instance, mechanism, seed, checkpoints, stream_prefix)
    observer = Observer(checkpoints, p)
    while plans := analyzer.next_plans():
        for plan in plans:
            sent, truths = users.respond(plan)
            for truth in truths:
                observer.on_truth(truth)
            if sent is None:
                continue
            box = (Intermediary(plan, mechanism) if shuffle_seed is None
                   else Shuffler(plan, mechanism, stream(shuffle_seed, "shuffle", plan.round_id)))
            box.receive(sent)
            observer.on_record(analyzer.on_release(box.release()))
    return observer.result(ledger.summary(), learner.eliminated_at.tolist(), instance.best_arm)
