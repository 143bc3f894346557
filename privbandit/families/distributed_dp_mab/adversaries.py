"""Poisoning users: attackers who report values that move the analyzer's estimate.

All three run the honest randomizer first and then replace their message, so the honest users'
messages are exactly those of the honest run. ``g``, ``τ`` and ``m`` are the round's public
parameters (Algorithm 1: ``y = (x̂ + η) mod m``, decode to ``[−τ, n·g + τ]``, lines 18–30).

| kind           | attacker's message                                     | what it can do                        |
|----------------|--------------------------------------------------------|---------------------------------------|
| ``max-shift``  | the residue that sets its block's modular sum          | any decoded sum in [−τ, n·g + τ]      |
| ``out-of-range`` | ``x̂ + η`` with x̂ = g·(1 + magnitude) or −g·magnitude | magnitude + 1 rewards per attacker    |
| ``window-edge``| ``g + B`` or ``−B`` mod m, B the clear-text window's slack | passes a range check: (g + 2B)/g each |

For raw-reward mechanisms (DP-SE, SE) the same attackers send raw rewards: huge, out of [0, 1], or
0/1, which is all a range check leaves them.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.distributed_dp_mab.base import Mechanism, RoundParams
from privbandit.families.distributed_dp_mab.defences import report_slack
from privbandit.protocol.primitives.encoding import modular_sum
from privbandit.protocol.primitives.seeding import USER_BLOCK
from privbandit.protocol.spine.adversaries import Adversary, Block

HUGE_REWARD = 1e12  # a raw-reward attacker's "modular" attack: any finite value, as far as possible


def params_of(plan) -> RoundParams:
    return RoundParams(**plan.body["params"])


class BanditAdversary(Adversary):
    """An adversary of this family: it knows the mechanism's encoding (g, τ, m) and, in the worst
    case, which arm is best (the simulated world does), so it pushes the best arm down and every
    other arm up, the way that makes successive elimination fail. Its ``attack`` sees the block's
    messages as one flat array (one residue or raw reward per reporting user)."""

    def __init__(self, fraction: float, mechanism: Mechanism, seed: int, stream_prefix: tuple = (),
                 best_arm: int = 0):
        super().__init__(fraction, seed, stream_prefix)
        self.mechanism = mechanism
        self.best_arm = best_arm

    def promote(self, plan) -> bool:
        """True: push this round's estimate up (a bad arm); False: down (the best arm)."""
        return plan.body["arm"] != self.best_arm

    def tamper(self, block: Block) -> np.ndarray:
        q = params_of(block.plan)
        if block.round.messages:  # split-and-mix shares: attack the residue they add up to, then move the
            # change into each attacker's last share (the others are uniform either way)
            shares = block.messages[0]
            residue = shares[:, 0] % q.m
            for j in range(1, shares.shape[1]):
                residue = (residue + shares[:, j]) % q.m
            attacked = self.attack(block, residue.copy(), q)
            out = block.messages.copy()
            out[0, :, -1] = (shares[:, -1] + attacked - residue) % q.m
            return out
        flat = self.attack(block, block.messages[0, :, 0].copy(), q)
        return flat.reshape(block.messages.shape)

    def attack(self, block: Block, out: np.ndarray, q: RoundParams) -> np.ndarray:
        raise NotImplementedError


class MaxShift(BanditAdversary):
    """Sets the decoded sum to the extreme: ``−τ`` for the best arm, ``n·g + τ`` for the others.

    Worst case by construction: the attackers of a block know the block's honest residues (they
    simulate them, or collude with their neighbours), so one attacker's residue
    ``(t_b − Σ honest) mod m`` makes the block sum ``t_b`` exactly; the block targets ``t_b`` add
    up to the round's target over the cohort. With at least one attacker in every block, the
    analyzer decodes exactly ``−τ`` or ``n·g + τ`` (plus its own noise in the central model):
    under secure aggregation a single user controls the whole release. The other attackers send 0.
    """

    kind = "max-shift"
    summary = "one residue per block that sets the decoded sum to −τ (best arm) or n·g+τ (others)"

    def target(self, plan) -> int:
        q = params_of(plan)
        return q.n * q.g + q.tau if self.promote(plan) else -q.tau

    def attack(self, block: Block, out: np.ndarray, q: RoundParams) -> np.ndarray:
        if not block.attackers.any():
            return out
        if q.m is None:
            out[block.attackers] = HUGE_REWARD if self.promote(block.plan) else -HUGE_REWARD
            return out
        start = block.index * USER_BLOCK
        stop = min(start + USER_BLOCK, block.plan.cohort)
        total = self.target(block.plan)
        # This block's share of the target; the shares telescope to the target over the cohort.
        share = total * stop // block.plan.cohort - total * start // block.plan.cohort
        honest = modular_sum(out[~block.attackers], q.m)
        first = np.flatnonzero(block.attackers)
        out[first] = 0
        out[first[0]] = (share - honest) % q.m
        return out


class OutOfRange(BanditAdversary):
    """Encodes a reward outside [0, 1]: ``x̂ = g·(1 + magnitude)`` (up) or ``−g·magnitude``
    (down), then adds its own honest noise share and reduces mod m, like any user.

    Each attacker moves the decoded sum by ``x̂_attack − x̂_honest``: between ``magnitude`` and
    ``1 + magnitude`` rewards. A clear-text range check (``range_check = true``) rejects it when
    the encoding leaves the window (always in the central model, whose window is exactly [0, g]).
    """

    kind = "out-of-range"
    summary = "encodes a reward of 1+magnitude (or −magnitude) instead of one in [0, 1]"

    def __init__(self, *args, magnitude: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        if not magnitude > 0:
            raise ValueError(f"magnitude={magnitude} must be > 0")
        self.magnitude = float(magnitude)

    def attack(self, block: Block, out: np.ndarray, q: RoundParams) -> np.ndarray:
        bad = block.attackers
        up = self.promote(block.plan)
        if q.m is None:
            out[bad] = 1.0 + self.magnitude if up else -self.magnitude
            return out
        fake = round(q.g * (1 + self.magnitude)) if up else -round(q.g * self.magnitude)
        # y − x̂ is the attacker's own noise share (mod m): keep it, swap the encoding.
        out[bad] = (out[bad] - block.encoded[bad] + fake) % q.m
        return out


class WindowEdge(BanditAdversary):
    """The most damaging report a clear-text range check still accepts: ``g + B`` (up) or ``−B``
    (down) mod m, where ``[−B, g + B]`` is the window (:func:`defences.report_slack`).

    This is the bounded-influence worst case: each attacker moves the sum by at most
    ``(g + 2B)/g`` rewards, and the bounded decode keeps it inside ``[−τ, n·g + τ]``. In the
    central model B = 0, so an attacker can do no more than an honest user lying about its reward.
    """

    kind = "window-edge"
    summary = "reports the extreme value a clear-text range check still accepts (g+B or −B)"

    def attack(self, block: Block, out: np.ndarray, q: RoundParams) -> np.ndarray:
        up = self.promote(block.plan)
        if q.m is None:
            out[block.attackers] = 1.0 if up else 0.0
            return out
        slack = report_slack(self.mechanism, q)
        out[block.attackers] = (q.g + slack if up else -slack) % q.m
        return out


class Colluders(BanditAdversary):
    """Users who report honestly but reveal their noise shares to the analyzer.

    Distributed noise lives in the shares (Theorems 1, 2, 4): once c of a round's n′ reporting users
    hand their shares η_i to the analyzer, what protects the honest users is the noise of the other
    ``n′ − c`` shares alone, exactly as if the colluders' shares had dropped out (their values
    still count in the sum). So the ε left against the coalition of the analyzer and the colluders
    is ``mechanism.privacy_event(params, n′ − c)``, the dropout machinery's own figure; the observer
    records it per round (``rounds.csv``: ``attackers``, ``epsilon_coalition``) and per run
    (``summary.json``: ``privacy.<label>.coalition``). Central and local guarantees do not depend on
    the shares, so for them the coalition's ε equals the ledger's. Regret and every estimate are
    those of the honest run.
    """

    kind = "colluders"
    summary = "report honestly but reveal their noise shares to the analyzer (ε left: the ledger's coalition ε)"
    leaks_shares = True

    def tamper(self, block: Block) -> np.ndarray:
        return block.messages


ADVERSARIES: dict[str, type[BanditAdversary]] = {c.kind: c for c in (MaxShift, OutOfRange, WindowEdge, Colluders)}
