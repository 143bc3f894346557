"""Secure aggregation, sans-I/O: the aggregator learns only ``Σ y_i mod m``.

Bonawitz et al. 2017, *Practical Secure Aggregation for Privacy-Preserving Machine Learning*
(CCS), and SecAgg+ of Bell et al. 2020, *Secure Single-Server Aggregation with (Poly)Logarithmic
Overhead* (CCS).

- :mod:`.prg`: ChaCha20 mask expansion, exactly uniform on ``Z_m``;
- :mod:`.keys`: signed X25519 key advertisement, HKDF pairwise keys;
- :mod:`.shamir`: t-of-n Shamir sharing of 32-byte secrets;
- :mod:`.graph`: complete or sparse (random Harary) masking graph, threshold rule;
- :mod:`.protocol`: :class:`SecAggUser`, :class:`SecAggServer` and the round's messages.
"""

from __future__ import annotations

import importlib

# The round's classes, each from its module, loaded on first use: the package is imported for its
# parameters (a plan's (k, t)) by every MAB process, which a secure round's cryptography would cost
# 0.1 CPU-s at start-up.
_EXPORTS = {"KeySubstitutionError": "errors", "SecAggAbort": "errors", "SecAggError": "errors", "ShareError": "errors",
            "MaskingGraph": "graph", "RoundConfig": "protocol", "SecAggResult": "protocol", "SecAggServer": "protocol",
            "SecAggUser": "protocol"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_EXPORTS])
