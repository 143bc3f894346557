"""Refusal counters count attacks only (issue #32 item 5).

Unattacked sessions reported ``wrong-task`` 88–125 and ``bad-status`` 1–2: the observer asked for a
task's metrics again (``resync``, after a few seconds without any, as happens under load), the
analyzer answered with the task's records and task-done, and they reached the observer after it had
moved on to the next task. The same race made two end-to-end tests fail under load. Here the race is
forced deterministically, on the in-memory broker of ``test_checkpoint.py`` with the real services:
the observer's resync of task 0 reaches the analyzer just before the control message of task 1.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from privbandit.services import codec
from privbandit.services.bus import BusSettings
from privbandit.services.dashboard import merged_counters
from privbandit.services.observer import ObserverService
from tests.services.test_checkpoint import RUN_ID, USERS_KEY, _mab, _Net, _services

PARTIES = ["analyzer", "aggregator", "users-0", "users-1"]


def _late_resync_session(tmp_path: Path):
    """Two runs of Dist-DP-SE through the real services; the moment the observer starts task 1, a
    resync of task 0 is put at the head of the analyzer's queue, as if sent at the end of task 0
    and delivered late. Returns the observer (finished) and the messages the analyzer sent again."""
    fam, config, label = _mab("Dist-DP-SE", {}, horizon=40_000, arms=3)
    config = config.model_copy(update={"runs": 2})
    net = _Net()
    parties = [_services(fam, config, name, tmp_path / "state") for name in PARTIES]
    for name, service in zip(PARTIES, parties):
        net.attach(name, service)
    obs = ObserverService(BusSettings(run_id=RUN_ID), fam, config, PARTIES, tmp_path / "out", report_key=USERS_KEY)
    net.attach("observer", obs)
    resync = codec.encode(codec.ControlMsg(run=RUN_ID, action="resync", task=0))

    async def go():
        for service in parties:
            await service.on_connect()
        injected_at = None
        for _ in range(100_000):
            if obs.finished:
                return injected_at
            if injected_at is None and obs.index == 1:
                assert parties[0].task_index == 0  # the analyzer has not seen task 1's control yet
                net.queues["analyzer"].insert(0, (f"pb/{RUN_ID}/control", resync))
                injected_at = len(net.seen)
            if not await net.step():
                for service in [*parties, obs]:
                    await service.tick()
        raise AssertionError("the session stalled")

    injected_at = asyncio.run(go())
    assert injected_at is not None, "the session never reached task 1"
    again = [m for _, m in net.seen[injected_at:] if getattr(m, "task", None) == 0
             and (isinstance(m, codec.RecordMsg) or (isinstance(m, codec.StatusMsg) and m.state == "task-done"))]
    return obs, again


def test_records_and_task_done_sent_again_after_the_observer_moved_on_are_not_refusals(tmp_path):
    obs, again = _late_resync_session(tmp_path)
    records = [m for m in again if isinstance(m, codec.RecordMsg)]
    assert len(records) > 10 and any(isinstance(m, codec.StatusMsg) for m in again), "the race was not forced"
    assert obs.failure is None
    summary = obs.write()
    # On the old observer: wrong-task = len(records), bad-status = 1.
    assert summary["rejected"] == {} and merged_counters(obs) == {}, summary["rejected"]
    assert summary["late_copies"] == 0 and summary["parties_missing_stats"] == []
    assert summary["algorithms"]["Dist-DP-SE"]["runs"] == 2


def test_a_record_or_task_done_of_the_last_task_that_differs_is_still_refused(tmp_path):
    """Only byte-identical copies of what was accepted are let through: a record or a task-done for
    the last task with any other content is ``wrong-task`` or ``bad-status``, as before."""
    obs, again = _late_resync_session(tmp_path)
    record = next(m for m in again if isinstance(m, codec.RecordMsg))
    done = next(m for m in again if isinstance(m, codec.StatusMsg))
    # The session is over: the last task is now task 1, and these are task 0's, altered.
    altered_record = record.model_copy(update={"body": {**record.body, "arm": (record.body["arm"] + 1) % 3}})
    altered_done = done.model_copy(update={"body": {**done.body, "learner": []}})
    asyncio.run(obs.handle(f"pb/{RUN_ID}/metrics/analyzer", altered_record))
    asyncio.run(obs.handle(f"pb/{RUN_ID}/metrics/analyzer", altered_done))
    assert obs.rejected["wrong-task"] == 1 and obs.rejected["bad-status"] == 1
