"""A user fleet killed mid-array under secure Anytime-Lazy-UCB loses nothing (issue #32 item 9).

An array of arm j fills over many plans; each fleet holds its users' Pólya residues of the array in
memory until the array's last join comes, and only then runs the secure round. docs said a fleet
killed meanwhile loses them and the run fails. It does not: the restarted fleet gets the plans it
missed from its persistent broker session, and the analyzer announces again every plan that joined
a round still open (``AnalyzerService.advance``), so the fleet redraws the same residues (a user's
draws depend only on seed, run, label, plan and block) and the round completes among exactly its
users. Three SIGKILLs of ``users-0``, each while it hosts users of an array that is joined but not
released, end with the ideal in-process run's bytes.

What is not recovered is a secure round *in flight* (its array complete, the protocol running): the
killed fleet's keys for it are gone, the round's steps go on without its users, and with too few
holders the round aborts loudly (docs/private-online-learning.md). So each kill here is timed: the
analyzer is paused (SIGSTOP) so that no array completes, the rounds in flight finish, and the fleet
is killed holding the residues of the arrays still filling; then the analyzer goes on (SIGCONT).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
import threading
import time

import aiomqtt
import pytest

from privbandit.runner import run_file
from privbandit.services import codec
from privbandit.services.bus import topic
from tests.services.readers import read_until
from tests.services.test_distributed import _log_tails, _start, _wait

EXPERIMENT = """
family = "private-online-learning"
name = "secure-restart"
horizon = 3000
seed = 7
epsilon = 1.0
runs = 1
[environment]
setting = 2
[algorithms."anytime-lazy-ucb@secagg"]
algorithm = "anytime-lazy-ucb"
trust = "distributed"
intermediary = "secagg"
"""
# The three kills were after 20, 33 and 45 plans. This session opens PLANS plans in all (a
# function of its seed) and its last arrays never complete (the horizon ends them): a kill after
# the last plan found the fleet "holding" their residues once the session's work was done, and the
# session could end before the new fleet subscribed, which then waited for good (CI, 2026-11-28).
# So every kill comes before the last plan, and the analyzer stays paused until the new fleet has
# subscribed (its "ready"), so the session's end reaches it.
KILL_AFTER_PLANS = (20, 33, 41)
PLANS = 45


class Watcher:
    """Reads the session's plans and releases (the tests' broker is anonymous) and keeps, per
    round still open, the users its announced joins name."""

    def __init__(self, url: str, run_id: str):
        self.url, self.run_id = url, run_id
        self.plans: set[int] = set()
        self.joined: dict[int, set[int]] = {}  # open secure round → the users joined so far
        self.expected: dict[int, int] = {}  # round → its cohort (the array's size)
        self.released: set[int] = set()
        self.ready_at: dict[str, float] = {}  # party → when it last said "ready" (it subscribed)
        self.lock = threading.Lock()
        self.ready, self.stop = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._guard, daemon=True)

    def _guard(self) -> None:
        try:
            asyncio.run(self._watch())
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            self.error = exc

    async def _watch(self) -> None:
        host, port = self.url.removeprefix("mqtt://").split(":")
        async with aiomqtt.Client(host, int(port), identifier=f"watcher-{self.run_id}") as c:
            await c.subscribe([(topic(self.run_id, "plan"), 1), (topic(self.run_id, "release", "aggregator"), 1),
                               (topic(self.run_id, "metrics", "users-0"), 1)])
            self.ready.set()
            await read_until(c, self.stop, self._on_message)

    def _on_message(self, message: aiomqtt.Message) -> None:
        msg = codec.decode(bytes(message.payload))
        with self.lock:
            if isinstance(msg, codec.PlanMsg):
                self.plans.add(msg.plan)
                self.expected.update({r.id: r.expected for r in msg.opens})
                for j in msg.joins:
                    if j.round not in self.released and j.users is not None:
                        self.joined.setdefault(j.round, set()).update(int(u) for u in j.users)
            elif isinstance(msg, codec.ReleaseMsg):
                self.released.add(msg.round)
                self.joined.pop(msg.round, None)
            elif isinstance(msg, codec.StatusMsg) and msg.state == "ready":
                self.ready_at[msg.party] = time.monotonic()

    def in_flight(self) -> list[int]:
        """Secure rounds whose array is complete and not released: the protocol is running."""
        with self.lock:
            return [r for r, users in self.joined.items() if len(users) == self.expected.get(r)]

    def held_by(self, shard: int) -> int:
        """Users of rounds joined but not released whose residues fleet ``shard`` holds: every fleet
        holds every input of such a round (services/users.py: the ring hosting needs the round's whole
        graph before a fleet knows its arc), so this is every such user, whichever fleet."""
        with self.lock:
            return sum(len(users) for users in self.joined.values())


@pytest.mark.slow_e2e
def test_a_fleet_killed_mid_array_three_times_ends_byte_identical(tmp_path, mosquitto_url):
    path = tmp_path / "secure.toml"
    path.write_text(EXPERIMENT)
    ideal = tmp_path / "ideal"  # the ideal modular sum: the numbers secure aggregation must give
    run_file(path, ["algorithms.anytime-lazy-ucb@secagg.intermediary=auto"], out=ideal)
    run_id = "s" + secrets.token_hex(4)
    watcher = Watcher(mosquitto_url, run_id)
    watcher.thread.start()
    assert watcher.ready.wait(10), watcher.error
    parties, out = _start(tmp_path, path, mosquitto_url, run_id)
    fleet = next(p for p in parties if p.name == "users-0")
    analyzer = next(p for p in parties if p.name == "analyzer")
    kills = []
    try:
        for after in KILL_AFTER_PLANS:
            end = time.monotonic() + 120
            while True:
                while not (after <= len(watcher.plans) < PLANS and watcher.held_by(0) > 0):
                    assert time.monotonic() < end, f"never {after} plans mid-array\n" + _log_tails(parties)
                    assert parties[0].proc.poll() is None, "the run ended before the kill\n" + _log_tails(parties)
                    time.sleep(0.02)
                analyzer.proc.send_signal(signal.SIGSTOP)  # no new plan: no array completes meanwhile
                try:
                    while watcher.in_flight():  # the rounds already running finish
                        assert time.monotonic() < end, f"rounds {watcher.in_flight()} never released"
                        time.sleep(0.02)
                    # Mid-array: users-0 hosts users of arrays joined and not released, whose
                    # residues live only in its memory (else: let the run go on, and look again).
                    if held := watcher.held_by(0):
                        kills.append((len(watcher.plans), held))
                        fleet.proc.kill()  # no goodbye: the residues it held are gone with it
                        fleet.proc.wait()
                        time.sleep(0.3)
                        restarted = time.monotonic()
                        fleet.start()
                        while watcher.ready_at.get("users-0", 0) < restarted:  # it has subscribed
                            if time.monotonic() > end:  # where the new fleet waits: its coroutines to its log
                                fleet.proc.send_signal(signal.SIGUSR2)
                                time.sleep(2)
                                raise AssertionError("the restarted fleet never said ready\n" + _log_tails(parties)
                                                     + _log_tails([fleet], 8000))
                            time.sleep(0.02)
                finally:
                    analyzer.proc.send_signal(signal.SIGCONT)
                if held:
                    break
                time.sleep(0.05)
        assert _wait(parties, timeout=300) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        watcher.stop.set()
        for p in parties:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
            p.stop()
    assert watcher.error is None, watcher.error
    assert [k for k, _ in kills] >= list(KILL_AFTER_PLANS) and all(held > 0 for _, held in kills), kills
    assert len(watcher.plans) == PLANS, len(watcher.plans)  # so every kill came before the last plan
    for name in ("curves.csv", "rounds.csv"):
        assert (out / name).read_bytes() == (ideal / name).read_bytes(), name
    # Every array of two users or more was one real secure round among exactly its users, none
    # aborted, none with a dropout: the residues the killed fleet held were drawn again.
    log = (out / "logs" / "aggregator.log").read_text()
    assert "aborted" not in log
    rounds = re.findall(r"secagg cost: aggregator round \d+ released: users (\d+), survivors (\d+)", log)
    assert len(rounds) >= 20 and all(n == kept for n, kept in rounds)
