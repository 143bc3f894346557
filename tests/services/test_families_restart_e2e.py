"""Every party of one algorithm per registered family killed with SIGKILL mid-run, in turn, and
started again: the numbers must still be the in-process run's, bit for bit (issue #14's restart
proof; the experiments are test_families_e2e.py's)."""

from __future__ import annotations

import secrets
import time

import pytest

from tests.services.test_distributed import _inproc, _log_tails, _start, _wait, assert_same_numbers
from tests.services.test_families_e2e import _write

# A longer run of one algorithm per family, long enough to kill every party in turn mid-run, and
# the intermediary that collects its rounds.
KILLED = {
    # Dist-DP-SE's batches double, so one run has few rounds (52 at T = 10⁶): three runs, so
    # that every kill still finds releases to wait for.
    "distributed-dp-mab": ("Dist-DP-SE", 1_000_000, "aggregator", 3),
    # Lazy-UCB's arrays double too (63 rounds at T = 10⁶): ten runs make each round long enough
    # that the observer, killed last, still finds the run going (one run ended first once the
    # tests' broker stopped adding ~40 ms per message).
    "private-online-learning": ("anytime-lazy-ucb@distributed", 1_000_000, "aggregator", 10),
    "shuffle-linear-bandits": ("LinUCB-SDP-Vec", 4_500, "shuffler"),
    "concurrent-shuffle": ("csta@k2", 4_000, "shuffler-2"),  # level 2's shuffler, its own process
    "glm-bandits": ("private-glm", 1_500, "aggregator"),
}


def _saved_after(path, since: float, timeout: float) -> bool:
    """Whether ``path`` was (re)written after ``since`` (a wall-clock time) within ``timeout`` s."""
    end = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_mtime > since):
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow_e2e
@pytest.mark.parametrize("family", sorted(KILLED))
def test_every_party_killed_mid_run_restarts_to_the_same_numbers(family, tmp_path, mosquitto_url):
    """SIGKILL each party once, in turn, while the run goes on: the analyzer, the intermediary, a
    user fleet and the observer. Each restarts from its checkpoint (the analyzer by replaying its
    releases, the fleet from the broker's queued plans, the observer from its truths and a resync)
    and the numbers are the in-process run's."""
    label, horizon, intermediary, *runs = KILLED[family]
    path = _write(tmp_path, family, keep=label, horizon=horizon, runs=runs[0] if runs else 1)
    _inproc(path, tmp_path / "inproc")
    parties, out = _start(tmp_path, path, mosquitto_url, "k" + secrets.token_hex(4))
    by_name = {p.name: p for p in parties}
    journal = out / "state" / "analyzer" / "checkpoint.bin"  # rewritten at every release decoded
    try:
        # Each kill lands mid-run: only once the analyzer has decoded a release since the last
        # restart (so the restarted party is back in the session and the run moves again); parties
        # take seconds to start, and a kill timed by the clock alone can fall before the first
        # round, testing nothing.
        # A fleet before the observer: the restarted fleet has lost the truths it sent before, so
        # the observer restarted after it gets those from its own checkpoint (truths older than
        # about two seconds are in it), not from the fleets' resync.
        restarted = 0.0
        for victim in ("analyzer", intermediary, "users-0", "observer"):
            assert _saved_after(journal, restarted, 120.0), "no release decoded after the restart\n" + _log_tails(parties)
            if victim == "observer":
                # Once its truth checkpoint was saved a second after the fleet's restart (it saves its
                # accepted truths at its first tick a second or more after its last save), it holds
                # every truth the fleet sent before that restart, delivered in milliseconds. Not a
                # fixed 2.5-s sleep: on the tests' low-latency broker a run could end within it.
                _saved_after(out / "state" / "observer" / "checkpoint.bin", restarted + 1.0, 2.5)
            party = by_name[victim]
            assert all(p.proc.poll() is None for p in parties), f"the run ended before {victim} was killed"
            party.proc.kill()  # no goodbye: work in flight is lost; the checkpoint and the broker's session remain
            party.proc.wait()
            time.sleep(0.3)
            restarted = time.time()
            party.start()
        assert _wait(parties, timeout=300) == 0, (tmp_path / "observer.log").read_text()[-3000:]
    finally:
        for p in parties:
            p.stop()
    assert_same_numbers(tmp_path / "inproc", out)
