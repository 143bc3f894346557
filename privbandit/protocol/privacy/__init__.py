"""Privacy as data: events per release (:mod:`.events`), the ledger that composes them per user
(:mod:`.ledger`), and the (ε, δ) bounds of shuffle-model protocols (:mod:`.amplification`)."""

from privbandit.protocol.privacy.events import (
    ORDERS,
    REPORTED_ORDERS,
    AdvancedComposition,
    ApproxDP,
    DiscreteGaussianSumCDP,
    NonPrivate,
    NoneProven,
    PrivacyEvent,
    PureDP,
    SkellamRDP,
    ZCDP,
    closeness_budget,
    near_secure_sum,
    polya_sum_epsilon,
)
from privbandit.protocol.privacy.ledger import Ledger, default_delta, rdp_to_dp

__all__ = ["ORDERS", "REPORTED_ORDERS", "AdvancedComposition", "ApproxDP", "DiscreteGaussianSumCDP", "Ledger",
           "NonPrivate", "NoneProven", "PrivacyEvent", "PureDP", "SkellamRDP", "ZCDP", "closeness_budget", "default_delta",
           "near_secure_sum", "polya_sum_epsilon", "rdp_to_dp"]
