"""Tenenbaum, Kaplan, Mansour & Stemmer, *Concurrent Shuffle Differential Privacy Under Continual
Observation* (ICML 2023): the counter of Algorithms 2 and 3 with k concurrent shufflers, its
baselines (one shuffler, the k lowest / highest binary levels, the central binary tree, a local
counter) and the lower bound's hard inputs. The spine plug-in is :data:`FAMILY`."""

from privbandit.families.concurrent_shuffle.family import FAMILY

__all__ = ["FAMILY"]
