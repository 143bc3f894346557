"""Experiments: TOML files → validated configs → many runs → a results directory."""
