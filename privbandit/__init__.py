"""privbandit: a distributed protocol simulator for private bandit learning.

``privbandit.run(experiment, ..., transport="inprocess" | "mqtt", **settings)`` runs an experiment
and returns its results; ``privbandit.sweep(experiment, grid, ...)`` runs it over a grid and
``privbandit.audit(experiment, ...)`` measures the privacy its releases give (:mod:`privbandit.api`);
``privbandit.Policy(algorithm or experiment, ...)`` serves one run to a caller's own loop
(``next``/``update``) with its ledger as ``.accountant`` (:mod:`privbandit.policy`)."""

__version__ = "0.1.0"

# The front door, imported on first use: `import privbandit` alone (every party process does it)
# loads neither the runner nor the services.
_API = ("run", "sweep", "Results", "Interrupted", "SessionFailed")
_POLICY = ("Policy", "Accountant", "NoProof")


def __getattr__(name: str):
    if name == "audit":  # the package, callable: privbandit.audit(...) is privbandit.api.audit
        import privbandit.audit

        return privbandit.audit
    if name in _POLICY:
        from privbandit import policy

        return getattr(policy, name)
    if name in _API:
        from privbandit import api

        return getattr(api, name)
    raise AttributeError(f"module 'privbandit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API, *_POLICY, "audit"])
