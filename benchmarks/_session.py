"""What the distributed benchmarks share: run a planned session's parties to the end."""

from __future__ import annotations

from pathlib import Path


def run_parties(parties: list, observer_log: Path, timeout_s: float = 1800) -> None:
    """Start every party of :func:`~privbandit.services.launcher.plan_parties`, wait for the observer
    (the first) to write the results, and stop the rest; a failed session raises with the observer's
    log tail."""
    try:
        for p in parties:
            p.start()
        code = parties[0].proc.wait(timeout_s)
        if code != 0:
            raise RuntimeError(f"the observer exited with {code}:\n{Path(observer_log).read_text()[-2000:]}")
    finally:
        for p in parties:
            p.stop()
