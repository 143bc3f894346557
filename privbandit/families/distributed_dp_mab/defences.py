"""The cheap defences, where the trust model lets someone see the reports.

Under secure aggregation nobody sees a user's value, so none of this applies there: the aggregator
sums whatever residues arrive (docs/attacks.md says what would be needed: range proofs or
distributed range checks, not built). Where reports are visible (the central model's aggregator,
a shuffler, the local model's pass-through) an intermediary can check each report against a
*window* ``[−B, g + B]`` (mod m), and the analyzer can sum visible reports as bounded integers
instead of residues, so that attackers inside the window cannot wrap the sum around.

The slack B:

- central model (CDP-SE): users send ``x̂ mod m`` with no noise, so B = 0 and the window is
  exactly the encodings [0, g];
- users' noise shares (local, or distributed shares seen by a shuffler): B = τ. The shares are
  independent and symmetric, so by Lévy's inequality ``P(max_i |η_i| > τ) ≤ 2·P(|Σ η| > τ) ≤ 2p``:
  with probability at least 1 − 2p per round the check rejects no honest report (in practice
  the largest share is far below τ).
- the local model (LDP-SE) knows more: each share is ``Lap_Z(g/ε)`` alone, with
  ``P(|η| ≥ t) ≤ 2e^{−εt/g}``, so a union bound over the n users gives
  ``B = ⌈(g/ε)·log(2n/p)⌉``, far below the sum's τ ∝ √n once n is large; we take the smaller.
"""

from __future__ import annotations

import math

import numpy as np

from privbandit.families.distributed_dp_mab.base import Mechanism, RoundParams


def report_slack(mechanism: Mechanism, params: RoundParams) -> int:
    """B of the window ``[−B, g + B]`` honest reports lie in (with probability ≥ 1 − 2p)."""
    if params.m is None:
        raise ValueError(f"{mechanism.key} sends raw rewards: they are checked against [0, 1]")
    if mechanism.trust_model == "central":
        return 0
    if mechanism.trust_model == "local":
        per_share = math.ceil(params.g / mechanism.epsilon * (math.log(params.n) + mechanism.log2p))
        return min(int(params.tau), per_share)
    return int(params.tau)


def in_window(values: np.ndarray, params: RoundParams, slack: int) -> np.ndarray:
    """Residues whose representative in ``[−B, g + B]`` exists (the rest are out of the window)."""
    return (np.asarray(values, dtype=np.int64) + slack) % params.m <= params.g + 2 * slack


def bounded_sum(values: np.ndarray, params: RoundParams, slack: int) -> int:
    """The sum of in-window reports as integers in ``[−B, g + B]``, clipped to ``[−τ, n·g + τ]``
    and reduced mod m: the release the decode reads (Alg. 1 lines 28–30) without a wrap-around.

    Equal to the plain modular sum whenever the honest noise obeys ``|Σ η| ≤ τ``; with attackers
    in the window it keeps their pull at ``(g + 2B)`` per attacker, where the modular sum would let
    the total wrap from the top of the range to the bottom.
    """
    signed = (np.asarray(values, dtype=np.int64) + slack) % params.m - slack
    total = int(signed.sum())
    return int(min(max(total, -params.tau), params.n * params.g + params.tau)) % params.m
