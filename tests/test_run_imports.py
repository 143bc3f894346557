"""A plain in-process `privbandit run` imports nothing it does not use (issue #33).

Each import below cost every such process a measurable share of a whole MAB run at T = 10⁶:
dp-accounting 0.7–0.9 CPU-seconds (scipy.signal, scipy.stats; the ledger's conversion is its own
now), the broker and dashboard modules about 0.3 (aiomqtt among them; only an MQTT run or a
dashboard uses them). The run is checked from outside, in a fresh process, by the modules it loaded.
"""

from __future__ import annotations

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
UNUSED = ("dp_accounting", "scipy.stats", "scipy.signal", "aiomqtt", "privbandit.services.bus", "privbandit.services.acl",
          "privbandit.services.dashboard", "privbandit.services.codec")


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
