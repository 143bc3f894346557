"""privbandit: a distributed protocol simulator for private bandit learning."""

__version__ = "0.1.0"


def run(experiment, overrides=(), out=None, jobs=1, overwrite=False, progress=None, resume=False):
    """Run an experiment in-process: ``privbandit.run("experiments/quickstart.toml")`` returns the
    summary, every run's results and ``.table()`` (see :func:`privbandit.runner.run`)."""
    from privbandit.runner import run as run_experiment

    return run_experiment(experiment, overrides, out, jobs, overwrite, progress, resume)


def __getattr__(name: str):
    # privbandit.Results without importing the runner on `import privbandit` (the parties never use it)
    if name == "Results":
        from privbandit.runner import Results

        return Results
    raise AttributeError(f"module 'privbandit' has no attribute {name!r}")
