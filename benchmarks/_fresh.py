"""What the fresh-process benchmarks share: time one child process from outside."""

from __future__ import annotations

import resource
import subprocess
import time


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, standard output) of a fresh process running ``argv``: its user +
    system time (``RUSAGE_CHILDREN``, so everything the process spent, from the interpreter's start)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall, out.stdout
