"""The GLM-bandit family (Sarmasarkar): Private-GLM (Algorithm 2, joint DP) and baselines."""

from privbandit.families.glm_bandits.family import FAMILY

__all__ = ["FAMILY"]
