"""Distributed Anytime-Lazy-UCB and FTNL (its K sums) over real secure aggregation, every party
its own OS process over a real Mosquitto (issue #14: the online family's distributed twins through
the real aggregator).

An array of arm j fills with the users who pull j, over many plans, mixed with other arms' users.
Each plan's join names the array's users; the fleets keep those users' residues until the array's
last join comes, then run one Bonawitz et al. round (SecAgg+ graph) among exactly those users with
the aggregator, which never sees a residue. An FTNL epoch is one plan; its users' inputs are K
residues each, and the round releases the K sums. The numbers must be those of the in-process run
with the ideal modular sum, bit for bit.
"""

from __future__ import annotations

import csv
import json
import re

from privbandit.runner import config as experiment_files, run_file
from privbandit.services.launcher import launch
from tests.services.test_distributed import OPEN_BROKER, refusals

EXPERIMENT = """
family = "private-online-learning"
name = "online-secagg"
horizon = 600
seed = 7
epsilon = 1.0
runs = 1
[environment]
setting = 2
[algorithms."anytime-lazy-ucb@distributed"]
algorithm = "anytime-lazy-ucb"
trust = "distributed"
intermediary = "secagg"
[algorithms."ftnl@distributed-analyzer"]
algorithm = "ftnl"
trust = "distributed"
argmax_at = "analyzer"
intermediary = "secagg"
"""
LABEL = "anytime-lazy-ucb@distributed"
FTNL = "ftnl@distributed-analyzer"  # an epoch's K = 5 residues per user, summed by one secure round


def test_secure_lazy_ucb_and_ftnl_over_mosquitto_equal_the_ideal_in_process_run(tmp_path, mosquitto_url):
    path = tmp_path / "online.toml"
    path.write_text(EXPERIMENT)
    family, config = experiment_files.load(path)
    assert launch(family, config, path, [], tmp_path / "mqtt", broker_url=mosquitto_url, shards=2, timeout_s=240,
                  secagg_step_s=60, **OPEN_BROKER) == 0  # the aggregator takes --secagg-step-deadline
    run_file(path, [f"algorithms.{LABEL}.intermediary=auto", f"algorithms.{FTNL}.intermediary=auto"],
             out=tmp_path / "ideal")
    for name in ("curves.csv", "rounds.csv"):
        assert (tmp_path / "mqtt" / name).read_bytes() == (tmp_path / "ideal" / name).read_bytes(), name
    secure = json.loads((tmp_path / "mqtt" / "summary.json").read_text())
    ideal = json.loads((tmp_path / "ideal" / "summary.json").read_text())
    assert secure["privacy"] == ideal["privacy"] and secure["privacy"][LABEL]["epsilon_pure"] == 1.0
    assert all(secure["algorithms"][a]["parameters"]["intermediary"] == "secagg" for a in (LABEL, FTNL))
    assert refusals(secure) == {}
    # Every array and epoch of two users or more was a real round among exactly its users, none
    # dropped; the one-user ones (array 0, epoch 0) were the ideal sum of their one report.
    sizes = [int(r["n"]) for r in csv.DictReader(open(tmp_path / "ideal" / "rounds.csv"))]
    log = (tmp_path / "mqtt" / "logs" / "aggregator.log").read_text()
    rounds = re.findall(r"secagg cost: aggregator round \d+ released: users (\d+), survivors (\d+)", log)
    assert sorted(int(n) for n, _ in rounds) == sorted(n for n in sizes if n >= 2)
    assert len(rounds) >= 15 and all(n == kept for n, kept in rounds)
    assert "aborted" not in log
    # The aggregator saw the protocol's messages, never a residue: the analyzer got releases only.
    roles = secure["communication"][LABEL]["roles"]
    assert roles["aggregator"]["payload.sent.relay"] > 0
    assert roles["analyzer"].get("payload.received.report", 0) == 0


def test_the_analyzer_announces_again_every_plan_that_joined_a_round_still_open():
    """An array may fill over three plans or more: A opens it, B and C join it. A fleet holds its
    users' inputs until the last join; restarted in between, it can rebuild them only from every
    one of those plans. So the analyzer keeps them all while the round is open (it used to keep
    only the opener and the newest) and announces them again when no release comes."""
    import asyncio
    from types import SimpleNamespace

    from privbandit.protocol.spine.events import Join, Plan, Round
    from privbandit.services import analyzer as analyzer_service

    rnd = Round(5, "aggregator", "sum", expected=6, m=2**20)
    other = Round(6, "aggregator", "sum", expected=2, m=2**20)
    a = Plan(7, 10, 3, {}, (rnd,), (Join(5, 10, 3, 2),))
    b = Plan(12, 13, 3, {}, (other,), (Join(5, 13, 3, 2), Join(6, 13, 3, 1)))
    c = Plan(16, 16, 2, {}, (), (Join(5, 16, 2, 2),))
    published = []

    class Bus:
        async def publish(self, topic, msg):
            published.append(msg.plan)

    svc = object.__new__(analyzer_service.AnalyzerService)
    svc.bus, svc.t, svc.run_id, svc.task_spec = Bus(), lambda *parts: "/".join(parts), "r1", {"index": 0}
    svc.announced, svc.done = [], False
    svc.party = SimpleNamespace(open={5: rnd, 6: other}, done=False)
    asyncio.run(svc.advance([a]))
    asyncio.run(svc.advance([b]))
    del svc.party.open[6]  # B's other round released; the array still fills
    asyncio.run(svc.advance([c]))
    assert [m.plan for m in svc.announced] == [7, 12, 16]
    published.clear()
    svc.last_progress -= analyzer_service.PLAN_RETRY_S + 1  # no release since
    asyncio.run(svc.tick())
    assert published == [7, 12, 16]
    del svc.party.open[5]  # the array's round released: nothing of it is announced again
    asyncio.run(svc.advance([Plan(18, 18, 1, {}, (), ())]))
    assert [m.plan for m in svc.announced] == [18]
