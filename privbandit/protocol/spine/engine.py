"""The in-process engine: drives the same party objects the MQTT services drive, with function calls
instead of messages. One call of :func:`run` is one task: one run of one algorithm, or several runs
stacked on the runs axis when the family's plans line up across runs.

    while plans := analyzer.next_plans():
        for plan in plans:
            intermediaries open the plan's rounds and join its users
            users serve it block by block: each block's reports to the intermediaries
                and its truth to the observer, as they come
            every round the plan completed is released, decoded, recorded

A round completes when all the reports it expects came, or once every user joined into it has
answered and the reports that came reach its threshold (the rest dropped out).
"""

from __future__ import annotations

from collections import Counter

from privbandit.protocol.spine.errors import ProtocolError
from privbandit.protocol.spine.events import Round
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.protocol.spine.observer import Observer
from privbandit.protocol.spine.parties import Analyzer, Users


def run(analyzer: Analyzer, users: Users, intermediaries: dict[str, Intermediary], observer: Observer) -> Counter:
    """Run one task to its end; returns the reports refused, by reason."""
    rounds: dict[int, Round] = {}
    while plans := analyzer.next_plans():
        for plan in plans:
            for rnd in plan.opens:
                rounds[rnd.id] = rnd
            boxes = {intermediaries[rounds[j.round_id].intermediary] for j in plan.joins}
            for box in boxes:
                box.open_plan(plan)
            # Block by block, straight through: the engine holds one block of a cohort at a time.
            for reports, truths in users.serve(plan, rounds=rounds):
                for truth in truths:
                    observer.on_truth(truth)
                for rep in reports:
                    intermediaries[rounds[rep.round_id].intermediary].receive(rep)
            for box in sorted(boxes, key=lambda b: b.name):
                box.answered(plan.id)
                if starved := box.starved():
                    raise ProtocolError("below-threshold", f"rounds {starved}: too few reports; nothing released")
                for round_id in box.ready():
                    observer.on_record(analyzer.on_release(box.release(round_id, partial=True)))
                    del rounds[round_id]
    rejected = Counter()
    for box in intermediaries.values():
        rejected.update(box.rejected)
    return rejected
