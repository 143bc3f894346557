"""Party processes keep freed memory (services/allocator.py): fewer page faults per block."""

import subprocess
import sys

import pytest
import typer

from privbandit import cli
from privbandit.services import allocator
from privbandit.services.checkpoint import CheckpointError

# A fleet block's kind of work, 2,000 times: several 512 KiB arrays alive at once (uniforms, the
# values, residues, their bytes), each replaced by the next block's.
FAULTS = """
import resource, sys
import numpy as np
from privbandit.services.allocator import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
rng = np.random.default_rng(0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2000):
    a = rng.random(65536)
    b = a * 2
    c = (b + 1).astype(np.int64)
    d = c.tobytes()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 2000)
"""


def _faults_per_block(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_keeping_freed_memory_removes_the_page_faults_of_each_block():
    """glibc's defaults fault a 512 KiB temporary in afresh each time (~100 faults a block here);
    with the thresholds raised the pages are reused (< 5 a block)."""
    default, kept = _faults_per_block("default"), _faults_per_block("kept")
    assert default > 50, default
    assert kept < 5, kept


def test_every_party_keeps_freed_memory_before_it_builds_its_service(monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append("kept") or True)

    def refuse():
        calls.append("built")
        raise CheckpointError("state", "refused")

    with pytest.raises(typer.Exit):
        cli._serve(refuse)
    assert calls == ["kept", "built"]
