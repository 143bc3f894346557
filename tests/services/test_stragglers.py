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

from privbandit import registry
from privbandit.protocol.primitives.report_auth import ReportAuthenticator, fleet_key
from privbandit.protocol.primitives.secagg.batch import (ADVERT_RECORD, CIPHERTEXT_BYTES, Adverts, Masked, Shares,
                                                         UserIdentities, Unmasks)
from privbandit.protocol.primitives.secagg.protocol import LIMBS
from privbandit.protocol.spine.events import Join, Plan, Round
from privbandit.services import codec
from privbandit.services.launcher import stop_process
from privbandit.services.secagg_rounds import FleetSecAgg, from_messages, to_messages

COHORT = 12  # threshold ⌊2·12/3⌋ + 1 = 9
M = 2**31 - 1
STEP_DEADLINE_S = 3.0
# The cohort: even ids of a 24-user plan, named by its join, so all of them run their side of the
# round on fleet 0 (user u on fleet u mod 2, secure_host) and fleet 1 hosts none of it.
USERS = tuple(range(0, 2 * COHORT, 2))
VALUES = {u: (u * 104_729 + 7) % M for u in USERS}


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


def _spec() -> dict:
    """Task 0's public spec, as the observer announces it: Dist-DP-SE with intermediary = secagg."""
    family = registry.family("distributed-dp-mab")
    config = family.load({
        "name": "st", "horizon": 1000, "seed": 1, "epsilon": 0.5, "runs": 1,
        "environment": {"kind": "uniform", "arms": 2},
        "algorithms": {"A": {"algorithm": "dist-dp-se", "intermediary": "secagg", "secagg_graph": "complete"}}},
        "st.toml")
    return codec.TaskSpec(index=0, runs=[0], label="A", family=family.name,
                          public=family.public_task(config, "A", [0])).model_dump()


def _plan(round_id: int) -> Plan:
    """A plan opening one secure round at the aggregator, its one join naming the cohort's users
    (as Anytime-Lazy-UCB's joins do)."""
    rnd = Round(round_id, "aggregator", "sum", COHORT, m=M, secagg="complete")
    return Plan(round_id, 0, 2 * COHORT, {}, (rnd,), (Join(round_id, 0, 2 * COHORT, COHORT, users=USERS),))


REPORT_AUTH_MASTER = 0x5EED  # the session's users' report key, as the aggregator process is given
FLEET_MASTER = 0x5EC  # the fleets' chunk keys' master, as the aggregator process is given
FLEET_AUTH = [ReportAuthenticator(fleet_key(FLEET_MASTER, i)) for i in range(2)]  # each fleet's own key


def _start_aggregator(url: str, run_id: str, log, *extra: str) -> subprocess.Popen:
    """The real aggregator process; returns once it says ``ready``."""
    env = {**os.environ, "PRIVBANDIT_BROKER_URL": url, "PRIVBANDIT_RUN_ID": run_id,
           "PRIVBANDIT_REPORT_AUTH_KEY": hex(REPORT_AUTH_MASTER), "PRIVBANDIT_FLEET_MASTER_KEY": hex(FLEET_MASTER)}
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "privbandit", "aggregator", "--secagg-step-deadline",
                                 str(STEP_DEADLINE_S), *extra], env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        asyncio.run(_wait_ready(url, run_id))
    except BaseException:
        stop_process(proc)
        raise
    return proc


@pytest.fixture(scope="module")
def aggregator(mosquitto_url, tmp_path_factory):
    """The real aggregator process, in one task running Dist-DP-SE with intermediary = secagg."""
    run_id = "s" + secrets.token_hex(4)
    log = tmp_path_factory.mktemp("agg") / "aggregator.log"
    proc = _start_aggregator(mosquitto_url, run_id, log)
    try:
        yield mosquitto_url, run_id, _spec(), log
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


async def _session(url, run_id, spec, step: str | None, gone: set[int], slow: float = 0.0, on_relay=None,
                   resends: list | None = None):
    """One secure round through the aggregator process. Users ``gone`` vanish before sending
    ``step``; with ``slow``, fleet 1 (it hosts none of the cohort) sends ``step`` that late;
    ``on_relay(announce)`` runs once, when the aggregator's first relay of the round arrives
    (``announce()`` publishes the task and the plan again, as the observer and analyzer would);
    ``resends`` collects the rounds the aggregator asks the fleets to send again.
    Returns (release or None, error reason or None, elapsed seconds)."""
    host, port = url.removeprefix("mqtt://").split(":")
    t = lambda *p: "/".join(("pb", run_id, *p))  # noqa: E731
    round_id = next(_round_ids)
    plan = _plan(round_id)
    (rnd,) = plan.opens
    async with aiomqtt.Client(host, int(port), identifier=f"{run_id}-t{round_id}") as c:
        await c.subscribe([(t("relay", "aggregator", "#"), 1), (t("relay", "aggregator"), 1),
                           (t("release", "aggregator"), 1), (t("metrics", "aggregator"), 1)])

        def sender(shard):
            async def send(msg: codec.SecAggMsg):
                delay = slow if shard == 1 and msg.step == step else 0.0
                if shard == 0 and msg.step == step and gone:
                    batch = _without(step, from_messages(step, [msg]), gone)
                    msg = to_messages(step, batch, run=run_id, task=0, round_id=round_id, shard=0, shards=2)[0]
                    msg = msg.model_copy(update={"tag": FLEET_AUTH[0].mac("secagg-chunk", run_id, 0, 0,
                                                                          payload=codec.encode(msg))})
                if delay:
                    asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(
                        c.publish(t("report", "aggregator"), codec.encode(msg), qos=1)))
                else:
                    await c.publish(t("report", "aggregator"), codec.encode(msg), qos=1)
            return send

        ident = UserIdentities(b"s" * 32)
        fleets = [FleetSecAgg(run_id, 0, i, 2, ident, sender(i), FLEET_AUTH[i]) for i in range(2)]

        async def announce():
            await c.publish(t("control"), codec.encode(codec.ControlMsg(run=run_id, action="task", task=0,
                                                                        body=spec)), qos=1)
            await c.publish(t("plan"), codec.encode(codec.plan_msg(run_id, 0, plan)), qos=1)

        await announce()
        start = time.monotonic()
        await fleets[0].start(rnd, np.array(USERS), VALUES, [])
        await fleets[1].start(rnd, np.array(USERS), {}, [])
        async with asyncio.timeout(30):
            async for message in c.messages:
                msg = codec.decode(message.payload)
                if getattr(msg, "round", round_id) != round_id:
                    continue
                if isinstance(msg, codec.ReleaseMsg):
                    assert msg.values.shape == (1, 1)  # the sum and nothing else
                    return (int(msg.values[0, 0]), msg.n_reports), None, time.monotonic() - start
                if isinstance(msg, codec.StatusMsg):
                    if msg.state == "error" and msg.body.get("round") == round_id:
                        return None, msg.body["reason"], time.monotonic() - start
                    continue
                if isinstance(msg, codec.ResendMsg):
                    if resends is not None:  # a restarted aggregator asks; no fleet re-runs a secure round
                        resends.append(msg.round)
                    continue
                if on_relay is not None:
                    hook, on_relay = on_relay, None
                    await hook(announce)
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
    gone = {4, 14}
    release, error, elapsed = _run(aggregator, step, gone)
    assert error is None, error
    # Who vanished before sending their masked input is not in the sum; after it (at unmask), is.
    counted = set(VALUES) - (gone if step != "unmask" else set())
    assert release == (sum(VALUES[u] for u in counted) % M, len(counted))
    assert elapsed < STEP_DEADLINE_S  # every fleet answered every step: no deadline was waited out


@pytest.mark.parametrize("step", ["shares", "unmask"])
def test_too_many_vanishing_at_a_step_abort_naming_round_and_step(aggregator, step):
    release, error, _ = _run(aggregator, step, {0, 2, 4, 6})  # 8 < threshold 9
    assert release is None
    assert error.startswith("round ") and f"after step {step!r}" in error, error


def test_a_fleet_slower_than_the_step_deadline_is_waited_for_once_then_left_behind(aggregator):
    """Fleet 1 answers `masked` 1.5 deadlines late: the aggregator goes on at the deadline with
    what came (fleet 1 hosts none of the cohort, so the sum is exact) and refuses the late chunk."""
    release, error, elapsed = _run(aggregator, "masked", set(), slow=1.5 * STEP_DEADLINE_S)
    assert error is None and release == (sum(VALUES.values()) % M, COHORT)
    assert STEP_DEADLINE_S <= elapsed < 1.5 * STEP_DEADLINE_S + 3


def test_killing_the_secure_aggregator_mid_round(mosquitto_url, tmp_path):
    """SIGKILL the secure aggregator after it relayed a round's key directory, restart it from its
    state directory: that round is never re-run (a server that could ask twice could difference
    two sums over the same inputs), so it aborts at its next step deadline, naming round and step
    and saying why; a later round then completes with the exact sum."""
    run_id = "k" + secrets.token_hex(4)
    log, state = tmp_path / "aggregator.log", tmp_path / "state"
    proc = _start_aggregator(mosquitto_url, run_id, log, "--state-dir", str(state))
    spec = _spec()

    async def crash(announce):
        nonlocal proc
        proc.kill()
        proc.wait()
        proc = await asyncio.to_thread(_start_aggregator, mosquitto_url, run_id, log, "--state-dir", str(state))
        await announce()

    try:
        resends = []
        release, error, _ = asyncio.run(_session(mosquitto_url, run_id, spec, None, set(), on_relay=crash,
                                                 resends=resends))
        assert release is None and error is not None
        assert resends  # the restarted aggregator knew it may have lost what it had acknowledged
        assert error.startswith("round ") and "step 'advertise'" in error and "restarted" in error, error
        release, error, _ = asyncio.run(_session(mosquitto_url, run_id, spec, None, set()))
        assert error is None and release == (sum(VALUES.values()) % M, COHORT)
    finally:
        stop_process(proc)
    assert "resumed task 0" in log.read_text()
