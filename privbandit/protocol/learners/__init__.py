"""Bandit learners: the analyzer's decision logic, fed only by decoded releases."""
