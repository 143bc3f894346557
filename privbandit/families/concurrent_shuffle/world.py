"""The users' private bits b_1 … b_n (spec §7 "input stream generators").

- ``iid``: Ber(p) bits;
- ``ones``: all ones (maximises the intra-batch bias, spec R5);
- ``hard``: a member of the lower bound's family Δ_{n,k} (Thm 4.1, §3 of the spec, [R]): a prefix
  of constant bits, then alternately one fresh Ber(½) bit and rep_{n,k} copies of another fresh
  Ber(½) bit, with rep_{n,k} = ½·n^{1/(2k+1)}·c_ε^{2k/(2k+1)}, c_ε = e^ε/(e^{2ε}+1).

Run r's bits come from ``(seed, "cs-world", r)`` in chunks of :data:`CHUNK` users, so any party
asking for users a … b − 1 (a fleet's block, the vectorized counter) gets the same bits.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.protocol.primitives.seeding import stream

INPUTS = ("iid", "ones", "hard")
CHUNK = 4096


def c_eps(epsilon: float) -> float:
    return math.exp(epsilon) / (math.exp(2 * epsilon) + 1)


def rep(n: int, k: int, epsilon: float) -> int:
    """rep_{n,k} rounded to a whole number of copies (≥ 1)."""
    return max(1, round(0.5 * n ** (1 / (2 * k + 1)) * c_eps(epsilon) ** (2 * k / (2 * k + 1))))


def hard_layout(first: int, last: int, period: int, prefix: int) -> tuple[np.ndarray, np.ndarray]:
    """For users first … last − 1 (0-based) of a Δ_{n,k} stream: which fresh bit each copies
    (index into the run's fresh bits; −1 for the constant prefix)."""
    t = np.arange(first, last, dtype=np.int64) - prefix
    seg = np.where(t >= 0, t // period, -1)
    pos = np.where(t >= 0, t % period, 0)
    fresh = np.where(seg >= 0, 2 * seg + (pos > 0), -1)
    return fresh, t


def bits(kind: str, p: float, n: int, k: int, epsilon: float, seed: int, run: int, first: int, last: int,
         prefix_bit: int = 0) -> np.ndarray:
    """Bits of users first … last − 1 (0-based) of run ``run``, int8."""
    if kind == "ones":
        return np.ones(last - first, np.int8)
    lo, hi = first // CHUNK, -(-last // CHUNK)
    if kind == "iid":
        parts = [stream(seed, "cs-world", run, c).random(CHUNK) < p for c in range(lo, hi)]
        allb = np.concatenate(parts) if parts else np.zeros(0, bool)
        return allb[first - lo * CHUNK:last - lo * CHUNK].astype(np.int8)
    if kind == "hard":
        r = rep(n, k, epsilon)
        prefix = r  # "a prefix of at most rep_{n,k} constant bits": the longest
        fresh, _ = hard_layout(first, last, r + 1, prefix)
        out = np.full(last - first, prefix_bit, np.int8)
        used = fresh[fresh >= 0]
        if used.size:
            c_lo, c_hi = int(used.min()) // CHUNK, int(used.max()) // CHUNK + 1
            draws = np.concatenate([stream(seed, "cs-world-fresh", run, c).integers(0, 2, CHUNK, dtype=np.int8)
                                    for c in range(c_lo, c_hi)])
            out[fresh >= 0] = draws[used - c_lo * CHUNK]
        return out
    raise ValueError(f"input = {kind!r} is not one of {', '.join(INPUTS)}")
