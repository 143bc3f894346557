"""privbandit: a distributed protocol simulator for private bandit learning."""

__version__ = "0.1.0"
