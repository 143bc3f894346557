"""Colluders: users who reveal their noise shares to the analyzer.

Distributed noise lives in the shares (Theorems 1, 2, 4): once c of a round's n′ reporting users
hand their shares η_i to the analyzer, it can subtract them, and what protects the honest users is
the noise of the other ``n′ − c`` shares alone. From the noise's point of view colluding shares are
missing ones, exactly as dropouts are, but their values still count in the sum. So the ε left
against the coalition of the analyzer and the colluders is ``mechanism.privacy_event(params,
n′ − c)``, the dropout machinery's own figure; the observer records it per round
(``rounds.csv``: ``attackers``, ``epsilon_coalition``) and per run
(``summary.json``: ``privacy.<label>.coalition``). Central and local guarantees do not depend on
the shares, so for them the coalition's ε equals the ledger's.

The colluders report honestly, so regret and every estimate are those of the honest run.
"""

from __future__ import annotations

import numpy as np

from privbandit.protocol.adversaries.base import Adversary, Block


class Colluders(Adversary):
    kind = "colluders"
    summary = "report honestly but reveal their noise shares to the analyzer (ε left: the ledger's coalition ε)"
    leaks_shares = True

    def tamper(self, block: Block) -> np.ndarray:
        return block.messages
