"""Chowdhury & Zhou (ICLR 2023), *Distributed Differential Privacy in Multi-Armed Bandits*.

Batched successive elimination (Algorithm 1) with a protocol P = (R, S, A) per round, and the
paper's mechanisms (:mod:`.mechanisms`): Pólya shares → discrete Laplace (Thm 1, Dist-DP-SE),
Skellam shares (Thm 2, Dist-RDP-SE), discrete Gaussian shares (Thm 4, Dist-CDP-SE), central and
local discrete Laplace (Thms 5, 6), DP-SE's central Laplace and non-private SE. The spine plug-in is
:data:`FAMILY` (:mod:`.family`)."""

from privbandit.families.distributed_dp_mab.family import FAMILY

__all__ = ["FAMILY"]
