"""Chowdhury & Zhou, *Shuffle Private Linear Contextual Bandits* (ICML 2022): batched LinUCB
(Algorithm 1) under five trust paths: non-private LinUCB, LinUCB-JDP (central, binary tree),
LinUCB-LDP (local), LinUCB-SDP-Amp (P_Amp, shuffled Gaussian reports) and LinUCB-SDP-Vec (P_Vec,
shuffled bit sums). The spine plug-in is :data:`FAMILY`."""

from privbandit.families.shuffle_linear_bandits.family import FAMILY

__all__ = ["FAMILY"]
