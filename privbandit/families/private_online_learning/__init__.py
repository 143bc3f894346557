"""Hu, Huang & Mehta, *Near-Optimal Algorithms for Private Online Learning in a Stochastic
Environment*: Anytime-Lazy-UCB (Alg. 1), Hybrid-UCB (Alg. 4), FTNL with report-noisy-max (Algs 2–3)
and DP-SE (Sajed & Sheffet), central and distributed. The spine plug-in is :data:`FAMILY`."""

from privbandit.families.private_online_learning.family import FAMILY

__all__ = ["FAMILY"]
