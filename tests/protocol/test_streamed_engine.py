"""The in-process engine streams a plan's blocks through the intermediaries (issue #33).

- the intermediaries receive one block of reports at a time, and a run's memory is that of one
  block, not of its largest cohort (traced by tracemalloc, which sees numpy's arrays);
- a round whose records come in order keeps a count of who reported, not a flag per user, and still
  refuses what it refused before once they do not;
- a float sum (DP-SE's and SE's release since issue #33, which used to pass every reward to the
  analyzer) is numpy's sum of the reports received in user order, to the bit, whatever the order the
  blocks came in and whoever dropped out.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from privbandit import registry
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine import engine
from privbandit.protocol.spine.events import Join, Plan, Reports, Round
from privbandit.protocol.spine.intermediary import Intermediary
from privbandit.runner.tasks import parties


def _task(label: str, horizon: int, **algorithm):
    fam = registry.family("distributed-dp-mab")
    config = fam.load({"name": "stream", "horizon": horizon, "seed": 3, "epsilon": 0.5, "runs": 1, "preset": "paper",
                       "algorithms": {label: {"algorithm": label, **algorithm}}}, "<test>")
    return parties(fam, config, label, [0])


@pytest.mark.parametrize("label, horizon", [("dist-dp-se", 10**6), ("dp-se", 10**6), ("ldp-se", 4 * 10**6)])
def test_the_intermediaries_receive_one_block_at_a_time(label, horizon, monkeypatch):
    """Rounds of several blocks; no message of more than one block."""
    _, analyzer, users, boxes, observer = _task(label, horizon)
    sizes = []
    receive = Intermediary.receive

    def watched(self, reports):
        sizes.append(reports.user_ids.size)
        return receive(self, reports)

    monkeypatch.setattr(Intermediary, "receive", watched)
    engine.run(analyzer, users, boxes, observer)
    rounds = [r.n_reports for r in observer.records.values()]
    assert max(sizes) == USER_BLOCK < max(rounds)
    assert sum(sizes) == sum(rounds)


def test_a_run_holds_one_block_not_its_largest_cohort():
    """Dist-DP-SE at T = 2²²: its largest round has 2²⁰ users (16 blocks). Traced peak: 5.9 MiB
    (42.4 MiB when a plan's blocks were built at once and concatenated)."""
    _, analyzer, users, boxes, observer = _task("dist-dp-se", 2**22)
    tracemalloc.start()
    try:
        engine.run(analyzer, users, boxes, observer)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert max(r.n_reports for r in observer.records.values()) == 2**20
    assert peak < 16 * 2**20, f"{peak / 2**20:.1f} MiB"


def _session(rnd: Round, cohort: int, block: int, order: list[int], drop: np.ndarray, values: np.ndarray):
    box = Intermediary(rnd.intermediary)
    box.open_plan(Plan(0, 0, cohort, opens=(rnd,), joins=(Join(rnd.id, 0, cohort, cohort),)))
    for b in order:
        ids = np.arange(b * block, min(cohort, (b + 1) * block))
        ids = ids[~drop[ids]]
        box.receive(Reports(rnd.id, 0, ids, values[:, ids]))
    box.answered(0)
    return box


def test_a_float_sum_is_numpys_sum_of_the_reports_in_user_order():
    """Random sessions: block sizes, blocks out of order, dropouts; the release is the float64 sum
    numpy gave the analyzer of the same reports (the pass round's values[0, :, 0]), bit for bit."""
    rng = np.random.default_rng(33)
    for _ in range(200):
        cohort = int(rng.integers(1, 5000))
        block = int(rng.integers(1, 700))
        blocks = -(-cohort // block)
        order = rng.permutation(blocks).tolist() if rng.random() < 0.5 else list(range(blocks))
        drop = rng.random(cohort) < rng.choice([0.0, 0.01, 0.3])
        drop[rng.integers(cohort)] = False  # at least one report
        scale = rng.choice([1.0, 1e-9, 1e9])
        values = np.clip(rng.normal(0.5, 0.2, (1, cohort, 1)), 0, 1) * scale
        kept = int((~drop).sum())
        rnd = Round(0, "aggregator", "sum", cohort, integer=False, low=0.0, high=float(scale), threshold=1)
        release = _session(rnd, cohort, block, order, drop, values).release(0, partial=True)
        assert release.n_reports == kept
        assert release.values[0, 0] == np.sum(values[0, ~drop, 0]), (cohort, block, kept)


def test_in_order_records_keep_a_count_and_the_flags_come_when_needed():
    cohort, block = 1000, 100
    values = np.ones((1, cohort, 1), np.int64)
    rnd = Round(0, "aggregator", "sum", cohort, m=10**6)
    box = _session(rnd, cohort, block, list(range(5)), np.zeros(cohort, bool), values)
    part = box.rounds[0].parts[0]
    assert part.mask is None and part.filled == 500  # five blocks in order: a count
    assert box.receive(Reports(0, 0, np.arange(700, 800), values[:, 700:800])) == 100  # a gap: the flags
    assert part.mask is not None and part.mask.sum() == 600
    assert box.receive(Reports(0, 0, np.arange(450, 550), values[:, 450:550])) == 50  # half of it seen
    assert box.rejected["duplicate"] == 50
    assert box.receive(Reports(0, 0, np.arange(0, 100), values[:, :100])) == 0
    assert box.rejected["duplicate"] == 150
