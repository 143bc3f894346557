"""What a test does when a tool or service it needs is absent: under ``CI=true`` (``.ci/run``
installs everything) a failure, elsewhere a skip."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    """``message``: what is absent and how to get it, e.g. "nats-server is not installed (apt
    install nats-server)"."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; required when CI=true", pytrace=False)
    pytest.skip(message)
