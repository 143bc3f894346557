"""Poisoning users and colluders of the private-online-learning family (docs/attacks.md).

The spine picks the attackers (exactly ⌊fraction·size⌋ of every block's users, from their own
stream) and hands each one's honest message here to be replaced (:mod:`~privbandit.protocol.spine.
adversaries`), in-process and in every fleet alike; honest users draw what they draw in the honest
run. The kinds are the distributed-DP MAB family's (:mod:`privbandit.families.distributed_dp_mab.
adversaries`), read on this family's rounds:

- an Anytime-Lazy-UCB array is a round of one arm, filled over many plans: its reports are one
  raw reward each (central) or one Pólya-noised residue mod m (distributed,
  :class:`~.mechanisms.DistributedArraySum`, the round's ``RoundParams`` those of an array of the
  round's size);
- an FTNL epoch is a round of K columns, one per action: a raw reward vector (central) or K
  residues (distributed, :class:`~.mechanisms.DistributedNoisyMax`);
- DP-SE's batches are the MAB family's rounds, and take the MAB family's adversaries unchanged.

Every poisoner knows the best arm (the worst case, as in the MAB family): it pushes the best arm's
column down and every other column up. On residues:

- ``max-shift``: on its block's first attacker, its block's share of the target ``n·g + τ`` (up)
  or ``−τ`` (down), less the block's honest residues; 0 on the others. An epoch's sums land exactly
  on the window's edges, an array's within a unit per block, once every block holding the round's
  users has an attacker.
- ``out-of-range``: ``x̂ + η`` with ``x̂ = g·(1 + magnitude)`` (up) or ``−g·magnitude`` (down), its
  own noise share kept: magnitude + 1 rewards per attacker.
- ``window-edge``: ``g + τ`` (up) or ``−τ`` (down) mod m: (g + 2τ)/g rewards per attacker, where
  nobody can check a residue (secure aggregation).

On raw rewards (the central model) a report outside [0, 1] is refused by the round
(``out-of-range``), so ``max-shift`` (±10¹²) and ``out-of-range`` (1 + magnitude, −magnitude) are
refused attackers, and ``window-edge`` sends 1 or 0: a user lying about its reward.

``colluders`` report honestly and hand their noise shares to the analyzer: what protects the honest
users of an FTNL epoch is then the noise of the ``n − c`` other shares alone, and the ledger
against the coalition records that per epoch (``finish``). Anytime-Lazy-UCB's arrays fill over
many plans, and no party holds the count of colluders in one array (the fleets know it per block
and plan, the observer scores a round with one plan's truths): colluders are refused there, as on
Hybrid-UCB, whose in-process analyzer looks ahead at the true rewards and which takes no
adversary at all.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab.adversaries import HUGE_REWARD
from privbandit.families.distributed_dp_mab.base import RoundParams
from privbandit.protocol.primitives.encoding import modular_sum
from privbandit.protocol.spine.adversaries import Adversary, Block


class OnlineAdversary(Adversary):
    """An adversary of this family: it knows each round's encoding (the randomizer's parameters for
    the round's size; none for raw rewards) and which arm each column of the round is about."""

    def __init__(self, fraction: float, randomizer, seed: int, stream_prefix: tuple = (), best_arm: int = 0,
                 magnitude: float = 1.0):
        super().__init__(fraction, seed, stream_prefix)
        if not magnitude > 0:
            raise ValueError(f"magnitude={magnitude} must be > 0")
        self.randomizer = randomizer  # DistributedArraySum / DistributedNoisyMax, or None (central)
        self.best_arm = best_arm
        self.magnitude = float(magnitude)

    def params(self, block: Block) -> RoundParams | None:
        """The round's encoding: an array of the round's size, or an epoch of n users."""
        if self.randomizer is None:
            return None
        body = block.plan.body
        return self.randomizer.params(int(body["n"]) if body["kind"] == "epoch" else block.round.expected)

    def up(self, block: Block) -> np.ndarray:
        """Per column: True to push the sum up (a bad arm), False down (the best arm)."""
        body = block.plan.body
        if body["kind"] == "epoch":
            return np.arange(block.messages.shape[-1]) != self.best_arm
        (arm,) = np.flatnonzero(np.asarray(body["round_of_arm"]) == block.round.id)
        return np.array([arm != self.best_arm])

    def tamper(self, block: Block) -> np.ndarray:
        out = block.messages[0].copy()  # (k, width): one run over MQTT and in-process alike
        self.attack(block, out, self.params(block), self.up(block))
        return out[None]

    def attack(self, block: Block, out: np.ndarray, q: RoundParams | None, up: np.ndarray) -> None:
        raise NotImplementedError


class MaxShift(OnlineAdversary):
    kind = "max-shift"
    summary = "one residue per block that moves its share of the round's sum to −τ (best arm) or n·g+τ (others)"

    def attack(self, block, out, q, up):
        bad = block.attackers
        if not bad.any():
            return
        if q is None:
            out[bad] = np.where(up, HUGE_REWARD, -HUGE_REWARD)
            return
        # This block's share of the target, by its reports into the round. An epoch's users are
        # its plan's cohort, in order: the shares telescope to the target exactly. An array's come
        # from many plans in no order a block can see: its blocks add up within a unit each.
        k = bad.size
        start = block.first - block.plan.first_user if block.plan.body["kind"] == "epoch" else 0
        total = np.where(up, q.n * q.g + q.tau, -q.tau)
        target = total * (start + k) // q.n - total * start // q.n
        first = np.flatnonzero(bad)
        honest = np.array([modular_sum(out[~bad, c], q.m) for c in range(out.shape[1])])
        out[first] = 0
        out[first[0]] = (target - honest) % q.m


class OutOfRange(OnlineAdversary):
    kind = "out-of-range"
    summary = "encodes a reward of 1+magnitude (or −magnitude) instead of one in [0, 1]"

    def attack(self, block, out, q, up):
        bad = block.attackers
        if q is None:
            out[bad] = np.where(up, 1.0 + self.magnitude, -self.magnitude)
            return
        fake = np.where(up, round(q.g * (1 + self.magnitude)), -round(q.g * self.magnitude))
        # y − x̂ is the attacker's own noise share (mod m): keep it, swap the encoding.
        out[bad] = (out[bad] - block.encoded[bad] + fake) % q.m


class WindowEdge(OnlineAdversary):
    kind = "window-edge"
    summary = "reports the extreme value a window check would still accept (g+τ or −τ; raw: 1 or 0)"

    def attack(self, block, out, q, up):
        bad = block.attackers
        if q is None:
            out[bad] = np.where(up, 1.0, 0.0)
            return
        out[bad] = np.where(up, q.g + q.tau, -q.tau) % q.m


class Colluders(OnlineAdversary):
    kind = "colluders"
    summary = "report honestly but reveal their noise shares to the analyzer (ε left: the ledger's coalition ε)"
    leaks_shares = True

    def tamper(self, block: Block) -> np.ndarray:
        return block.messages


ADVERSARIES: dict[str, type[OnlineAdversary]] = {c.kind: c for c in (MaxShift, OutOfRange, WindowEdge, Colluders)}
