"""A plain in-process `privbandit run` imports nothing it does not use (issue #33).

Each import below cost every such process a measurable share of a whole MAB run at T = 10⁶:
dp-accounting 0.7–0.9 CPU-seconds (scipy.signal, scipy.stats; the ledger's conversion is its own
now), the broker and dashboard modules about 0.3 (aiomqtt among them; only an MQTT run or a
dashboard uses them), numba 0.2 (and 57 MB: the MAB family's sequential baselines had brought it
into every MAB process). The run is checked from outside, in a fresh process, by the modules it loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys

EXPERIMENT = """name = "imports"
horizon = 20000
seed = 1
epsilon = 0.5
runs = 1
[environment]
kind = "uniform"
arms = 4
[algorithms.Dist-RDP-SE]
[algorithms.DP-SE]
"""

# privbandit.services.allocator (a ctypes call, no import of its own) is the one module of the
# services an in-process run uses.
# numba (0.2 CPU-s and 57 MB of a process) compiles the sequential baselines' and FTL/Hedge's steps, not
# these algorithms'.
UNUSED = ("dp_accounting", "scipy.stats", "scipy.signal", "aiomqtt", "privbandit.services.bus",
          "privbandit.services.acl", "privbandit.services.dashboard", "privbandit.services.codec", "numba")


def test_an_in_process_run_imports_no_accountant_library_and_no_broker_module(tmp_path):
    path = tmp_path / "imports.toml"
    path.write_text(EXPERIMENT)
    code = (
        "import sys\n"
        "from privbandit.cli import app\n"
        "try:\n"
        f"    app([\"run\", {str(path)!r}, \"--out\", {str(tmp_path / 'out')!r}, \"--jobs\", \"1\"])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = [m for m in out.splitlines() if m.startswith(UNUSED)]
    assert loaded == [], loaded
    assert (tmp_path / "out" / "summary.json").is_file()  # the run did run, with its Rényi conversion


def _threads_after_numpy(env: dict) -> tuple[str, int]:
    """(OPENBLAS_NUM_THREADS, the process's threads) once the CLI and numpy's BLAS are loaded, in a
    fresh process (a party, a `privbandit run`) with ``env``."""
    code = ("import os\nimport privbandit.cli\nimport numpy\nnumpy.ones((64, 64)) @ numpy.ones((64, 64))\n"
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True)
    value, threads = out.stdout.split()
    return value, int(threads)


def test_a_cli_process_computes_on_one_thread_unless_the_user_says_otherwise():
    """The CLI pins the BLAS pool to one thread before numpy loads: no thread pool's start or spin
    (0.1–0.4 CPU-s of a fresh MAB task), no float result depending on the core count. A user's own
    setting is kept: with it, OpenBLAS starts its pool (what the check would see without the pin)."""
    pinned = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
    base = {k: v for k, v in os.environ.items() if k not in pinned}
    assert _threads_after_numpy(base) == ("1", 1)
    value, threads = _threads_after_numpy({**base, "OPENBLAS_NUM_THREADS": "2"})
    assert value == "2" and threads >= 2
