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

from privbandit.protocol.primitives.secagg.errors import (
    KeySubstitutionError,
    SecAggAbort,
    SecAggError,
    ShareError,
)
from privbandit.protocol.primitives.secagg.graph import MaskingGraph
from privbandit.protocol.primitives.secagg.protocol import (
    RoundConfig,
    SecAggResult,
    SecAggServer,
    SecAggUser,
)

__all__ = [
    "KeySubstitutionError",
    "MaskingGraph",
    "RoundConfig",
    "SecAggAbort",
    "SecAggError",
    "SecAggResult",
    "SecAggServer",
    "SecAggUser",
    "ShareError",
]
