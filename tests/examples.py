"""The example packages in ``examples/``, installed as their own packages for the plug-in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_example(name: str, target: Path) -> dict:
    """pip-install ``examples/<name>`` into ``target`` (no dependencies: privbandit is this one);
    returns an environment whose processes import it, as a user who installed it would, beside the
    privbandit under test (a worktree's, when PYTHONPATH names one)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(ROOT / "examples" / name)], check=True, capture_output=True)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(target), os.environ.get("PYTHONPATH"))))}
