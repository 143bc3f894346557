"""The observer's roll-call: parties that said "ready" before it subscribed say so again at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from privbandit.services import codec
from privbandit.services.bus import BusSettings
from privbandit.services.observer import ObserverService
from tests.services.test_checkpoint import RUN_ID, _mab, _Net, _services


def _statuses(net: _Net) -> list[tuple[str, str]]:
    return [(m.party, m.state) for _, m in net.seen if isinstance(m, codec.StatusMsg)]


def test_a_waiting_party_answers_the_roll_call_and_a_running_one_does_not(tmp_path: Path):
    fam, config, label = _mab("Dist-DP-SE", {})
    net = _Net()
    names = ["analyzer", "aggregator", "users-0", "users-1"]
    for name in names:
        net.attach(name, _services(fam, config, name, tmp_path))
    net.subs["observer"], net.queues["observer"] = [f"pb/{RUN_ID}/metrics/+"], []

    async def roll_call():
        net.publish(f"pb/{RUN_ID}/control", codec.encode(codec.ControlMsg(run=RUN_ID, action="resync")))
        while await net.step():
            pass

    asyncio.run(roll_call())
    assert sorted(_statuses(net)) == sorted((n, "ready") for n in names)

    # Once a task runs, a roll-call is not for them: no party says "ready" again.
    spec = codec.TaskSpec(index=0, runs=[0], label=label, family=fam.name, public=fam.public_task(config, label, [0]),
                          session="5e55").model_dump()
    net.publish(f"pb/{RUN_ID}/control", codec.encode(codec.ControlMsg(run=RUN_ID, action="task", task=0, body=spec)))
    asyncio.run(_drain(net, 40))
    net.seen.clear()
    asyncio.run(roll_call())
    assert ("users-0", "ready") not in _statuses(net) and ("analyzer", "ready") not in _statuses(net)


async def _drain(net: _Net, steps: int) -> None:
    for _ in range(steps):
        if not await net.step():
            return


def test_the_observer_calls_the_roll_when_it_connects_before_the_first_task(tmp_path: Path):
    fam, config, _ = _mab("Dist-DP-SE", {})
    observer = ObserverService(BusSettings(run_id=RUN_ID), fam, config, ["analyzer"], tmp_path / "out", report_key=1)
    net = _Net()
    net.attach("observer", observer)
    net.subs["analyzer"], net.queues["analyzer"] = [f"pb/{RUN_ID}/control"], []
    asyncio.run(observer.on_connect())
    (topic, data), = net.queues["analyzer"]
    msg = codec.decode(data)
    assert topic == f"pb/{RUN_ID}/control" and msg.action == "resync" and msg.task is None
