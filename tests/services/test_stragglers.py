"""Dropouts and stragglers at every secure-aggregation step, with the real aggregator process
over Mosquitto: users that vanish after step k, too many of them, and a fleet slower than the
step deadline. The round completes with the survivors (Bonawitz et al.'s recovery, threshold
⌊2n/3⌋ + 1) and releases exactly their sum, or aborts loudly naming the round and the step.

The test process plays the observer (control), the analyzer (plan, release) and two user fleets
(the real :class:`FleetSecAgg` step machines); only the users' outgoing rows are filtered, at
the step where they vanish.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import os
import time

import aiomqtt
import numpy as np
import pytest

from privbandit.experiment.config import ExperimentConfig
from privbandit.experiment.runner import resolved_algorithms
from privbandit.protocol.events import RoundPlan
from privbandit.protocol.mechanisms.base import RoundParams
from privbandit.protocol.secagg.batch import (ADVERT_RECORD, CIPHERTEXT_BYTES, Adverts, Masked, Shares,
                                              UserIdentities, Unmasks)
from privbandit.protocol.secagg.protocol import LIMBS
from privbandit.services import codec
from privbandit.services.launcher import stop_process
from privbandit.services.secagg_rounds import FleetSecAgg, from_messages, to_messages

COHORT = 12  # threshold ⌊2·12/3⌋ + 1 = 9
M = 2**31 - 1
STEP_DEADLINE_S = 3.0
VALUES = {u: (u * 104_729 + 7) % M for u in range(COHORT)}


def _without(step: str, batch, gone: set[int]):
    """``batch`` of ``step`` without the rows the vanished users would have sent."""
    if step == "advertise":
        keep = ~np.isin(batch.ids, list(gone))
        return Adverts(batch.ids[keep], b"".join(batch.records[i * ADVERT_RECORD:(i + 1) * ADVERT_RECORD]
                                                 for i in np.flatnonzero(keep)))
    if step == "shares":
        keep = ~np.isin(batch.senders, list(gone))
        return Shares(batch.senders[keep], batch.recipients[keep],
                      b"".join(batch.ciphertexts[i * CIPHERTEXT_BYTES:(i + 1) * CIPHERTEXT_BYTES]
                               for i in np.flatnonzero(keep)))
    if step == "masked":
        keep = ~np.isin(batch.ids, list(gone))
        return Masked(batch.ids[keep], batch.values[keep])
    keep = ~np.isin(batch.responders, list(gone))
    return Unmasks(batch.responders[keep], batch.owners[keep], batch.kinds[keep],
                   batch.limbs.reshape(-1, LIMBS)[keep].ravel())


@pytest.fixture(scope="module")
def aggregator(mosquitto_url, tmp_path_factory):
    """The real aggregator process, in one task running Dist-DP-SE with intermediary = secagg."""
    run_id = "s" + secrets.token_hex(4)
    log = tmp_path_factory.mktemp("agg") / "aggregator.log"
    env = {**os.environ, "PRIVBANDIT_BROKER_URL": mosquitto_url, "PRIVBANDIT_RUN_ID": run_id}
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "privbandit", "aggregator", "--secagg-step-deadline",
                                 str(STEP_DEADLINE_S)], env=env, stdout=fh, stderr=subprocess.STDOUT)
    config = ExperimentConfig.model_validate({
        "name": "st", "horizon": 1000, "seed": 1, "epsilon": 0.5, "runs": 1,
        "environment": {"kind": "uniform", "arms": 2},
        "algorithms": {"A": {"algorithm": "dist-dp-se", "intermediary": "secagg", "secagg_graph": "complete"}}})
    spec = {"index": 0, "run": 0, "label": "A", "algorithm": resolved_algorithms(config)["A"].model_dump(),
            "horizon": 1000, "arms": 2, "delta": config.delta}
    try:
        asyncio.run(_wait_ready(mosquitto_url, run_id))
        yield mosquitto_url, run_id, spec, log
    finally:
        stop_process(proc)


async def _wait_ready(url, run_id):
    """Until the aggregator says ``ready`` (it repeats that every second until a task starts)."""
    host, port = url.removeprefix("mqtt://").split(":")
    async with aiomqtt.Client(host, int(port)) as c:
        await c.subscribe(f"pb/{run_id}/metrics/aggregator", qos=1)
        async with asyncio.timeout(30):
            async for message in c.messages:
                if codec.decode(message.payload).state == "ready":
                    return


_round_ids = iter(range(1, 10_000))


async def _session(url, run_id, spec, step: str | None, gone: set[int], slow: float = 0.0):
    """One secure round through the aggregator process. Users ``gone`` vanish before sending
    ``step``; with ``slow``, fleet 1 (it hosts none of the cohort) sends ``step`` that late.
    Returns (release or None, error reason or None, elapsed seconds)."""
    host, port = url.removeprefix("mqtt://").split(":")
    t = lambda *p: "/".join(("pb", run_id, *p))  # noqa: E731
    round_id = next(_round_ids)
    plan = RoundPlan(round_id=round_id, batch=1, arm=0, first_user=0, cohort=COHORT,
                     params=RoundParams(n=COHORT, g=1, tau=0, m=M))
    async with aiomqtt.Client(host, int(port), identifier=f"{run_id}-t{round_id}") as c:
        await c.subscribe([(t("relay", "aggregator", "#"), 1), (t("relay", "aggregator"), 1),
                           (t("release", "aggregator"), 1), (t("metrics", "aggregator"), 1)])

        def sender(shard):
            async def send(msg: codec.SecAggMsg):
                delay = slow if shard == 1 and msg.step == step else 0.0
                if shard == 0 and msg.step == step and gone:
                    batch = _without(step, from_messages(step, [msg]), gone)
                    msg = to_messages(step, batch, run=run_id, task=0, round_id=round_id, shard=0, shards=2)[0]
                if delay:
                    asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(
                        c.publish(t("report", "aggregator"), codec.encode(msg), qos=1)))
                else:
                    await c.publish(t("report", "aggregator"), codec.encode(msg), qos=1)
            return send

        ident = UserIdentities(b"s" * 32)
        fleets = [FleetSecAgg(run_id, 0, i, 2, "complete", ident, sender(i)) for i in range(2)]
        await c.publish(t("control"), codec.encode(codec.ControlMsg(run=run_id, action="task", task=0, body=spec)),
                        qos=1)
        await c.publish(t("plan"), codec.encode(codec.PlanMsg(
            run=run_id, task=0, round=round_id, batch=1, arm=0, first_user=0, cohort=COHORT, collect=True,
            params=codec.params_of(plan.params))), qos=1)
        start = time.monotonic()
        await fleets[0].start(plan, VALUES, [])
        await fleets[1].start(plan, {}, [])
        async with asyncio.timeout(30):
            async for message in c.messages:
                msg = codec.decode(message.payload)
                if getattr(msg, "round", round_id) != round_id:
                    continue
                if isinstance(msg, codec.ReleaseMsg):
                    return (msg.value, msg.n_reports), None, time.monotonic() - start
                if isinstance(msg, codec.StatusMsg):
                    if msg.state == "error" and msg.body.get("round") == round_id:
                        return None, msg.body["reason"], time.monotonic() - start
                    continue
                for fleet in fleets:
                    if round_id in fleet.rounds:
                        assert await fleet.on_message(msg) in (None, "duplicate")


def _run(aggregator, step, gone, slow=0.0):
    url, run_id, spec, log = aggregator
    try:
        return asyncio.run(_session(url, run_id, spec, step, gone, slow))
    except TimeoutError:
        raise AssertionError(f"no release and no error; aggregator log:\n{log.read_text()[-3000:]}") from None


@pytest.mark.parametrize("step", ["advertise", "shares", "masked", "unmask"])
def test_users_vanishing_at_a_step_leave_the_survivors_sum(aggregator, step):
    gone = {2, 7}
    release, error, elapsed = _run(aggregator, step, gone)
    assert error is None, error
    # Who vanished before sending their masked input is not in the sum; after it (at unmask), is.
    counted = set(VALUES) - (gone if step != "unmask" else set())
    assert release == (sum(VALUES[u] for u in counted) % M, len(counted))
    assert elapsed < STEP_DEADLINE_S  # every fleet answered every step: no deadline was waited out


@pytest.mark.parametrize("step", ["shares", "unmask"])
def test_too_many_vanishing_at_a_step_abort_naming_round_and_step(aggregator, step):
    release, error, _ = _run(aggregator, step, {0, 1, 2, 3})  # 8 < threshold 9
    assert release is None
    assert error.startswith("round ") and f"after step {step!r}" in error, error


def test_a_fleet_slower_than_the_step_deadline_is_waited_for_once_then_left_behind(aggregator):
    """Fleet 1 answers `masked` 1.5 deadlines late: the aggregator goes on at the deadline with
    what came (fleet 1 hosts none of the cohort, so the sum is exact) and refuses the late chunk."""
    release, error, elapsed = _run(aggregator, "masked", set(), slow=1.5 * STEP_DEADLINE_S)
    assert error is None and release == (sum(VALUES.values()) % M, COHORT)
    assert STEP_DEADLINE_S <= elapsed < 1.5 * STEP_DEADLINE_S + 3
