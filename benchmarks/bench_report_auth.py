"""The aggregator's per-message cost: report MACs, and one report message through the service.

    python benchmarks/bench_report_auth.py [--repeat 30] [--blocks 64]

Prints CPU milliseconds (this process's, ``time.process_time``; median of ``--repeat``) of:

- ``ReportAuthenticator.tags`` for one 65,536-user message (one block of a plan's cohort): one
  residue per user with ids increasing and contiguous (a fleet's message), the same ids shuffled,
  and reports of 4 words (float64, runs × width = 4) with every other user missing;
- one fleet message of 65,536 residues (Dist-DP-SE's round: a modular sum, m = 2³⁷) through the
  aggregator's service, from its bytes: ``codec.decode``, then ``IntermediaryService.on_message``
  (MACs checked, records admitted, the block's closing MAC checked), on a bus that only records;
  ``--blocks`` such messages fill the round, and the last one's figure includes the release.

It uses only what both the old and the new code have, so the same file times either
(``PYTHONPATH=<other worktree> python benchmarks/bench_report_auth.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from statistics import median

import numpy as np

from privbandit.protocol.primitives.report_auth import ReportAuthenticator
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine.events import Join, Plan, Reports, Round
from privbandit.services import codec
from privbandit.services.bus import BusSettings
from privbandit.services.intermediary import IntermediaryService
from privbandit.services.users import reports_message

M = 2**37  # Dist-DP-SE's modulus at T = 10⁸ (37 bits per residue)
RUN = "rbench"
KEY = 0x5EC2E7  # any 256-bit key: the cost does not depend on it (a session draws its own)


def cpu_ms(fn, repeat: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return median(times) * 1e3


class _RecordingBus:
    def __init__(self):
        self.sent = []

    async def publish(self, topic_name, msg):
        self.sent.append((topic_name, msg))


def tags_cases(auth: ReportAuthenticator, repeat: int) -> None:
    rng = np.random.default_rng(0)
    first = 5 * USER_BLOCK  # a plan's cohort from user 327,680; the message is its block 3
    ids = first + 3 * USER_BLOCK + np.arange(USER_BLOCK)
    residues = rng.integers(0, M, (1, USER_BLOCK, 1))
    shuffled = rng.permutation(USER_BLOCK)
    half = ids[::2]
    wide = rng.standard_normal((2, half.size, 2))
    cases = {
        "one residue, ids contiguous": lambda: auth.tags(RUN, 0, 7, 7, first, ids, residues),
        "one residue, ids shuffled": lambda: auth.tags(RUN, 0, 7, 7, first, ids[shuffled], residues[:, shuffled]),
        "4 float words, every other id": lambda: auth.tags(RUN, 0, 7, 7, first, half, wide),
    }
    for name, fn in cases.items():
        ms = cpu_ms(fn, repeat)
        users = fn().size
        print(f"tags(), {users:>6,} users, {name:<30} {ms:8.3f} ms   {users / ms * 1e3:>13,.0f} users/s")


async def service_case(auth: ReportAuthenticator, blocks: int, repeat: int) -> None:
    """``repeat`` rounds of ``blocks`` messages each; per-message CPU times, the release apart."""
    cohort = blocks * USER_BLOCK
    rng = np.random.default_rng(1)
    per_message, last = [], []
    for r in range(repeat + 1):  # the first round warms
        rid = 100 + r
        rnd = Round(rid, "aggregator", "sum", expected=cohort, m=M, threshold=2 * cohort // 3 + 1)
        plan = Plan(rid, 10 * cohort * r, cohort, {}, (rnd,), (Join(rid, 10 * cohort * r, cohort, cohort),))
        data, total = [], 0
        for b in range(blocks):
            ids = plan.first_user + b * USER_BLOCK + np.arange(USER_BLOCK)
            rep = Reports(rid, plan.id, ids, rng.integers(0, M, (1, USER_BLOCK, 1)))
            total += int(rep.values.sum())  # < 2⁶³ for up to 2²⁶ residues below 2³⁷
            data.append(codec.encode(reports_message(auth, RUN, 0, plan, rnd, b, rep)))
        svc = IntermediaryService(BusSettings(run_id=RUN), report_key=KEY, role="aggregator")
        svc.bus = _RecordingBus()
        svc.task_spec = {"index": 0, "runs": [0], "label": "bench"}
        await svc.on_task(svc.task_spec)
        await svc.on_message("plan", codec.plan_msg(RUN, 0, plan))
        times = []
        for raw in data:
            t0 = time.process_time()
            await svc.on_message("report", codec.decode(raw))
            times.append(time.process_time() - t0)
        released = [m for _, m in svc.bus.sent if isinstance(m, codec.ReleaseMsg)]
        assert len(released) == 1 and released[0].n_reports == cohort and not +svc.rejected, (released, svc.rejected)
        assert int(released[0].values[0, 0]) == total % M, "the release is not the sum of the reports"
        if r:
            per_message += times[:-1]
            last.append(times[-1])
    ms = median(per_message) * 1e3
    print(f"aggregator, decode + on_message, one 65,536-user message   {ms:8.3f} ms   "
          f"{USER_BLOCK / ms * 1e3:>13,.0f} users/s   (median of {len(per_message)})")
    print(f"aggregator, the round's last message, with the release of {cohort:,} reports   "
          f"{median(last) * 1e3:8.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=64, help="messages (blocks of 65,536 users) per round")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, python {platform.python_version()}, numpy {np.__version__}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    auth = ReportAuthenticator(KEY)
    tags_cases(auth, args.repeat)
    asyncio.run(service_case(auth, args.blocks, max(1, args.repeat // 10)))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
