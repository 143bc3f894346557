"""#31 item 6: ``benchmarks/bench_linear.py --single`` prints only what it measured. Without the
authors' code no ratio (and no figure of theirs) appears; with ``--authors-code`` the ratio is the
quotient of the two rates printed beside it, both timed in the run, and so is the CPU ratio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("LinUCB", "LinUCB-JDP", "LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP")

# A stand-in with the authors' interface whose run takes a known, visible time.
FAKE = '''
import time
d = None
class LinBandit:
    def __init__(self, X, theta, epsilon, delta, BatchSize, noise="normal", sigma=0.5, seed=None):
        self.K = X.shape[0]
    def reset_random(self):
        pass
def evaluate_one(Alg, params, env, n, period_size):
    assert d == 5, d  # the global their __main__ sets
    time.sleep(0.05)
    return None, None
LinUCB = LDPLinUCB = JDPLinUCB = SDPLinUCBPAmp = SDPLinUCBPVec = object
'''


def _bench(*extra: str) -> list[str]:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_linear.py"), "--single", "--repeat", "1",
                          "--horizon", "200", *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _rows(lines: list[str]) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in lines if line.split() and line.split()[0] in LABELS}


def test_without_the_authors_code_only_privbandits_rates_are_printed():
    lines = _bench()
    rows = _rows(lines)
    assert set(rows) == set(LABELS)
    for label, cells in rows.items():  # seconds, rounds/s and CPU seconds, nothing else
        assert len(cells) == 3, (label, cells)
        assert float(cells[1].replace(",", "")) > 0 and float(cells[2]) > 0
    text = "\n".join(lines)
    assert "×" not in text and "target" not in text and "authors s" not in text
    assert "no ratio to it is printed" in text


def test_with_the_authors_code_the_ratio_is_of_two_rates_measured_here(tmp_path):
    (tmp_path / "LinBanditPrivate.py").write_text(FAKE)
    rows = _rows(_bench("--authors-code", str(tmp_path)))
    assert set(rows) == set(LABELS)
    for label, (secs, rate, cpu, their_secs, their_rate, their_cpu, ratio, by_cpu, *verdict) in rows.items():
        assert float(their_secs) >= 0.05  # the stand-in's sleep was timed, not looked up
        assert float(their_cpu) < 0.05  # and it sleeps: its CPU seconds are not its wall seconds
        ours, theirs = float(rate.replace(",", "")), float(their_rate.replace(",", ""))
        assert abs(float(ratio) - ours / theirs) <= 0.01 * ours / theirs + 0.01, (label, rows[label])
        # Both CPU figures are printed to 1 ms, the ratio to 0.01: the ratio must lie within what
        # the printed figures allow (the stand-in's CPU is well under 1 ms, printed 0.000).
        mine, its = float(cpu), float(their_cpu)
        low = max(its - 5e-4, 0.0) / (mine + 5e-4)
        high = (its + 5e-4) / max(mine - 5e-4, 1e-9)
        assert low - 0.005 <= float(by_cpu) <= high + 0.005, (label, rows[label])
        met = ours >= 50 * theirs and float(by_cpu) >= 50
        assert " ".join(verdict) == ("met" if met else "NOT met")


def test_fresh_processes_time_both_sides_from_the_interpreters_start(tmp_path):
    """``--fresh``: each side is a fresh process; the first-run and whole-process ratios are the
    quotients of the medians printed beside them, and the stand-in's process is a real interpreter's
    (its start and numpy import cost CPU time, its sleep costs none)."""
    (tmp_path / "LinBanditPrivate.py").write_text(FAKE)
    rows = _rows(_bench("--fresh", "--authors-code", str(tmp_path / "LinBanditPrivate.py")))
    assert set(rows) == set(LABELS)
    for label, (first, proc, their_first, their_proc, by_first, by_proc, *verdict) in rows.items():
        first, proc, their_first, their_proc = map(float, (first, proc, their_first, their_proc))
        assert 0 < first < proc, (label, rows[label])  # the run is part of its process
        assert their_first < 0.05 and their_proc > 0.05, (label, rows[label])  # a sleep; an interpreter's start
        for ratio, num, den in ((by_first, their_first, first), (by_proc, their_proc, proc)):
            low, high = max(num - 5e-4, 0.0) / (den + 5e-4), (num + 5e-4) / max(den - 5e-4, 1e-9)
            assert low - 0.005 <= float(ratio) <= high + 0.005, (label, rows[label])
        assert " ".join(verdict) == ("met" if their_first >= 20 * first else "NOT met")


def test_fresh_needs_the_authors_code():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_linear.py"), "--single", "--fresh"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--fresh compares fresh processes of both sides" in out.stderr
