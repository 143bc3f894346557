"""What the costliest messages of the users' account cost a party to decode (issue #32 item 2).

1. **Decoding.** Each of :func:`privbandit.services.hostile.decoding_bombs` (the issue's 500,000-key
   map and four million nested lists, lists of lists and of maps, a bin the size of the message,
   the deepest nesting, unknown keys, the largest bodies a status or truth may hold), decoded as the
   bus decodes it (``codec.decode`` with its topic's kinds), and, for a status or truth that
   decodes, its MAC checked as the observer checks it before refusing it: the least CPU time of
   ``--repeat`` tries, against the goal of 10 ms plus 2 ms per MB.
2. **Handling.** A forged reports message of ``--records`` records under invited ids with wrong
   MACs, through the aggregator (``decode`` + ``on_message``), against an honest 65,536-user one:
   what verifying the MACs costs per MB.
3. **A session** (``--session``): ``experiments``' Dist-DP-SE at ``--horizon`` over the embedded
   broker, without and with the ``bombs`` traffic adversary (one bomb per plan, from the users'
   account): wall time of each, and whether rounds.csv and curves.csv are byte-identical to the
   in-process run's.

    .venv/bin/python benchmarks/bench_decode_bombs.py [--repeat 5] [--session --horizon 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privbandit.protocol.primitives.report_auth import NONCE_MAC_BYTES, ReportAuthenticator  # noqa: E402
from privbandit.protocol.spine.events import Join, Plan, Reports, Round  # noqa: E402
from privbandit.services import codec  # noqa: E402
from privbandit.services.bus import BusSettings  # noqa: E402
from privbandit.services.hostile import decoding_bombs  # noqa: E402
from privbandit.services.intermediary import IntermediaryService  # noqa: E402
from privbandit.services.users import reports_message, status_tag, truth_tag  # noqa: E402

RUN = "bombs"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def allowance_ms(size: int) -> float:
    return 10 + 2 * size / 1e6


def least_cpu_ms(fn, repeat: int) -> tuple[float, str]:
    best, outcome = float("inf"), ""
    for _ in range(repeat):
        t0 = time.process_time()
        try:
            fn()
            outcome = "accepted"
        except codec.DecodeError as exc:
            outcome = f"{exc.reason}"
        best = min(best, time.process_time() - t0)
    return best * 1e3, outcome


def mac_check(msg, auth: ReportAuthenticator) -> bytes:
    """The MAC the observer computes to refuse a status or truth the users' account forged: over
    the bytes received with the tag emptied (``codec.tag_payload``; users.status_tag,
    ObserverService.check_truth)."""
    return (status_tag if isinstance(msg, codec.StatusMsg) else truth_tag)(auth, msg)


def decoding(repeat: int) -> None:
    """Each bomb decoded; one that decodes (a status or truth body) also has its MAC checked, as
    the observer does before refusing it: that is part of what it costs (``+ MAC``)."""
    print(f"{'message':<36} {'MB':>6} {'CPU ms':>8} {'+ MAC':>7} {'goal ms':>8}  outcome")
    over, auth = 0, ReportAuthenticator(5)
    for name, where, payload in decoding_bombs(RUN):
        ms, outcome = least_cpu_ms(lambda: codec.decode(payload, codec.TOPIC_KINDS[where]), repeat)
        mac = ""
        if outcome == "accepted":
            msg = codec.decode(payload, codec.TOPIC_KINDS[where])
            mac_ms = least_cpu_ms(lambda: mac_check(msg, auth), repeat)[0]
            ms, mac, outcome = ms + mac_ms, f"{mac_ms:7.2f}", f"decodes, then refused by its MAC ({msg.kind})"
        goal = allowance_ms(len(payload))
        over += ms > goal
        print(f"{name:<36} {len(payload) / 1e6:6.2f} {ms:8.2f} {mac:>7} {goal:8.1f}  {outcome}"
              f"{'   OVER' if ms > goal else ''}")
    print(f"{over} over the goal (CPU ms: decoding and, for what decodes, the MAC check)")


class _Sink:
    def __init__(self):
        self.sent, self.lost = [], None

    async def publish(self, topic, msg) -> None:
        self.sent.append((topic, msg))


async def handling(records: int, repeat: int) -> None:
    """The aggregator's CPU for a forged message of ``records`` records (wrong MACs, invited ids)
    and for an honest one-block message, each decoded and handled."""
    m = 2**16  # two-byte residues: a record and its tag take 6 bytes, the most records under the cap
    rnd = Round(1, "aggregator", "sum", expected=records, m=m, threshold=2 * records // 3 + 1)
    plan = Plan(1, 0, records, {}, (rnd,), (Join(1, 0, records, records),))
    svc = IntermediaryService(BusSettings(run_id=RUN), report_key=5, role="aggregator")
    svc.bus = _Sink()
    svc.task_spec = {"index": 0, "runs": [0], "label": "bench"}
    await svc.on_task(svc.task_spec)
    await svc.on_message("plan", codec.plan_msg(RUN, 0, plan))
    ids = np.arange(records)
    values = np.zeros((1, records, 1), np.int64)
    forged = codec.encode(codec.ReportsMsg(
        run=RUN, task=0, round=1, plan=1, user_ids=codec.ids_on_wire(ids), values=codec.packed(values, m), block=0,
        tags=ReportAuthenticator(6).tags(RUN, 0, 1, 1, 0, ids, values),  # a key that is not the users' ...
        block_tag=bytes(NONCE_MAC_BYTES)))  # ... and a block tag to check, the costliest forgery
    honest = codec.encode(reports_message(ReportAuthenticator(5), RUN, 0, plan, rnd, 1, Reports(
        1, 1, np.arange(65_536, 131_072), np.ones((1, 65_536, 1), np.int64))))
    for name, payload in ((f"forged, {records:,} records (wrong MACs)", forged),
                          ("honest, one 65,536-user block", honest)):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            await svc.on_message("report", codec.decode(payload, codec.TOPIC_KINDS["report"]))
            best = min(best, time.process_time() - t0)
        mb = len(payload) / 1e6
        print(f"aggregator, decode + on_message, {name:<40} {mb:5.2f} MB {best * 1e3:7.1f} ms "
              f"({best * 1e3 / mb:.1f} ms/MB; goal {allowance_ms(len(payload)):.1f} ms)")
    print(f"  refused: {dict((k, v) for k, v in svc.rejected.items() if v)}")


def session(horizon: int) -> None:
    from privbandit.runner import config as experiment_files
    from privbandit.runner import run_file
    from privbandit.services.launcher import launch

    text = f"""name = "bombs"\nhorizon = {horizon}\nseed = 17\nepsilon = 0.5\nruns = 1\n
[environment]\nkind = "uniform"\n[algorithms.Dist-DP-SE]\n"""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "e.toml").write_text(text)
        run_file(tmp / "e.toml", out=tmp / "inproc")
        for attacked in (False, True):
            path = tmp / ("attacked.toml" if attacked else "e.toml")
            if attacked:
                path.write_text('traffic_adversaries = ["bombs"]\n' + text)
            family, config = experiment_files.load(path)
            out = tmp / ("attacked" if attacked else "clean")
            t0 = time.perf_counter()
            code = launch(family, config, path, [], out, shards=2, timeout_s=1800)
            wall = time.perf_counter() - t0
            same = all((out / f).read_bytes() == (tmp / "inproc" / f).read_bytes() for f in ("rounds.csv", "curves.csv"))
            summary = json.loads((out / "summary.json").read_text())
            extra = ""
            if attacked:
                report = json.loads((out / "adversaries" / "bombs.json").read_text())
                extra = f"; {report['messages_sent']} bombs sent; refused {summary['rejected']}"
            print(f"session T = {horizon:,} {'with the bombs' if attacked else 'clean':<16} exit {code}, "
                  f"{wall:6.1f} s in all, the observer's session {summary['elapsed_s']:6.1f} s, numbers identical "
                  f"to in-process: {same}{extra}  (load {load()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--records", type=int, default=2**20, help="records of the forged reports message")
    ap.add_argument("--session", action="store_true", help="also run a session with and without the bombs")
    ap.add_argument("--horizon", type=int, default=30_000)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average {load()}")
    decoding(args.repeat)
    asyncio.run(handling(args.records, args.repeat))
    if args.session:
        session(args.horizon)
    print(f"load average {load()}")


if __name__ == "__main__":
    main()
