"""Analyses of finished runs: numbers in, numbers out (numpy and scipy only; nothing here runs an experiment)."""
