"""A traffic adversary's report, from a launched session's results directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privbandit.services.launcher import log_tail


def attack_report(out: Path, kind: str) -> dict:
    """``<out>/adversaries/<kind>.json``; when the adversary left none, the test fails with the end
    of its log, which says why (a crash, or a kill before it could write: a CI failure without it
    said nothing)."""
    path = out / "adversaries" / f"{kind}.json"
    if not path.exists():
        pytest.fail(f"the {kind} adversary wrote no report; the end of its log:\n"
                    f"{log_tail(out / 'logs' / f'hostile-{kind}.log', 40)}")
    return json.loads(path.read_text())
