"""Finished tasks kept on disk as they finish, so no finished work is lost (issue #18).

``out/.tasks/`` holds one file per finished task, named by a hash of everything that determines
its numbers (:func:`experiment_key`): the experiment's full config, the content of every data file
it names, privbandit's own code and the installed plug-ins; then the algorithm label and the runs.
A run with ``--resume`` (and ``privbandit.run(..., resume=True)``) loads what is there and
computes only what is missing; a changed config, data file, source file or plug-in, another label
never matches a stale file. A file that cannot be read is reported, set aside and computed again.

The files are Python pickles of :class:`~privbandit.protocol.spine.observer.RunResult`: resume
only from results directories you made (unpickling runs code a hostile file could carry).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import time
from functools import lru_cache
from pathlib import Path

from privbandit.protocol.spine.observer import RunResult

log = logging.getLogger(__name__)
DIRNAME = ".tasks"


def named_files(data) -> list[str]:
    """The files a config names: every string in it that is an absolute path to a file (a family
    resolves its data paths, a means file, to absolute ones when it loads the experiment)."""
    if isinstance(data, dict):
        return [f for v in data.values() for f in named_files(v)]
    if isinstance(data, (list, tuple)):
        return [f for v in data for f in named_files(v)]
    if isinstance(data, str) and os.path.isabs(data) and os.path.isfile(data):
        return [data]
    return []


def plugin_files() -> list[Path]:
    """The source of every installed plug-in from outside privbandit: the module its entry point
    names, or, for a package, every ``.py`` under it. Found without importing the module."""
    from importlib.util import find_spec

    from privbandit.runner.provenance import plugin_entry_points

    files: set[Path] = set()
    for _, ep in plugin_entry_points():
        try:
            spec = find_spec(ep.module)
        except (ImportError, ValueError):  # the registry reports a plug-in that cannot load
            continue
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is None or not origin.is_file():
            continue
        files |= set(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else {origin}
    return sorted(files)


@lru_cache(maxsize=4)
def code_fingerprint(root: Path | None = None) -> str:
    """A hash of privbandit's own source files, and of the installed plug-ins' versions and source
    files. Neither version number changes with every edit: a result computed before a fix to a
    mechanism, privbandit's or a plug-in's, must not be reused after it (``experiments/reproduce.py``
    always resumes)."""
    from privbandit.runner.provenance import plugins

    root = root or Path(__file__).resolve().parent.parent  # the package's own directory
    digest = hashlib.sha256(json.dumps(plugins(), sort_keys=True).encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for path in plugin_files():
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def experiment_key(config) -> str:
    """A hash of everything that fixes an experiment's numbers: privbandit's code
    (:func:`code_fingerprint`), the full config, and the bytes of every file it names, so a means
    file rewritten in place is another experiment, never a reuse of the old one's results."""
    dump = config.model_dump(mode="json")
    files = {f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in sorted(set(named_files(dump)))}
    text = json.dumps([code_fingerprint(), dump, files], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class TaskStore:
    def __init__(self, out: Path, config):
        self.dir = Path(out) / DIRNAME
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_hash = experiment_key(config)  # names every task file: summary.json → provenance
        self.unreadable = 0
        self.reused = 0  # tasks loaded, not computed
        self.computed = 0  # tasks computed and saved by this run
        self.used: set[Path] = set()  # this run's tasks, loaded or saved: what :meth:`prune` keeps
        # A run is one leg of the work; a resumed one adds a leg. Each saved task carries its leg's
        # start (POSIX) and the leg's wall seconds so far, so the legs a resumed run reuses add up
        # to its elapsed_s (issue #35: the last leg alone was reported).
        self.leg_started = time.time()
        self._leg_clock = time.perf_counter()
        self.earlier_legs: dict[float, float] = {}  # leg start → wall seconds to its last task reused here

    def path(self, label: str, runs: tuple[int, ...]) -> Path:
        key = hashlib.sha256(json.dumps([self.config_hash, label, list(runs)]).encode()).hexdigest()[:32]
        return self.dir / f"{key}.pkl"

    def load(self, label: str, runs: tuple[int, ...]) -> tuple[RunResult, float] | None:
        path = self.path(label, runs)
        if not path.exists():
            return None
        try:
            with open(path, "rb") as fh:
                got = pickle.load(fh)
            ok = (isinstance(got, dict) and got.get("label") == label and tuple(got.get("runs", ())) == runs
                  and isinstance(got.get("result"), RunResult))
            if not ok:
                raise ValueError("not a task of this experiment")
        except Exception as exc:  # any damage: recompute rather than trust it
            self.unreadable += 1
            log.warning("%s: unreadable task file (%s: %s); computing the task again", path, type(exc).__name__, exc)
            path.replace(path.with_suffix(".damaged"))
            return None
        self.used.add(path)
        self.reused += 1
        leg = got.get("leg")  # absent from the files of privbandit before issue #35: their leg is not counted
        if isinstance(leg, dict) and isinstance(leg.get("started"), float) and isinstance(leg.get("elapsed"), float):
            self.earlier_legs[leg["started"]] = max(self.earlier_legs.get(leg["started"], 0.0), leg["elapsed"])
        return got["result"], float(got.get("seconds", 0.0))

    def earlier_elapsed(self) -> float:
        """Wall seconds of the earlier legs whose tasks this run reused, each up to the last of its
        tasks reused (an interrupted leg's unfinished work produced nothing here)."""
        return sum(self.earlier_legs.values())

    def save(self, label: str, runs: tuple[int, ...], result: RunResult, seconds: float) -> None:
        path = self.path(label, runs)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            leg = {"started": self.leg_started, "elapsed": time.perf_counter() - self._leg_clock}
            pickle.dump({"label": label, "runs": list(runs), "result": result, "seconds": seconds, "leg": leg}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)  # atomic: an interrupted save leaves no half file under the real name
        self.used.add(path)
        self.computed += 1

    def prune(self) -> int:
        """After the run's results are written: remove every file of ``.tasks/`` this run did not
        use (tasks of earlier configs or code, set-aside damaged files, interrupted saves), so the
        directory holds what ``--resume`` of this experiment would reuse and no more. Returns how
        many were removed."""
        removed = 0
        for path in self.dir.iterdir():
            if path not in self.used and path.is_file():
                path.unlink(missing_ok=True)
                removed += 1
        return removed
